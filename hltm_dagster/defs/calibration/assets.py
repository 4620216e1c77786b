"""`vacancy_calibration`: what memory proposes for each vacancy, between the memory and the judge.

* `vacancy_calibration` — on the dynamic ``vacancies`` partitions; reads the memory of the
  vacancy's own seat and contract (through the query boundary, one scope each), stores the
  proposed soft requirements in ``vacancy_calibrations`` and shows them with support and
  citations. `judge_scores` depends on it: the judge reads the stored items as non-mandatory
  checklist items, and their version is part of the score-cache key.
* `calibrate_vacancies` — the asset's job. Its backfill policy is a single run, so a run over a
  range of vacancy partitions (the demo's and `hltm refresh`'s: all of them) calibrates them in
  one process; the UI's Materialize, the sensors and the CLI all run the asset's own function.
  It makes no LLM call.

The work is in `hltm.judge.calibration`; this module wires resources and events.
"""

from typing import Any

import dagster as dg

from hltm.judge.calibration import Calibration, calibrate_vacancies, store_calibrations
from hltm.judge.data import load_vacancies
from hltm_dagster.defs.memory.assets import ASSET_KEYS
from hltm_dagster.defs.sources.assets import VACANCIES, source_key
from hltm_dagster.resources import PlatformResource

CALIBRATION_KEY = dg.AssetKey("vacancy_calibration")


def calibration_metadata(cal: Calibration) -> dict[str, Any]:
    rows = [
        f"| {p.field} | {p.value} | {p.support}/{p.of} {p.unit} | {', '.join(p.citations[:4])}"
        f"{' …' if len(p.citations) > 4 else ''} |"
        for p in cal.proposals
    ]
    table = "| field | usual value | support | memory nodes cited |\n|---|---|---|---|\n"
    table += "\n".join(rows) if rows else "| – | nothing proposed | – | – |"
    skipped = "\n".join(f"* {p.describe()}: {why}" for p, why in cal.skipped) or "none"
    return {
        "summary": cal.sentence(),
        "calibration_version": cal.version or "-",
        "vacancy_version": cal.vacancy_version,
        "proposed": len(cal.proposals),
        "skipped_vacancy_wins": len(cal.skipped),
        "seat": cal.seat_id or "-",
        "contract": cal.contract_id or "-",
        "proposals": dg.MetadataValue.md(table),
        "skipped": dg.MetadataValue.md(skipped),
        "memory_versions": dg.MetadataValue.json(cal.memory_versions),
    }


def _calibrate(platform: PlatformResource, ids: list[str] | None) -> list[Calibration]:
    sources_db, derived_db = platform.sources_db.path, platform.derived_db.path
    vacancies = load_vacancies(sources_db, ids)
    calibrations = calibrate_vacancies(sources_db, derived_db, vacancies)
    store_calibrations(derived_db, calibrations)
    return calibrations


@dg.asset(
    key=CALIBRATION_KEY,
    group_name="judge",
    partitions_def=VACANCIES,
    backfill_policy=dg.BackfillPolicy.single_run(),
    deps=[
        dg.AssetDep(ASSET_KEYS["seat"], partition_mapping=dg.AllPartitionMapping()),
        dg.AssetDep(ASSET_KEYS["contract"], partition_mapping=dg.AllPartitionMapping()),
        source_key("vacancies"),
        source_key("vacancy_requirements"),
        source_key("projects"),
    ],
    kinds={"duckdb"},
    description="Soft requirements memory proposes for the vacancy: what its recruiter's past "
    "projects and its organisation usually want (locations, work mode, employment, level, role, "
    "recurring skills), each with support and cited memory nodes; the vacancy's own text wins.",
)
def vacancy_calibration(
    context: dg.AssetExecutionContext, platform: PlatformResource
) -> dg.MaterializeResult:
    """One vacancy (the UI's Materialize, a sensor's request) or a range of them in one run."""
    wanted = list(context.partition_keys)
    found = _calibrate(platform, wanted)
    missing = sorted(set(wanted) - {c.vacancy_id for c in found})
    if missing:
        raise dg.Failure(f"vacancies not in the sources (deleted?): {', '.join(missing[:10])}")
    for cal in found:
        context.log.info(f"{cal.vacancy_id}: {cal.sentence()}")
    if len(found) == 1:
        (cal,) = found
        return dg.MaterializeResult(
            metadata=calibration_metadata(cal), data_version=dg.DataVersion(cal.version or "none")
        )
    return dg.MaterializeResult(metadata=batch_metadata(found))


def batch_metadata(calibrations: list[Calibration]) -> dict[str, Any]:
    """What a run over many vacancies shows on each of them: every vacancy's summary."""
    rows = "\n".join(
        f"| {c.vacancy_id} | {len(c.proposals)} | {c.sentence()} |" for c in calibrations
    )
    return {
        "vacancies": len(calibrations),
        "proposed": sum(len(c.proposals) for c in calibrations),
        "summaries": dg.MetadataValue.md(
            f"| vacancy | proposed | summary |\n|---|---|---|\n{rows}"
        ),
    }


calibrate_vacancies_job = dg.define_asset_job(
    "calibrate_vacancies",
    selection=[CALIBRATION_KEY],
    partitions_def=VACANCIES,
    description="Calibrate vacancies from their seat's and contract's memory: one partition, or "
    "a range in one run (the CLI runs every vacancy); no LLM call.",
)


CALIBRATION_ASSETS = [vacancy_calibration]
CALIBRATION_JOBS = [calibrate_vacancies_job]

"""`vacancy_calibration`: what memory proposes for each vacancy, between the memory and the judge.

* `vacancy_calibration` — on the dynamic ``vacancies`` partitions; reads the memory of the
  vacancy's own seat and contract (through the query boundary, one scope each), stores the
  proposed soft requirements in ``vacancy_calibrations`` and shows them with support and
  citations. `judge_scores` depends on it: the judge reads the stored items as non-mandatory
  checklist items, and their version is part of the score-cache key.
* `calibrate_vacancies` — an op job calibrating many vacancies in one run (config: ids, empty =
  all), logging one materialisation per vacancy partition; the demo and the calibration sensor
  run it. It makes no LLM call.

The work is in `hltm.judge.calibration`; this module wires resources and events.
"""

from typing import Any

import dagster as dg

from assets.judge import VACANCIES
from assets.memory import ASSET_KEYS
from assets.sources import source_key
from hltm.judge.calibration import Calibration, calibrate_vacancies, store_calibrations
from hltm.judge.data import load_vacancies
from resources import PlatformResource

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
    found = _calibrate(platform, [context.partition_key])
    if not found:
        raise dg.Failure(f"vacancy {context.partition_key} is not in the sources (deleted?)")
    cal = found[0]
    context.log.info(f"{cal.vacancy_id}: {cal.sentence()}")
    return dg.MaterializeResult(
        metadata=calibration_metadata(cal), data_version=dg.DataVersion(cal.version or "none")
    )


class CalibrateConfig(dg.Config):
    """Empty `vacancies` = every vacancy in the sources."""

    vacancies: list[str] = []


@dg.op
def calibrate_all_vacancies(
    context: dg.OpExecutionContext, config: CalibrateConfig, platform: PlatformResource
) -> int:
    calibrations = _calibrate(platform, config.vacancies or None)
    known = set(context.instance.get_dynamic_partitions(VACANCIES.name))
    missing = sorted({c.vacancy_id for c in calibrations} - known)
    if missing:
        context.instance.add_dynamic_partitions(VACANCIES.name, missing)
    for cal in calibrations:
        context.log_event(
            dg.AssetMaterialization(
                CALIBRATION_KEY, partition=cal.vacancy_id, metadata=calibration_metadata(cal)
            )
        )
    proposed = sum(len(c.proposals) for c in calibrations)
    context.log.info(f"{len(calibrations)} vacancies calibrated, {proposed} items proposed")
    return len(calibrations)


@dg.job(
    name="calibrate_vacancies",
    description="Calibrate every vacancy (or the given ones) from its seat's and contract's "
    "memory in one run; no LLM call.",
)
def calibrate_vacancies_job() -> None:
    calibrate_all_vacancies()


CALIBRATION_ASSETS = [vacancy_calibration]
CALIBRATION_JOBS = [calibrate_vacancies_job]

"""The judge's automation: keep ``vacancies`` partitions in sync, calibrate and re-rank changed
vacancies, re-calibrate after memory changes.

Nothing here spends LLM budget unasked:

* `vacancy_changes` (sensor, on by default) — its **first evaluation adopts the current
  vacancies as the baseline**: it syncs the ``vacancies`` partitions and requests no run, so
  starting the daemon after `hltm demo` (or on any existing data) judges nothing. Afterwards,
  each vacancy that is new or whose own version key changed is first calibrated from memory (a
  `calibrate_vacancies` run, no LLM call) and, once its calibration matches its text, re-ranked
  by one `judge_refresh` run (run key = sha1 of the set and versions, so a retick never
  duplicates a run). Cost per tick: nothing when no vacancy changed; otherwise one cold
  evaluation per new pool pair of the changed vacancies (≈ 100–250 LLM calls per new vacancy).
  Resume changes are left to the nightly run: they touch every pool, and the score cache makes
  that run cost only the changed pairs.
* `memory_calibration` (sensor, on by default) — re-calibrates the vacancies whose seat or
  contract memory changed since their calibration (no LLM call). The judge re-judges a vacancy
  only when its proposals — not merely the memory versions — changed, on its next run.
* `judge_nightly` (`schedules.py`) judges everything nightly when switched on.
"""

from __future__ import annotations

import hashlib
import json

import dagster as dg

from hltm.judge.calibration import load_calibrations
from hltm.judge.data import vacancy_ids
from hltm.memory.store import read_built
from hltm.warehouse import connect
from hltm_dagster.defs.calibration.assets import calibrate_vacancies_job
from hltm_dagster.defs.judge.assets import judge_refresh_job
from hltm_dagster.defs.sources.assets import VACANCIES
from hltm_dagster.instance import partition_range_tags, partition_ranges
from hltm_dagster.resources import PlatformResource, WarehouseResource

MAX_PARTITION_REQUESTS = 25_000


def _cursor(raw: str | None) -> dict[str, str]:
    try:
        value = json.loads(raw) if raw else {}
    except json.JSONDecodeError:
        value = {}
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}


def _digest(versions: dict[str, str]) -> str:
    return hashlib.sha1(json.dumps(versions, sort_keys=True).encode()).hexdigest()


def _partition_requests(
    instance: dg.DagsterInstance, current: dict[str, str]
) -> list[dg.AddDynamicPartitionsRequest | dg.DeleteDynamicPartitionsRequest]:
    partitions = set(instance.get_dynamic_partitions(VACANCIES.name))
    add = sorted(set(current) - partitions)[:MAX_PARTITION_REQUESTS]
    budget_left = MAX_PARTITION_REQUESTS - len(add)
    delete = sorted(partitions - set(current))[: max(0, budget_left)]
    requests: list[dg.AddDynamicPartitionsRequest | dg.DeleteDynamicPartitionsRequest] = []
    if add:
        requests.append(VACANCIES.build_add_request(add))
    if delete:
        requests.append(VACANCIES.build_delete_request(delete))
    return requests


def _calibrate_requests(
    order: list[str], versions: dict[str, str], reason: str
) -> list[dg.RunRequest]:
    """Runs of the calibration asset (no LLM call): one per contiguous range of the vacancies'
    partitions, and one per vacancy whose partition is added by this same tick."""
    requests = []
    for start, end in partition_ranges(order, set(versions)):
        keys = order[order.index(start) : order.index(end) + 1]
        requests.append(
            dg.RunRequest(
                run_key=f"calibrate-{_digest({k: versions[k] for k in keys})}",
                job_name=calibrate_vacancies_job.name,
                tags={"hltm/calibration": reason, **partition_range_tags(start, end)},
            )
        )
    for vacancy in sorted(set(versions) - set(order)):
        requests.append(
            dg.RunRequest(
                run_key=f"calibrate-{_digest({vacancy: versions[vacancy]})}",
                job_name=calibrate_vacancies_job.name,
                partition_key=vacancy,
                tags={"hltm/calibration": reason},
            )
        )
    return requests


@dg.sensor(
    name="vacancy_changes",
    jobs=[judge_refresh_job, calibrate_vacancies_job],
    minimum_interval_seconds=60,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Adds/removes `vacancies` partitions from the sources; calibrates, then re-ranks "
    "new or changed vacancies. Its first evaluation adopts the current vacancies as the "
    "baseline (no run, no LLM call).",
)
def vacancy_changes(
    context: dg.SensorEvaluationContext, platform: PlatformResource
) -> dg.SensorResult | dg.SkipReason:
    sources_db, derived_db = platform.sources_db, platform.derived_db
    if not sources_db.path.exists():
        return dg.SkipReason(f"no sources yet ({sources_db.path} does not exist)")
    current = vacancy_ids(sources_db.path)
    requests = _partition_requests(context.instance, current)
    if context.cursor is None:
        return dg.SensorResult(
            dynamic_partitions_requests=requests,
            cursor=json.dumps(current, sort_keys=True),
            skip_reason=f"first evaluation: adopted {len(current)} vacancies as the baseline"
            " (nothing judged; `hltm judge run` or the nightly schedule judges them)",
        )
    previous = _cursor(context.cursor)
    changed = {v: version for v, version in current.items() if previous.get(v) != version}
    calibrations = load_calibrations(derived_db.path, sorted(changed), read_only=True)
    ready = {
        v: version
        for v, version in changed.items()
        if v in calibrations and calibrations[v].vacancy_version == version
    }
    waiting = {v: version for v, version in changed.items() if v not in ready}
    runs = []
    if waiting:
        order = context.instance.get_dynamic_partitions(VACANCIES.name)
        runs.extend(_calibrate_requests(order, waiting, "vacancy_changes"))
    if ready:
        runs.append(
            dg.RunRequest(
                run_key=f"vacancies-{_digest(ready)}",
                job_name=judge_refresh_job.name,
                run_config={
                    "ops": {"judge_all_vacancies": {"config": {"vacancies": sorted(ready)}}}
                },
                tags={"hltm/judge": "vacancy_changes"},
            )
        )
    # Judged vacancies advance the cursor; those still being calibrated stay "changed".
    cursor = {v: version for v, version in previous.items() if v in current and v not in waiting}
    cursor.update(ready)
    if not (requests or runs) and cursor == previous:
        return dg.SkipReason("no vacancy added, changed or removed")
    return dg.SensorResult(
        run_requests=runs,
        dynamic_partitions_requests=requests,
        cursor=json.dumps(cursor, sort_keys=True),
    )


def _memory_versions(derived_db: WarehouseResource) -> dict[str, str]:
    with connect(derived_db.path, read_only=True) as con:
        return {node_id: built.version for node_id, built in read_built(con).items()}


@dg.sensor(
    name="memory_calibration",
    job=calibrate_vacancies_job,
    minimum_interval_seconds=60,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Re-calibrates the vacancies whose seat or contract memory changed since their "
    "calibration (no LLM call; the judge re-judges only vacancies whose proposals changed).",
)
def memory_calibration(
    context: dg.SensorEvaluationContext, platform: PlatformResource
) -> dg.SensorResult | dg.SkipReason:
    derived_db = platform.derived_db
    if not derived_db.path.exists():
        return dg.SkipReason(f"no derived store yet ({derived_db.path} does not exist)")
    calibrations = load_calibrations(derived_db.path, read_only=True)
    memory = _memory_versions(derived_db)
    stale = {
        vid: _digest({n: memory.get(n, "") for n in cal.memory_versions})
        for vid, cal in calibrations.items()
        if any(memory.get(n, "") != v for n, v in cal.memory_versions.items())
    }
    if not stale:
        return dg.SkipReason(f"{len(calibrations)} calibrations match the current memory")
    context.log.info(f"memory changed under {len(stale)} calibrated vacancies")
    order = context.instance.get_dynamic_partitions(VACANCIES.name)
    return dg.SensorResult(run_requests=_calibrate_requests(order, stale, "memory_calibration"))


JUDGE_SENSORS = [vacancy_changes, memory_calibration]

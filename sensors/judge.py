"""The judge's automation: keep ``vacancies`` partitions in sync, re-rank changed vacancies at
once, and run the whole judge nightly.

* `vacancy_changes` (sensor) — reads the sources read-only; adds a ``vacancies`` partition for
  every new vacancy and deletes those of removed vacancies (≤ 25,000 requests per evaluation,
  Dagster's advice; the rest on the next ticks); requests one `judge_refresh` run for the
  vacancies that are new or whose version key changed (run key = sha1 of that set and their
  versions, so a retick never duplicates a run). Resume changes are left to the nightly run:
  they touch every pool, and the score cache makes that run cost only the changed pairs.
* `judge_nightly` (schedule, `HLTM_JUDGE_CRON`, default 02:00 every day) — `judge_refresh` over
  every vacancy, one budget of cold evaluations for the night.
"""

from __future__ import annotations

import hashlib
import json

import dagster as dg

from assets.judge import VACANCIES, judge_refresh_job
from hltm.judge.data import vacancy_ids
from hltm.settings import judge_cron
from resources import WarehouseResource

MAX_PARTITION_REQUESTS = 25_000


def _cursor(raw: str | None) -> dict[str, str]:
    try:
        value = json.loads(raw) if raw else {}
    except json.JSONDecodeError:
        value = {}
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}


@dg.sensor(
    name="vacancy_changes",
    job=judge_refresh_job,
    minimum_interval_seconds=60,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Adds/removes `vacancies` partitions from the sources and re-ranks new or "
    "changed vacancies (one judge_refresh run per change set).",
)
def vacancy_changes(
    context: dg.SensorEvaluationContext, sources_db: WarehouseResource
) -> dg.SensorResult | dg.SkipReason:
    if not sources_db.path.exists():
        return dg.SkipReason(f"no sources yet ({sources_db.path} does not exist)")
    current = vacancy_ids(sources_db.path)
    previous = _cursor(context.cursor)
    partitions = set(context.instance.get_dynamic_partitions(VACANCIES.name))
    add = sorted(set(current) - partitions)[:MAX_PARTITION_REQUESTS]
    budget_left = MAX_PARTITION_REQUESTS - len(add)
    delete = sorted(partitions - set(current))[: max(0, budget_left)]
    changed = sorted(v for v, version in current.items() if previous.get(v) != version)
    requests = []
    if add:
        requests.append(VACANCIES.build_add_request(add))
    if delete:
        requests.append(VACANCIES.build_delete_request(delete))
    runs = []
    if changed:
        digest = hashlib.sha1(
            json.dumps({v: current[v] for v in changed}, sort_keys=True).encode()
        ).hexdigest()
        runs.append(
            dg.RunRequest(
                run_key=f"vacancies-{digest}",
                run_config={"ops": {"judge_all_vacancies": {"config": {"vacancies": changed}}}},
                tags={"hltm/judge": "vacancy_changes"},
            )
        )
    if not (requests or runs) and previous == current:
        return dg.SkipReason("no vacancy added, changed or removed")
    return dg.SensorResult(
        run_requests=runs,
        dynamic_partitions_requests=requests,
        cursor=json.dumps(current, sort_keys=True),
    )


judge_nightly = dg.ScheduleDefinition(
    name="judge_nightly",
    job=judge_refresh_job,
    cron_schedule=judge_cron(),
    default_status=dg.DefaultScheduleStatus.RUNNING,
    run_config={"ops": {"judge_all_vacancies": {"config": {"vacancies": []}}}},
    tags={"hltm/judge": "nightly"},
    description="Every night: refresh the resume index and pools, judge only new pairs (score "
    "cache) within the budget of cold evaluations, gate, publish rankings to the journal.",
)

JUDGE_SENSORS = [vacancy_changes]
JUDGE_SCHEDULES = [judge_nightly]

"""`judge_nightly` (**stopped by default**; `HLTM_JUDGE_CRON`, default 02:00): `judge_refresh`
over every vacancy, up to `HLTM_JUDGE_BUDGET` (3,000) cold evaluations a night. Switch it on in
the UI (*Automation*) or `dagster schedule start judge_nightly`."""

from __future__ import annotations

from collections.abc import Iterator

import dagster as dg

from hltm.judge.data import vacancy_ids
from hltm.settings import judge_cron
from hltm_dagster.defs.judge.assets import judge_refresh_job
from hltm_dagster.defs.sources.assets import vacancy_ranges
from hltm_dagster.instance import partition_range_tags
from hltm_dagster.resources import PlatformResource


@dg.schedule(
    name="judge_nightly",
    job=judge_refresh_job,
    cron_schedule=judge_cron(),
    default_status=dg.DefaultScheduleStatus.STOPPED,  # up to 3,000 LLM calls a night
    tags={"hltm/judge": "nightly"},
    description="Every night: refresh the resume index and pools, judge only new pairs (score "
    "cache) within the budget of cold evaluations, gate, publish rankings to the journal — one "
    "run over every vacancy's partition.",
)
def judge_nightly(
    context: dg.ScheduleEvaluationContext, platform: PlatformResource
) -> Iterator[dg.RunRequest | dg.SkipReason]:
    sources_db = platform.sources_db.path
    wanted = set(vacancy_ids(sources_db)) if sources_db.exists() else set()
    if not wanted:
        yield dg.SkipReason(f"no vacancy in the sources ({sources_db})")
        return
    # A partition the `vacancy_changes` sensor has not added yet (it may be stopped) is added here.
    for start, end in vacancy_ranges(context.instance, wanted):
        yield dg.RunRequest(tags=partition_range_tags(start, end))


JUDGE_SCHEDULES = [judge_nightly]

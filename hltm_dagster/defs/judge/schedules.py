"""`judge_nightly` (**stopped by default**; `HLTM_JUDGE_CRON`, default 02:00): `judge_refresh`
over every vacancy, up to `HLTM_JUDGE_BUDGET` (3,000) cold evaluations a night. Switch it on in
the UI (*Automation*) or `dagster schedule start judge_nightly`."""

from __future__ import annotations

import dagster as dg

from hltm.settings import judge_cron
from hltm_dagster.defs.judge.assets import judge_refresh_job

judge_nightly = dg.ScheduleDefinition(
    name="judge_nightly",
    job=judge_refresh_job,
    cron_schedule=judge_cron(),
    default_status=dg.DefaultScheduleStatus.STOPPED,  # up to 3,000 LLM calls a night
    run_config={"ops": {"judge_all_vacancies": {"config": {"vacancies": []}}}},
    tags={"hltm/judge": "nightly"},
    description="Every night: refresh the resume index and pools, judge only new pairs (score "
    "cache) within the budget of cold evaluations, gate, publish rankings to the journal.",
)

JUDGE_SCHEDULES = [judge_nightly]

"""`recall_probe_schedule` (**stopped by default**): once a month, probe the month that just
ended (built from the monthly partitioned job, so each tick targets one month partition):
`HLTM_PROBE_SAMPLE_SIZE` (20) judge calls per ranked vacancy, about 480 for the demo's 24."""

from __future__ import annotations

import dagster as dg

from hltm_dagster.defs.probe.assets import recall_probe_job

recall_probe_schedule = dg.build_schedule_from_partitioned_job(
    recall_probe_job,
    name="recall_probe_schedule",
    hour_of_day=4,
    default_status=dg.DefaultScheduleStatus.STOPPED,  # 20 judge calls per ranked vacancy
    description="Monthly recall probe: 20 candidates per vacancy from outside its pool and "
    "results (archive layer included), judged through the score cache and budget.",
)

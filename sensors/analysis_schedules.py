"""Schedules of the adaptation and analysis assets.

* `query_patterns_schedule` (on by default) — mine the query log periodically
  (`HLTM_PATTERNS_CRON`, default Mondays 03:00) and release approved patterns as memory hints.
  A tick makes no LLM call (it reads the query log and embeds template texts); new patterns
  wait for `hltm patterns approve` unless `HLTM_PATTERNS_AUTO_APPROVE=1`, and only a release
  that changes the hints makes `source_changes` rebuild the tree (with its LLM calls).
* `recall_probe_schedule` (**stopped by default**) — once a month, probe the month that just
  ended (built from the monthly partitioned job, so each tick targets one month partition):
  `HLTM_PROBE_SAMPLE_SIZE` (20) judge calls per ranked vacancy, ≈ 480 for the demo's 24.
"""

from __future__ import annotations

import dagster as dg

from assets.patterns import query_patterns_job
from assets.probe import recall_probe_job
from hltm.patterns import PatternSettings

query_patterns_schedule = dg.ScheduleDefinition(
    name="query_patterns_schedule",
    job=query_patterns_job,
    cron_schedule=PatternSettings.from_env().cron,
    default_status=dg.DefaultScheduleStatus.RUNNING,
    description="Mine the query log for recurring templates and asked attributes; release the "
    "approved ones as memory hints.",
)

recall_probe_schedule = dg.build_schedule_from_partitioned_job(
    recall_probe_job,
    name="recall_probe_schedule",
    hour_of_day=4,
    default_status=dg.DefaultScheduleStatus.STOPPED,  # 20 judge calls per ranked vacancy
    description="Monthly recall probe: 20 candidates per vacancy from outside its pool and "
    "results (archive layer included), judged through the score cache and budget.",
)

ANALYSIS_SCHEDULES = [query_patterns_schedule, recall_probe_schedule]

"""`query_patterns_schedule` (on by default): mine the query log periodically
(`HLTM_PATTERNS_CRON`, default Mondays 03:00) and release approved patterns as memory hints.
A tick makes no LLM call (it reads the query log and embeds template texts); new patterns wait
for `hltm patterns approve` unless `HLTM_PATTERNS_AUTO_APPROVE=1`, and only a release that
changes the hints makes `source_changes` rebuild the tree (with its LLM calls)."""

from __future__ import annotations

import dagster as dg

from hltm.patterns import PatternSettings
from hltm_dagster.defs.patterns.assets import query_patterns_job

query_patterns_schedule = dg.ScheduleDefinition(
    name="query_patterns_schedule",
    job=query_patterns_job,
    cron_schedule=PatternSettings.from_env().cron,
    default_status=dg.DefaultScheduleStatus.RUNNING,
    description="Mine the query log for recurring templates and asked attributes; release the "
    "approved ones as memory hints.",
)

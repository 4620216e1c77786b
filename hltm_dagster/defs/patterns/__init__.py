"""Query-log pattern mining that steers the extractors, and its schedule."""

import dagster as dg

from hltm_dagster.defs.patterns.assets import PATTERN_ASSETS, PATTERN_JOBS
from hltm_dagster.defs.patterns.schedules import query_patterns_schedule

defs = dg.Definitions(assets=PATTERN_ASSETS, jobs=PATTERN_JOBS, schedules=[query_patterns_schedule])

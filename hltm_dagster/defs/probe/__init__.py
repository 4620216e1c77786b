"""The monthly recall probe and its schedule."""

import dagster as dg

from hltm_dagster.defs.probe.assets import PROBE_ASSETS, PROBE_JOBS
from hltm_dagster.defs.probe.schedules import recall_probe_schedule

defs = dg.Definitions(assets=PROBE_ASSETS, jobs=PROBE_JOBS, schedules=[recall_probe_schedule])

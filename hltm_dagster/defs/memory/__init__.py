"""The memory tree: one partitioned asset per level, its checks and jobs, and the sensor that
refreshes it when the sources change."""

import dagster as dg

from hltm_dagster.defs.memory.assets import MEMORY_ASSETS, MEMORY_CHECKS, MEMORY_JOBS
from hltm_dagster.defs.memory.sensors import source_changes

defs = dg.Definitions(
    assets=MEMORY_ASSETS, asset_checks=MEMORY_CHECKS, jobs=MEMORY_JOBS, sensors=[source_changes]
)

"""The one Dagster code location: every asset, check, job, sensor, schedule and resource."""

from __future__ import annotations

import dagster as dg

from assets.evaluation import EVALUATION_ASSETS
from assets.memory import MEMORY_ASSETS, MEMORY_JOBS, MemoryTreeResource
from assets.sources import observe_sources_job, source_tables
from hltm.settings import Settings
from resources import build_resources
from sensors.source_changes import source_changes

defs = dg.Definitions(
    assets=[source_tables, *MEMORY_ASSETS, *EVALUATION_ASSETS],
    jobs=[observe_sources_job, *MEMORY_JOBS],
    sensors=[source_changes],
    resources={**build_resources(Settings.from_env()), "memory_tree": MemoryTreeResource()},
)

"""The one Dagster code location: every asset, check, job, sensor, schedule and resource."""

from __future__ import annotations

import dagster as dg

from assets.evaluation import EVALUATION_ASSETS
from assets.sources import observe_sources_job, source_tables
from hltm.settings import Settings
from resources import build_resources

defs = dg.Definitions(
    assets=[source_tables, *EVALUATION_ASSETS],
    jobs=[observe_sources_job],
    resources=build_resources(Settings.from_env()),
)

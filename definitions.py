"""The one Dagster code location: every asset, check, job, sensor, schedule and resource."""

from __future__ import annotations

import dagster as dg

from assets.analysis import ANALYSIS_ASSETS
from assets.calibration import CALIBRATION_ASSETS, CALIBRATION_JOBS
from assets.evaluation import EVALUATION_ASSETS, EVALUATION_JOBS
from assets.judge import JUDGE_ASSETS, JUDGE_CHECKS, JUDGE_JOBS
from assets.memory import MEMORY_ASSETS, MEMORY_CHECKS, MEMORY_JOBS
from assets.patterns import PATTERN_ASSETS, PATTERN_JOBS
from assets.probe import PROBE_ASSETS, PROBE_JOBS
from assets.sources import observe_sources_job, source_tables
from hltm.settings import Settings
from resources import build_resources
from sensors.analysis_schedules import ANALYSIS_SCHEDULES
from sensors.judge import JUDGE_SCHEDULES, JUDGE_SENSORS
from sensors.source_changes import source_changes

defs = dg.Definitions(
    assets=[
        source_tables,
        *MEMORY_ASSETS,
        *EVALUATION_ASSETS,
        *JUDGE_ASSETS,
        *CALIBRATION_ASSETS,
        *PATTERN_ASSETS,
        *PROBE_ASSETS,
        *ANALYSIS_ASSETS,
    ],
    asset_checks=[*JUDGE_CHECKS, *MEMORY_CHECKS],
    jobs=[
        observe_sources_job,
        *MEMORY_JOBS,
        *JUDGE_JOBS,
        *CALIBRATION_JOBS,
        *EVALUATION_JOBS,
        *PATTERN_JOBS,
        *PROBE_JOBS,
    ],
    sensors=[source_changes, *JUDGE_SENSORS],
    schedules=[*JUDGE_SCHEDULES, *ANALYSIS_SCHEDULES],
    resources=build_resources(Settings.from_env()),
    # One process per run: DuckDB has one writer and embedded Chroma one process, and a run the
    # CLI executes (in its own process) runs the same way as one the UI launches.
    executor=dg.in_process_executor,
)

"""The one Dagster code location: every domain's definitions merged, with the resources and the
executor they share."""

from __future__ import annotations

import dagster as dg

from hltm.settings import Settings
from hltm_dagster.defs import (
    analysis,
    calibration,
    evaluation,
    judge,
    memory,
    patterns,
    probe,
    sources,
)
from hltm_dagster.resources import build_resources

DOMAINS = (sources, memory, judge, calibration, patterns, probe, evaluation, analysis)

defs = dg.Definitions.merge(
    *(domain.defs for domain in DOMAINS),
    dg.Definitions(
        resources=build_resources(Settings.from_env()),
        # One process per run: DuckDB has one writer and embedded Chroma one process, and a run
        # the CLI executes (in its own process) runs the same way as one the UI launches.
        executor=dg.in_process_executor,
    ),
)

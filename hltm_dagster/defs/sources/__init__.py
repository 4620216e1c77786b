"""The source tables, observed (row counts and data versions), and the job that observes them."""

import dagster as dg

from hltm_dagster.defs.sources.assets import observe_sources_job, source_tables

defs = dg.Definitions(assets=[source_tables], jobs=[observe_sources_job])

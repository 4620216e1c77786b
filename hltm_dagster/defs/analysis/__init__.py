"""The judge's statistics report on the golden set."""

import dagster as dg

from hltm_dagster.defs.analysis.assets import ANALYSIS_ASSETS

defs = dg.Definitions(assets=ANALYSIS_ASSETS)

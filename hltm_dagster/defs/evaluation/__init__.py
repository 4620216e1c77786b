"""The memory evaluation and the job that evaluates the platform."""

import dagster as dg

from hltm_dagster.defs.evaluation.assets import EVALUATION_ASSETS, EVALUATION_JOBS

defs = dg.Definitions(assets=EVALUATION_ASSETS, jobs=EVALUATION_JOBS)

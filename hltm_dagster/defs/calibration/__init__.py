"""A new vacancy's calibration from its recruiter's memory."""

import dagster as dg

from hltm_dagster.defs.calibration.assets import CALIBRATION_ASSETS, CALIBRATION_JOBS

defs = dg.Definitions(assets=CALIBRATION_ASSETS, jobs=CALIBRATION_JOBS)

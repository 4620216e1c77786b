"""The judge: resume index, pools, scores and rankings per vacancy, the golden set, their checks,
the vacancy sensors and the nightly schedule."""

import dagster as dg

from hltm_dagster.defs.judge.assets import JUDGE_ASSETS, JUDGE_CHECKS, JUDGE_JOBS
from hltm_dagster.defs.judge.schedules import JUDGE_SCHEDULES
from hltm_dagster.defs.judge.sensors import JUDGE_SENSORS

defs = dg.Definitions(
    assets=JUDGE_ASSETS,
    asset_checks=JUDGE_CHECKS,
    jobs=JUDGE_JOBS,
    sensors=JUDGE_SENSORS,
    schedules=JUDGE_SCHEDULES,
)

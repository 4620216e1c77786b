"""The Dagster shell: thin assets, checks, jobs, sensors and schedules calling `hltm`, by domain.

The one home of the code location's warning filters (this package is the first of it any
process imports: the webserver, the daemon, the CLI, the tests through `tests/conftest.py`).
`dagster` is pinned to one version in pyproject.toml, so each filtered beta API below is the
behaviour this project was tested with:

* `multi_observable_source_asset`: the source tables' row counts and data versions, observed as
  one asset per table; used on purpose.
* `backfill_policy` of `asset`: a single-run backfill policy lets one run calibrate a range of
  vacancies (`vacancy_calibration`); used on purpose.
* `owners` of `SensorDefinition.__init__`: Dagster passes it itself when it binds resources to a
  sensor; no sensor here sets owners.

Every other warning still shows.
"""

import warnings

import dagster as dg

ACCEPTED_BETA_WARNINGS = (
    r"Function `multi_observable_source_asset` is currently in beta",
    r"Parameter `backfill_policy` of function `asset` is currently in beta",
    r"Parameter `owners` of initializer `SensorDefinition.__init__` is currently in beta",
)

for _message in ACCEPTED_BETA_WARNINGS:
    warnings.filterwarnings("ignore", message=_message, category=dg.BetaWarning)

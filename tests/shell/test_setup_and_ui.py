"""What `make setup` and `make ui` print: `make ui` runs `dg dev` on the project pyproject's
[tool.dg] describes (plain `dagster dev` prints a SupersessionWarning that points at it), and
the editable install is the repository root on the path, which setuptools installs without its
warning about folders shadowing packages."""

from __future__ import annotations

import re
import sysconfig
from importlib.metadata import distributions
from pathlib import Path

from tests.support import REPO


def test_make_ui_runs_dg_dev_on_the_projects_one_code_location() -> None:
    from dagster_dg_core.context import DgContext

    recipe = re.search(r"^ui:.*\n((?:\t.*\n)+)", (REPO / "Makefile").read_text(), re.M)
    assert recipe is not None
    assert "/dg dev" in recipe.group(1) and "dagster dev" not in recipe.group(1)
    project = DgContext.for_project_environment(REPO, {"suppress_warnings": []})
    assert project.is_project and project.code_location_name == "definitions"
    assert project.code_location_target_module_name == "hltm_dagster.definitions"
    assert not project.config.cli.telemetry_enabled


def test_the_editable_install_is_the_repository_on_the_path() -> None:
    (installed,) = distributions(name="hltm-platform", path=[sysconfig.get_paths()["purelib"]])
    files = installed.files or []
    finders = [f.name for f in files if f.name.startswith("__editable__") and "finder" in f.name]
    assert finders == []  # setuptools' import finder is what warns at every `make setup`
    (pth,) = [f for f in files if f.name.endswith(".pth")]
    assert Path(pth.read_text().strip()) == REPO

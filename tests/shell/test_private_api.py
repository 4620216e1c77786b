"""Dagster's private API lives in one module, and each name it uses is pinned here, so an upgrade
of Dagster that moves or changes one fails this test before it fails a run."""

from __future__ import annotations

import re
import subprocess

import dagster as dg

from hltm_dagster import instance
from tests.support import REPO

HOME = "hltm_dagster/instance.py"


def test_only_the_instance_module_imports_private_dagster() -> None:
    tracked = subprocess.run(
        ["git", "ls-files", "*.py"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    private = re.compile(r"^\s*(from|import) dagster\._", re.M)
    users = {
        path
        for path in tracked
        if not path.startswith("tests/") and private.search((REPO / path).read_text("utf-8"))
    }
    assert users == {HOME}


def test_the_private_names_still_mean_what_the_project_relies_on() -> None:
    # the tags Dagster itself reads back
    assert instance.DATA_VERSION_TAG == "dagster/data_version"
    assert instance.partition_range_tags("a", "b") == {
        "dagster/asset_partition_range_start": "a",
        "dagster/asset_partition_range_end": "b",
    }
    # the run launcher's health check: the shape run monitoring expects
    assert {s.name for s in instance.WorkerStatus} >= {"RUNNING", "NOT_FOUND", "FAILED", "UNKNOWN"}
    result = instance.CheckRunHealthResult(instance.WorkerStatus.NOT_FOUND, "gone")
    assert (result.status, result.msg) == (instance.WorkerStatus.NOT_FOUND, "gone")
    assert issubclass(instance.LocalRunLauncher, dg.DefaultRunLauncher)
    assert instance.LocalRunLauncher.supports_check_run_worker_health
    # running a job of the code location in this process
    job, origin = instance.located_job("observe_sources")
    assert job.get_definition().name == "observe_sources"
    assert origin.job_name == "observe_sources"

"""What the CLI executes is a run of the code location: the UI lists it under its job (the job
page filters runs by the repository label the origin gives), in the timeline, and can re-execute
it."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest
from dagster._core.storage.tags import REPOSITORY_LABEL_TAG

from hltm.cli.demo import run_job
from hltm.settings import Settings


def test_a_cli_run_has_the_code_locations_origin(
    loaded_world: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    (tmp_path / "dagster_home").mkdir()
    result = run_job("observe_sources")
    with dg.DagsterInstance.get() as instance:
        run = instance.get_run_by_id(result.run_id)
        listed = instance.get_runs(
            dg.RunsFilter(
                job_name="observe_sources",
                tags={REPOSITORY_LABEL_TAG: "__repository__@definitions"},
            )
        )
    assert run is not None and run.status == dg.DagsterRunStatus.SUCCESS
    origin = run.remote_job_origin
    assert origin is not None and origin.location_name == "definitions"
    assert origin.repository_origin.repository_name == "__repository__"
    assert run.job_code_origin is not None  # reconstructable: re-execution loads the job again
    assert [r.run_id for r in listed] == [run.run_id]

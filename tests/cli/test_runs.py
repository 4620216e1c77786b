"""What the CLI executes is a run of the code location: the UI lists it under its job (the job
page filters runs by the repository label the origin gives), in the timeline, and can re-execute
it; and, asked through the UI's own GraphQL API, every memory check has its evaluations."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest
from dagster._core.storage.tags import REPOSITORY_LABEL_TAG

from hltm.settings import Settings
from hltm_cli.dagster_runs import dagster_home, run_job
from hltm_cli.demo import build_memory
from hltm_dagster import instance as dagster_instance
from hltm_dagster.defs.memory.assets import MEMORY_ASSETS, MEMORY_CHECKS, MEMORY_JOBS
from hltm_dagster.defs.sources.assets import observe_sources_job, source_tables
from hltm_dagster.resources import build_resources
from tests.support.memory import ingested_sources, memory_world  # noqa: F401 (fixtures)
from tests.support.ui import ui_graphql

# The label a job's page in the UI filters its runs by: repository @ code location.
JOB_PAGE_LABEL = "__repository__@definitions"


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
                tags={REPOSITORY_LABEL_TAG: JOB_PAGE_LABEL},
            )
        )
    assert run is not None and run.status == dg.DagsterRunStatus.SUCCESS
    origin = run.remote_job_origin
    assert origin is not None and origin.location_name == "definitions"
    assert origin.repository_origin.repository_name == "__repository__"
    assert run.job_code_origin is not None  # reconstructable: re-execution loads the job again
    assert [r.run_id for r in listed] == [run.run_id]


def location_on_test_stores() -> dg.Definitions:
    """The code location's jobs the test runs, bound to the test's stores when the run loads
    them: the `definitions` module keeps the stores of the first test that imported it."""
    return dg.Definitions(
        assets=[source_tables, *MEMORY_ASSETS],
        asset_checks=MEMORY_CHECKS,
        jobs=[observe_sources_job, *MEMORY_JOBS],
        resources=build_resources(Settings.from_env()),
        executor=dg.in_process_executor,
    )


CLI_JOBS = {"observe_sources": 1, "refresh_memory_tree": 2}
MEMORY_ASSET_KEYS = ("project_memory", "seat_memory", "contract_memory")
JOB_RUNS = """
query JobRuns($job: String!, $tag: String!, $repository: String!) {
  runsOrError(filter: {pipelineName: $job, tags: [{key: $tag, value: $repository}]}) {
    ... on Runs { results { runId status } }
  }
}"""
ALL_RUNS = """
{
  runsOrError {
    ... on Runs { results { runId pipelineName repositoryOrigin { repositoryLocationName } } }
  }
}"""
CHECKS_OF_ASSETS = """
query MemoryChecks($keys: [AssetKeyInput!]) {
  assetNodes(assetKeys: $keys) {
    assetKey { path }
    assetChecksOrError { ... on AssetChecks { checks { name } } }
  }
}"""
CHECK_EXECUTIONS = """
query Executions($key: AssetKeyInput!, $check: String!) {
  assetCheckExecutions(assetKey: $key, checkName: $check, limit: 10) { runId status }
}"""


@pytest.mark.usefixtures("memory_world")
def test_the_ui_lists_the_cli_runs_under_their_jobs_with_their_checks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the UI shows after CLI runs, asked through Dagster's GraphQL API (the webserver's,
    here on the code location loaded in process): each job's page lists its runs, every run has
    the code location's origin, every memory check has its evaluations."""
    monkeypatch.setattr(dagster_instance, "LOCATION_MODULE", __name__)
    monkeypatch.setattr(dagster_instance, "LOCATION_DEFS", location_on_test_stores.__name__)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    dagster_home()
    run_job("observe_sources")
    build_memory()
    build_memory()
    with dg.DagsterInstance.get() as instance, ui_graphql(instance) as query:
        listed = {
            job: query(JOB_RUNS, job=job, tag=REPOSITORY_LABEL_TAG, repository=JOB_PAGE_LABEL)[
                "runsOrError"
            ]["results"]
            for job in CLI_JOBS
        }
        runs = query(ALL_RUNS)["runsOrError"]["results"]
        nodes = query(CHECKS_OF_ASSETS, keys=[{"path": [key]} for key in MEMORY_ASSET_KEYS])[
            "assetNodes"
        ]
        executions = {
            (node["assetKey"]["path"][0], check["name"]): query(
                CHECK_EXECUTIONS, key=node["assetKey"], check=check["name"]
            )["assetCheckExecutions"]
            for node in nodes
            for check in node["assetChecksOrError"]["checks"]
        }
    assert {job: [r["status"] for r in listed[job]] for job in CLI_JOBS} == {
        job: ["SUCCESS"] * n for job, n in CLI_JOBS.items()
    }
    assert sorted(r["pipelineName"] for r in runs) == sorted(
        job for job, n in CLI_JOBS.items() for _ in range(n)
    )
    assert [r["runId"] for r in runs if r["repositoryOrigin"] is None] == []
    assert {r["repositoryOrigin"]["repositoryLocationName"] for r in runs} == {"definitions"}
    assert len(executions) == 4  # each level's degradation check, the store's consistency
    # Both memory runs evaluate every check, even the second, which had nothing to rebuild.
    assert {check: len(found) for check, found in executions.items()} == {
        check: 2 for check in executions
    }
    assert {e["status"] for found in executions.values() for e in found} == {"SUCCEEDED"}

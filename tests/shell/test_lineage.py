"""What the UI shows is true.

* The lineage it draws, read from the webserver's own GraphQL API over the real code location
  (workspace.yaml, loaded in a code-server process as `dagster dev` does):
  seat_memory → vacancy_calibration → judge_scores, and memory_hints → project_memory.
* *Materialize* on a current memory partition lists the stored nodes, not zeroed counters.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dagster as dg
import pytest
from dagster_graphql.test.utils import define_out_of_process_context, execute_dagster_graphql

from hltm.settings import Settings
from hltm.sources.ingest import ingest_directory
from hltm_dagster.defs.memory.assets import MEMORY_ASSETS
from hltm_dagster.defs.sources.assets import source_tables
from hltm_dagster.resources import build_resources
from hltm_devkit.generator import WorldSize, generate_world
from hltm_devkit.scenarios import read_world
from tests.support import REPO
from tests.support.memory import level_metadata

ROOT = REPO

ASSET_EDGES = """
query {
  assetNodes {
    assetKey { path }
    dependencyKeys { path }
    dependedByKeys { path }
  }
}
"""


def test_ui_lineage_joins_memory_calibration_and_judge(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HLTM_DATA_DIR", str(tmp_path / "data"))
    with (
        dg.instance_for_test(temp_dir=str(tmp_path)) as instance,
        define_out_of_process_context(str(ROOT / "workspace.yaml"), None, instance) as context,
    ):
        result = execute_dagster_graphql(context, ASSET_EDGES)
    assert not result.errors, result.errors
    nodes = {
        "/".join(n["assetKey"]["path"]): n
        for n in result.data["assetNodes"]  # type: ignore[index]
    }

    def upstream(key: str) -> set[str]:
        return {"/".join(k["path"]) for k in nodes[key]["dependencyKeys"]}

    def downstream(key: str) -> set[str]:
        return {"/".join(k["path"]) for k in nodes[key]["dependedByKeys"]}

    assert {"seat_memory", "contract_memory"} <= upstream("vacancy_calibration")
    assert "judge_scores" in downstream("vacancy_calibration")
    assert "vacancy_calibration" in upstream("judge_scores")
    assert "memory_hints" in upstream("project_memory")
    assert "project_memory" in downstream("memory_hints")


def test_materialize_on_a_current_partition_reports_what_is_stored(
    tmp_path: Path, settings: Settings
) -> None:
    """Pressing *Materialize* on an up-to-date memory partition rebuilds nothing and says so,
    listing the stored nodes with their versions (never zeroed counters for nodes that hold
    items)."""
    tiny = WorldSize(contracts=1, seats_per_contract=1, projects_per_seat=1, resumes=4, vacancies=1)
    generate_world(tmp_path / "world", seed=5, size=tiny)
    assert ingest_directory(tmp_path / "world", settings.sources_db).quarantined == 0
    instance = dg.DagsterInstance.ephemeral()
    (key,) = read_world(settings.sources_db).contracts
    instance.add_dynamic_partitions("contracts", [key])
    resources = build_resources(settings)

    def press() -> dict[str, Any]:
        result = dg.materialize(
            [*MEMORY_ASSETS, source_tables],
            selection=dg.AssetSelection.assets("project_memory").required_multi_asset_neighbors(),
            partition_key=key,
            instance=instance,
            resources=resources,
        )
        return level_metadata(result)[("project_memory", key)]

    built = press()
    again = press()
    ((node, meta),) = built["rebuilt"].items()
    assert meta["status"] == "built" and meta["facets"] > 0
    assert (again["rebuilt_nodes"], again["current_nodes"], again["nodes"]) == (0, 1, 1)
    assert again["rebuilt"] == {} and "facets" not in again
    assert again["llm_calls"] == 0 and again["versions"] == {node: meta["version"]}

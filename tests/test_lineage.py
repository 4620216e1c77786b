"""The lineage the UI draws, read from the webserver's own GraphQL API over the real code
location (workspace.yaml, loaded in a code-server process as `dagster dev` does):
seat_memory → vacancy_calibration → judge_scores, and memory_hints → project_memory."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest
from dagster_graphql.test.utils import define_out_of_process_context, execute_dagster_graphql

ROOT = Path(__file__).resolve().parent.parent

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

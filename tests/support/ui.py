"""What the Dagster UI shows, asked through the webserver's own GraphQL API on the code location
loaded in this process (no server, no browser)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import dagster as dg

from tests.support import REPO

Query = Callable[..., dict[str, Any]]

# Each partition's staleness as the asset page shows it ("resume_index has a new
# materialization"), with its causes.
STALENESS = """
query Staleness($key: AssetKeyInput!, $partitions: [String!]) {
  assetNodes(assetKeys: [$key]) {
    staleStatusByPartition(partitions: $partitions)
    staleCausesByPartition(partitions: $partitions) { key { path } reason dependency { path } }
  }
}"""


@contextmanager
def ui_graphql(instance: dg.DagsterInstance) -> Iterator[Query]:
    """`query(text, **variables)` → the `data` of a GraphQL answer of the webserver, on the
    `definitions` code location and `instance`."""
    from dagster._core.remote_origin import InProcessCodeLocationOrigin
    from dagster._core.types.loadable_target_origin import LoadableTargetOrigin
    from dagster._core.workspace.context import WorkspaceProcessContext
    from dagster._core.workspace.load_target import InProcessWorkspaceLoadTarget
    from dagster_graphql.test.utils import execute_dagster_graphql

    location = InProcessCodeLocationOrigin(
        LoadableTargetOrigin(module_name="hltm_dagster.definitions", working_directory=str(REPO)),
        location_name="definitions",
    )
    with WorkspaceProcessContext(instance, InProcessWorkspaceLoadTarget(location)) as process:
        context = process.create_request_context()

        def query(text: str, **variables: object) -> dict[str, Any]:
            result = execute_dagster_graphql(context, text, variables)
            assert not result.errors, result.errors
            return result.data

        yield query


def stale_partitions(query: Query, asset: str, partitions: list[str]) -> dict[str, list[str]]:
    """partition → why the UI shows it stale (only the stale ones)."""
    (node,) = query(STALENESS, key={"path": [asset]}, partitions=partitions)["assetNodes"]
    return {
        partition: [
            f"{'/'.join((cause['dependency'] or cause['key'])['path'])} {cause['reason']}"
            for cause in causes
        ]
        or [status]
        for partition, status, causes in zip(
            partitions, node["staleStatusByPartition"], node["staleCausesByPartition"], strict=True
        )
        if status != "FRESH"
    }

"""The permitted set of one request: the nodes of the caller's subtree (of the depths asked),
derived once, from one state of the tree, and handed to every read of that request.

Every read is confined to it before anything else happens: a search ranks only these nodes'
items (or asks Chroma for them alone), a fetch by id reads an id outside the set as absent, the
depth check counts it. It is taken from the ownership path every stored row carries (`Scope`),
so a node of another owner is never a candidate at all.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import duckdb

from hltm.query.scope import MEMORY_TABLE, Scope
from hltm.query.snapshot import NodeRow, TreeSnapshot
from hltm.warehouse import table_exists


@dataclass(frozen=True, eq=False)
class Permitted:
    scope: Scope
    levels: tuple[str, ...] | None  # None: every depth
    # Sorted by node id. For one scope of one snapshot it is the same list object on every
    # request: `SubtreeVectors` keys the scope's stacked vectors by it.
    rows: list[NodeRow]
    by_id: dict[str, NodeRow]
    snapshot: TreeSnapshot | None  # the tree it was derived from (None: read by SQL)

    def node_ids(self) -> list[str]:
        return [row.node_id for row in self.rows]

    def level_ok(self, level: str) -> bool:
        return self.levels is None or level in self.levels

    def among(self, node_ids: Iterable[str]) -> dict[str, NodeRow]:
        """The rows of these nodes that the set holds (any other id reads as absent)."""
        return {n: self.by_id[n] for n in set(node_ids) if n in self.by_id}

    @classmethod
    def of(
        cls,
        scope: Scope,
        source: TreeSnapshot | duckdb.DuckDBPyConnection,
        levels: Sequence[str] | None = None,
    ) -> Permitted:
        """The permitted set of `scope` in a snapshot of the tree (kept with the snapshot: a
        contract of 10k projects takes 12 ms) or, read by SQL, in a connection's file."""
        levels = tuple(levels) if levels else None
        if isinstance(source, TreeSnapshot):
            key = ("permitted", scope, levels)
            found = source.derived.get(key)
            if found is None:
                rows = [] if scope.empty else _tree_rows(scope, source, levels)
                found = source.derived[key] = _permitted(scope, levels, rows, source)
            return found
        rows = [] if scope.empty else _sql_rows(scope, source, levels)
        return _permitted(scope, levels, rows, None)


def _permitted(
    scope: Scope, levels: tuple[str, ...] | None, rows: list[NodeRow], tree: TreeSnapshot | None
) -> Permitted:
    return Permitted(scope, levels, rows, {row.node_id: row for row in rows}, tree)


def _tree_rows(
    scope: Scope, snapshot: TreeSnapshot, levels: tuple[str, ...] | None
) -> list[NodeRow]:
    column, value = scope.narrowest_id()
    members = (snapshot.rows[n] for n in snapshot.members.get((column, value), ()))
    return [
        row
        for row in sorted(members, key=lambda r: r.node_id)
        if scope.admits(row.contract_id, row.seat_id, row.project_id)
        and (levels is None or row.level in levels)
    ]


def _sql_rows(
    scope: Scope, con: duckdb.DuckDBPyConnection, levels: tuple[str, ...] | None
) -> list[NodeRow]:
    if not table_exists(con, MEMORY_TABLE):
        return []
    predicate, params = scope.sql_predicate()
    fetched = con.execute(
        f"SELECT node_id, level, contract_id, seat_id, project_id, version, item_count"
        f" FROM {MEMORY_TABLE} WHERE {predicate} ORDER BY node_id",
        params,
    ).fetchall()
    rows = [NodeRow(r[0], r[1], r[2], r[3] or None, r[4] or None, r[5], r[6]) for r in fetched]
    return [row for row in rows if levels is None or row.level in levels]

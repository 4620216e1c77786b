"""Which contracts have to be diffed, from the rows changed since a change number, and their diff.

A node's version depends only on its own subtree, so diffing whole contract subtrees gives, for
their nodes, exactly the plan a diff of the whole tree gives; the other contracts are not read.
A contract is diffed when its subtree changed:

* in the sources — a row with a `change_seq` above the last one seen (the ingest change log),
  mapped to its contract where the sources place it now *and* where the store built it (a move
  rebuilds both chains); a row that left an owner (`source_departures`: a deleted project's
  seat, a deleted document's project, a row moved elsewhere); a stored node whose source row is
  gone (an anti-join of ids in SQL), at the contract it was built under;
* in the store — stored nodes are digested per bucket of contracts (256 buckets by the first two
  hex digits of md5(contract id)); a bucket whose digest moved (a refresh run wrote, a crash lost
  nodes, an old backup came back) has all its contracts diffed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import duckdb

from hltm.memory.inputs import read_tree
from hltm.memory.models import node_id_for
from hltm.memory.store import MEMORY_TABLE, read_built, table_exists
from hltm.memory.tree import BuiltNode, Plan, Tree, VersionConfig, plan_changes
from hltm.sources.ingest import DEPARTURES_TABLE, TREE_OWNERS
from hltm.warehouse import connect, store_exists
from hltm.warehouse import table_exists as table_in_store

BUCKET = "substr(md5(contract_id), 1, 2)"
BUCKETS = tuple(f"{i:02x}" for i in range(256))
_LOGGED_TABLES = ("contracts", *TREE_OWNERS)
_STORE = "hltm_store"  # the memory store, attached read-only to the sources connection

# (id column, id) of every contract, seat and project whose subtree changed after change $1.
_CHANGED_OWNERS = f"""
SELECT 'contract_id', contract_id FROM contracts WHERE change_seq > $1
UNION SELECT 'seat_id', seat_id FROM seats WHERE change_seq > $1
UNION SELECT 'project_id', project_id FROM projects WHERE change_seq > $1
UNION SELECT 'project_id', project_id FROM project_documents WHERE change_seq > $1
UNION SELECT 'project_id', project_id FROM recruiter_actions WHERE change_seq > $1
UNION SELECT 'project_id', project_id FROM vacancies WHERE change_seq > $1
UNION SELECT 'project_id', v.project_id FROM vacancy_requirements r JOIN vacancies v
  USING (vacancy_id) WHERE r.change_seq > $1
UNION SELECT owner_column, owner_id FROM {DEPARTURES_TABLE}
  WHERE change_seq > $1 AND owner_column <> 'vacancy_id'
UNION SELECT 'project_id', v.project_id FROM {DEPARTURES_TABLE} d JOIN vacancies v
  ON v.vacancy_id = d.owner_id WHERE d.owner_column = 'vacancy_id' AND d.change_seq > $1
"""

_CONTRACTS_NOW = """
SELECT contract_id FROM contracts WHERE contract_id IN (SELECT unnest($1::VARCHAR[]))
UNION SELECT contract_id FROM seats WHERE seat_id IN (SELECT unnest($2::VARCHAR[]))
UNION SELECT s.contract_id FROM projects p JOIN seats s USING (seat_id)
  WHERE p.project_id IN (SELECT unnest($3::VARCHAR[]))
"""

# One anti-join per level: PostgreSQL runs `NOT IN (SELECT …)` over a set larger than its
# work_mem as a scan of the set per stored node (O(n²): more than 12 minutes at 1M projects).
_CONTRACTS_OF_GONE = " UNION ".join(
    f"SELECT m.contract_id FROM {_STORE}.{MEMORY_TABLE} m WHERE m.level = '{level}'"
    f" AND NOT EXISTS (SELECT 1 FROM {table} s WHERE s.{column} = m.{column})"
    for level, table, column in (
        ("project", "projects", "project_id"),
        ("seat", "seats", "seat_id"),
        ("contract", "contracts", "contract_id"),
    )
)


def change_mark(con: duckdb.DuckDBPyConnection) -> int | None:
    """The newest change number in the sources; None when they have no change log (written
    before it existed, or not at all)."""
    row = con.execute(
        "SELECT count(*) FROM duckdb_columns() WHERE column_name = 'change_seq'"
        " AND table_name IN (SELECT unnest(?::VARCHAR[]))",
        [list(_LOGGED_TABLES)],
    ).fetchone()
    if not row or row[0] != len(_LOGGED_TABLES) or not table_exists(con, DEPARTURES_TABLE):
        return None
    newest = " UNION ALL ".join(
        f"SELECT max(change_seq) AS n FROM {t}" for t in (*_LOGGED_TABLES, DEPARTURES_TABLE)
    )
    row = con.execute(f"SELECT coalesce(max(n), 0) FROM ({newest}) AS newest").fetchone()
    return int(row[0]) if row else 0


def store_digests(derived_db: Path) -> dict[str, str]:
    """Bucket → digest of the stored (node id, version) pairs of the bucket's contracts."""
    if not store_exists(derived_db):
        return {}
    with connect(derived_db, read_only=True) as con:
        if not table_exists(con, MEMORY_TABLE):
            return {}
        rows = con.execute(
            f"SELECT {BUCKET} AS b, substr(md5(string_agg(node_id || chr(31) || version, chr(30)"
            f" ORDER BY node_id)), 1, 16) FROM {MEMORY_TABLE} GROUP BY b"
        ).fetchall()
    return dict(sorted(rows))


def moved_buckets(before: dict[str, str], now: dict[str, str]) -> set[str]:
    return {b for b in before.keys() | now.keys() if before.get(b) != now.get(b)}


def contracts_to_diff(
    sources: duckdb.DuckDBPyConnection, derived_db: Path, since: int, buckets: set[str]
) -> set[str]:
    """The contracts whose subtree changed after change `since` in the sources, or whose store
    bucket is in `buckets`. Reads only the changed rows' ids (and, in SQL, id columns)."""
    changed: dict[str, set[str]] = {"contract_id": set(), "seat_id": set(), "project_id": set()}
    for column, value in sources.execute(_CHANGED_OWNERS, [since]).fetchall():
        if value is not None:
            changed[column].add(value)
    ids = [sorted(changed[c]) for c in ("contract_id", "seat_id", "project_id")]
    contracts = {r[0] for r in sources.execute(_CONTRACTS_NOW, ids).fetchall()}
    contracts |= changed["contract_id"]
    contracts |= {
        r[0]
        for r in sources.execute(
            f"SELECT contract_id FROM contracts WHERE {BUCKET} IN (SELECT unnest(?::VARCHAR[]))",
            [sorted(buckets)],
        ).fetchall()
    }
    if not store_exists(derived_db):
        return contracts
    path = str(derived_db).replace("'", "''")
    sources.execute(f"ATTACH '{path}' AS {_STORE} (READ_ONLY)")
    try:
        if not table_in_store(sources, MEMORY_TABLE, database=_STORE):
            return contracts
        levels = (("contract", ids[0]), ("seat", ids[1]), ("project", ids[2]))
        node_ids = [node_id_for(level, i) for level, group in levels for i in group]
        where_built = (
            f"SELECT DISTINCT contract_id FROM {_STORE}.{MEMORY_TABLE}"
            " WHERE node_id IN (SELECT unnest($1::VARCHAR[]))"
            f" OR {BUCKET} IN (SELECT unnest($2::VARCHAR[]))"
        )
        contracts |= {
            r[0] for r in sources.execute(where_built, [node_ids, sorted(buckets)]).fetchall()
        }
        if any(ids):
            contracts |= {r[0] for r in sources.execute(_CONTRACTS_OF_GONE).fetchall()}
    finally:
        sources.execute(f"DETACH {_STORE}")
    return contracts


@dataclass(frozen=True)
class ScopedDiff:
    """The desired tree of some contracts, what the store holds of them, and the plan."""

    tree: Tree
    built: dict[str, BuiltNode]
    plan: Plan

    @property
    def nodes_read(self) -> int:
        """Tree nodes computed from the sources plus stored nodes read (the tick's cost)."""
        return len(self.tree.nodes) + len(self.built)


def diff_contracts(
    sources: duckdb.DuckDBPyConnection,
    derived_db: Path,
    contract_ids: set[str] | None,
    config: VersionConfig,
) -> ScopedDiff:
    """Diff the subtrees of `contract_ids` (None: the whole tree) against the store."""
    scope = None if contract_ids is None else sorted(contract_ids)
    tree = Tree.from_sources(read_tree(sources, contract_ids=scope), config)
    built: dict[str, BuiltNode] = {}
    if store_exists(derived_db) and scope != []:
        with connect(derived_db, read_only=True) as con:
            built = read_built(con, contract_ids=scope)
    return ScopedDiff(tree, built, plan_changes(tree, built))

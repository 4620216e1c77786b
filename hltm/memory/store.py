"""The memory store: full node content in DuckDB, search strings and vectors in Chroma.

DuckDB (`settings.derived_db`), table `memory_nodes`, one row per current node:

    node_id PK ('project:<id>' | 'seat:<id>' | 'contract:<id>'), level, contract_id,
    seat_id (NULL for contracts), project_id (NULL unless project), parent_id, label, version,
    facets  JSON [{field, value, support, sources}],
    qa      JSON [{question, answer, rationale, source, support}],
    summary_long, summary_short,
    children JSON [[child_id, child_version], ...],
    item_count, built_at

Chroma: one collection per contract, `memory_collection_name(contract_id)`; one item per facet
(document `"field: value"`), per QA question and per short summary, with metadata `node_id, level,
contract_id, seat_id ("" for contracts), project_id ("" unless project), kind ('facet' | 'qa' |
'summary'), index, node_version` (+ `field` on facets). Item ids embed the version, so two
versions of a node can coexist while it is being replaced.

Replacing a node is atomic for a reader that accepts only items whose `node_version` equals the
node's row: new-version items are written first, then the rows flip in one DuckDB transaction,
then the old version's items are deleted. Deleting a node removes its row first, then its items.

A crash between those steps leaves items no row accepts (orphans, which still take nearest-
neighbour slots before a reader filters them out), and an index that was lost or replaced (a
fresh Chroma server) leaves rows without items. `check()` finds both, `sweep()` removes orphans
and `reindex()` rewrites a node's items from its stored row (no LLM needed).

Table `memory_node_quality` (node_id PK, version, kept/dropped counts, reasons JSON) records what
each build dropped from the model's answer (unknown ids, below minimum support, echoed prompt
examples), written in the same transaction as the node's row, for the degraded-node check.

Table `memory_incomplete` (node_id PK, contract_id, seat_id, project_id, reason) names the nodes
whose memory misses what the last build should have put in: a node whose build failed (its last
good version, if any, stays) and every ancestor of it (kept at its last good version, or built
from the failed child's previous version). Readers say an answer over such a node is incomplete;
a later build that settles the node clears its mark.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import numpy as np

from hltm.memory.models import QA, Facet, MemoryNode, Placement, canonical_json
from hltm.memory.tree import BuiltNode
from hltm.vectors import VectorStore, collection_name
from hltm.warehouse import connect, insert_rows

MEMORY_TABLE = "memory_nodes"
QUALITY_TABLE = "memory_node_quality"
INCOMPLETE_TABLE = "memory_incomplete"
COLLECTION_PREFIX = "mem"
_CHROMA_CHUNK = 2000

_COLUMNS = (
    ("node_id", "VARCHAR PRIMARY KEY"),
    ("level", "VARCHAR NOT NULL"),
    ("contract_id", "VARCHAR NOT NULL"),
    ("seat_id", "VARCHAR"),
    ("project_id", "VARCHAR"),
    ("parent_id", "VARCHAR"),
    ("label", "VARCHAR NOT NULL"),
    ("version", "VARCHAR NOT NULL"),
    ("facets", "VARCHAR NOT NULL"),
    ("qa", "VARCHAR NOT NULL"),
    ("summary_long", "VARCHAR NOT NULL"),
    ("summary_short", "VARCHAR NOT NULL"),
    ("children", "VARCHAR NOT NULL"),
    ("item_count", "INTEGER NOT NULL"),
    ("built_at", "TIMESTAMP NOT NULL"),
)
CONTENT_COLUMNS = tuple(name for name, _ in _COLUMNS if name != "built_at")


def memory_collection_name(contract_id: str) -> str:
    return collection_name(COLLECTION_PREFIX, contract_id)


def item_id(node_id: str, version: str, kind: str, index: int) -> str:
    return f"{node_id}#{version}#{kind}#{index}"


def table_exists(con: duckdb.DuckDBPyConnection, name: str) -> bool:
    """Like `hltm.warehouse.table_exists`, through `duckdb_tables()` (several times faster)."""
    row = con.execute(
        "SELECT count(*) FROM duckdb_tables() WHERE table_name = ?", [name]
    ).fetchone()
    return bool(row and row[0])


def ensure_memory_schema(con: duckdb.DuckDBPyConnection) -> None:
    columns = ", ".join(f"{name} {kind}" for name, kind in _COLUMNS)
    con.execute(f"CREATE TABLE IF NOT EXISTS {MEMORY_TABLE} ({columns})")
    con.execute(
        f"CREATE TABLE IF NOT EXISTS {QUALITY_TABLE} (node_id VARCHAR PRIMARY KEY,"
        " version VARCHAR NOT NULL, kept INTEGER NOT NULL, dropped INTEGER NOT NULL,"
        " reasons VARCHAR NOT NULL)"
    )
    con.execute(
        f"CREATE TABLE IF NOT EXISTS {INCOMPLETE_TABLE} (node_id VARCHAR PRIMARY KEY,"
        " contract_id VARCHAR NOT NULL, seat_id VARCHAR, project_id VARCHAR,"
        " reason VARCHAR NOT NULL)"
    )


@dataclass(frozen=True)
class Drops:
    """What one build kept of the model's items and dropped, by reason (`facet:unknown_source`)."""

    kept: int = 0
    reasons: tuple[tuple[str, int], ...] = ()

    @property
    def dropped(self) -> int:
        return sum(n for _, n in self.reasons)

    def count(self, prefix: str) -> int:
        return sum(n for reason, n in self.reasons if reason.startswith(f"{prefix}:"))


@dataclass(frozen=True)
class DegradedNode:
    node_id: str
    level: str
    kept: int
    dropped: int
    reasons: dict[str, int]
    copied_sources: int = 0  # > 0: every facet cites the same this many sources

    @property
    def why(self) -> str:
        if self.kept == 0:
            return "empty (no facet and no QA pair)"
        if self.copied_sources:
            return (
                "no evidence of provenance (every facet cites the same"
                f" {self.copied_sources} sources)"
            )
        return f"mostly dropped ({self.dropped} of {self.kept + self.dropped} items)"


def copied_sources(facets: list[dict[str, Any]]) -> int:
    """How many sources every facet cites, when two or more facets all cite one and the same
    set of two or more: a model copying the whole list of allowed ids, which says nothing of
    where each value came from. 0 otherwise."""
    sets = {frozenset(f.get("sources", ())) for f in facets}
    if len(facets) < 2 or len(sets) != 1:
        return 0
    (only,) = sets
    return len(only) if len(only) >= 2 else 0


def degraded_nodes(con: duckdb.DuckDBPyConnection, level: str) -> list[DegradedNode]:
    """Stored nodes of a level that are empty, whose build dropped more items than it kept, or
    whose facets all cite the same full set of sources (`copied_sources`)."""
    if not table_exists(con, MEMORY_TABLE) or not table_exists(con, QUALITY_TABLE):
        return []
    rows = con.execute(
        f"SELECT m.node_id, m.level, q.kept, q.dropped, q.reasons, m.facets FROM {MEMORY_TABLE} m"
        f" JOIN {QUALITY_TABLE} q ON q.node_id = m.node_id AND q.version = m.version"
        " WHERE m.level = ? ORDER BY m.node_id",
        [level],
    ).fetchall()
    found = []
    for node_id, lvl, kept, dropped, reasons, facets in rows:
        copied = copied_sources(json.loads(facets or "[]"))
        if kept == 0 or dropped > kept or copied:
            found.append(DegradedNode(node_id, lvl, kept, dropped, json.loads(reasons), copied))
    return found


# ---- reading (also the query path's API) -------------------------------------------------------


def read_built(
    con: duckdb.DuckDBPyConnection,
    node_ids: Iterable[str] | None = None,
    contract_ids: Iterable[str] | None = None,
) -> dict[str, BuiltNode]:
    """node id → (level, version, contract, parent) of stored nodes (all, the given ones, or
    those of the given contracts)."""
    if not table_exists(con, MEMORY_TABLE):
        return {}
    query = f"SELECT node_id, level, version, contract_id, parent_id FROM {MEMORY_TABLE}"
    params: list[Any] = []
    if node_ids is not None:
        query += " WHERE node_id IN (SELECT unnest(?::VARCHAR[]))"
        params = [sorted(set(node_ids))]
    elif contract_ids is not None:
        query += " WHERE contract_id IN (SELECT unnest(?::VARCHAR[]))"
        params = [sorted(set(contract_ids))]
    return {r[0]: BuiltNode(*r) for r in con.execute(query, params).fetchall()}


def current_versions(con: duckdb.DuckDBPyConnection, node_ids: Iterable[str]) -> dict[str, str]:
    """The version a reader must accept for each node (absent: the node does not exist)."""
    return {nid: b.version for nid, b in read_built(con, node_ids).items()}


def _node_from_row(row: tuple[Any, ...]) -> MemoryNode:
    values = dict(zip(CONTENT_COLUMNS, row, strict=True))
    placement = Placement(
        values["node_id"],
        values["level"],
        values["contract_id"],
        values["seat_id"],
        values["project_id"],
        values["parent_id"],
        values["label"],
    )
    facets = tuple(
        Facet(f["field"], f["value"], tuple(f["support"]), tuple(f["sources"]))
        for f in json.loads(values["facets"])
    )
    qa = tuple(
        QA(q["question"], q["answer"], q["rationale"], q["source"], tuple(q["support"]))
        for q in json.loads(values["qa"])
    )
    children = tuple((c[0], c[1]) for c in json.loads(values["children"]))
    return MemoryNode(
        placement,
        values["version"],
        facets,
        qa,
        values["summary_long"],
        values["summary_short"],
        children,
    )


def read_nodes(con: duckdb.DuckDBPyConnection, node_ids: Iterable[str]) -> dict[str, MemoryNode]:
    """Full stored memories of the given nodes (missing ids are simply absent)."""
    wanted = sorted(set(node_ids))
    if not wanted or not table_exists(con, MEMORY_TABLE):
        return {}
    rows = con.execute(
        f"SELECT {', '.join(CONTENT_COLUMNS)} FROM {MEMORY_TABLE}"
        " WHERE node_id IN (SELECT unnest(?::VARCHAR[]))",
        [wanted],
    ).fetchall()
    return {r[0]: _node_from_row(r) for r in rows}


def subtree_node_ids(
    con: duckdb.DuckDBPyConnection,
    *,
    contract_id: str | None = None,
    seat_id: str | None = None,
    project_id: str | None = None,
) -> list[str]:
    """T_v = {v} ∪ Desc(v) for the narrowest identity given (project ⊂ seat ⊂ contract).

    The same filter works in Chroma: `where={"project_id": p}`, `{"seat_id": s}` or
    `{"contract_id": c}` inside the contract's collection.
    """
    if not table_exists(con, MEMORY_TABLE):
        return []
    if project_id is not None:
        column, value = "project_id", project_id
    elif seat_id is not None:
        column, value = "seat_id", seat_id
    elif contract_id is not None:
        column, value = "contract_id", contract_id
    else:
        raise ValueError("an identity is required: contract_id, seat_id or project_id")
    rows = con.execute(
        f"SELECT node_id FROM {MEMORY_TABLE} WHERE {column} = ? ORDER BY node_id", [value]
    ).fetchall()
    return [r[0] for r in rows]


def item_metadata(node: MemoryNode, kind: str, index: int, field: str) -> dict[str, Any]:
    p = node.placement
    meta: dict[str, Any] = {
        "node_id": p.node_id,
        "level": p.level,
        "contract_id": p.contract_id,
        "seat_id": p.seat_id if p.level != "contract" and p.seat_id else "",
        "project_id": p.project_id or "",
        "kind": kind,
        "index": index,
        "node_version": node.version,
    }
    if kind == "facet":
        meta["field"] = field
    return meta


# ---- writing -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Consistency:
    """Where the vector index and the node rows disagree."""

    orphans: dict[str, list[str]]  # collection → item ids no stored row accepts
    incomplete: list[str]  # stored nodes whose current items are not all in the index
    unowned_collections: list[str]  # memory collections of no stored contract, not empty

    @property
    def orphan_count(self) -> int:
        return sum(len(ids) for ids in self.orphans.values())

    @property
    def clean(self) -> bool:
        return not (self.orphans or self.incomplete or self.unowned_collections)

    def describe(self) -> str:
        if self.clean:
            return "the vector index matches the stored nodes"
        return (
            f"{self.orphan_count} orphan item(s) in {len(self.orphans)} collection(s),"
            f" {len(self.unowned_collections)} collection(s) of no stored contract,"
            f" {len(self.incomplete)} node(s) with missing items"
        )


@dataclass(frozen=True)
class StoreSnapshot:
    """Everything stored, in a canonical order, for byte-for-byte comparisons."""

    rows: tuple[tuple[Any, ...], ...]
    collections: dict[str, tuple[tuple[str, str, str, bytes], ...]]

    def text_dump(self) -> str:
        out = [canonical_json(list(r)) for r in self.rows]
        for name in sorted(self.collections):
            out.append(f"== {name}")
            out += [f"{i} | {d} | {m} | {e.hex()[:16]}" for i, d, m, e in self.collections[name]]
        return "\n".join(out)


class MemoryStore:
    """The two stores of the memory tree, written together."""

    def __init__(self, derived_db: Path | str, vectors: VectorStore) -> None:
        self.derived_db = Path(derived_db)
        self.vectors = vectors
        self._schema_ready = False  # the table is created by the first write, not by readers

    def _ensure(self, con: duckdb.DuckDBPyConnection) -> None:
        if not self._schema_ready:
            ensure_memory_schema(con)
            self._schema_ready = True

    # reads
    def built(self, node_ids: Iterable[str] | None = None) -> dict[str, BuiltNode]:
        with connect(self.derived_db) as con:
            return read_built(con, node_ids)

    def nodes(self, node_ids: Iterable[str]) -> dict[str, MemoryNode]:
        with connect(self.derived_db) as con:
            return read_nodes(con, node_ids)

    def read(
        self, node_ids: Iterable[str], child_ids: Iterable[str]
    ) -> tuple[dict[str, BuiltNode], dict[str, MemoryNode]]:
        """Stored state of some nodes and full memories of others, in one connection."""
        with connect(self.derived_db) as con:
            return read_built(con, node_ids), read_nodes(con, child_ids)

    def _collection(self, contract_id: str, create: bool):  # type: ignore[no-untyped-def]
        name = memory_collection_name(contract_id)
        return self.vectors.collection(name) if create else self.vectors.existing(name)

    # writes
    def write(
        self,
        entries: list[tuple[MemoryNode, np.ndarray]],
        old: dict[str, BuiltNode] | None = None,
        drops: dict[str, Drops] | None = None,
    ) -> None:
        """Store new versions of nodes atomically (each row flips only once its items exist).

        `old`: what the store held for these nodes, if the caller has just read it; `drops`:
        what each node's build dropped (recorded with the row)."""
        if not entries:
            return
        if old is None:
            old = self.built(n.node_id for n, _ in entries)
        else:
            old = {n.node_id: old[n.node_id] for n, _ in entries if n.node_id in old}
        todo = []
        for node, vectors in entries:
            before = old.get(node.node_id)
            same = before is not None and before.version == node.version
            if same and before.contract_id == node.placement.contract_id:  # type: ignore[union-attr]
                continue  # content-addressed: this exact memory is already stored
            todo.append((node, vectors))
        if not todo:
            return
        new_version = {n.node_id: n.version for n, _ in todo}
        new_contract = {n.node_id: n.placement.contract_id for n, _ in todo}

        # Items already in Chroma for these nodes: leftovers of the new version from an earlier
        # attempt that never flipped (invisible to readers; cleared now) and the live old
        # version (deleted only after the flip).
        inspect: dict[str, set[str]] = defaultdict(set)
        for nid in new_version:
            inspect[new_contract[nid]].add(nid)
            if nid in old:
                inspect[old[nid].contract_id].add(nid)
        stale: dict[str, list[str]] = defaultdict(list)
        for cid in sorted(inspect):
            with self.vectors.reading():
                col = self._collection(cid, create=False)
                if col is None:
                    continue
                got = col.get(where=_in("node_id", inspect[cid]), include=["metadatas"])
                leftovers = []
                for iid, meta in zip(got["ids"], got["metadatas"] or [], strict=True):
                    nid = str(meta["node_id"])
                    if cid == new_contract[nid] and meta.get("node_version") == new_version[nid]:
                        leftovers.append(iid)
                    else:
                        stale[cid].append(iid)
                _delete_ids(col, leftovers)

        by_contract = self._add_items(todo)

        rows = [_row(node) for node, _ in todo]
        quality = [
            (n.node_id, n.version, d.kept, d.dropped, canonical_json(dict(d.reasons)))
            for n, _ in todo
            if (d := (drops or {}).get(n.node_id)) is not None
        ]
        columns = ", ".join(CONTENT_COLUMNS)
        with connect(self.derived_db) as con:
            self._ensure(con)
            con.execute("BEGIN TRANSACTION")
            con.execute(
                f"CREATE TEMP TABLE incoming_nodes AS SELECT {columns} FROM {MEMORY_TABLE} LIMIT 0"
            )
            insert_rows(con, "INSERT INTO incoming_nodes", rows)
            con.execute(
                f"INSERT OR REPLACE INTO {MEMORY_TABLE} ({columns}, built_at)"
                f" SELECT {columns}, now() FROM incoming_nodes"
            )
            con.execute("DROP TABLE incoming_nodes")
            con.execute(
                f"DELETE FROM {QUALITY_TABLE} WHERE node_id IN (SELECT unnest(?::VARCHAR[]))",
                [sorted(new_version)],
            )
            insert_rows(con, f"INSERT INTO {QUALITY_TABLE}", quality)
            con.execute("COMMIT")

        for cid in sorted(stale):
            with self.vectors.reading():
                col = self._collection(cid, create=False)
                if col is not None:
                    _delete_ids(col, stale[cid])
        self._drop_empty_contracts({b.contract_id for b in old.values()} - set(by_contract))

    def _add_items(
        self, entries: list[tuple[MemoryNode, np.ndarray]]
    ) -> dict[str, list[tuple[MemoryNode, np.ndarray]]]:
        """Add the search items of these node versions to their contracts' collections."""
        by_contract: dict[str, list[tuple[MemoryNode, np.ndarray]]] = defaultdict(list)
        for node, vectors in entries:
            by_contract[node.placement.contract_id].append((node, vectors))
        for cid in sorted(by_contract):
            ids: list[str] = []
            documents: list[str] = []
            metadatas: list[dict[str, Any]] = []
            embeddings: list[np.ndarray] = []
            for node, vectors in by_contract[cid]:
                items = node.search_items()
                if len(items) != len(vectors):
                    raise ValueError(f"{node.node_id}: {len(items)} items, {len(vectors)} vectors")
                for (kind, index, text, field), vector in zip(items, vectors, strict=True):
                    ids.append(item_id(node.node_id, node.version, kind, index))
                    documents.append(text)
                    metadatas.append(item_metadata(node, kind, index, field))
                    embeddings.append(vector)
            with self.vectors.reading():
                col = self._collection(cid, create=True)
                foreign = col.get(where={"contract_id": {"$ne": cid}}, limit=1, include=[])
                if foreign["ids"]:
                    # Two contract ids that sanitise to one collection name: refuse to mix them.
                    raise ValueError(
                        f"collection {col.name} already holds items of another contract"
                        f" than {cid!r}"
                    )
                for start in range(0, len(ids), _CHROMA_CHUNK):
                    end = start + _CHROMA_CHUNK
                    col.add(
                        ids=ids[start:end],
                        documents=documents[start:end],
                        metadatas=metadatas[start:end],  # type: ignore[arg-type]
                        embeddings=np.asarray(embeddings[start:end], dtype=np.float32),
                    )
        return by_contract

    # consistency between the two stores
    def check(self, contract_ids: Iterable[str] | None = None) -> Consistency:
        """Orphan items and nodes with missing items, for some contracts (default: all)."""
        with connect(self.derived_db) as con:
            if not table_exists(con, MEMORY_TABLE):
                rows = []
            else:
                rows = con.execute(
                    f"SELECT node_id, version, contract_id, item_count FROM {MEMORY_TABLE}"
                ).fetchall()
        wanted = None if contract_ids is None else set(contract_ids)
        nodes = {r[0]: r for r in rows if wanted is None or r[2] in wanted}
        by_name: dict[str, set[str]] = defaultdict(set)
        for _, _, cid, _ in nodes.values():
            by_name[memory_collection_name(cid)].add(cid)
        names = set(by_name)
        if wanted is None:
            names |= {n for n in self.vectors.list_names() if n.startswith(f"{COLLECTION_PREFIX}-")}
        else:
            names |= {memory_collection_name(c) for c in wanted}
        present: dict[str, int] = defaultdict(int)
        orphans: dict[str, list[str]] = {}
        unowned: list[str] = []
        for name in sorted(names):
            with self.vectors.reading():
                col = self.vectors.existing(name)
                if col is None:
                    continue
                if name not in by_name:
                    if col.count():
                        unowned.append(name)
                    continue
                got = col.get(include=["metadatas"])
            stray = []
            for iid, meta in zip(got["ids"], got["metadatas"] or [], strict=True):
                row = nodes.get(str((meta or {}).get("node_id")))
                if (
                    row is None
                    or meta.get("node_version") != row[1]
                    or meta.get("contract_id") != row[2]
                ):
                    stray.append(iid)
                else:
                    present[row[0]] += 1
            if stray:
                orphans[name] = sorted(stray)
        incomplete = sorted(nid for nid, r in nodes.items() if present[nid] != r[3])
        return Consistency(orphans, incomplete, unowned)

    def sweep(self, consistency: Consistency) -> int:
        """Delete the orphan items (and collections no stored node owns); returns items removed."""
        removed = 0
        for name, ids in sorted(consistency.orphans.items()):
            with self.vectors.reading():
                col = self.vectors.existing(name)
                if col is not None:
                    _delete_ids(col, ids)
                    removed += len(ids)
        for name in consistency.unowned_collections:
            with self.vectors.reading():
                col = self.vectors.existing(name)
                if col is not None:
                    removed += col.count()
                    self.vectors.drop(name)
        return removed

    def reindex(self, entries: list[tuple[MemoryNode, np.ndarray]]) -> None:
        """Rewrite the items of stored node versions (whatever part of them is left first)."""
        by_contract: dict[str, set[str]] = defaultdict(set)
        for node, _ in entries:
            by_contract[node.placement.contract_id].add(node.node_id)
        for cid in sorted(by_contract):
            with self.vectors.reading():
                col = self._collection(cid, create=False)
                if col is not None:
                    col.delete(where=_in("node_id", by_contract[cid]))
        self._add_items(entries)

    def delete(self, node_ids: Iterable[str]) -> dict[str, BuiltNode]:
        """Remove nodes: rows first (readers stop accepting them), then their items.
        Returns what was stored for the nodes that existed."""
        wanted = sorted(set(node_ids))
        if not wanted:
            return {}
        with connect(self.derived_db) as con:
            old = read_built(con, wanted)
            con.execute("BEGIN TRANSACTION")
            for table in (MEMORY_TABLE, QUALITY_TABLE, INCOMPLETE_TABLE):
                if table_exists(con, table):
                    con.execute(
                        f"DELETE FROM {table} WHERE node_id IN (SELECT unnest(?::VARCHAR[]))",
                        [wanted],
                    )
            con.execute("COMMIT")
        if not old:
            return {}
        by_contract: dict[str, set[str]] = defaultdict(set)
        for nid, built in old.items():
            by_contract[built.contract_id].add(nid)
        for cid in sorted(by_contract):
            with self.vectors.reading():
                col = self._collection(cid, create=False)
                if col is not None:
                    col.delete(where=_in("node_id", by_contract[cid]))
        self._drop_empty_contracts(set(by_contract))
        return old

    def _drop_empty_contracts(self, contract_ids: set[str]) -> None:
        """A contract with no stored node left has its collection dropped."""
        if not contract_ids:
            return
        with connect(self.derived_db) as con:
            self._ensure(con)
            alive = {
                r[0]
                for r in con.execute(
                    f"SELECT DISTINCT contract_id FROM {MEMORY_TABLE}"
                    " WHERE contract_id IN (SELECT unnest(?::VARCHAR[]))",
                    [sorted(contract_ids)],
                ).fetchall()
            }
        for cid in sorted(contract_ids - alive):
            self.vectors.drop(memory_collection_name(cid))

    def mark_incomplete(self, marks: list[tuple[Placement, str]], settled: list[str]) -> None:
        """Record the nodes a build left incomplete (with why), and clear the marks of the
        nodes it settled otherwise (built, current or deleted)."""
        marked = {p.node_id for p, _ in marks}
        cleared = sorted(set(settled) | marked)
        if not cleared:
            return
        with connect(self.derived_db) as con:
            self._ensure(con)
            con.execute("BEGIN TRANSACTION")
            con.execute(
                f"DELETE FROM {INCOMPLETE_TABLE} WHERE node_id IN (SELECT unnest(?::VARCHAR[]))",
                [cleared],
            )
            insert_rows(
                con,
                f"INSERT INTO {INCOMPLETE_TABLE}",
                [
                    (p.node_id, p.contract_id, p.seat_id, p.project_id, reason)
                    for p, reason in sorted(marks, key=lambda m: m[0].node_id)
                ],
            )
            con.execute("COMMIT")

    def clear(self) -> None:
        """Drop the whole memory tree (a from-scratch rebuild; not atomic for readers)."""
        with connect(self.derived_db) as con:
            self._ensure(con)
            for table in (MEMORY_TABLE, QUALITY_TABLE, INCOMPLETE_TABLE):
                con.execute(f"DELETE FROM {table}")
        for name in self.vectors.list_names():
            if name.startswith(f"{COLLECTION_PREFIX}-"):
                self.vectors.drop(name)

    def snapshot(self, with_embeddings: bool = True) -> StoreSnapshot:
        with connect(self.derived_db) as con:
            self._ensure(con)
            rows = con.execute(
                f"SELECT {', '.join(CONTENT_COLUMNS)} FROM {MEMORY_TABLE} ORDER BY node_id"
            ).fetchall()
        collections = {}
        for name in self.vectors.list_names():
            if not name.startswith(f"{COLLECTION_PREFIX}-"):
                continue
            include = ["documents", "metadatas"] + (["embeddings"] if with_embeddings else [])
            with self.vectors.reading():
                col = self.vectors.existing(name)
                if col is None:
                    continue
                got = col.get(include=include)  # type: ignore[arg-type]
            embeddings = got.get("embeddings")
            items = []
            for i, iid in enumerate(got["ids"]):
                vector = (
                    np.asarray(embeddings[i], dtype=np.float32).tobytes()
                    if with_embeddings and embeddings is not None
                    else b""
                )
                items.append(
                    (
                        iid,
                        (got["documents"] or [""])[i] or "",
                        canonical_json(dict((got["metadatas"] or [{}])[i] or {})),
                        vector,
                    )
                )
            collections[name] = tuple(sorted(items))
        return StoreSnapshot(tuple(tuple(r) for r in rows), collections)


def _row(node: MemoryNode) -> tuple[Any, ...]:
    p = node.placement
    return (
        p.node_id,
        p.level,
        p.contract_id,
        p.seat_id if p.level != "contract" else None,
        p.project_id,
        p.parent_id,
        p.label,
        node.version,
        node.facets_json(),
        node.qa_json(),
        node.summary_long,
        node.summary_short,
        node.children_json(),
        len(node.search_items()),
    )


def _in(key: str, values: Iterable[str]) -> dict[str, Any]:
    items = sorted(set(values))
    return {key: items[0]} if len(items) == 1 else {key: {"$in": items}}


def _delete_ids(col: Any, ids: list[str]) -> None:
    for start in range(0, len(ids), _CHROMA_CHUNK):
        col.delete(ids=ids[start : start + _CHROMA_CHUNK])

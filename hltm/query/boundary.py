"""The one retrieval boundary: the only code in the query path that reads memory.

`ScopedMemory` is built for one request from a resolved `Scope`. It derives the request's
permitted set once (`hltm.query.permitted`: the subtree's nodes of the depths asked, from one
state of the tree) and confines every read to it:

* `search(kind, vectors, n)` — nearest vector items of the permitted nodes. With the query
  engine's tree index a small scope is searched exactly over those nodes' own vectors
  (`SubtreeVectors`, read from Chroma once per node version), a larger one by Chroma, restricted
  to the permitted items' ids below a contract, unfiltered inside a contract's own collection
  (`ContractCollection`: other contracts' collections are never opened). Without the index, the
  filter is Chroma's `where`, applied before similarity. Chroma returns ids and distances only:
  an item id names its node, version, kind and index, and every hit's node is checked against
  the scope by its stored ownership path — a hit that does not belong is an `IsolationError`
  (fail closed), never a result. Hits are kept only if their version is the node's version in
  the permitted set, so a node being replaced is read either wholly old or wholly new.
* `node_ids()` / `node_count()` — the permitted set itself, for reads that cover the scope.
* `nodes(ids)` / `versions(ids)` — the given nodes that the set holds (a planted citation, a
  guessed id reads as absent); contents fetched by version, or by SQL under the subtree filter.

There is no unfiltered method, and an empty scope reads nothing.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import duckdb
import numpy as np

from hltm.embeddings import normalise
from hltm.query.chroma_subtree import Collections, ContractCollection
from hltm.query.permitted import Permitted
from hltm.query.scope import MEMORY_TABLE, Scope
from hltm.query.snapshot import (
    NODE_COLUMNS,
    NodeRow,
    NodeView,
    TreeIndex,
    TreeSnapshot,
    node_view,
)
from hltm.query.subtree_vectors import (
    KIND_CODES,
    KINDS,
    EntryKey,
    ItemVectors,
    SubtreeVectors,
    exact_part,
    parse_item_id,
    stack,
    view_item_ids,
)
from hltm.vectors import VectorStore
from hltm.warehouse import table_exists

_READ_BY_IDS = 64  # item vectors read by id up to this many; more by the subtree's id clause


@functools.cache
def _reader() -> ThreadPoolExecutor:
    """The process's readers ahead (`ScopedMemory.read_ahead`): a scope's Chroma read beside
    its question's embedding, up to four at once (a worker runs one query at a time by default;
    more queue here)."""
    return ThreadPoolExecutor(max_workers=4, thread_name_prefix="read-ahead")


class IsolationError(RuntimeError):
    """A store returned something outside the permitted subtree: refuse the whole query."""


@dataclass(frozen=True)
class Hit:
    """One vector item near a query, inside the scope, of a node's current version."""

    node_id: str
    level: str
    kind: str
    index: int
    score: float  # cosine similarity (1 - cosine distance)


@dataclass
class BoundaryStats:
    chroma_queries: int = 0
    exact_searches: int = 0  # searches answered by `SubtreeVectors`
    items_seen: int = 0
    stale_items_dropped: int = 0
    versions: dict[str, str] = field(default_factory=dict)


class ScopedMemory:
    """Reads of the memory tree confined to one request's permitted set."""

    def __init__(
        self,
        scope: Scope,
        con: duckdb.DuckDBPyConnection | TreeIndex,
        vectors: VectorStore | None,
        levels: Sequence[str] | None = None,
        wait_s: float | None = None,
        collections: Collections | None = None,
        exact: SubtreeVectors | None = None,
        tree: TreeSnapshot | None = None,
    ) -> None:
        """`con`: an open connection to the derived DuckDB file, or a `TreeIndex` of it.
        `wait_s`: how long a `TreeIndex` read waits for a file another process holds.
        `collections`: handles shared across queries (None: the collection is opened anew).
        `exact`: the engine's cache of small scopes' vectors (None: Chroma searches them).
        `tree`: the request's snapshot of the index (None: its latest)."""
        self.scope = scope
        self._con = con
        self._wait_s = wait_s
        if isinstance(con, TreeIndex):
            tree = tree or con.snapshot(wait_s)
        self.permitted = Permitted.of(scope, tree or con, levels)  # type: ignore[arg-type]
        self.levels = self.permitted.levels
        self.stats = BoundaryStats()
        self.last_exhausted: list[bool] = []  # per query of the last search: all items seen
        self._exact = exact if isinstance(con, TreeIndex) else None
        self.collection: ContractCollection | None = None
        if not scope.empty and vectors is not None and scope.contract_id is not None:
            self.collection = ContractCollection(vectors, scope.contract_id, collections)

    @property
    def empty(self) -> bool:
        return self.scope.empty

    # ---- vector search ---------------------------------------------------------------------

    def search(self, kind: str | None, queries: np.ndarray, n: int) -> list[list[Hit]]:
        """For each query vector, up to `n` nearest items in the subtree, best first: of one
        `kind`, or of every kind (`kind=None`, one cheaper call; the caller splits by kind).

        With a tree index the permitted items are the permitted nodes' own, taken before any
        similarity: a scope of up to `SubtreeVectors.max_scope_items` items is searched exactly
        over their cached vectors, a larger one by Chroma — by the subtree's item ids below a
        contract, unfiltered in a contract's own collection. Without a tree index (or when the
        index lacks an item) the subtree filter is Chroma's `where` (see `Scope.chroma_where`);
        a kind filter is added only when asked (Chroma's filter cost grows with the number of
        items a clause matches, and a kind matches a third of the collection). Every hit is
        then checked against its node's stored ownership."""
        if kind is not None and kind not in KINDS:
            raise ValueError(f"unknown item kind {kind!r}")
        queries = np.atleast_2d(np.asarray(queries, dtype=np.float32))
        nothing = [[] for _ in range(len(queries))]
        if self.collection is None or self.collection.handle is None or len(queries) == 0 or n <= 0:
            self.last_exhausted = [True] * len(queries)
            return nothing
        result = None
        tree, rows = self.permitted.snapshot, self.permitted.rows
        if tree is not None:
            if self._exact is not None:
                self._exact.follow(tree)
            if not any(r.items for r in rows):
                self.last_exhausted = [True] * len(queries)
                return nothing
            result = self._exact_search(tree, rows, queries, n, kind)
            if result is None and self.scope.level != "contract":
                ids = self._item_ids(rows, kind)
                if not ids:
                    self.last_exhausted = [True] * len(queries)
                    return nothing
                self.stats.chroma_queries += 1
                result = self.collection.nearest_of(queries, n, ids)
        if result is None:
            extra: dict[str, Any] = {}
            if kind is not None:
                extra["kind"] = kind
            if self.levels is not None:
                extra["level"] = list(self.levels)
            self.stats.chroma_queries += 1
            result = self.collection.nearest(queries, n, self.scope.chroma_where(**extra))
        raw = [
            [(parse_item_id(i), float(d)) for i, d in zip(ids, dists, strict=True)]
            for ids, dists in zip(result["ids"], result["distances"] or [], strict=True)
        ]
        self.last_exhausted = [len(row) < n for row in raw]
        owners = self._ownership({item[0] for row in raw for item, _ in row})
        hits: list[list[Hit]] = []
        for row in raw:
            self.stats.items_seen += len(row)
            kept = []
            for (node_id, version, item_kind, index), dist in row:
                owner = owners.get(node_id)
                if owner is None:  # removed since the item was written: an orphan
                    self.stats.stale_items_dropped += 1
                    continue
                if not self.scope.admits(owner.contract_id, owner.seat_id, owner.project_id):
                    raise IsolationError(
                        f"Chroma returned {node_id!r} outside {self.scope.identity}"
                    )
                if kind is not None and item_kind != kind:
                    raise IsolationError(f"Chroma ignored the kind filter for {node_id}")
                if not self.permitted.level_ok(owner.level):
                    raise IsolationError(f"Chroma ignored the level filter for {node_id}")
                if owner.version != version:
                    self.stats.stale_items_dropped += 1
                    continue
                kept.append(Hit(node_id, owner.level, item_kind, index, 1.0 - dist))
            hits.append(kept)
        return hits

    def _item_ids(self, rows: Sequence[NodeRow], kind: str | None) -> list[str]:
        """The vector item ids of these node versions (of one `kind`), from their contents:
        below a contract, the narrowest filter Chroma takes and its cheapest (measured at 30k
        items: a seat's 300 ids 28 ms, its `where` 62 ms, with a kind 193 ms)."""
        assert isinstance(self._con, TreeIndex)
        views = self._con.contents(rows, self._wait_s)
        # A version that moved on meanwhile is read as absent.
        return [
            i for r in rows if r.node_id in views for i in view_item_ids(views[r.node_id], kind)
        ]

    def _exact_search(
        self,
        snapshot: TreeSnapshot,
        rows: list[NodeRow],
        queries: np.ndarray,
        n: int,
        kind: str | None,
    ) -> dict[str, list[list]] | None:
        """Exact search over the permitted nodes' own vectors (`SubtreeVectors`); None when the
        scope is too large for it or Chroma lacks one of its items (then Chroma searches)."""
        exact = self._exact
        if exact is None:
            return None
        total = sum(r.items for r in rows)
        part = exact_part(rows, total, kind, exact.max_scope_items)
        if part is False:
            return None
        stacked = exact.stacked(snapshot, rows, part)
        if stacked is None:
            found = self._cached_vectors(exact, snapshot, rows, part, queries.shape[1], total)
            if found is None:
                return None
            stacked = stack([found[r.node_id].only(part) for r in rows])
            exact.keep_stack(snapshot, rows, part, stacked)
        self.stats.exact_searches += 1
        return stacked.nearest(queries, n, kind)

    def _cached_vectors(
        self,
        exact: SubtreeVectors,
        snapshot: TreeSnapshot,
        rows: list[NodeRow],
        part: str | None,
        dim: int,
        total: int,
    ) -> dict[str, ItemVectors] | None:
        """Each row's entry covering `part`, the missing ones read from Chroma into the cache;
        None if Chroma lacks one of them."""
        found = exact.cached(snapshot, rows, part)
        missing = [r for r in rows if r.node_id not in found]
        if missing:
            read = self._read_vectors(missing, dim, total, part)
            if read is None:
                return None
            exact.add(snapshot, read)
            found |= {node_id: entry for (node_id, _v, _p), entry in read.items()}
        return found

    def read_ahead(self, dim: int) -> Future[Any] | None:
        """Start reading, on a thread of its own, what a first search of every kind will read
        from Chroma (a scope searched exactly whose nodes are not all cached), so that the read
        overlaps the embedding of the question: the scope, not the question, decides what is
        read. None when there is nothing to read; the search waits for the future."""
        exact, tree, rows = self._exact, self.permitted.snapshot, self.permitted.rows
        if exact is None or tree is None or self.collection is None:
            return None
        total = sum(r.items for r in rows)
        if not total or exact_part(rows, total, None, exact.max_scope_items) is not None:
            return None
        if exact.stacked(tree, rows, None) is not None:
            return None
        if len(exact.cached(tree, rows, None)) == len(rows):
            return None
        return _reader().submit(self._cached_vectors, exact, tree, rows, None, dim, total)

    def prefetch_vectors(self, dim: int) -> int:
        """Read every permitted node's vectors into the exact-search cache now, in one read, if
        the budget has room (a server's warm-up, on each contract: its seats and projects are
        then searched with no first read), else only their summaries. Returns how many nodes
        were read."""
        tree, rows = self.permitted.snapshot, self.permitted.rows
        if self._exact is None or self.collection is None or tree is None:
            return 0
        total = sum(r.items for r in rows)
        if not total:
            return 0
        part = None  # every item: the scope's seats and projects are then searched at once
        if not self._exact.has_room(total, dim):
            # at least a large contract's own summaries (one a node; see `exact_part`)
            if len(rows) > self._exact.max_scope_items or not self._exact.has_room(len(rows), dim):
                return 0
            part = "summary"
        read = self._read_vectors(rows, dim, total, part)
        if read is None:
            return 0
        self._exact.add(tree, read)
        return len(read)

    def _read_vectors(
        self, rows: Sequence[NodeRow], dim: int, scope_items: int, part: str | None = None
    ) -> dict[EntryKey, ItemVectors] | None:
        """These node versions' item vectors from Chroma; None if any is missing (lost, or this
        process's embedded view is older than the tree). Most of a scope's `scope_items` are
        read by the subtree's id clause, several times faster than by item ids (measured on 3k
        items: a seat's 300 in 11–15 ms against 30–100 ms); only the expected ids are kept.
        With a `part` (one kind), only that kind's items are read, and kept as their own
        entries."""
        assert self.collection is not None and isinstance(self._con, TreeIndex)
        views = self._con.contents(rows, self._wait_s)
        if any(r.node_id not in views for r in rows):  # a version moved on meanwhile
            return None
        expected = {
            (r.node_id, r.version, part): view_item_ids(views[r.node_id], part) for r in rows
        }
        wanted = [i for ids in expected.values() for i in ids]
        matched = scope_items if part is None else len(rows)  # what the clause below matches
        if len(wanted) > max(_READ_BY_IDS, matched // 2):
            where = self.scope.chroma_where(**({} if part is None else {"kind": part}))
            got = self.collection.embeddings(where, None)
        else:
            got = self.collection.embeddings(None, wanted)
        if got is None:
            return None
        vectors = got["embeddings"] if got["embeddings"] is not None else []
        by_id = dict(zip(got["ids"], vectors, strict=True))
        out = {}
        for key, ids in expected.items():
            if any(i not in by_id for i in ids):
                return None
            matrix = normalise(np.asarray([by_id[i] for i in ids]).reshape(len(ids), dim))
            kinds = np.array([KIND_CODES[parse_item_id(i)[2]] for i in ids], dtype=np.int8)
            out[key] = ItemVectors(tuple(ids), kinds, matrix)
        return out

    def _ownership(self, node_ids: set[str]) -> dict[str, NodeRow]:
        """The stored ownership path, level and version of these nodes, wherever they lie: the
        check of what Chroma returned (a node outside the scope fails the query; no content is
        read here). A permitted node's row is the permitted set's own."""
        out = self.permitted.among(node_ids)
        others = node_ids - out.keys()
        if others and self.permitted.snapshot is not None:
            rows = self.permitted.snapshot.rows
            out |= {n: rows[n] for n in others if n in rows}
        elif (
            others
            and not isinstance(self._con, TreeIndex)
            and table_exists(self._con, MEMORY_TABLE)
        ):
            fetched = self._con.execute(
                f"SELECT node_id, level, contract_id, seat_id, project_id, version"
                f" FROM {MEMORY_TABLE} WHERE node_id IN (SELECT unnest(?::VARCHAR[]))",
                [sorted(others)],
            ).fetchall()
            out |= {
                r[0]: NodeRow(r[0], r[1], r[2], r[3] or None, r[4] or None, r[5]) for r in fetched
            }
        self.stats.versions.update(
            {n: r.version for n, r in out.items() if n in self.permitted.by_id}
        )
        return out

    # ---- fetch by id -----------------------------------------------------------------------

    def versions(self, node_ids: Iterable[str]) -> dict[str, str]:
        """Current versions of the given nodes that the permitted set holds."""
        out = {node_id: row.version for node_id, row in self.permitted.among(node_ids).items()}
        self.stats.versions.update(out)
        return out

    def nodes(self, node_ids: Iterable[str]) -> dict[str, NodeView]:
        """Full memories of the given nodes that the permitted set holds (others read as
        absent)."""
        rows = self.permitted.among(node_ids)
        if not rows:
            return {}
        if isinstance(self._con, TreeIndex):
            views = list(self._con.contents(rows.values(), self._wait_s).values())
        else:
            predicate, params = self.scope.sql_predicate()
            fetched = self._con.execute(
                f"SELECT {NODE_COLUMNS} FROM {MEMORY_TABLE}"
                f" WHERE node_id IN (SELECT unnest(?::VARCHAR[])) AND {predicate}",
                [sorted(rows), *params],
            ).fetchall()
            views = [node_view(row) for row in fetched]
        for view in views:
            if not self.scope.admits(view.contract_id, view.seat_id, view.project_id):
                raise IsolationError(f"DuckDB returned {view.node_id} outside {self.scope}")
        return {view.node_id: view for view in views}

    def node_ids(self) -> list[str]:
        """Every node id of the permitted set, sorted: for reads that must cover the whole scope
        rather than its nearest items."""
        return self.permitted.node_ids()

    def node_count(self) -> int:
        """How many nodes the permitted set holds (0: answer "no memory for this scope")."""
        return len(self.permitted.rows)

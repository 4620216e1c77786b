"""Chroma as the query boundary reads it: one contract's collection, asked for a subtree's items.

A scope opens its own contract's collection and no other (the second wall beside the subtree
filter, which the boundary hands in: a `where` or the permitted items' ids). Handles are shared
across queries (`Collections`); an embedded view made stale by another process's writes is
reopened once and asked again; a Chroma that cannot be reached, or an index that is damaged or
on a full disk, is `VectorIndexUnavailable`, naming it and what to do.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from hltm.errors import UNAVAILABLE
from hltm.memory.store import memory_collection_name
from hltm.vectors import (
    VectorIndexUnavailable,
    VectorStore,
    describe_index,
    index_fault,
    is_replaced,
    is_stale_view,
    is_unreachable,
)

_RETRY = "retry in a moment; if it stays so, run `hltm refresh`"


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
                handle = self.get(memory_collection_name(contract_id))
                if handle is not None and handle.count():
                    handle.query(query_embeddings=np.atleast_2d(probe), n_results=1, include=[])
                    loaded += 1
        return loaded

    def forget(self, name: str) -> None:
        for key in [k for k in list(self._handles) if k[0] == name]:
            self._handles.pop(key, None)


class ContractCollection:
    """One contract's collection, for one query: nearest items under a filter, or stored item
    vectors, of the client of the moment."""

    def __init__(
        self, vectors: VectorStore, contract_id: str, collections: Collections | None = None
    ) -> None:
        """`collections`: handles shared across queries (None: the collection is opened anew)."""
        self.vectors = vectors
        self.name = memory_collection_name(contract_id)
        self._collections = collections
        self.handle: Any = None  # None: no such collection (nothing stored for the contract)
        self._generation = -1  # the client generation `handle` belongs to
        self._open()

    def _open(self) -> None:
        try:
            with self.vectors.reading():
                if self._collections is not None:
                    self.handle = self._collections.get(self.name)
                else:
                    self.handle = self.vectors.existing(self.name)
                self._generation = self.vectors.generation
        except Exception as err:
            if is_unreachable(err):
                raise self.unavailable(err) from err
            raise

    @contextmanager
    def reading(self) -> Iterator[Any]:
        """A hold on the Chroma client (no reopen closes it meanwhile), with this collection's
        handle of that client: one taken before a reopen is taken anew."""
        with self.vectors.reading():
            if self._generation != self.vectors.generation:
                self._open()
            yield self.handle

    def unavailable(self, err: Exception) -> VectorIndexUnavailable:
        settings = self.vectors.settings
        return index_fault(settings, err) or VectorIndexUnavailable(
            describe_index(settings), f"cannot be read ({str(err)[:300]})", _RETRY, UNAVAILABLE
        )

    def embeddings(self, where: dict[str, Any] | None, ids: list[str] | None) -> Any:
        """Stored items with their vectors, by `where` or by `ids`; None when the collection
        was dropped meanwhile or the read failed (the caller then searches without them)."""
        try:
            with self.reading() as collection:
                if collection is None:  # dropped meanwhile by the writer
                    return None
                if ids is None:
                    return collection.get(where=where, include=["embeddings"])
                return collection.get(ids=ids, include=["embeddings"])
        except Exception as err:  # chromadb raises its own and httpx's errors
            if is_unreachable(err):
                raise self.unavailable(err) from err
            return None

    def nearest_of(self, queries: np.ndarray, n: int, ids: list[str]) -> Any:
        """The nearest of these items; None when the index lacks one of them (lost, or a view
        older than the tree): the caller then asks by `where`, which reopens a stale view."""
        try:
            with self.reading() as collection:
                if collection is None:  # dropped meanwhile by the writer
                    return None
                return collection.query(
                    query_embeddings=queries, n_results=n, ids=ids, include=["distances"]
                )
        except Exception as err:  # chromadb raises its own and httpx's errors
            if is_unreachable(err):
                raise self.unavailable(err) from err
            return None

    def nearest(self, queries: np.ndarray, n: int, where: dict[str, Any] | None) -> Any:
        """One filtered nearest-neighbour call; a stale embedded view is reopened once, and a
        shared handle that fails, or one whose collection was replaced (dropped and recreated,
        or rebuilt by a deletion), opened anew."""
        nothing = {"ids": [[]] * len(queries), "distances": [[]] * len(queries)}
        for attempt in (0, 1):
            with self.reading() as collection:
                if collection is None:  # dropped meanwhile by the writer
                    return nothing
                generation = self.vectors.generation
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
                    self.vectors.reopen(generation)
                if self._collections is not None:
                    self._collections.forget(self.name)
                self._open()
                continue
            if is_stale_view(failure) or index_fault(self.vectors.settings, failure):
                raise self.unavailable(failure) from failure
            raise failure
        raise AssertionError("unreachable")  # pragma: no cover

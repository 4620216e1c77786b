"""The Chroma vector index: embedded `PersistentClient` by default, a Chroma server when configured.

We always hand Chroma our own vectors and our own embedding function: Chroma's default downloads
a model at run time, which fails offline and would silently use a different model from ours.
Collections use cosine space; vectors are normalised, so distance = 1 - cosine.

The embedded client never sees another process's writes: its in-memory HNSW index stays as it
was loaded, so a filtered query whose ids were added elsewhere fails with "Error finding id".
`VectorStore.reopen()` drops this process's client and loads the index anew from disk; the query
path calls it on that error and asks again (see `is_stale_view`). Closing the client stops the
system every thread of the process shares, so each use of the client or of a collection handle
happens under `VectorStore.reading()`, and a reopen waits until those in flight have finished
(new ones wait for the reopen); a handle taken before a reopen is taken anew (`generation`).
A Chroma server that cannot be reached is a `VectorIndexUnavailable` naming the host, never a
bare traceback.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from typing import Any

import chromadb
from chromadb.api import ClientAPI
from chromadb.api.models.Collection import Collection
from chromadb.api.shared_system_client import SharedSystemClient
from chromadb.api.types import Documents, EmbeddingFunction, Embeddings
from chromadb.config import Settings as ChromaSettings
from chromadb.utils.embedding_functions import register_embedding_function

from hltm.embeddings import CachedEmbedder, make_embedder
from hltm.errors import DAMAGED, UNAVAILABLE, StoreError, disk_fault
from hltm.settings import Settings

_NAME_OK = re.compile(r"[^a-zA-Z0-9._-]")
_DOTS = re.compile(r"\.{2,}")
_NAME_MAX = 55
_generation = 0  # how many times this process reopened its embedded client


class ReadersWriter:
    """Many readers or one writer; a waiting writer holds back new readers, so a reopen is not
    starved under load. Re-entrant for readers of one thread (a nested read while a writer
    waits would otherwise deadlock); a thread that holds a read may not write."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._writer = False
        self._held = threading.local()

    def _depth(self) -> int:
        return getattr(self._held, "depth", 0)

    @contextmanager
    def reading(self) -> Iterator[None]:
        depth = self._depth()
        if depth == 0:
            with self._cond:
                while self._writer:
                    self._cond.wait()
                self._readers += 1
        self._held.depth = depth + 1
        try:
            yield
        finally:
            self._held.depth = depth
            if depth == 0:
                with self._cond:
                    self._readers -= 1
                    if self._readers == 0:
                        self._cond.notify_all()

    @contextmanager
    def writing(self) -> Iterator[None]:
        if self._depth():
            raise RuntimeError("a thread that reads the vector index cannot reopen it")
        with self._cond:
            while self._writer:
                self._cond.wait()
            self._writer = True
            while self._readers:
                self._cond.wait()
        try:
            yield
        finally:
            with self._cond:
                self._writer = False
                self._cond.notify_all()


_CLIENT_USE = ReadersWriter()  # the process's embedded client: its readers and its reopen
# chromadb's registry of one shared system per path is not thread-safe: threads that start the
# first client of a path at once get a KeyError or a half-built system. One starts it at a time.
_CLIENT_START = threading.Lock()


class VectorIndexUnavailable(StoreError):
    """The vector index cannot be used: the Chroma server is down, the disk is full or
    read-only, or the embedded index is damaged (`kind` says which)."""


# How Chroma (its Rust core, over SQLite and hnswlib) says the embedded index cannot be read or
# written any more: a SQLite file cut short, a write-ahead log record or an HNSW segment file
# (what a full disk leaves) that its compactor cannot apply or load.
_DAMAGE_TEXTS = (
    "malformed",
    "not a database",
    "compaction",
    "compactor",
    "log store",
    "segment reader",
    "segment writer",
)
_REBUILD = (
    "run `hltm refresh`: it rebuilds the embedded index from the stored memory and the sources"
    " (no LLM call)"
)


def index_fault(settings: Settings, err: BaseException) -> VectorIndexUnavailable | None:
    """The `VectorIndexUnavailable` behind a Chroma error; None for any other error (a stale
    view, a replaced collection, a bad argument)."""
    if isinstance(err, VectorIndexUnavailable):
        return err
    where = describe_index(settings)
    if is_unreachable(err):
        remedy = "start it, or unset CHROMA_HOST to use the embedded index"
        return VectorIndexUnavailable(where, "not reachable", remedy, UNAVAILABLE)
    if fault := disk_fault(settings.chroma_path, err):
        return VectorIndexUnavailable(where, fault.problem, fault.remedy, fault.kind)
    text = str(err).lower()
    if isinstance(err, chromadb.errors.ChromaError) and any(t in text for t in _DAMAGE_TEXTS):
        problem = f"damaged ({str(err)[:200]})"
        if settings.chroma_host:
            return VectorIndexUnavailable(where, problem, "see the Chroma server's log", DAMAGED)
        return VectorIndexUnavailable(where, problem, _REBUILD, DAMAGED)
    return None


def is_stale_view(err: Exception) -> bool:
    """An embedded client's in-memory index lags behind what another process wrote."""
    return "error finding id" in str(err).lower()


def is_replaced(err: Exception) -> bool:
    """A handle whose collection is gone: dropped, or replaced by `VectorStore.rebuild` (a new
    collection of the same name, which a lookup by name finds)."""
    return isinstance(err, chromadb.errors.NotFoundError)


def is_unreachable(err: Exception) -> bool:
    """A Chroma server that is down or refuses connections (httpx's and the OS's errors)."""
    import httpx

    return isinstance(err, httpx.TransportError | ConnectionError) or (
        "could not connect" in str(err).lower()
    )


def describe_index(settings: Settings) -> str:
    if settings.chroma_host:
        return f"the Chroma server at {settings.chroma_host}:{settings.chroma_port}"
    return f"the embedded Chroma index at {settings.chroma_path}"


@register_embedding_function
class HltmEmbeddingFunction(EmbeddingFunction[Documents]):
    """Chroma's view of our embedder (passages for documents, queries for searches)."""

    def __init__(self, embedder: CachedEmbedder | None = None) -> None:
        self._embedder = embedder

    @property
    def embedder(self) -> CachedEmbedder:
        if self._embedder is None:
            self._embedder = make_embedder(Settings.from_env())
        return self._embedder

    def __call__(self, input: Documents) -> Embeddings:
        return list(self.embedder.passages(list(input)))

    def embed_query(self, input: Documents) -> Embeddings:
        return [self.embedder.query(text) for text in input]

    @staticmethod
    def name() -> str:
        return "hltm"

    def default_space(self) -> str:  # type: ignore[override]
        return "cosine"

    def get_config(self) -> dict[str, Any]:
        return {}

    @staticmethod
    def build_from_config(config: dict[str, Any]) -> HltmEmbeddingFunction:
        return HltmEmbeddingFunction()


def collection_name(prefix: str, key: str) -> str:
    """A Chroma collection name for `key`: Chroma allows [a-zA-Z0-9._-], alphanumeric at both
    ends, no "..", 3 to 63 characters on the strictest server (the rebuild's temporary name
    adds 8). A key that needs changing to fit gets a hash of itself appended, so distinct keys
    never share a collection, and the same key always maps to the same name."""
    raw = f"{prefix}-{key}"
    name = _DOTS.sub("-", _NAME_OK.sub("-", raw)).strip("-._")
    if name != raw or len(name) > _NAME_MAX:
        digest = hashlib.sha1(key.encode()).hexdigest()[:12]
        name = f"{name[: _NAME_MAX - 13].rstrip('-._')}-{digest}"
    return name if len(name) >= 3 else f"{name}-xx"


@cache
def _client(settings: Settings) -> ClientAPI:
    chroma_settings = ChromaSettings(anonymized_telemetry=False, allow_reset=False)
    if settings.chroma_host:
        return chromadb.HttpClient(
            host=settings.chroma_host, port=settings.chroma_port, settings=chroma_settings
        )
    settings.chroma_path.mkdir(parents=True, exist_ok=True)
    try:
        return chromadb.PersistentClient(path=str(settings.chroma_path), settings=chroma_settings)
    except Exception:
        # chromadb keeps the system of a path whose start failed, half built, and hands it to
        # every later client of the path ("no attribute 'bindings'"): let the next one start.
        SharedSystemClient._identifier_to_system.pop(str(settings.chroma_path), None)
        raise


def _connected_client(settings: Settings) -> ClientAPI:
    try:
        with _CLIENT_START:
            return _client(settings)
    except Exception as err:  # chromadb's HttpClient: "Could not connect to a Chroma server"
        if fault := index_fault(settings, err):
            raise fault from err
        raise


class VectorStore:
    """The process's client, collections created on demand with our embedding function and
    cosine space. A Chroma server is reached at once (one that is down is named now); the
    embedded index is opened on first use, so a damaged one fails the uses that need it, each
    with what to do, and `repair` can rebuild it."""

    def __init__(self, settings: Settings, embedder: CachedEmbedder) -> None:
        self.settings = settings
        self.embedding_function = HltmEmbeddingFunction(embedder)
        if settings.chroma_host:
            _connected_client(settings)

    @property
    def client(self) -> ClientAPI:
        """The client of the moment; use it, and the handles it gives, under `reading()`."""
        return _connected_client(self.settings)

    @contextmanager
    def reading(self) -> Iterator[None]:
        """A hold on the client: no reopen closes it until the block ends. A Chroma error of
        the block that says the index cannot be used is raised as `VectorIndexUnavailable`."""
        with _CLIENT_USE.reading():
            try:
                yield
            except Exception as err:
                if fault := index_fault(self.settings, err):
                    raise fault from err
                raise

    @property
    def generation(self) -> int:
        """Bumped by every reopen, so concurrent readers that saw one failure reopen once."""
        return _generation

    def reopen(self, seen_generation: int) -> None:
        """Reload the embedded index from disk (after another process wrote to it), unless a
        concurrent reader already did since `seen_generation`. A server client is left alone.
        Waits for the reads in flight; the caller must not hold one."""
        if self.settings.chroma_host:
            return
        global _generation
        with _CLIENT_USE.writing():
            if _generation != seen_generation:
                return
            with _CLIENT_START:
                old = _client(self.settings)
                _client.cache_clear()
                old.close()  # stops the shared system, so the next client loads the files anew
                _client(self.settings)
            _generation += 1

    def repair(self) -> list[str]:
        """Rebuild what of the embedded index cannot be read, and say what was done: a
        collection Chroma can no longer read is dropped, the whole index when it cannot be
        opened (or a damaged collection cannot be dropped). Everything in it is derived (the
        memory's items from the stored nodes, which `MemoryBuilder.reconcile` re-indexes; the
        resumes from the sources, which the judge's index refresh adds back), all from the
        embedding cache. A Chroma server keeps its own files: nothing is done there."""
        if self.settings.chroma_host:
            return []
        where = describe_index(self.settings)
        try:
            damaged = self._damaged_collections()
            for name, _ in damaged:
                with _CLIENT_USE.reading():
                    _connected_client(self.settings).delete_collection(name)
        except Exception as err:  # noqa: BLE001 - classified: only damage is repaired here
            fault = index_fault(self.settings, err)
            if fault is None or fault.kind != DAMAGED:
                raise
            self._reset()
            return [f"{where}: {fault.problem}: removed it, to be rebuilt from the stored data"]
        return [
            f"collection {name} of {where}: {problem}: dropped it, to be rebuilt from the stored"
            " data"
            for name, problem in damaged
        ]

    def _damaged_collections(self) -> list[tuple[str, str]]:
        """The collections Chroma cannot read (each asked for its count), with why."""
        damaged = []
        with _CLIENT_USE.reading():
            client = _connected_client(self.settings)
            for listed in client.list_collections():
                try:
                    client.get_collection(listed.name).count()
                except Exception as err:  # noqa: BLE001 - classified below
                    fault = index_fault(self.settings, err)
                    if fault is None:
                        raise
                    if fault.kind != DAMAGED:
                        raise fault from err
                    damaged.append((listed.name, fault.problem))
        return damaged

    def _reset(self) -> None:
        """An empty embedded index in place of one that cannot be opened."""
        global _generation
        with _CLIENT_USE.writing(), _CLIENT_START:
            try:
                old = _client(self.settings)
            except Exception:  # noqa: BLE001 - it cannot even be opened: nothing to close
                old = None
            _client.cache_clear()
            if old is not None:
                old.close()
            shutil.rmtree(self.settings.chroma_path, ignore_errors=True)
            _generation += 1

    def collection(self, name: str) -> Collection:
        with self.reading():
            return self.client.get_or_create_collection(
                name,
                embedding_function=self.embedding_function,  # type: ignore[arg-type]
                configuration={"hnsw": {"space": "cosine"}},
            )

    def existing(self, name: str) -> Collection | None:
        """A collection that exists already, never created by a reader."""
        try:
            with self.reading():
                return self.client.get_collection(
                    name,
                    embedding_function=self.embedding_function,  # type: ignore[arg-type]
                )
        except (chromadb.errors.NotFoundError, ValueError):
            return None

    def list_names(self) -> list[str]:
        with self.reading():
            return sorted(c.name for c in self.client.list_collections())

    def drop(self, name: str) -> None:
        with self.reading():
            if self.existing(name) is not None:
                self.client.delete_collection(name)

    def rebuild(self, name: str) -> int | None:
        """Copy a collection's live items (ids, vectors, documents, metadata) into a new one,
        which then takes its name: the new segment's index holds no deleted-marked slot and its
        id map no deleted id. Returns the items copied (None: no such collection).

        The copy is made under ``rebuild.<name>`` and renamed once the old one is dropped, so a
        reader looking the name up finds the old or the new collection (none only between the
        two catalogue writes); a handle on the old one raises `NotFoundError` (see
        `is_replaced`). A copy left by a rebuild that stopped midway is dropped, or renamed if
        the old one is already gone. Writers to the collection must not run meanwhile."""
        temp = f"rebuild.{name}"
        with self.reading():
            client = self.client
            names = {c.name for c in client.list_collections()}
            if temp in names:
                if name in names:
                    client.delete_collection(temp)
                else:
                    client.get_collection(temp).modify(name=name)
                    names.add(name)
            if name not in names:
                return None
            old = client.get_collection(name)
            config = old.configuration
            new = client.create_collection(
                temp,
                configuration={"hnsw": dict(config.get("hnsw") or {})},  # type: ignore[typeddict-item]
                metadata=old.metadata,
                embedding_function=config.get("embedding_function"),  # as persisted
            )
            ids = old.get(include=[])["ids"]
            batch = max(1, client.get_max_batch_size())
            for start in range(0, len(ids), batch):
                got = old.get(
                    ids=ids[start : start + batch], include=["embeddings", "documents", "metadatas"]
                )
                new.add(
                    ids=got["ids"],
                    embeddings=got["embeddings"],  # type: ignore[arg-type]
                    documents=got["documents"],  # type: ignore[arg-type]
                    metadatas=got["metadatas"],  # type: ignore[arg-type]
                )
            client.delete_collection(name)
            new.modify(name=name)
        return len(ids)

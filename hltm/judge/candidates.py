"""Candidate pools over the resume index: vector top-100 ∪ BM25 top-150, with provenance.

* The **vector index** is the Chroma collection ``resumes`` (one entry per active resume,
  metadata ``layer``, ``language``, ``content_hash``). `sync_resume_index` upserts only resumes
  whose content hash changed and removes deleted ones. The pool's vector top-k is the *exact*
  cosine top-k over the active layer's vectors as the collection stores them (`vector_top`),
  ties broken by id: Chroma's approximate search (HNSW) returns a slightly different top-k each
  time the index is opened, and a pool must be the same for the same inputs. The archive layer
  never enters a normal pool (and is not embedded: `hltm.judge.service.refresh_index` syncs the
  active layer).
* **BM25** (`bm25s`, tech-aware tokenizer) runs over the active layer's texts, built in memory
  from the sources (milliseconds for thousands of resumes) and reused while they are unchanged.
* The **pool** is the plain union (`hltm.judge.pools.union_pool`); the judge ranks it. RRF is a
  measured baseline only (see `hltm.evaluation.judge.golden`).

Vacancy query vectors are cached by (model, text hash) in ``judge_query_vectors``: an e5 query
over a whole vacancy costs ~0.7 s on two cores, and the nightly run asks the same ones again.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hltm.embeddings import CachedEmbedder, text_hash
from hltm.judge.data import Resume, Vacancy
from hltm.judge.pools import BM25Index, PoolEntry, stable_top, union_pool
from hltm.vectors import VectorStore
from hltm.warehouse import connect

__all__ = [
    "K_BM25",
    "K_VECTOR",
    "RESUMES_COLLECTION",
    "IndexSync",
    "QueryVectors",
    "bm25_index",
    "build_pool",
    "sync_resume_index",
    "vector_top",
]

RESUMES_COLLECTION = "resumes"
K_VECTOR = 100
K_BM25 = 150


@dataclass(frozen=True)
class IndexSync:
    indexed: int  # resumes in the index after the sync
    upserted: int  # new or changed
    removed: int
    unchanged: int
    embedded: int  # passages actually sent to the embedding model (cache misses)


def sync_resume_index(
    store: VectorStore, embedder: CachedEmbedder, resumes: Sequence[Resume]
) -> IndexSync:
    """Make the ``resumes`` collection equal the given resumes, changed ones only. Each use of
    the collection holds the client (`VectorStore.reading`); passages are embedded outside."""
    with store.reading():
        got = store.collection(RESUMES_COLLECTION).get(include=["metadatas"])
        batch = max(1, min(1000, store.client.get_max_batch_size()))
    existing: dict[str, str] = {}
    for rid, meta in zip(got["ids"], got["metadatas"] or [], strict=False):
        existing[rid] = str((meta or {}).get("content_hash", ""))
    wanted = {r.resume_id: r for r in resumes}
    changed = [r for r in resumes if existing.get(r.resume_id) != r.content_hash]
    removed = sorted(set(existing) - set(wanted))
    before = embedder.stats.calls
    for start in range(0, len(changed), batch):
        part = changed[start : start + batch]
        vectors = embedder.passages([r.passage() for r in part])
        with store.reading():
            store.collection(RESUMES_COLLECTION).upsert(
                ids=[r.resume_id for r in part],
                embeddings=[v.tolist() for v in vectors],
                metadatas=[
                    {
                        "layer": r.layer,
                        "language": r.language or "",
                        "content_hash": r.content_hash,
                    }
                    for r in part
                ],
            )
    with store.reading():
        coll = store.collection(RESUMES_COLLECTION)
        if removed:
            coll.delete(ids=removed)
        indexed = coll.count()
    return IndexSync(
        indexed=indexed,
        upserted=len(changed),
        removed=len(removed),
        unchanged=len(resumes) - len(changed),
        embedded=embedder.stats.calls - before,
    )


def index_hashes(store: VectorStore) -> dict[str, str]:
    """resume id → content hash currently in the index (empty if there is no index yet)."""
    with store.reading():
        coll = store.existing(RESUMES_COLLECTION)
        if coll is None:
            return {}
        got = coll.get(include=["metadatas"])
    return {
        rid: str((meta or {}).get("content_hash", ""))
        for rid, meta in zip(got["ids"], got["metadatas"] or [], strict=False)
    }


@dataclass(frozen=True)
class LayerVectors:
    """One layer's vectors as the ``resumes`` collection stores them: ids, unit-length rows."""

    ids: list[str]
    matrix: np.ndarray


_VECTORS: dict[str, LayerVectors] = {}
_VECTORS_LOCK = threading.Lock()


def layer_vectors(store: VectorStore, layer: str = "active") -> LayerVectors:
    """The layer's vectors, read from the collection again only when its ids or content hashes
    changed (a judge run reads them once for all its vacancies)."""
    with store.reading():
        coll = store.existing(RESUMES_COLLECTION)
        if coll is None:
            return LayerVectors([], np.zeros((0, 0)))
        listed = coll.get(where={"layer": layer}, include=["metadatas"])
        pairs = sorted(
            (rid, str((meta or {}).get("content_hash", "")))
            for rid, meta in zip(listed["ids"], listed["metadatas"] or [], strict=False)
        )
        digest = hashlib.sha1(f"{store.settings.chroma_path}\n{pairs}".encode()).hexdigest()
        with _VECTORS_LOCK:
            found = _VECTORS.get(digest)
        if found is not None:
            return found
        ids = [rid for rid, _ in pairs]
        got = coll.get(ids=ids, include=["embeddings"]) if ids else {"ids": [], "embeddings": []}
    by_id = dict(zip(got["ids"], got["embeddings"], strict=True))
    found = LayerVectors(ids, unit_rows([by_id[rid] for rid in ids]))
    with _VECTORS_LOCK:
        if len(_VECTORS) > 4:
            _VECTORS.clear()
        _VECTORS[digest] = found
    return found


def unit_rows(rows: Sequence[Sequence[float]]) -> np.ndarray:
    """The stored vectors as unit-length float64 rows (none: a layer without resumes).

    Chroma keeps 4-byte floats; its server sends each as its shortest decimal, which reads as
    another 8-byte float than the one its files hand over. Read as the 4-byte floats they are,
    both give the same cosines, so the pool's cut is the same with either."""
    if not len(rows):
        return np.zeros((0, 0))
    matrix = np.asarray(rows, dtype=np.float32).astype(np.float64).reshape(len(rows), -1)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return matrix / np.where(norms > 0, norms, 1.0)


def vector_top(
    store: VectorStore, query_vector: np.ndarray, k: int, allowed: set[str] | None = None
) -> list[tuple[str, float]]:
    """(resume id, cosine) of the exact top ``k`` of the active layer (among ``allowed`` ids),
    best first, cut by `stable_top` (rounded score, then id): the same on every run over the
    same vectors, whatever order or graph the index holds them in."""
    vectors = layer_vectors(store)
    if k <= 0 or not vectors.ids:
        return []
    query = np.asarray(query_vector, dtype=np.float64)
    scores = vectors.matrix @ (query / (np.linalg.norm(query) or 1.0))
    keep = np.array([allowed is None or rid in allowed for rid in vectors.ids])
    if not keep.any():
        return []
    kept = scores[keep]
    cut = len(kept) - min(k, len(kept))
    # The k best and all that rounding could tie with the k-th; `stable_top` orders and cuts.
    near = np.flatnonzero(keep & (scores >= np.partition(kept, cut)[cut] - 1e-6))
    return stable_top([(vectors.ids[i], float(scores[i])) for i in near], k)


class QueryVectors:
    """Query embeddings cached by (model, text hash), in process and in the derived DuckDB."""

    _memo: dict[tuple[str, str], np.ndarray] = {}
    _lock = threading.Lock()

    def __init__(self, embedder: CachedEmbedder, cache_db: Path | str | None = None) -> None:
        self.embedder = embedder
        self.cache_db = Path(cache_db) if cache_db else None
        self.computed = 0
        if self.cache_db is not None:
            with connect(self.cache_db) as con:
                con.execute(
                    "CREATE TABLE IF NOT EXISTS judge_query_vectors (model VARCHAR,"
                    " text_hash VARCHAR, vector FLOAT[], PRIMARY KEY (model, text_hash))"
                )

    def get(self, text: str) -> np.ndarray:
        key = (self.embedder.model_name, text_hash(text))
        with self._lock:
            hit = self._memo.get(key)
        if hit is not None:
            return hit
        if self.cache_db is not None:
            with connect(self.cache_db) as con:
                row = con.execute(
                    "SELECT vector FROM judge_query_vectors WHERE model = ? AND text_hash = ?",
                    list(key),
                ).fetchone()
            if row is not None:
                vector = np.asarray(row[0], dtype=np.float32)
                with self._lock:
                    self._memo[key] = vector
                return vector
        vector = np.asarray(self.embedder.query(text), dtype=np.float32)
        self.computed += 1
        with self._lock:
            self._memo[key] = vector
        if self.cache_db is not None:
            with connect(self.cache_db) as con:
                con.execute(
                    "INSERT OR IGNORE INTO judge_query_vectors VALUES (?, ?, ?)",
                    [*key, vector.tolist()],
                )
        return vector


_BM25_CACHE: dict[str, BM25Index] = {}
_BM25_LOCK = threading.Lock()


def bm25_index(resumes: Sequence[Resume]) -> BM25Index:
    """A BM25 index over the given resumes, reused while their ids and hashes are unchanged."""
    digest = hashlib.sha1(
        "\n".join(f"{r.resume_id}:{r.content_hash}" for r in resumes).encode()
    ).hexdigest()
    with _BM25_LOCK:
        got = _BM25_CACHE.get(digest)
        if got is None:
            got = BM25Index().build([r.resume_id for r in resumes], [r.text for r in resumes])
            if len(_BM25_CACHE) > 8:
                _BM25_CACHE.clear()
            _BM25_CACHE[digest] = got
    return got


def build_pool(
    vacancy: Vacancy,
    vector_hits: Sequence[tuple[str, float]],
    bm25: BM25Index,
    k_vector: int = K_VECTOR,
    k_bm25: int = K_BM25,
) -> list[PoolEntry]:
    """Vector top-``k_vector`` ∪ BM25 top-``k_bm25`` for a vacancy, vector order first."""
    return union_pool(
        vector_hits, bm25.search(vacancy.bm25_query(), k=k_bm25), k_vector=k_vector, k_bm25=k_bm25
    )

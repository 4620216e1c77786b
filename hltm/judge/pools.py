"""Candidate pools for the judge: BM25 retrieval and the union of vector and BM25 pools.

Why a union and not a fusion formula: the judge re-reads every pooled resume anyway, so the
pool only has to *contain* the right people. RRF (``1/(60+rank)``) rewards agreement of the
two rankings, which is precisely what a candidate lost by the vector search lacks; on the
golden set it lowered fit recall (140 → 137 of 174) and rescued 1 of 14 invisible candidates,
while the plain union (vector top-100 ∪ BM25 top-150) rescued 6 and lifted strict P@10.
``rrf`` is kept here only so that the baseline can be re-measured.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass

import bm25s
import numpy as np

from hltm.judge.text import tokenize

# bm25s sets its own logger to DEBUG on import; keep it at the application's level.
logging.getLogger("bm25s").setLevel(logging.NOTSET)

__all__ = ["BM25Index", "PoolEntry", "rrf", "stable_top", "union_pool"]

Id = Hashable


class BM25Index:
    """A BM25 index (``bm25s``, Lucene variant) over documents tokenized by ``text.tokenize``.

    Results are ``(id, score)`` best first; the rank of a hit is its 1-based position. Only
    documents sharing at least one query token are returned (score > 0), ties keep build order,
    so results are deterministic.
    """

    def __init__(
        self,
        k1: float = 1.5,
        b: float = 0.75,
        method: str = "lucene",
        tokenizer: Callable[[str], list[str]] = tokenize,
    ) -> None:
        self.k1, self.b, self.method = k1, b, method
        self.tokenizer = tokenizer
        self.ids: list[Id] = []
        self._model: bm25s.BM25 | None = None

    def build(self, ids: Sequence[Id], texts: Sequence[str]) -> BM25Index:
        """Index ``texts`` under ``ids`` (unique). Returns self for chaining."""
        if len(ids) != len(texts):
            raise ValueError(f"{len(ids)} ids but {len(texts)} texts")
        if len(set(ids)) != len(ids):
            raise ValueError("document ids must be unique")
        self.ids = list(ids)
        self._model = None
        if not self.ids:
            return self
        corpus = [self.tokenizer(t) for t in texts]
        if not any(corpus):
            return self  # nothing indexable: every search returns no hits
        model = bm25s.BM25(k1=self.k1, b=self.b, method=self.method)
        model.index(corpus, show_progress=False)  # bm25s accepts a list of token lists
        self._model = model
        return self

    def __len__(self) -> int:
        return len(self.ids)

    def scores(self, query_text: str) -> np.ndarray:
        """BM25 score of every indexed document for the query (build order)."""
        query = self.tokenizer(query_text)
        if self._model is None or not query:
            return np.zeros(len(self.ids), dtype=np.float64)
        return np.asarray(self._model.get_scores(query), dtype=np.float64)

    def search(self, query_text: str, k: int = 150) -> list[tuple[Id, float]]:
        """Top ``k`` documents for the query as ``(id, score)``, best first."""
        if k <= 0:
            return []
        scores = self.scores(query_text)
        order = np.argsort(-scores, kind="stable")[:k]
        return [(self.ids[i], float(scores[i])) for i in order if scores[i] > 0.0]


@dataclass(frozen=True)
class PoolEntry:
    """One pooled candidate and where it came from (ranks are 1-based, None = not returned)."""

    id: Id
    vector_rank: int | None
    bm25_rank: int | None
    vector_score: float | None = None
    bm25_score: float | None = None

    @property
    def sources(self) -> tuple[str, ...]:
        return tuple(
            name
            for name, rank in (("vector", self.vector_rank), ("bm25", self.bm25_rank))
            if rank is not None
        )

    @property
    def bm25_only(self) -> bool:
        """True for the candidates the hybrid exists for: invisible to the vector top-k."""
        return self.vector_rank is None and self.bm25_rank is not None


def _ranked(hits: Iterable[tuple[Id, float]], k: int) -> dict[Id, tuple[int, float]]:
    """First occurrence wins; ranks are positions in the given (already ranked) list."""
    out: dict[Id, tuple[int, float]] = {}
    for rank, (doc_id, score) in enumerate(hits, start=1):
        if len(out) >= k:
            break
        if doc_id not in out:
            out[doc_id] = (rank, float(score))
    return out


def stable_top(
    hits: Iterable[tuple[Id, float]], k: int, decimals: int = 6
) -> list[tuple[Id, float]]:
    """The ``k`` best hits by score rounded to ``decimals``, ties broken by id.

    Why: an approximate nearest-neighbour search (HNSW) returns equal or near-equal scores in
    an order that depends on the graph, so a plain cut at ``k`` keeps a different member of a
    tie from one run to the next. Rounding first makes float noise a tie as well.
    """
    return sorted(hits, key=lambda hit: (-round(hit[1], decimals), str(hit[0])))[: max(k, 0)]


def union_pool(
    vector_hits: Sequence[tuple[Id, float]],
    bm25_hits: Sequence[tuple[Id, float]],
    k_vector: int = 100,
    k_bm25: int = 150,
) -> list[PoolEntry]:
    """Vector top-``k_vector`` ∪ BM25 top-``k_bm25``, with each candidate's provenance.

    Both inputs must already be ranked best first (their scores may be on any scale — cosine,
    distance, BM25 — they are carried, never compared). Order of the result is stable and
    formula-free: vector hits in vector order, then BM25-only hits in BM25 order. The judge,
    not this order, ranks the pool.
    """
    vec = _ranked(vector_hits, k_vector)
    bm = _ranked(bm25_hits, k_bm25)
    pool: list[PoolEntry] = []
    for doc_id, (rank, score) in vec.items():
        b = bm.get(doc_id)
        pool.append(PoolEntry(doc_id, rank, b[0] if b else None, score, b[1] if b else None))
    for doc_id, (rank, score) in bm.items():
        if doc_id not in vec:
            pool.append(PoolEntry(doc_id, None, rank, None, score))
    return pool


def rrf(rankings: Sequence[Sequence[Id]], k: int = 60) -> list[tuple[Id, float]]:
    """Reciprocal rank fusion, ``score(d) = Σ 1/(k + rank_i(d))`` with 1-based ranks.

    Measured baseline only — the product does not use it (see module docstring). Ties keep
    the order of first appearance across the rankings.
    """
    scores: dict[Id, float] = {}
    for ranking in rankings:
        seen: set[Id] = set()
        for rank, doc_id in enumerate(ranking, start=1):
            if doc_id in seen:
                continue
            seen.add(doc_id)
            scores[doc_id] = scores.get(doc_id, 0.0) + 1.0 / (k + rank)
    order = sorted(enumerate(scores.items()), key=lambda t: (-t[1][1], t[0]))
    return [(doc_id, score) for _, (doc_id, score) in order]

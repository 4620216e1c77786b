"""Incremental refresh is lossless: after random add / change / delete / move sequences, the
incrementally refreshed tree is byte-identical to a full rebuild of the final sources, in DuckDB
and in Chroma — and each step rebuilt only the touched leaves and their ancestor chains."""

from __future__ import annotations

import hashlib
import random
import re
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from hltm.embeddings import CachedEmbedder, EmbeddingStats
from hltm.memory import MemoryConfig, builder_from_settings
from hltm.memory.scenarios import random_operation, read_world
from hltm.settings import Settings
from tests import test_memory_dagster as _shared

# The shared fixtures: a copy of the small world's sources, ingested once per session.
ingested_sources = _shared.ingested_sources
memory_world = _shared.memory_world


class HashingEmbedder:
    """Deterministic feature hashing of words into 384 dimensions.

    The property under test is the pipeline's (same sources → same bytes), not the model's; the
    bundled e5 model costs ~20–50 ms per string on two cores, which a 3-seed random walk cannot
    afford in a test budget. The Dagster and deletion tests use the real model."""

    model_name = "test-feature-hashing-384"
    dim = 384

    def _one(self, text: str) -> np.ndarray:
        vector = np.zeros(self.dim, dtype=np.float32)
        for word in re.findall(r"\w+", text.lower()):
            digest = hashlib.sha1(word.encode()).digest()
            vector[int.from_bytes(digest[:4], "little") % self.dim] += (
                1.0 if digest[4] & 1 else -1.0
            )
        norm = float(np.linalg.norm(vector))
        return vector / norm if norm else vector

    def passages(self, texts: list[str]) -> np.ndarray:
        return np.stack([self._one(t) for t in texts]) if texts else np.zeros((0, self.dim))

    def query(self, text: str) -> np.ndarray:
        return self._one(text)


class MemoEmbedder(CachedEmbedder):
    """`CachedEmbedder`'s interface with an in-memory cache only (no DuckDB round trips)."""

    def __init__(self, inner: HashingEmbedder) -> None:  # noqa: D107 - no cache file on purpose
        self.inner = inner  # type: ignore[assignment]
        self.model_name = inner.model_name
        self.dim = inner.dim
        self.stats = EmbeddingStats()
        self._vectors: dict[str, np.ndarray] = {}

    def passages(self, texts: list[str]) -> np.ndarray:
        todo = [t for t in dict.fromkeys(texts) if t not in self._vectors]
        if todo:
            self._vectors.update(zip(todo, self.inner.passages(todo), strict=True))
            self.stats.calls += len(todo)
        self.stats.cache_hits += len(texts) - len(todo)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([self._vectors[t] for t in texts]).astype(np.float32)


def _builder(settings: Settings, config: MemoryConfig):  # type: ignore[no-untyped-def]
    return builder_from_settings(settings, config=config, embedder=MemoEmbedder(HashingEmbedder()))


def _chains(builder, touched: list[str], before: dict) -> set[str]:  # type: ignore[no-untyped-def]
    """Touched nodes plus their ancestors, under the current parent and the one built with."""
    tree = builder.tree()
    out: set[str] = set()
    frontier = list(touched)
    while frontier:
        nid = frontier.pop()
        if nid in out:
            continue
        out.add(nid)
        if nid in tree.nodes and tree.nodes[nid].parent_id:
            frontier.append(tree.nodes[nid].parent_id)
        if nid in before and before[nid].parent_id:
            frontier.append(before[nid].parent_id)
    return out


@pytest.mark.parametrize("seed", [1])
def test_random_changes_refresh_to_a_full_rebuild(
    memory_world: Settings, tmp_path: Path, seed: int
) -> None:
    config = MemoryConfig(support_threshold=0.3, min_support=2)
    builder = _builder(memory_world, config)
    first = builder.full_build()
    first.raise_for_failures()
    assert builder.plan().empty

    rng = random.Random(seed)
    applied = []
    for _ in range(8):
        before = builder.store.built()
        name, touched = random_operation(memory_world.sources_db, rng)
        applied.append(name)
        # The change log names only the touched nodes; the builder adds the ancestor chains.
        plan = builder.plan_for(touched)
        report = builder.refresh(plan)
        report.raise_for_failures()
        rebuilt = {r.node_id for r in report.rebuilt} | {
            r.node_id for r in report.with_status("deleted")
        }
        assert rebuilt <= _chains(builder, touched, before), (name, touched, sorted(rebuilt))
        # Nothing else went stale: the sensor's version diff agrees with the change log.
        assert builder.plan().empty, (name, builder.plan().describe())

    world = read_world(memory_world.sources_db)
    assert world.projects, applied

    # A full rebuild of the same final sources, from nothing, in another data directory.
    fresh = replace(memory_world, data_dir=tmp_path / f"fresh-{seed}")
    fresh.data_dir.mkdir(parents=True)
    shutil.copy(memory_world.sources_db, fresh.sources_db)
    rebuilt_builder = _builder(fresh, config)
    rebuilt_builder.full_build().raise_for_failures()

    incremental = builder.store.snapshot()
    full = rebuilt_builder.store.snapshot()
    assert [r[0] for r in incremental.rows] == [r[0] for r in full.rows]
    for mine, theirs in zip(incremental.rows, full.rows, strict=True):
        assert mine == theirs, mine[0]
    assert sorted(incremental.collections) == sorted(full.collections)
    for name in full.collections:
        assert incremental.collections[name] == full.collections[name], name
    assert incremental == full
    assert incremental.text_dump() == full.text_dump()


def test_parallel_workers_build_the_same_tree(memory_world: Settings, tmp_path: Path) -> None:
    serial = _builder(memory_world, MemoryConfig(workers=1))
    serial.full_build().raise_for_failures()
    other = replace(memory_world, data_dir=tmp_path / "parallel")
    other.data_dir.mkdir(parents=True)
    shutil.copy(memory_world.sources_db, other.sources_db)
    parallel = _builder(other, MemoryConfig(workers=4, batch_size=5))
    report = parallel.full_build()
    report.raise_for_failures()
    assert parallel.store.snapshot() == serial.store.snapshot()
    assert parallel.llm.usage.calls == report.totals()["llm_calls"] > 0

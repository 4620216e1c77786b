"""Incremental refresh is lossless: after random add / change / delete / move sequences, the
incrementally refreshed tree is byte-identical to a full rebuild of the final sources, in DuckDB
and in Chroma — and each step rebuilt only the touched leaves and their ancestor chains."""

from __future__ import annotations

import random
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from hltm.memory import MemoryConfig
from hltm.settings import Settings
from hltm_devkit.scenarios import random_operation, read_world
from tests.support import memory as _shared
from tests.support.memory import hashing_builder

# The shared fixtures: a copy of the small world's sources, ingested once per session.
ingested_sources = _shared.ingested_sources
memory_world = _shared.memory_world


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
    builder = hashing_builder(memory_world, config)
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
    rebuilt_builder = hashing_builder(fresh, config)
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
    serial = hashing_builder(memory_world, MemoryConfig(workers=1))
    serial.full_build().raise_for_failures()
    other = replace(memory_world, data_dir=tmp_path / "parallel")
    other.data_dir.mkdir(parents=True)
    shutil.copy(memory_world.sources_db, other.sources_db)
    parallel = hashing_builder(other, MemoryConfig(workers=4, batch_size=5))
    report = parallel.full_build()
    report.raise_for_failures()
    assert parallel.store.snapshot() == serial.store.snapshot()
    assert parallel.llm.usage.calls == report.totals()["llm_calls"] > 0

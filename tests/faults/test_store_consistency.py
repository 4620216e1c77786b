"""Crash leftovers and a lost vector index are noticed and repaired.

A kill between the Chroma write and the DuckDB flip leaves items no row accepts; they take
nearest-neighbour slots before readers filter them out. A fresh Chroma (a new server, a wiped
directory) leaves rows with no items, and every query says "No memory". The store check finds
both, the asset check flags them, and a full refresh sweeps the orphans and re-indexes the
nodes from their stored rows, without a single LLM call. One project node keeps it fast.
"""

from __future__ import annotations

from typing import Any

import dagster as dg
import numpy as np

from hltm.memory import builder_from_settings, memory_collection_name
from hltm.settings import Settings
from hltm_dagster.defs.memory.assets import memory_store_consistent
from hltm_dagster.resources import build_resources
from hltm_devkit.scenarios import read_world
from tests.support import memory as _shared

ingested_sources = _shared.ingested_sources
memory_world = _shared.memory_world


def _one_project(settings: Settings) -> tuple[Any, str, str]:
    builder = builder_from_settings(settings)
    world = read_world(settings.sources_db)
    pid = sorted(world.projects)[0]
    (report,) = builder.build([f"project:{pid}"])
    assert report.status == "built"
    contract = builder.store.built()[f"project:{pid}"].contract_id
    return builder, f"project:{pid}", memory_collection_name(contract)


def _asset_check(settings: Settings) -> Any:
    return memory_store_consistent(  # type: ignore[call-arg]
        dg.build_asset_check_context(), platform=build_resources(settings)["platform"]
    )


def test_crash_leftovers_are_found_flagged_and_swept(memory_world: Settings) -> None:
    builder, nid, name = _one_project(memory_world)
    col = builder.store.vectors.existing(name)
    live = col.get(include=["documents", "metadatas", "embeddings"])
    # What a kill after writing a new version's items, before the row flipped, leaves behind.
    col.add(
        ids=[f"{i}-stale" for i in live["ids"]],
        documents=live["documents"],
        metadatas=[{**m, "node_version": "v-never-flipped"} for m in live["metadatas"]],
        embeddings=np.asarray(live["embeddings"], dtype=np.float32),
    )
    probe = np.asarray(live["embeddings"][0], dtype=np.float32)
    nearest = col.query(query_embeddings=[probe], n_results=10)["ids"][0]
    assert sum(i.endswith("-stale") for i in nearest) >= 4  # they take the reader's slots

    found = builder.store.check()
    assert found.orphan_count == len(live["ids"]) and not found.incomplete
    check = _asset_check(memory_world)
    assert not check.passed and f"{len(live['ids'])} orphan item(s)" in check.description

    swept, reindexed = builder.reconcile()  # what every full plan does first
    assert (swept, reindexed) == (len(live["ids"]), [])
    assert builder.store.check().clean and _asset_check(memory_world).passed
    nearest = col.query(query_embeddings=[probe], n_results=10)["ids"][0]
    assert not any(i.endswith("-stale") for i in nearest)
    assert sorted(col.get(include=[])["ids"]) == sorted(live["ids"])  # the live items stay
    assert builder.store.nodes([nid])[nid].version == live["metadatas"][0]["node_version"]


def test_an_empty_index_is_noticed_and_reindexed_without_llm_calls(
    memory_world: Settings,
) -> None:
    builder, nid, name = _one_project(memory_world)
    intact = builder.store.snapshot()
    builder.store.vectors.drop(name)  # a fresh Chroma server: the rows are all that is left

    found = builder.store.check()
    assert found.incomplete == [nid] and not found.orphans
    check = _asset_check(memory_world)
    assert not check.passed and check.metadata["nodes_missing_items"].value == 1

    before = builder.llm.snapshot()
    swept, reindexed = builder.reconcile()
    assert (swept, [r.node_id for r in reindexed]) == (0, [nid])
    assert reindexed[0].status == "reindexed" and reindexed[0].version == intact.rows[0][7]
    assert (builder.llm.snapshot() - before).calls == 0  # re-embedded from the stored row
    assert builder.store.snapshot() == intact  # byte for byte, vectors included
    assert builder.store.check().clean and _asset_check(memory_world).passed

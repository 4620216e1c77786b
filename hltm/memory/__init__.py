"""HLTM memory tree, Dagster-free: the ownership tree and its diff, the three representations
per node (facets, QA pairs, summaries), bottom-up aggregation, the DuckDB + Chroma store, full
builds and incremental refreshes. The Dagster layer (`hltm_dagster/defs/memory/`) only wires
these to resources, partitions and schedules.
"""

from __future__ import annotations

from pathlib import Path

from hltm.embeddings import CachedEmbedder, make_embedder
from hltm.llm import LLM, make_llm
from hltm.memory.build import MemoryBuilder, MemoryBuildError, MemoryConfig, RefreshReport
from hltm.memory.flow import NodeReport
from hltm.memory.hints import NO_HINTS, Hints, QATemplate, load_hints, save_hints
from hltm.memory.store import (
    MEMORY_TABLE,
    MemoryStore,
    current_versions,
    item_id,
    memory_collection_name,
    read_built,
    read_nodes,
    subtree_node_ids,
)
from hltm.memory.tree import Plan
from hltm.settings import Settings
from hltm.vectors import VectorStore
from hltm.warehouse import connect

__all__ = [
    "MEMORY_TABLE",
    "NO_HINTS",
    "Hints",
    "MemoryBuildError",
    "MemoryBuilder",
    "MemoryConfig",
    "MemoryStore",
    "NodeReport",
    "Plan",
    "QATemplate",
    "RefreshReport",
    "builder_from_settings",
    "current_versions",
    "item_id",
    "load_hints",
    "memory_collection_name",
    "read_built",
    "read_nodes",
    "save_hints",
    "subtree_node_ids",
]


def builder_from_settings(
    settings: Settings,
    config: MemoryConfig | None = None,
    hints: Hints | None = None,
    llm: LLM | None = None,
    embedder: CachedEmbedder | None = None,
) -> MemoryBuilder:
    """A builder on the configured stores and models (hints: the newest released, unless given)."""
    embedder = embedder or make_embedder(settings)
    store = MemoryStore(settings.derived_db, VectorStore(settings, embedder))
    if hints is None:
        with connect(Path(settings.derived_db)) as con:
            hints = load_hints(con)
    return MemoryBuilder(
        settings.sources_db, store, llm or make_llm(settings), embedder, hints, config
    )

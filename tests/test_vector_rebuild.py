"""What a deletion does to the embedded Chroma's files (`hltm.deletion.compact_stores`): a
collection items were deleted from is rebuilt under its own name with its live items only, the
files of the dropped segment are removed, and no segment keeps a non-zero byte past its element
count; a reader whose handle names the replaced collection looks it up again.

Before: the rebuilt collection's readers outside the engine's shared handles raised
`NotFoundError`; the segment files kept the deleted items' vectors in deleted-marked slots, and
their slots past the element count held the writing process's freed memory."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from hltm.deletion import remove_dropped_segments, zero_unused_slots
from hltm.embeddings import make_embedder
from hltm.memory.models import Facet, MemoryNode, Placement
from hltm.memory.store import MemoryStore, memory_collection_name
from hltm.query.boundary import ScopedMemory
from hltm.query.scope import Identity, resolve_scope
from hltm.settings import Settings
from hltm.vectors import VectorStore, _client
from hltm.warehouse import connect

NAME = memory_collection_name("c1")


def _node(node_id: str, seat: str, facets: list[str]) -> MemoryNode:
    level, _, ident = node_id.partition(":")
    project = ident if level == "project" else None
    parent = f"seat:{seat}" if level == "project" else "contract:c1"
    placement = Placement(node_id, level, "c1", seat, project, parent, ident)  # type: ignore[arg-type]
    return MemoryNode(
        placement,
        f"v-{node_id}",
        tuple(Facet("skill", f, (), ()) for f in facets),
        (),
        "",
        f"summary of {node_id}",
    )


@pytest.fixture
def store(settings: Settings) -> MemoryStore:
    """A seat and three projects in contract c1's collection (random unit vectors)."""
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    store = MemoryStore(settings.derived_db, VectorStore(settings, make_embedder(settings)))
    rng = np.random.default_rng(7)
    nodes = [_node("seat:s1", "s1", ["Kafka"])] + [
        _node(f"project:p{i}", "s1", [f"skill {i}", f"tool {i}"]) for i in range(1, 4)
    ]
    entries = []
    for node in nodes:
        vectors = rng.standard_normal((len(node.search_items()), 384)).astype(np.float32)
        entries.append((node, vectors / np.linalg.norm(vectors, axis=1, keepdims=True)))
    store.write(entries)
    return store


def _items(vectors: VectorStore, name: str) -> dict[str, tuple]:
    """id → (document, metadata, vector to 5 decimals: the index keeps vectors normalised)."""
    col = vectors.existing(name)
    assert col is not None
    got = col.get(include=["documents", "metadatas", "embeddings"])
    return {
        i: (d, m, tuple(np.round(np.asarray(e, dtype=np.float64), 5) + 0.0))
        for i, d, m, e in zip(
            got["ids"], got["documents"], got["metadatas"], got["embeddings"], strict=True
        )
    }


def _segments(settings: Settings) -> set[str]:
    return {p.name for p in settings.chroma_path.iterdir() if p.is_dir()}


def test_a_rebuilt_collection_keeps_its_name_and_live_items_only(
    settings: Settings, store: MemoryStore
) -> None:
    vectors = store.vectors
    old = vectors.existing(NAME)
    assert old is not None
    old.modify(configuration={"hnsw": {"ef_search": 50}})
    store.delete(["project:p2"])
    live = _items(vectors, NAME)
    assert live and not any(i.startswith("project:p2#") for i in live)
    before = _segments(settings)

    assert vectors.rebuild(NAME) == len(live)
    new = vectors.existing(NAME)
    assert new is not None and new.id != old.id
    assert _items(vectors, NAME) == live
    assert new.configuration["hnsw"]["ef_search"] == 50  # type: ignore[index]
    assert vectors.list_names() == [NAME]
    assert vectors.rebuild("mem-missing") is None

    # The old segment's files stay behind until removed (they hold the deleted vectors).
    assert len(before - _segments(settings)) == 0
    assert remove_dropped_segments(settings.chroma_path) == 1
    assert len(_segments(settings)) == 1
    assert remove_dropped_segments(settings.chroma_path) == 0


@pytest.mark.parametrize("stopped", ["before the drop", "before the rename"])
def test_a_rebuild_that_stopped_midway_is_finished_by_the_next(
    settings: Settings, store: MemoryStore, stopped: str
) -> None:
    vectors = store.vectors
    live = _items(vectors, NAME)
    client = vectors.client
    temp = client.create_collection(
        f"rebuild.{NAME}",
        configuration={"hnsw": {"space": "cosine"}},
        embedding_function=vectors.embedding_function,  # type: ignore[arg-type]
    )
    if stopped == "before the rename":  # the copy holds everything, the old one is gone
        old = client.get_collection(NAME)
        got = old.get(include=["documents", "metadatas", "embeddings"])
        temp.add(
            ids=got["ids"],
            embeddings=got["embeddings"],
            documents=got["documents"],
            metadatas=got["metadatas"],
        )
        client.delete_collection(NAME)
    assert vectors.rebuild(NAME) == len(live)
    assert vectors.list_names() == [NAME] and _items(vectors, NAME) == live


def test_slots_past_the_element_count_are_zeroed_and_the_index_still_reads(
    settings: Settings, store: MemoryStore
) -> None:
    """Freed memory of the writer is planted past the element count; zeroing leaves the files'
    sizes and every element as they were, and a client that loads them anew finds the same."""
    col = store.vectors.existing(NAME)
    assert col is not None
    col.modify(configuration={"hnsw": {"sync_threshold": 2}})  # persist the elements now
    store.vectors.reopen(store.vectors.generation)
    store.write([(_node("project:p9", "s1", ["Rust"]), np.eye(384, dtype=np.float32)[:2])])
    (segment,) = [p for p in settings.chroma_path.iterdir() if p.is_dir()]
    _, _, capacity, count, slot = struct.unpack_from("<i4Q", (segment / "header.bin").read_bytes())
    assert 0 < count < capacity
    planted = b"SECRET-FREED-TEXT" * 4
    files = {"data_level0.bin": slot, "length.bin": 4}
    for name, size in files.items():
        with open(segment / name, "r+b") as f:
            f.seek(count * size)
            f.write(planted[: (capacity - count) * size])
    before = {n: (segment / n).read_bytes() for n in files}
    query = np.eye(384, dtype=np.float32)[:1]
    col = store.vectors.existing(NAME)  # of the client reopened above
    assert col is not None
    nearest = col.query(query_embeddings=query, n_results=3, include=["distances"])["ids"]

    assert zero_unused_slots(settings.chroma_path) == 1
    for name, size in files.items():
        data = (segment / name).read_bytes()
        assert (
            len(data) == len(before[name]) and data[: count * size] == before[name][: count * size]
        )
        assert not any(data[count * size :])
    assert zero_unused_slots(settings.chroma_path) == 0
    store.vectors.reopen(store.vectors.generation)  # the files loaded anew
    again = store.vectors.existing(NAME)
    assert again is not None
    assert again.query(query_embeddings=query, n_results=3, include=["distances"])["ids"] == nearest


def test_a_reader_of_a_rebuilt_collection_looks_it_up_again(
    settings: Settings, store: MemoryStore
) -> None:
    """A boundary without the engine's shared handles (a batch reader) opened its handle before
    a deletion rebuilt the collection: its search opens the new one and answers."""
    query = np.asarray(
        store.vectors.existing(NAME).get(ids=["seat:s1#v-seat:s1#facet#0"], include=["embeddings"])[  # type: ignore[union-attr]
            "embeddings"
        ]
    )
    with connect(settings.derived_db) as con:
        memory = ScopedMemory(resolve_scope(con, Identity("seat", "s1")), con, store.vectors)
        store.delete(["project:p2"])
        store.vectors.rebuild(NAME)
        (hits,) = memory.search(None, query, 5)
    assert hits and hits[0].node_id == "seat:s1"
    assert "project:p2" not in {h.node_id for h in hits}
    assert memory.collection is not None
    assert memory.collection.handle.id == _client(settings).get_collection(NAME).id


def test_zeroing_leaves_what_is_not_a_segment_alone(tmp_path: Path) -> None:
    (tmp_path / "not-a-uuid").mkdir()
    (tmp_path / "not-a-uuid" / "data_level0.bin").write_bytes(b"\x01" * 8)
    assert zero_unused_slots(tmp_path) == 0 and remove_dropped_segments(tmp_path) == 0
    assert (tmp_path / "not-a-uuid" / "data_level0.bin").read_bytes() == b"\x01" * 8

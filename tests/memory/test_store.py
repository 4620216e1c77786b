"""The memory store: replacing a node is atomic for a reader that accepts only items of the
node's current version; a failed write leaves the previous version intact and its leftovers are
cleared by the next; moves and deletions leave nothing behind in any collection."""

from __future__ import annotations

import random
from typing import Any

import pytest
from chromadb.api.models.Collection import Collection

from hltm.memory import MemoryConfig
from hltm.memory.hints import Hints, QATemplate, save_hints
from hltm.memory.store import current_versions, memory_collection_name, subtree_node_ids
from hltm.settings import Settings
from hltm.warehouse import connect
from hltm_devkit.scenarios import change_project, move_project, read_world, remove_project
from tests.support import memory as _shared
from tests.support.memory import hashing_builder as _builder

# The shared fixtures: a copy of the small world's sources, ingested once per session.
ingested_sources = _shared.ingested_sources
memory_world = _shared.memory_world


def reader_view(builder: Any, node_id: str) -> tuple[str | None, list[str]]:
    """What the query path accepts for a node: its row's version and the items of that version."""
    with connect(builder.store.derived_db) as con:
        version = current_versions(con, [node_id]).get(node_id)
        row = con.execute(
            "SELECT contract_id FROM memory_nodes WHERE node_id = ?", [node_id]
        ).fetchone()
    if row is None:
        return None, []
    col = builder.store.vectors.existing(memory_collection_name(row[0]))
    got = col.get(where={"node_id": node_id}, include=["documents", "metadatas"])
    docs = [
        d for d, m in zip(got["documents"], got["metadatas"], strict=True)
        if m["node_version"] == version
    ]  # fmt: skip
    return version, sorted(docs)


def items_of(builder: Any, node_id: str) -> dict[str, int]:
    """Collection name → number of items of `node_id` in it (any version)."""
    out = {}
    for name in builder.store.vectors.list_names():
        col = builder.store.vectors.existing(name)
        n = len(col.get(where={"node_id": node_id}, include=[])["ids"])
        if n:
            out[name] = n
    return out


def test_replacement_is_atomic_and_a_failed_write_changes_nothing(
    memory_world: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    builder = _builder(memory_world, MemoryConfig())
    builder.full_build().raise_for_failures()
    world = read_world(memory_world.sources_db)
    pid = sorted(world.projects)[3]
    node = f"project:{pid}"
    old = reader_view(builder, node)
    assert old[0] and old[1]
    change_project(memory_world.sources_db, random.Random(2), project_id=pid)

    seen_mid_write: list[tuple[str | None, list[str]]] = []
    original_add = Collection.add

    class Crash(BaseException):
        """The process dying between the vector write and the row flip: nothing after it runs
        (a failed write, an Exception, only fails its contract's nodes)."""

    def add_then_look(self: Collection, *args: Any, **kwargs: Any) -> None:
        original_add(self, *args, **kwargs)
        seen_mid_write.append(reader_view(builder, node))
        raise Crash

    monkeypatch.setattr(Collection, "add", add_then_look)
    with pytest.raises(Crash):
        builder.refresh(builder.plan_for([node]))
    monkeypatch.setattr(Collection, "add", original_add)

    # New-version items were already in Chroma, yet the reader saw (and sees) the old node only.
    assert seen_mid_write == [old]
    assert reader_view(builder, node) == old

    builder.refresh(builder.plan_for([node])).raise_for_failures()
    new = reader_view(builder, node)
    assert new[0] != old[0] and new[1] != old[1]
    with connect(memory_world.derived_db) as con:
        item_count = con.execute(
            "SELECT item_count FROM memory_nodes WHERE node_id = ?", [node]
        ).fetchone()[0]  # type: ignore[index]
    # Exactly the current version's items remain: the crashed attempt and the old version are gone.
    assert sum(items_of(builder, node).values()) == item_count == len(new[1])
    assert builder.plan().empty


def test_moves_and_deletions_leave_nothing_behind(memory_world: Settings) -> None:
    builder = _builder(memory_world, MemoryConfig())
    builder.full_build().raise_for_failures()
    world = read_world(memory_world.sources_db)
    c1, c2 = sorted(world.contracts)[:2]
    pid = next(p for p, s in sorted(world.projects.items()) if world.seats[s] == c1)
    target = next(s for s, c in sorted(world.seats.items()) if c == c2)
    move_project(memory_world.sources_db, random.Random(0), project_id=pid, seat_id=target)
    builder.refresh().raise_for_failures()
    assert list(items_of(builder, f"project:{pid}")) == [memory_collection_name(c2)]
    with connect(memory_world.derived_db) as con:
        assert f"project:{pid}" in subtree_node_ids(con, contract_id=c2)
        assert f"project:{pid}" in subtree_node_ids(con, seat_id=target)
        assert f"project:{pid}" not in subtree_node_ids(con, contract_id=c1)
        assert subtree_node_ids(con, project_id=pid) == [f"project:{pid}"]

    # A whole contract goes: its rows, its items and its collection.
    world = read_world(memory_world.sources_db)
    for project, seat in sorted(world.projects.items()):
        if world.seats[seat] == c2:
            remove_project(memory_world.sources_db, random.Random(0), project_id=project)
    with connect(memory_world.sources_db) as con:
        con.execute("DELETE FROM seats WHERE contract_id = ?", [c2])
        con.execute("DELETE FROM contracts WHERE contract_id = ?", [c2])
    report = builder.refresh()
    report.raise_for_failures()
    assert {r.node_id for r in report.with_status("deleted")} >= {f"contract:{c2}"}
    with connect(memory_world.derived_db) as con:
        assert subtree_node_ids(con, contract_id=c2) == []
    assert builder.store.vectors.existing(memory_collection_name(c2)) is None
    assert memory_collection_name(c1) in builder.store.vectors.list_names()
    assert builder.plan().empty


def test_released_hints_refresh_every_node_and_shape_it(memory_world: Settings) -> None:
    builder = _builder(memory_world, MemoryConfig())
    builder.full_build().raise_for_failures()
    hints = Hints(
        attributes=("headcount",),
        qa_templates=(QATemplate("How many people does {node} hire at once?", "headcount"),),
    )
    with connect(memory_world.derived_db) as con:
        save_hints(con, hints)
    hinted = _builder(memory_world, MemoryConfig())  # picks up the newest released hints
    assert hinted.hints.version == hints.version
    plan = hinted.plan()
    assert len(plan.rebuilds) == len(builder.store.built())  # the hints version is in every version
    hinted.refresh(plan).raise_for_failures()
    nodes = hinted.store.nodes(hinted.store.built())
    asked = [
        q
        for n in nodes.values()
        for q in n.qa
        if q.question.startswith("How many people does") and q.question.endswith("hire at once?")
    ]
    assert asked, "the hinted template was not used"
    project_pairs = [q for q in asked if q.support and not q.support[0].startswith("project:")]
    assert all(q.answer for q in project_pairs) and project_pairs

"""Deletion reaches everything derived: a canary token placed in one project document shows up in
that project's memory and its ancestors', and after the deletion and the sensor's refresh it is
gone from every row of the memory store and every item of every Chroma collection."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import dagster as dg
import pytest
from click.testing import CliRunner

from hltm.embeddings import short_key, text_hash
from hltm.memory.store import read_nodes
from hltm.query.engine import QueryEngine
from hltm.query.scope import Identity
from hltm.settings import Settings
from hltm.sources.ingest import delete_document, delete_project
from hltm.vectors import _client
from hltm.warehouse import connect
from hltm_cli import main
from hltm_devkit.scenarios import _ingest, read_world
from tests.support import memory as _shared
from tests.support.memory import level_metadata, make_harness, rebuilt

# The shared fixtures: a copy of the small world's sources, ingested once per session.
ingested_sources = _shared.ingested_sources
memory_world = _shared.memory_world

CANARY = "ZQX-CANARY-7781"


def _rows_mentioning(settings: Settings, needle: str) -> set[str]:
    with connect(settings.derived_db) as con:
        rows = con.execute("SELECT * FROM memory_nodes").fetchall()
    return {
        str(r[0]) for r in rows if needle in json.dumps([str(v) for v in r], ensure_ascii=False)
    }


def _items_mentioning(settings: Settings, needle: str) -> set[str]:
    """Node ids of Chroma items (any collection) whose id, document or metadata has `needle`."""
    client = _client(settings)
    found = set()
    for col in client.list_collections():
        got = client.get_collection(col.name).get(include=["documents", "metadatas"])
        for iid, doc, meta in zip(
            got["ids"], got["documents"] or [], got["metadatas"] or [], strict=True
        ):
            if needle in iid or needle in (doc or "") or needle in json.dumps(meta):
                found.add(str((meta or {}).get("node_id", iid)))
    return found


def _plant_canary(settings: Settings, pid: str) -> str:
    doc_id = f"{pid}-addendum"
    text = (
        f"Intake addendum: the hiring manager named the programme {CANARY}.\n"
        f"Programme code: {CANARY}\n"
        "The team works hybrid from Berlin."
    )
    _ingest(
        settings.sources_db,
        {
            "project_documents": [
                {"document_id": doc_id, "project_id": pid, "kind": "intake_notes", "text": text}
            ]
        },
    )
    return doc_id


# A deleted project is covered across every store by tests/test_deletion_canary.py.
@pytest.mark.parametrize("what", ["document"])
def test_canary_is_gone_after_deletion(memory_world: Settings, what: str) -> None:
    # Support 1: every detail of a child reaches the parents — the worst case for deletion.
    harness = make_harness(memory_world, support_threshold=0.0, min_support=1)
    world = read_world(memory_world.sources_db)
    pid = sorted(world.projects)[1]
    seat = world.projects[pid]
    chain = {f"project:{pid}", f"seat:{seat}", f"contract:{world.seats[seat]}"}
    doc_id = _plant_canary(memory_world, pid)

    _, runs = harness.tick_and_run()
    assert runs and runs[0].success
    assert _rows_mentioning(memory_world, CANARY) == chain
    assert _items_mentioning(memory_world, CANARY) == chain  # facet strings are embedded
    assert _rows_mentioning(memory_world, doc_id) == chain  # provenance reaches the root

    if what == "project":
        delete_project(memory_world.sources_db, pid)
    else:
        delete_document(memory_world.sources_db, doc_id)
    result, runs = harness.tick_and_run()
    assert isinstance(result, dg.SensorResult) and runs[0].success
    assert f"seat:{seat}" in rebuilt(runs[0])

    for needle in (CANARY, doc_id):
        assert _rows_mentioning(memory_world, needle) == set(), needle
        assert _items_mentioning(memory_world, needle) == set(), needle
    with connect(memory_world.derived_db) as con:
        nodes = {r[0] for r in con.execute("SELECT node_id FROM memory_nodes").fetchall()}
    assert (f"project:{pid}" in nodes) == (what == "document")
    purged = {n for m in level_metadata(runs[0]).values() for n in m["purged"]}
    assert (f"project:{pid}" in purged) == (what == "project")
    assert isinstance(harness.tick(), dg.SkipReason)


def test_a_deleted_project_is_never_answered_once_the_delete_returns(
    memory_world: Settings,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    cli_jobs_from: Callable[[dg.Definitions], None],
) -> None:
    """No daemon runs. A reader that was already serving (the engine `hltm serve` and MCP
    share) asks right after `hltm delete project` returns: the project has no memory, and its
    seat's and contract's answers neither cite it nor hold its text; the delete rebuilt them
    itself, in a Dagster run."""
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    harness = make_harness(memory_world)
    # The run `hltm delete` starts, on this test's stores (`definitions` binds the first's).
    cli_jobs_from(harness.defs)
    world = read_world(memory_world.sources_db)
    pid = sorted(world.projects)[1]
    seat = world.projects[pid]
    contract = world.seats[seat]
    _plant_canary(memory_world, pid)
    _, runs = harness.tick_and_run()
    assert runs and runs[0].success
    question = "Which programme did the hiring manager name?"
    engine = QueryEngine(memory_world, log_queries=False)
    before = engine.ask(Identity("project", pid), question)
    assert f"project:{pid}" in before.citations and CANARY in json.dumps(before.context)
    built = read_built_nodes(memory_world)
    assert {f"project:{pid}", f"seat:{seat}"} <= _rows_mentioning(memory_world, pid)
    said = _statements_with(memory_world, f"project:{pid}", CANARY)
    assert said and all(_cached(memory_world, said))  # embedded by the build, for the answer

    deleted = CliRunner().invoke(main, ["delete", "project", pid])
    assert deleted.exit_code == 0, deleted.output
    gone = engine.ask(Identity("project", pid), question)
    assert gone.no_memory and not gone.citations
    for who in (Identity("seat", seat), Identity("contract", contract)):
        answer = engine.ask(who, question)
        shown = json.dumps(answer.as_dict(with_context=True), ensure_ascii=False)
        assert CANARY not in shown and f"project:{pid}" not in shown, who
    assert f"seat:{seat}" in deleted.output and "rebuilt the memory" in deleted.output
    assert _rows_mentioning(memory_world, pid) == set()
    assert not any(_cached(memory_world, said))
    after = read_built_nodes(memory_world)
    for node in (f"seat:{seat}", f"contract:{contract}"):  # rebuilt, not merely dropped
        assert node in after and after[node] != built[node]
    _, runs = harness.tick_and_run()
    assert not runs  # nothing left for the sensor


def _statements_with(settings: Settings, node_id: str, needle: str) -> list[str]:
    with connect(settings.derived_db) as con:
        node = read_nodes(con, [node_id])[node_id]
    return [s for s in node.statements() if needle in s]


def _cached(settings: Settings, statements: list[str]) -> list[bool]:
    """Whether the embedding cache holds each statement's vector (as the build stores it)."""
    with connect(settings.derived_db) as con:
        hashes = {h for (h,) in con.execute("SELECT text_hash FROM embedding_cache").fetchall()}
    return [text_hash(short_key(s)) in hashes for s in statements]


def read_built_nodes(settings: Settings) -> dict[str, str]:
    with connect(settings.derived_db) as con:
        return dict(con.execute("SELECT node_id, version FROM memory_nodes").fetchall())

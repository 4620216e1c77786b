"""`source_changes` diffs only what changed: after one change it reads the
changed contract's subtree and nothing else — an edit made behind ingest's back in another
contract stays unseen — and a cursor without the change-log format falls back to one full diff,
which does see it, then goes incremental again; the periodic full diff is spread over ticks."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
from dagster._core.storage.tags import PARTITION_NAME_TAG, RUN_KEY_TAG

import hltm.memory.planner as planner
from hltm.memory.changes import change_mark, contracts_to_diff, diff_contracts
from hltm.memory.tree import VersionConfig
from hltm.settings import Settings
from hltm.sources.ingest import delete_document, delete_project, ingest_directory
from hltm.warehouse import connect
from hltm_dagster.defs.memory.assets import REFRESH_TAG
from hltm_devkit.scenarios import change_project, read_world
from tests.support import memory as _shared
from tests.support.memory import Harness, make_harness

ingested_sources = _shared.ingested_sources
memory_world = _shared.memory_world


def _requested(harness: Harness, result: dg.SensorResult | dg.SkipReason) -> tuple[str, list[str]]:
    """How the tick diffed, and the contracts its one requested run covers."""
    assert isinstance(result, dg.SensorResult) and len(result.run_requests or []) == 1, result
    request = result.run_requests[0]  # type: ignore[index]
    return request.tags["hltm/diff"], harness.contracts(request)


def _two_small_contracts(settings: Settings) -> None:
    """Keep one project in each of two contracts: a fast first build."""
    world = read_world(settings.sources_db)
    keep: set[str] = set()
    for contract in sorted(set(world.seats.values()))[:2]:
        seat = min(s for s, c in world.seats.items() if c == contract)
        keep |= set(sorted(p for p, s in world.projects.items() if s == seat)[:1])
    for project in sorted(set(world.projects) - keep):
        delete_project(settings.sources_db, project)


def _built_then_every_project_changed(settings: Settings) -> tuple[Harness, Any, list[str]]:
    """Two small contracts built by the sensor's run, then every project's title edited: the
    harness, the world and the two contracts."""
    _two_small_contracts(settings)
    harness = make_harness(settings)
    _, runs = harness.tick_and_run()
    assert runs and all(r.success for r in runs)
    world = read_world(settings.sources_db)
    for pid in sorted(world.projects):
        change_project(settings.sources_db, random.Random(5), project_id=pid, kind="title")
    return harness, world, sorted(set(world.seats.values()))[:2]


def test_sensor_reads_only_the_changed_contract(
    memory_world: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    _two_small_contracts(memory_world)
    harness = make_harness(memory_world)
    _, runs = harness.tick_and_run()
    assert runs and all(r.success for r in runs)
    assert isinstance(harness.tick(), dg.SkipReason)
    since = json.loads(harness.cursor or "{}")["change_seq"]
    world = read_world(memory_world.sources_db)
    first, other = sorted(set(world.seats.values()))[:2]
    pid = next(p for p, s in sorted(world.projects.items()) if world.seats[s] == first)
    unseen = next(p for p, s in sorted(world.projects.items()) if world.seats[s] == other)

    change_project(memory_world.sources_db, random.Random(3), project_id=pid, kind="title")
    with connect(memory_world.sources_db) as con:  # behind ingest's back: no change log entry
        con.execute(
            "UPDATE project_documents SET text = text || ' Relocation offered.'"
            " WHERE project_id = ?",
            [unseen],
        )
    with connect(memory_world.sources_db, read_only=True) as con:
        scope = contracts_to_diff(con, memory_world.derived_db, since, set())
        assert scope == {first}
        diff = diff_contracts(con, memory_world.derived_db, scope, VersionConfig((), "", "m", 0, 0))
    in_first = 1 + sum(1 for c in world.seats.values() if c == first)
    in_first += sum(1 for s in world.projects.values() if world.seats[s] == first)
    total = len(world.contracts) + len(world.seats) + len(world.projects)
    assert len(diff.tree.nodes) == in_first < total  # the other contracts were never read
    assert {b.contract_id for b in diff.built.values()} == {first}

    result = harness.tick()
    kind, contracts = _requested(harness, result)
    assert kind == "incremental"
    assert contracts == [first]
    tags = result.run_requests[0].tags  # type: ignore[union-attr]
    assert [tags[f"hltm/{k}"] for k in ("projects", "seats", "contracts", "deletes")] == [
        "1",
        "1",
        "1",
        "0",
    ]
    assert isinstance(harness.tick(), dg.SkipReason)  # nothing new since

    # A cursor of the older format (no change number): one full diff, which sees everything.
    old = json.loads(harness.cursor or "{}")
    harness.cursor = json.dumps({k: v for k, v in old.items() if k not in ("format", "change_seq")})
    result = harness.tick()
    kind, contracts = _requested(harness, result)
    assert kind == "full"
    assert sorted(contracts) == sorted([first, other])
    assert result.run_requests[0].tags["hltm/projects"] == "2"  # type: ignore[union-attr]
    assert json.loads(harness.cursor or "{}")["format"] == old["format"]
    assert isinstance(harness.tick(), dg.SkipReason)

    # The periodic full diff is spread over ticks by store bucket and, once through, covers all.
    monkeypatch.setattr(planner, "SWEEP_BUCKETS", 128)  # two ticks, not eight
    harness.cursor = json.dumps({**json.loads(harness.cursor or "{}"), "diffed_at": 0})
    requested: set[str] = set()
    for _ in range(2):
        result = harness.tick()
        if isinstance(result, dg.SensorResult) and result.run_requests:
            kind, contracts = _requested(harness, result)
            assert kind == "incremental"
            requested |= set(contracts)
    assert requested == {first, other}
    assert json.loads(harness.cursor or "{}")["sweep"] is None
    assert isinstance(harness.tick(), dg.SkipReason)


def test_change_log_maps_moves_and_deletions_to_both_contracts(
    ingested_sources: Path, tmp_path: Path
) -> None:
    """A row moved to another owner changes the old owner too; a deletion records the owner it
    leaves, never the deleted id."""
    db = tmp_path / "sources.duckdb"
    shutil.copy(ingested_sources, db)
    world = read_world(db)
    first, other = sorted(set(world.seats.values()))[:2]
    doc = next(
        d for d, p in sorted(world.documents.items()) if world.seats[world.projects[p]] == first
    )
    target = next(p for p, s in sorted(world.projects.items()) if world.seats[s] == other)
    with connect(db, read_only=True) as con:
        since = change_mark(con) or 0
        row = con.execute(
            "SELECT document_id, kind, text FROM project_documents WHERE document_id = ?", [doc]
        ).fetchone()
    assert row is not None
    (tmp_path / "move").mkdir()
    (tmp_path / "move" / "project_documents.jsonl").write_text(
        json.dumps({"document_id": row[0], "project_id": target, "kind": row[1], "text": row[2]})
    )
    assert ingest_directory(tmp_path / "move", db).changed == 1
    with connect(db, read_only=True) as con:
        assert contracts_to_diff(con, tmp_path / "none.duckdb", since, set()) == {first, other}
        since = change_mark(con) or 0
    delete_document(db, doc)
    with connect(db, read_only=True) as con:
        assert contracts_to_diff(con, tmp_path / "none.duckdb", since, set()) == {other}
        departures = con.execute("SELECT owner_id FROM source_departures").fetchall()
    assert (doc,) not in departures and (target,) in departures


def test_contracts_a_failed_refresh_did_not_reach_are_requested_again(
    memory_world: Settings,
) -> None:
    """Every project changes; the refresh run stores the first contract and dies (the run ends
    FAILURE, as run monitoring marks a killed one). With no further change, the next tick
    requests the other contract, and after its run the whole tree is current."""
    harness, world, (first, other) = _built_then_every_project_changed(memory_world)
    result = harness.tick()
    _, contracts = _requested(harness, result)
    assert sorted(contracts) == sorted([first, other])
    request = result.run_requests[0]  # type: ignore[union-attr]

    # The run reaches the first contract's partition, then dies.
    reached = {k: v for k, v in request.tags.items() if not k.startswith("dagster/")}
    died = harness.defs.resolve_job_def("refresh_memory_tree").execute_in_process(
        instance=harness.instance,
        partition_key=first,
        tags={**reached, RUN_KEY_TAG: request.run_key or ""},
    )
    harness.instance.report_run_failed(died.dagster_run)
    assert harness.instance.get_run_by_id(died.run_id).status == dg.DagsterRunStatus.FAILURE  # type: ignore[union-attr]

    retry = harness.tick()
    _, again = _requested(harness, retry)
    assert again == [other]
    in_other = sum(1 for s in world.projects.values() if world.seats[s] == other)
    assert retry.run_requests[0].tags["hltm/projects"] == str(in_other)  # type: ignore[union-attr]
    assert harness.run(retry.run_requests[0]).success  # type: ignore[union-attr]
    assert isinstance(harness.tick(), dg.SkipReason)
    full = {k: v for k, v in json.loads(harness.cursor or "{}").items() if k != "format"}
    harness.cursor = json.dumps(full)  # a whole-tree diff: nothing is left stale
    skipped = harness.tick()
    assert isinstance(skipped, dg.SkipReason) and "every memory node is current" in (
        skipped.skip_message or ""
    )


def test_a_change_beside_a_running_refresh_runs_at_once_and_one_to_its_contract_after_it(
    memory_world: Settings,
) -> None:
    """A refresh run is at the first contract (not ended yet). A change to each contract:
    the tick requests the other contract's refresh at once, and leaves the first one's for when
    that run has ended, never diffing its half-written nodes."""
    harness, _, (first, other) = _built_then_every_project_changed(memory_world)
    running = harness.instance.create_run_for_job(
        harness.defs.resolve_job_def("refresh_memory_tree"),
        tags={REFRESH_TAG: "refresh", PARTITION_NAME_TAG: first},
    )

    beside = harness.tick()
    assert _requested(harness, beside)[1] == [other]
    assert json.loads(harness.cursor or "{}")["deferred"] == [first]
    assert harness.run(beside.run_requests[0]).success  # type: ignore[union-attr]
    waiting = harness.tick()
    assert isinstance(waiting, dg.SkipReason), waiting  # its run goes on: nothing to ask

    harness.instance.report_run_canceled(running)  # the run at the first contract has ended
    after = harness.tick()
    assert _requested(harness, after)[1] == [first]
    assert harness.run(after.run_requests[0]).success  # type: ignore[union-attr]
    assert isinstance(harness.tick(), dg.SkipReason)
    assert json.loads(harness.cursor or "{}")["deferred"] == []

"""The refresh planner, without Dagster: a first evaluation diffs the whole tree and asks for
every contract's partition and refresh; the next one, with nothing changed, skips on the
watermark; a refresh whose run ended badly is asked for again from the change its diff started
from; a contract gone from the sources keeps its partition until a run of it purged its memory,
and that run's plan is exactly its stored nodes."""

from __future__ import annotations

import json

from hltm.memory import builder_from_settings
from hltm.memory.planner import memory_partitions, plan_refresh
from hltm.memory.tree import plan_contracts
from hltm.settings import Settings
from hltm.sources.ingest import delete_project
from hltm.warehouse import connect
from hltm_devkit.scenarios import read_world
from tests.support import memory as _shared

ingested_sources = _shared.ingested_sources
memory_world = _shared.memory_world


def test_first_diff_then_skip_then_ask_again_after_a_failed_run(memory_world: Settings) -> None:
    config = builder_from_settings(memory_world).version_config()
    sources, derived = memory_world.sources_db, memory_world.derived_db
    partitions: set[str] = set()

    def existing(keys: set[str] | None) -> set[str]:
        return set(partitions) if keys is None else partitions & keys

    world = read_world(sources)
    first = plan_refresh(None, sources, derived, config, existing, lambda _: False, now=100.0)
    assert first.plan is not None and first.plan.projects and first.skip is None
    assert first.tags["hltm/diff"] == "full" and "no cursor" in first.notes[0]
    assert first.adds == first.contracts == world.contracts and not first.deletes
    (requested,) = json.loads(first.cursor or "{}")["requested"]
    assert requested["run_key"] == first.run_key
    partitions |= set(first.adds)

    quiet = plan_refresh(first.cursor, sources, derived, config, existing, lambda _: False, 101.0)
    assert quiet.plan is None and quiet.cursor is None and not (quiet.adds or quiet.deletes)
    assert quiet.skip is not None and quiet.skip.startswith("no source changes")

    failed = plan_refresh(first.cursor, sources, derived, config, existing, lambda _: True, 102.0)
    assert failed.plan is not None and failed.plan.projects == first.plan.projects
    assert failed.notes[0].startswith("a refresh requested earlier did not succeed")
    assert failed.run_key != first.run_key  # a new sequence: the retry is a new run


def test_a_contract_gone_from_the_sources_keeps_its_partition_until_purged(
    memory_world: Settings,
) -> None:
    builder = builder_from_settings(memory_world)
    world = read_world(memory_world.sources_db)
    gone = world.contracts[0]
    seats = [s for s, c in world.seats.items() if c == gone]
    mine = [p for p, s in world.projects.items() if s in seats]
    builder.build([f"project:{p}" for p in mine])  # the contract's projects are stored
    for project in mine:
        delete_project(memory_world.sources_db, project)
    with connect(memory_world.sources_db) as con:  # its seats and itself, edited out
        con.execute(f"DELETE FROM seats WHERE seat_id IN ({','.join('?' * len(seats))})", seats)
        con.execute("DELETE FROM contracts WHERE contract_id = ?", [gone])
    assert gone in memory_partitions(memory_world.sources_db, memory_world.derived_db)

    plan = plan_contracts(builder.tree(), builder.store.built(), [gone])
    assert plan.deletes == sorted(f"project:{p}" for p in mine) and not plan.rebuilds
    assert plan_contracts(builder.tree(), builder.store.built(), world.contracts[1:]).deletes == []
    builder.delete(plan.deletes)  # the run of its partition
    assert gone not in memory_partitions(memory_world.sources_db, memory_world.derived_db)

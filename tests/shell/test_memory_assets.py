"""The memory tree in Dagster: the code location loads, the sensor turns one change into one run
of the memory's asset job over exactly the affected contracts, that run rebuilds exactly the
changed chain and records each node's lineage in its level's metadata, and a run of a contract's
partition is the whole build of that contract."""

from __future__ import annotations

import random

import dagster as dg
import numpy as np

from hltm.memory import memory_collection_name
from hltm.memory.store import read_built
from hltm.settings import Settings
from hltm.warehouse import connect
from hltm_dagster.defs.memory.assets import MEMORY_ASSETS, MEMORY_CHECKS
from hltm_dagster.defs.sources.assets import source_tables
from hltm_dagster.instance import partition_range_tags
from hltm_dagster.resources import build_resources
from hltm_devkit.scenarios import change_project, move_project, read_world, remove_project
from tests.support.memory import ingested_sources as ingested_sources  # noqa: F401 (fixture)
from tests.support.memory import level_metadata, make_harness, memory_definitions, rebuilt
from tests.support.memory import memory_world as memory_world  # noqa: F401 (fixture)

RANGE_START = "dagster/asset_partition_range_start"
RANGE_END = "dagster/asset_partition_range_end"


def test_code_location_loads() -> None:
    from hltm_dagster import definitions

    dg.Definitions.validate_loadable(definitions.defs)
    jobs = {j.name for j in definitions.defs.get_repository_def().get_all_jobs()}
    assert "refresh_memory_tree" in jobs and "rebuild_memory_tree" not in jobs
    sensor = definitions.defs.resolve_sensor_def("source_changes")
    assert {j.name for j in sensor.jobs} == {"refresh_memory_tree"}
    job = definitions.defs.resolve_job_def("refresh_memory_tree")
    assert job.partitions_def is not None and job.partitions_def.name == "contracts"  # type: ignore[attr-defined]


def test_sensor_requests_exactly_the_changed_chain(memory_world: Settings) -> None:
    harness = make_harness(memory_world)
    world = read_world(memory_world.sources_db)
    everything = [
        *(f"project:{p}" for p in world.projects),
        *(f"seat:{s}" for s in world.seats),
        *(f"contract:{c}" for c in world.contracts),
    ]

    # First tick on an empty store: every contract's partition, one run over all of them.
    first, runs = harness.tick_and_run()
    assert isinstance(first, dg.SensorResult) and len(first.run_requests or []) == 1
    assert runs[0].success
    assert sorted(harness.instance.get_dynamic_partitions("contracts")) == world.contracts
    assert rebuilt(runs[0]) == sorted(everything)
    assert isinstance(harness.tick(), dg.SkipReason)

    # One project changes → one run over exactly its contract, rebuilding the leaf, its seat
    # and its contract.
    pid = sorted(world.projects)[4]
    seat = world.projects[pid]
    contract = world.seats[seat]
    change_project(memory_world.sources_db, random.Random(5), project_id=pid)
    result = harness.tick()
    assert isinstance(result, dg.SensorResult)
    assert len(result.run_requests or []) == 1
    request = result.run_requests[0]  # type: ignore[index]
    assert (request.tags[RANGE_START], request.tags[RANGE_END]) == (contract, contract)
    assert request.tags["hltm/diff"] == "incremental"  # read only the changed contract
    assert (request.tags["hltm/projects"], request.tags["hltm/seats"]) == ("1", "1")
    assert not result.dynamic_partitions_requests

    # A second tick before the run has happened: nothing new, so it skips.
    second = harness.tick()
    assert isinstance(second, dg.SkipReason)
    assert "no source changes" in (second.skip_message or "")

    run = harness.run(request)
    assert run.success
    assert rebuilt(run) == sorted([f"contract:{contract}", f"project:{pid}", f"seat:{seat}"])
    levels = level_metadata(run)
    assert set(levels) == {(f"{lv}_memory", contract) for lv in ("project", "seat", "contract")}
    seat_level = levels[("seat_memory", contract)]
    meta = seat_level["rebuilt"][f"seat:{seat}"]
    children = meta["children"]
    assert [c[0] for c in children] == sorted(
        f"project:{p}" for p, s in world.projects.items() if s == seat
    )
    with connect(memory_world.derived_db) as con:
        built = read_built(con)
    assert dict(children)[f"project:{pid}"] == built[f"project:{pid}"].version
    for key in ("llm_calls", "prompt_tokens", "completion_tokens", "embedding_calls", "seconds"):
        assert key in meta and key in seat_level
    assert meta["llm_calls"] == 1 == seat_level["llm_calls"]
    # Every node of the level in the contract is listed with its stored version.
    assert seat_level["versions"] == {
        n: b.version for n, b in built.items() if b.level == "seat" and b.contract_id == contract
    }
    assert seat_level["current_nodes"] == seat_level["nodes"] - 1
    assert isinstance(harness.tick(), dg.SkipReason)


def test_sensor_handles_moves_and_deletions(memory_world: Settings) -> None:
    harness = make_harness(memory_world)
    harness.tick_and_run()
    world = read_world(memory_world.sources_db)
    contracts = sorted(set(world.seats.values()))
    pid = next(p for p, s in sorted(world.projects.items()) if world.seats[s] == contracts[0])
    old_seat = world.projects[pid]
    new_seat = next(s for s, c in sorted(world.seats.items()) if c == contracts[1])
    move_project(memory_world.sources_db, random.Random(1), project_id=pid, seat_id=new_seat)
    gone = next(p for p, s in sorted(world.projects.items()) if s == new_seat)
    remove_project(memory_world.sources_db, random.Random(1), project_id=gone)

    result, runs = harness.tick_and_run()
    assert isinstance(result, dg.SensorResult)
    assert result.run_requests[0].tags["hltm/diff"] == "incremental"  # type: ignore[index]
    # Both contracts (old and new parent chain) are refreshed; no partition goes.
    covered = {
        c
        for r in result.run_requests or []
        for c in world.contracts
        if r.tags[RANGE_START] <= c <= r.tags[RANGE_END]
    }
    assert covered == set(contracts[:2])
    assert not result.dynamic_partitions_requests
    assert all(r.success for r in runs)
    done = sorted(n for r in runs for n in rebuilt(r))
    assert done == sorted(
        [
            f"project:{pid}",
            f"seat:{old_seat}",
            f"seat:{new_seat}",
            *(f"contract:{c}" for c in contracts[:2]),
        ]
    )
    purged = {n for r in runs for m in level_metadata(r).values() for n in m["purged"]}
    assert purged == {f"project:{gone}"}
    with connect(memory_world.derived_db) as con:
        rows = dict(
            con.execute(
                "SELECT node_id, seat_id FROM memory_nodes WHERE level = 'project'"
            ).fetchall()
        )
    assert rows[f"project:{pid}"] == new_seat
    assert f"project:{gone}" not in rows
    assert isinstance(harness.tick(), dg.SkipReason)


def test_a_contracts_partition_builds_its_whole_subtree(memory_world: Settings) -> None:
    """The UI's Materialize of one memory partition: that contract's projects, seats and
    contract node, nothing of another contract; the levels are one step, never split."""
    instance = dg.DagsterInstance.ephemeral()
    world = read_world(memory_world.sources_db)
    contract = world.contracts[0]
    instance.add_dynamic_partitions("contracts", [contract])
    resources = build_resources(memory_world)
    # What another refresh running beside this one has written so far: an item of a node of its
    # own contract whose row has not flipped yet. Not this run's business, and not an orphan.
    other = memory_collection_name(world.contracts[1])
    written = resources["platform"].vectors.get().collection(other)
    written.add(ids=["in-flight"], documents=["x"], embeddings=np.ones((1, 384), np.float32))
    assets = [*MEMORY_ASSETS, *MEMORY_CHECKS, source_tables]
    # The UI's Materialize of any of the three selects the other two (one step).
    one_level = dg.AssetSelection.assets("seat_memory").required_multi_asset_neighbors()
    result = dg.materialize(
        assets, selection=one_level, partition_key=contract, instance=instance, resources=resources
    )
    assert result.success
    checked = {e.check_name: e for e in result.get_asset_check_evaluations()}
    consistency = checked["memory_store_consistent"]
    assert consistency.passed, consistency.description
    assert consistency.description.endswith("(over the run's 1 contract(s))")
    seats = {s for s, c in world.seats.items() if c == contract}
    mine = {
        *(f"project:{p}" for p, s in world.projects.items() if s in seats),
        *(f"seat:{s}" for s in seats),
        f"contract:{contract}",
    }
    assert rebuilt(result) == sorted(mine)
    with connect(memory_world.derived_db) as con:
        stored = {r[0] for r in con.execute("SELECT node_id FROM memory_nodes").fetchall()}
    assert stored == mine


def test_whole_tree_refresh(memory_world: Settings) -> None:
    defs = memory_definitions(memory_world)
    instance = dg.DagsterInstance.ephemeral()
    world = read_world(memory_world.sources_db)
    instance.add_dynamic_partitions("contracts", world.contracts)
    job = defs.resolve_job_def("refresh_memory_tree")
    everything = partition_range_tags(world.contracts[0], world.contracts[-1])
    first = job.execute_in_process(instance=instance, tags=everything)
    assert first.success
    total = len(world.projects) + len(world.seats) + len(world.contracts)
    assert len(rebuilt(first)) == total
    runs = [first]
    for from_scratch in (False, True):  # one first build serves both re-runs
        again = job.execute_in_process(
            instance=instance,
            tags=everything,
            run_config={"ops": {"memory_tree": {"config": {"from_scratch": from_scratch}}}},
        )
        assert again.success
        # Content-addressed: a current tree has nothing to rebuild unless it was dropped first.
        assert len(rebuilt(again)) == (total if from_scratch else 0), from_scratch
        runs.append(again)
    # Every memory check is a step of each run, even of one that built nothing.
    for run in runs:
        evaluated = {e.check_name for e in run.get_asset_check_evaluations()}
        assert evaluated == {c for d in MEMORY_CHECKS for c in (k.name for k in d.check_keys)}

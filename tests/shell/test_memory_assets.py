"""The memory tree in Dagster: the code location loads, the sensor turns one change into one run
over exactly the affected chain, the refresh job logs one materialization per rebuilt node with
its lineage, and the partitioned assets build single nodes."""

from __future__ import annotations

import random

import dagster as dg

from hltm.memory.store import read_built
from hltm.settings import Settings
from hltm.warehouse import connect
from hltm_dagster.defs.memory.assets import MEMORY_ASSETS, MEMORY_CHECKS
from hltm_dagster.defs.sources.assets import source_tables
from hltm_dagster.resources import build_resources
from hltm_devkit.scenarios import change_project, move_project, read_world, remove_project
from tests.support.memory import ingested_sources as ingested_sources  # noqa: F401 (fixture)
from tests.support.memory import make_harness, materializations, memory_definitions
from tests.support.memory import memory_world as memory_world  # noqa: F401 (fixture)


def test_code_location_loads() -> None:
    from hltm_dagster import definitions

    dg.Definitions.validate_loadable(definitions.defs)
    repo = definitions.defs.get_repository_def()
    assert {"refresh_memory_tree", "rebuild_memory_tree"} <= {j.name for j in repo.get_all_jobs()}
    sensor = definitions.defs.resolve_sensor_def("source_changes")
    assert "refresh_memory_tree" in {j.name for j in sensor.jobs}


def test_sensor_requests_exactly_the_changed_chain(memory_world: Settings) -> None:
    harness = make_harness(memory_world)
    world = read_world(memory_world.sources_db)

    # First tick on an empty store: every node, one run, and every partition.
    first, runs = harness.tick_and_run()
    assert isinstance(first, dg.SensorResult) and len(first.run_requests or []) == 1
    assert runs[0].success
    assert len(harness.instance.get_dynamic_partitions("projects")) == len(world.projects)
    assert len(materializations(runs[0])) == len(world.projects) + len(world.seats) + len(
        world.contracts
    )
    assert isinstance(harness.tick(), dg.SkipReason)

    # One project changes → one run over exactly that leaf, its seat and its contract.
    pid = sorted(world.projects)[4]
    seat = world.projects[pid]
    contract = world.seats[seat]
    change_project(memory_world.sources_db, random.Random(5), project_id=pid)
    result = harness.tick()
    assert isinstance(result, dg.SensorResult)
    assert len(result.run_requests or []) == 1
    request = result.run_requests[0]  # type: ignore[index]
    config = request.run_config["ops"]["plan_memory_refresh"]["config"]
    assert config == {
        "projects": [f"project:{pid}"],
        "seats": [f"seat:{seat}"],
        "contracts": [f"contract:{contract}"],
        "deletes": [],
    }
    assert len(request.run_key or "") == 40
    assert request.tags["hltm/diff"] == "incremental"  # read only the changed contract
    assert not result.dynamic_partitions_requests

    # A second tick before the run has happened: nothing new, so it skips.
    second = harness.tick()
    assert isinstance(second, dg.SkipReason)
    assert "no source changes" in (second.skip_message or "")

    run = harness.run(request)
    assert run.success
    assert materializations(run) == [
        ("contract_memory", contract),
        ("project_memory", pid),
        ("seat_memory", seat),
    ]
    seat_event = next(
        e
        for e in run.get_asset_materialization_events()
        if e.asset_key == dg.AssetKey("seat_memory")
    )
    meta = seat_event.materialization.metadata  # type: ignore[union-attr]
    children = meta["children"].value  # type: ignore[attr-defined]
    assert [c[0] for c in children] == sorted(
        f"project:{p}" for p, s in world.projects.items() if s == seat
    )
    with connect(memory_world.derived_db) as con:
        built = read_built(con)
    assert dict(children)[f"project:{pid}"] == built[f"project:{pid}"].version
    for key in ("llm_calls", "prompt_tokens", "completion_tokens", "embedding_calls", "seconds"):
        assert key in meta
    assert meta["llm_calls"].value == 1  # type: ignore[attr-defined]
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
    config = result.run_requests[0].run_config["ops"]["plan_memory_refresh"]["config"]  # type: ignore[index]
    assert config["projects"] == [f"project:{pid}"]
    assert result.run_requests[0].tags["hltm/diff"] == "incremental"  # type: ignore[index]
    # Both the old and the new parent chain are rebuilt; the deleted leaf is purged.
    assert config["seats"] == sorted([f"seat:{old_seat}", f"seat:{new_seat}"])
    assert config["contracts"] == [f"contract:{c}" for c in contracts]
    assert config["deletes"] == [f"project:{gone}"]
    deletes = [
        r for r in result.dynamic_partitions_requests or []
        if isinstance(r, dg.DeleteDynamicPartitionsRequest)
    ]  # fmt: skip
    assert [(r.partitions_def_name, list(r.partition_keys)) for r in deletes] == [
        ("projects", [gone])
    ]
    assert runs[0].success
    with connect(memory_world.derived_db) as con:
        rows = dict(
            con.execute(
                "SELECT node_id, seat_id FROM memory_nodes WHERE level = 'project'"
            ).fetchall()
        )
    assert rows[f"project:{pid}"] == new_seat
    assert f"project:{gone}" not in rows
    assert isinstance(harness.tick(), dg.SkipReason)


def test_partitioned_assets_build_single_nodes(memory_world: Settings) -> None:
    defs = memory_definitions(memory_world)
    instance = dg.DagsterInstance.ephemeral()
    world = read_world(memory_world.sources_db)
    seat = sorted(world.seats)[0]
    projects = sorted(p for p, s in world.projects.items() if s == seat)
    instance.add_dynamic_partitions("projects", projects)
    instance.add_dynamic_partitions("seats", [seat])
    resources = build_resources(memory_world)
    assets = [*MEMORY_ASSETS, source_tables]

    # A seat is built from its children's memories: refused while they are missing.
    early = dg.materialize(
        assets,
        selection="seat_memory",
        partition_key=seat,
        instance=instance,
        resources=resources,
        raise_on_error=False,
    )
    assert not early.success
    for pid in projects:
        result = dg.materialize(
            assets,
            selection="project_memory",
            partition_key=pid,
            instance=instance,
            resources=resources,
        )
        assert result.success
    result = dg.materialize(
        assets, selection="seat_memory", partition_key=seat, instance=instance, resources=resources
    )
    assert result.success
    event = result.get_asset_materialization_events()[0]
    meta = event.materialization.metadata  # type: ignore[union-attr]
    assert [c[0] for c in meta["children"].value] == [f"project:{p}" for p in projects]  # type: ignore[attr-defined]
    assert meta["status"].value == "built"  # type: ignore[attr-defined]
    with connect(memory_world.derived_db) as con:
        levels = dict(con.execute("SELECT node_id, level FROM memory_nodes").fetchall())
    assert levels == {f"seat:{seat}": "seat", **{f"project:{p}": "project" for p in projects}}
    assert defs.get_job_def("refresh_memory_tree") is not None


def test_full_rebuild_job(memory_world: Settings) -> None:
    defs = memory_definitions(memory_world)
    instance = dg.DagsterInstance.ephemeral()
    job = defs.get_job_def("rebuild_memory_tree")
    first = job.execute_in_process(instance=instance)
    assert first.success
    world = read_world(memory_world.sources_db)
    total = len(world.projects) + len(world.seats) + len(world.contracts)
    assert len(first.get_asset_materialization_events()) == total
    # parents after every child (Dagster's staleness compares times across the whole level)
    levels = [e.asset_key.path[0] for e in first.get_asset_materialization_events()]
    assert levels == sorted(levels, key=["project_memory", "seat_memory", "contract_memory"].index)
    runs = [first]
    for from_scratch in (False, True):
        again = job.execute_in_process(
            instance=instance,
            run_config={
                "ops": {
                    "plan_memory_refresh": {
                        "config": {"all_stale": True, "from_scratch": from_scratch}
                    }
                }
            },
        )
        assert again.success
        # Content-addressed: a current tree has nothing to rebuild unless it was dropped first.
        built = len(again.get_asset_materialization_events())
        assert built == (total if from_scratch else 0), from_scratch
        runs.append(again)
    # Every memory check is evaluated by the run that wrote the store, even one that built nothing.
    for run in runs:
        evaluated = {
            e.asset_check_evaluation_data.check_name
            for e in run.all_events
            if e.event_type == dg.DagsterEventType.ASSET_CHECK_EVALUATION
        }
        assert evaluated == {c for d in MEMORY_CHECKS for c in (k.name for k in d.check_keys)}

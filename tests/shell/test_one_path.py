"""The UI's Materialize and the sensors' runs give the same result: the memory of one contract
(one partition of `project_memory`, `seat_memory` and `contract_memory`), built by the UI and by
the `source_changes` sensor's run, is the same nodes (a backfill of a range of partitions is one
run that builds them all); the
judge's scores and ranking of a vacancy, by the UI and by the `vacancy_changes` sensor's run,
are the same, because that run is the judge's own asset job."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from hltm.memory.models import LEVELS, MemoryNode
from hltm.memory.store import read_nodes
from hltm.settings import Settings
from hltm.sources.ingest import delete_project, ingest_directory
from hltm.warehouse import connect
from hltm_dagster.defs.memory.assets import MEMORY_ASSETS
from hltm_dagster.defs.sources.assets import source_tables
from hltm_dagster.instance import partition_range_tags
from hltm_dagster.resources import build_resources
from hltm_devkit.scenarios import read_world
from tests.support.memory import ingested_sources as ingested_sources  # noqa: F401 (fixture)
from tests.support.memory import level_metadata, make_harness, rebuilt
from tests.support.memory import memory_world as memory_world  # noqa: F401 (fixture)


def _stored(settings: Settings, node_id: str) -> MemoryNode:
    with connect(settings.derived_db, read_only=True) as con:
        return read_nodes(con, [node_id])[node_id]


def test_materialize_of_one_partition_gives_the_sensors_nodes(
    memory_world: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    world = read_world(memory_world.sources_db)
    keep = world.contracts[:2]
    for project in sorted(p for p, s in world.projects.items() if world.seats[s] not in keep):
        delete_project(memory_world.sources_db, project)  # a small tree: a fast build
    mine = {
        c: sorted(
            [
                f"contract:{c}",
                *(f"seat:{s}" for s, sc in world.seats.items() if sc == c),
                *(f"project:{p}" for p, s in world.projects.items() if world.seats[s] == c),
            ]
        )
        for c in keep
    }

    # The sensor's run, in the shared data dir.
    harness = make_harness(memory_world)
    _, runs = harness.tick_and_run()
    assert runs and all(r.success for r in runs)

    # The UI's Materialize on a copy of the same sources: a run of the assets for one partition
    # (selecting one level selects the other two: they are one step).
    monkeypatch.setenv("HLTM_DATA_DIR", str(tmp_path / "ui"))
    ui = Settings.from_env()
    ui.data_dir.mkdir(parents=True)
    shutil.copy(memory_world.sources_db, ui.sources_db)
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("contracts", keep)
    project_level = dg.AssetSelection.assets("project_memory").required_multi_asset_neighbors()
    result = dg.materialize(
        [*MEMORY_ASSETS, source_tables],
        selection=project_level,
        partition_key=keep[0],
        instance=instance,
        resources=build_resources(ui),
    )
    assert result.success
    assert rebuilt(result) == mine[keep[0]]
    for node in mine[keep[0]]:
        assert _stored(ui, node) == _stored(memory_world, node)

    # A backfill of the range is one run (the assets' backfill policy is a single run), and
    # each partition's materialization lists its own contract's nodes.
    ranged = dg.materialize(
        [*MEMORY_ASSETS, source_tables],
        selection=project_level,
        instance=instance,
        resources=build_resources(ui),
        tags=partition_range_tags(keep[0], keep[-1]),
    )
    assert ranged.success
    levels = level_metadata(ranged)
    assert sorted(levels) == sorted((f"{lv}_memory", c) for lv in LEVELS for c in keep)
    assert rebuilt(ranged) == mine[keep[1]]  # the first contract was current already
    for contract in keep:
        listed = sorted(n for lv in LEVELS for n in levels[(f"{lv}_memory", contract)]["versions"])
        assert listed == mine[contract]
        for node in mine[contract]:
            assert _stored(ui, node) == _stored(memory_world, node)


def _judged(settings: Settings) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """The stored judge scores (every pair's five scores and verdict) and the served rankings."""
    with connect(settings.derived_db, read_only=True) as con:
        scores = con.execute(
            "SELECT vacancy_id, resume_id, role, level, skills, experience, overall, verdict"
            " FROM judge_scores ORDER BY ALL"
        ).fetchall()
        ranked = con.execute(
            "SELECT vacancy_id, rank, resume_id, overall FROM rankings ORDER BY ALL"
        ).fetchall()
    return scores, ranked


def test_the_judge_sensors_run_is_the_assets_and_gives_the_uis_scores(
    tiny_world: Path, settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`vacancy_changes` asks for a run of the judge's asset job over the changed vacancy's
    partition; the UI's Materialize of that partition (the assets selected in the asset graph)
    stores the same scores and serves the same ranking."""
    from hltm.judge.calibration import calibrate_vacancies, store_calibrations
    from hltm.judge.data import load_vacancies
    from hltm_dagster.defs import judge
    from hltm_dagster.defs.judge.assets import JUDGE_ASSETS, JUDGE_CHECKS
    from hltm_dagster.defs.judge.sensors import vacancy_changes

    assert ingest_directory(tiny_world, settings.sources_db).quarantined == 0
    ui_dir = tmp_path / "ui"
    ui_dir.mkdir()
    shutil.copy(settings.sources_db, ui_dir / "sources.duckdb")
    for at in (settings.sources_db, ui_dir / "sources.duckdb"):
        store_calibrations(
            at.with_name("derived.duckdb"),
            calibrate_vacancies(at, at.with_name("derived.duckdb"), load_vacancies(at)),
        )

    # The sensor's run: a new vacancy after the baseline tick, and the run it asks for.
    instance = dg.DagsterInstance.ephemeral()
    resources = build_resources(settings)
    with dg.build_sensor_context(instance=instance, resources=resources) as ctx:
        adopted = vacancy_changes(ctx)
    assert isinstance(adopted, dg.SensorResult)
    instance.add_dynamic_partitions("vacancies", ["v001", "v003"])  # v002 is "new"
    baseline = {k: v for k, v in json.loads(str(adopted.cursor)).items() if k != "v002"}
    with dg.build_sensor_context(
        instance=instance, resources=resources, cursor=json.dumps(baseline)
    ) as ctx:
        changed = vacancy_changes(ctx)
    assert isinstance(changed, dg.SensorResult)
    (request,) = changed.run_requests
    sensor_defs = dg.Definitions.merge(judge.defs, dg.Definitions(resources=resources))
    job = sensor_defs.resolve_job_def(str(request.job_name))
    assert dg.AssetKey("judge_scores") in job.asset_layer.executable_asset_keys  # an asset job
    instance.add_dynamic_partitions("vacancies", ["v002"])
    by_sensor = job.execute_in_process(
        instance=instance, partition_key=request.partition_key, tags=request.tags
    )
    assert by_sensor.success
    built = {
        (e.step_key, e.asset_key.to_user_string(), e.partition)
        for e in by_sensor.get_asset_materialization_events()
    }
    assert ("judge_scores", "judge_scores", "v002") in built  # the asset's own step
    assert ("rankings", "rankings", "v002") in built

    # The UI's Materialize of that partition, on a copy of the same sources.
    monkeypatch.setenv("HLTM_DATA_DIR", str(ui_dir))
    ui = Settings.from_env()
    ui_instance = dg.DagsterInstance.ephemeral()
    ui_instance.add_dynamic_partitions("vacancies", ["v002"])
    by_ui = dg.materialize(
        [*JUDGE_ASSETS, *JUDGE_CHECKS],
        selection=["resume_index", "candidate_pools", "judge_scores", "rankings"],
        partition_key="v002",
        instance=ui_instance,
        resources=build_resources(ui),
    )
    assert by_ui.success
    scores, ranked = _judged(ui)
    assert scores and ranked
    assert (scores, ranked) == _judged(settings)

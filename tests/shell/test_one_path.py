"""The UI's Materialize of one `project_memory` partition and the `source_changes` sensor's run
build the same node: the same version, facets, QA pairs and summaries, stored the same way; a
backfill of a range of partitions is one run that builds them all."""

from __future__ import annotations

import shutil
from pathlib import Path

import dagster as dg
import pytest

from hltm.memory.models import MemoryNode
from hltm.memory.store import read_nodes
from hltm.settings import Settings
from hltm.sources.ingest import delete_project
from hltm.warehouse import connect
from hltm_dagster.defs.memory.assets import MEMORY_ASSETS
from hltm_dagster.defs.sources.assets import source_tables
from hltm_dagster.instance import partition_range_tags
from hltm_dagster.resources import build_resources
from hltm_devkit.scenarios import read_world
from tests.support.memory import ingested_sources as ingested_sources  # noqa: F401 (fixture)
from tests.support.memory import make_harness
from tests.support.memory import memory_world as memory_world  # noqa: F401 (fixture)


def _stored(settings: Settings, node_id: str) -> MemoryNode:
    with connect(settings.derived_db, read_only=True) as con:
        return read_nodes(con, [node_id])[node_id]


def test_materialize_of_one_project_partition_gives_the_sensors_node(
    memory_world: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    world = read_world(memory_world.sources_db)
    seat = sorted(world.seats)[0]
    kept = sorted(p for p, s in world.projects.items() if s == seat)[:2]
    for project in sorted(set(world.projects) - set(kept)):  # a small tree: a fast build
        delete_project(memory_world.sources_db, project)
    pid = kept[0]

    # The sensor's run, in the shared data dir.
    harness = make_harness(memory_world)
    _, runs = harness.tick_and_run()
    assert runs and all(r.success for r in runs)
    by_sensor = _stored(memory_world, f"project:{pid}")

    # The UI's Materialize on a copy of the same sources: a run of the asset for that partition.
    monkeypatch.setenv("HLTM_DATA_DIR", str(tmp_path / "ui"))
    ui = Settings.from_env()
    ui.data_dir.mkdir(parents=True)
    shutil.copy(memory_world.sources_db, ui.sources_db)
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("projects", kept)
    result = dg.materialize(
        [*MEMORY_ASSETS, source_tables],
        selection="project_memory",
        partition_key=pid,
        instance=instance,
        resources=build_resources(ui),
    )
    assert result.success
    assert _stored(ui, f"project:{pid}") == by_sensor

    # A backfill of the range is one run (the assets' backfill policy is a single run).
    ranged = dg.materialize(
        [*MEMORY_ASSETS, source_tables],
        selection="project_memory",
        instance=instance,
        resources=build_resources(ui),
        tags=partition_range_tags(kept[0], kept[-1]),
    )
    assert ranged.success
    (event,) = ranged.get_asset_materialization_events()[:1]
    assert len(ranged.get_asset_materialization_events()) == len(kept)
    assert {e.partition for e in ranged.get_asset_materialization_events()} == set(kept)
    assert event.materialization.metadata["nodes"].value == len(kept)  # type: ignore[union-attr]
    for project in kept:
        assert _stored(ui, f"project:{project}") == _stored(memory_world, f"project:{project}")

"""`source_changes` heals the tree without waiting for a source change: a
store emptied by a crash is diffed and rebuilt on the next tick; a slow periodic full diff runs
even when neither the sources nor the store moved; and a tick never stacks a second refresh on
one still running."""

from __future__ import annotations

import json

import dagster as dg

from hltm.memory.store import MEMORY_TABLE
from hltm.settings import Settings
from hltm.warehouse import connect
from hltm_dagster.defs.memory.assets import REFRESH_TAG
from tests.support import memory as _shared
from tests.support.memory import make_harness

ingested_sources = _shared.ingested_sources
memory_world = _shared.memory_world


def test_emptied_store_is_rebuilt_and_periodic_diff_runs(memory_world: Settings) -> None:
    harness = make_harness(memory_world)
    _, runs = harness.tick_and_run()
    assert runs and all(r.success for r in runs)
    assert isinstance(harness.tick(), dg.SkipReason)

    with connect(memory_world.derived_db) as con:  # a crash that lost the tree
        con.execute(f"DELETE FROM {MEMORY_TABLE} WHERE level <> 'project'")
    result, runs = harness.tick_and_run()
    assert isinstance(result, dg.SensorResult) and runs, result
    assert all(r.success for r in runs)
    with connect(memory_world.derived_db, read_only=True) as con:
        levels = {r[0] for r in con.execute(f"SELECT level FROM {MEMORY_TABLE}").fetchall()}
    assert levels == {"project", "seat", "contract"}

    assert isinstance(harness.tick(), dg.SkipReason)
    cursor = json.loads(harness.cursor or "{}")
    harness.cursor = json.dumps({**cursor, "diffed_at": 0})  # an hour later
    result = harness.tick()
    assert isinstance(result, dg.SkipReason) and "diffed" in (result.skip_message or "")


def test_no_second_refresh_while_one_is_queued(memory_world: Settings) -> None:
    harness = make_harness(memory_world)
    run = harness.instance.create_run_for_job(
        harness.defs.resolve_job_def("refresh_memory_tree"), tags={REFRESH_TAG: "sensor"}
    )
    assert run.status == dg.DagsterRunStatus.NOT_STARTED  # created, not yet launched
    result = harness.tick()
    assert isinstance(result, dg.SkipReason) and "in progress" in (result.skip_message or "")


def test_memory_assets_show_the_sensor_as_their_automation() -> None:
    """The UI lists an instigator under an asset when one of its target jobs holds the asset:
    the sensor's job is the memory assets' own."""
    from dagster._core.remote_representation.external_data import RepositorySnap

    from hltm_dagster.definitions import defs

    snap = RepositorySnap.from_def(defs.get_repository_def())
    (sensor,) = [s for s in snap.sensors if s.name == "source_changes"]
    targeted = {t.job_name for t in sensor.target_dict.values()}
    for node in snap.asset_nodes:
        if node.asset_key.to_user_string() in {"project_memory", "seat_memory", "contract_memory"}:
            assert targeted & set(node.job_names), node.asset_key

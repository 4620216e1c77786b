"""Nothing spends LLM budget unasked: after a demo-like session, a fresh daemon's first ticks of
every sensor that starts on launch no run that makes an LLM call, and every schedule that would
spend LLM calls starts stopped."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from hltm.judge.calibration import load_calibrations
from hltm.judge.data import vacancy_ids
from hltm.settings import Settings
from hltm.sources.ingest import ingest_directory
from hltm.warehouse import connect
from hltm_dagster.defs import judge
from hltm_dagster.defs.judge.assets import judge_refresh_job
from hltm_dagster.defs.memory.assets import MEMORY_ASSETS, MEMORY_JOBS
from hltm_dagster.instance import partition_range_tags
from hltm_dagster.resources import build_resources
from tests.support.judge import calibrate_every_vacancy
from tests.support.memory import refresh_all

# Jobs whose runs call the LLM (memory extraction and aggregation, the judge, the probe).
LLM_JOBS = {
    "judge_refresh",
    "recall_probe_job",
    "refresh_memory_tree",
}


def _defs() -> dg.Definitions:
    from hltm_dagster.definitions import defs

    return defs


def test_schedules_that_spend_llm_calls_start_stopped() -> None:
    schedules = _defs().get_repository_def().schedule_defs
    for schedule in schedules:
        if schedule.job_name in LLM_JOBS:
            assert schedule.default_status == dg.DefaultScheduleStatus.STOPPED, schedule.name
    names = {s.name: s.default_status for s in schedules}
    assert names["judge_nightly"] == names["recall_probe_schedule"]
    assert names["query_patterns_schedule"] == dg.DefaultScheduleStatus.RUNNING  # no LLM call


@pytest.fixture
def after_demo(tiny_world: Path, settings: Settings) -> tuple[Settings, dg.DagsterInstance]:
    """The state `hltm demo` leaves: memory built, vacancies calibrated, judged under a budget
    that defers pairs — on an instance whose sensors have never ticked."""
    assert ingest_directory(tiny_world, settings.sources_db).quarantined == 0
    resources = _resources(settings)
    instance = dg.DagsterInstance.ephemeral()
    memory = dg.Definitions(assets=MEMORY_ASSETS, jobs=MEMORY_JOBS, resources=resources)
    assert refresh_all(memory, instance, settings).success
    assert calibrate_every_vacancy(instance, resources, settings.sources_db).success
    config = {"ops": {"judge_scores": {"config": {"budget": 6, "workers": 2}}}}
    ids = sorted(vacancy_ids(settings.sources_db))
    judge_defs = dg.Definitions.merge(judge.defs, dg.Definitions(resources=resources))
    result = judge_defs.resolve_job_def(judge_refresh_job.name).execute_in_process(
        run_config=config, instance=instance, tags=partition_range_tags(ids[0], ids[-1])
    )
    assert result.success
    deferred = [
        e.materialization.metadata["deferred_by_budget"].value
        for e in result.get_asset_materialization_events()
        if e.materialization.asset_key == dg.AssetKey("judge_scores")
    ]
    assert sum(deferred) > 0  # type: ignore[arg-type]  # budget a careless tick could spend
    return settings, instance


def _resources(settings: Settings) -> dict[str, Any]:
    return build_resources(settings)


def test_a_fresh_daemon_after_the_demo_launches_no_llm_run(after_demo) -> None:  # type: ignore[no-untyped-def]
    settings, instance = after_demo
    with connect(settings.derived_db) as con:
        scores_before = con.execute("SELECT count(*) FROM judge_scores").fetchone()
    launched: dict[str, list[str]] = {}
    sensors = _defs().get_repository_def().sensor_defs
    running = [s for s in sensors if s.default_status == dg.DefaultSensorStatus.RUNNING]
    assert {s.name for s in running} >= {"source_changes", "vacancy_changes", "memory_calibration"}
    for sensor in running:
        with dg.build_sensor_context(
            instance=instance, resources=_resources(settings), cursor=None
        ) as ctx:
            data = sensor.evaluate_tick(ctx)
        launched[sensor.name] = [r.job_name or sensor.job_name for r in data.run_requests or []]
    assert launched == {"source_changes": [], "vacancy_changes": [], "memory_calibration": []}
    with connect(settings.derived_db) as con:
        assert con.execute("SELECT count(*) FROM judge_scores").fetchone() == scores_before
    assert len(load_calibrations(settings.derived_db)) == 3

    # the asset itself (the UI's Materialize on one vacancy) stores and shows the same result
    from hltm_dagster.defs.calibration.assets import vacancy_calibration

    instance.add_dynamic_partitions("vacancies", ["v001"])
    result = dg.materialize(
        [vacancy_calibration],
        partition_key="v001",
        instance=instance,
        resources=_resources(settings),
    )
    (event,) = result.get_asset_materialization_events()
    meta = event.materialization.metadata
    assert meta["summary"].value.startswith("from your")  # type: ignore[attr-defined]
    assert (
        meta["vacancy_version"].value
        == load_calibrations(settings.derived_db)["v001"].vacancy_version
    )  # type: ignore[attr-defined]

    # budget 0 publishes from the cache: the pairs the first run deferred stay unjudged
    judge_defs = dg.Definitions.merge(judge.defs, dg.Definitions(resources=_resources(settings)))
    ids = sorted(vacancy_ids(settings.sources_db))
    rerun = judge_defs.resolve_job_def(judge_refresh_job.name).execute_in_process(
        run_config={"ops": {"judge_scores": {"config": {"budget": 0}}}},
        instance=instance,
        tags=partition_range_tags(ids[0], ids[-1]),
    )
    scores = [
        e.materialization.metadata
        for e in rerun.get_asset_materialization_events()
        if e.materialization.asset_key == dg.AssetKey("judge_scores")
    ]
    assert {m["run_budget"].value for m in scores} == {0}
    assert sum(m["deferred_by_budget"].value for m in scores) > 0  # type: ignore[misc]
    with connect(settings.derived_db) as con:
        assert con.execute("SELECT count(*) FROM judge_scores").fetchone() == scores_before

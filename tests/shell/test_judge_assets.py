"""The judge as Dagster assets, checks, jobs and sensor on the session's tiny generated world
(`tiny_world`, conftest)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from hltm.judge.data import load_resumes, load_vacancies
from hltm.judge.journal import journal_entries, verify_chain
from hltm.judge.pipeline import judge_config
from hltm.judge.store import ensure_judge_schema
from hltm.llm import DETERMINISTIC_MODEL, LLM, DeterministicBackend
from hltm.settings import Settings
from hltm.sources.ingest import ingest_directory
from hltm.warehouse import connect
from hltm_dagster.defs.judge.assets import (
    VACANCIES,
    candidate_pools,
    judge_quote_gate,
    judge_scores,
    ranking_journal_chain,
    rankings,
    resume_index,
)
from hltm_dagster.defs.judge.sensors import vacancy_changes
from hltm_dagster.instance import (
    ASSET_PARTITION_RANGE_END_TAG,
    ASSET_PARTITION_RANGE_START_TAG,
    partition_range_tags,
)
from hltm_dagster.resources import build_resources
from tests.support.judge import calibrate_every_vacancy
from tests.support.ui import stale_partitions, ui_graphql


@pytest.fixture
def world(tiny_world: Path, settings: Settings) -> Settings:
    report = ingest_directory(tiny_world, settings.sources_db)
    assert report.quarantined == 0
    return settings


@pytest.fixture
def instance() -> Iterator[dg.DagsterInstance]:
    with dg.instance_for_test() as inst:  # on disk: the UI's GraphQL reads it too
        yield inst


def _resources(settings: Settings) -> dict[str, Any]:
    return build_resources(settings)


def test_definitions_load_with_the_judge() -> None:
    from hltm_dagster.definitions import defs

    dg.Definitions.validate_loadable(defs)
    assert defs.resolve_job_def("judge_refresh") is not None
    assert {s.name for s in defs.schedules or []} >= {"judge_nightly"}


def test_sensor_adds_partitions_and_requests_one_run_for_changes(world: Settings, instance) -> None:  # type: ignore[no-untyped-def]
    from hltm.judge.calibration import calibrate_vacancies, store_calibrations

    resources = _resources(world)

    def tick(cursor: str | None) -> dg.SensorResult | dg.SkipReason:
        with dg.build_sensor_context(instance=instance, resources=resources, cursor=cursor) as ctx:
            return vacancy_changes(ctx)

    # the first tick adopts the current vacancies as the baseline: partitions, no run
    result = tick(None)
    assert isinstance(result, dg.SensorResult) and not result.run_requests
    added = result.dynamic_partitions_requests[0]
    assert sorted(added.partition_keys) == ["v001", "v002", "v003"]
    # nothing changed → skip; a vacancy edit → calibrate it first, then a run for it only
    instance.add_dynamic_partitions(VACANCIES.name, added.partition_keys)
    assert isinstance(tick(result.cursor), dg.SkipReason)
    with connect(world.sources_db) as con:
        con.execute(
            "UPDATE vacancies SET version = version + 1, text = text || ' Go.' WHERE vacancy_id = 'v002'"
        )
    changed = tick(result.cursor)
    assert isinstance(changed, dg.SensorResult)
    (calibrate,) = changed.run_requests
    assert calibrate.job_name == "calibrate_vacancies"
    assert calibrate.tags[ASSET_PARTITION_RANGE_START_TAG] == "v002"
    assert calibrate.tags[ASSET_PARTITION_RANGE_END_TAG] == "v002"
    store_calibrations(
        world.derived_db,
        calibrate_vacancies(world.sources_db, world.derived_db, load_vacancies(world.sources_db)),
    )
    judged = tick(changed.cursor)
    assert isinstance(judged, dg.SensorResult)
    (run,) = judged.run_requests  # the judge's assets over that vacancy's partition alone
    assert run.job_name == "judge_refresh"
    assert run.tags[ASSET_PARTITION_RANGE_START_TAG] == run.tags[ASSET_PARTITION_RANGE_END_TAG]
    assert run.tags[ASSET_PARTITION_RANGE_START_TAG] == "v002"


def _judge_every_vacancy(
    world: Settings, instance: dg.DagsterInstance, budget: int | None = None
) -> tuple[dg.ExecuteInProcessResult, dict[str, Any]]:
    """One `judge_refresh` run over every vacancy's partition (the nightly schedule's run), and
    its totals as `hltm judge run` reads them."""
    from hltm_cli.judge import judge_run_totals

    config = {"ops": {"judge_scores": {"config": {"budget": budget, "workers": 2}}}}
    from hltm_dagster.defs import judge

    defs = dg.Definitions.merge(judge.defs, dg.Definitions(resources=_resources(world)))
    result = defs.resolve_job_def("judge_refresh").execute_in_process(
        run_config=config, instance=instance, tags=partition_range_tags("v001", "v003")
    )
    assert result.success
    return result, judge_run_totals(
        _metadata(result, "judge_scores"), _metadata(result, "rankings")
    )


def test_nightly_job_judges_publishes_and_a_warm_rerun_is_free(world: Settings, instance) -> None:  # type: ignore[no-untyped-def]
    calibrated = calibrate_every_vacancy(instance, _resources(world), world.sources_db)
    assert calibrated.success
    first, totals = _judge_every_vacancy(world, instance)
    assert totals["published"] == 3 and totals["judged"] == totals["pool_pairs"] > 0
    mats = [e.materialization for e in first.get_asset_materialization_events()]
    keys = {(m.asset_key.to_user_string(), m.partition) for m in mats}
    assert ("rankings", "v001") in keys and ("judge_scores", "v003") in keys
    assert ("resume_index", None) in keys
    checks = first.get_asset_check_evaluations()
    assert checks and all(c.passed for c in checks)
    # What the UI shows right after the run: no partition it built reads stale (the index was
    # recorded after the pools it fed, so every pool read "resume_index has a new
    # materialization").
    with ui_graphql(instance) as query:
        stale = {
            asset: stale_partitions(query, asset, ["v001", "v002", "v003"])
            for asset in ("candidate_pools", "judge_scores", "rankings")
        }
    assert stale == {"candidate_pools": {}, "judge_scores": {}, "rankings": {}}

    second, warm = _judge_every_vacancy(world, instance)
    assert (warm["judged"], warm["llm_calls"], warm["cached"]) == (0, 0, totals["pool_pairs"])
    # a cached run still shows where each partition stands, not this run's zeros
    standing = _metadata(second, "judge_scores")
    assert standing and all(
        m["coverage_scored"] == m["coverage_pool"] == m["pool"] > 0
        and m["judged_now"] == m["coverage_pending"] == m["coverage_failed"] == 0
        for m in standing.values()
    )
    # the same rankings are not journaled again (a second refresh appended a copy of each)
    assert (warm["published"], warm["unchanged"]) == (0, 3)
    assert len(journal_entries(world.derived_db)) == 3 and verify_chain(world.derived_db).ok

    # the budget caps cold evaluations and says how many wait: every resume gets a new content
    # hash (its text stays, so the embedding cache still has it and nothing is re-embedded)
    with connect(world.sources_db) as con:
        con.execute("UPDATE resumes SET content_hash = content_hash || 'x'")
    third, t3 = _judge_every_vacancy(world, instance, budget=10)
    assert t3["judged"] == 10 and t3["deferred"] == t3["pool_pairs"] - 10
    # a partial ranking never replaces a complete one: the live rankings stay, and say why
    assert (t3["published"], t3["held"]) == (0, 3)
    assert all("kept the live ranking" in r for r in t3["held_reasons"].values())
    assert len(journal_entries(world.derived_db)) == 3 and verify_chain(world.derived_db).ok
    held = _metadata(third, "rankings")
    assert held and all(m["published"] is False for m in held.values())
    scores = _metadata(third, "judge_scores")
    assert sum(m["coverage_scored"] for m in scores.values()) == 10
    assert sum(m["coverage_pending"] for m in scores.values()) == t3["pool_pairs"] - 10


def _metadata(result: dg.ExecuteInProcessResult, asset: str) -> dict[str, dict[str, Any]]:
    """partition → metadata values of the run's materialisations of ``asset``."""
    return {
        str(m.partition): {k: v.value for k, v in m.metadata.items()}
        for m in (e.materialization for e in result.get_asset_materialization_events())
        if m.asset_key.to_user_string() == asset
    }


def test_partition_assets_and_the_blocking_gate(world: Settings, instance) -> None:  # type: ignore[no-untyped-def]
    instance.add_dynamic_partitions(VACANCIES.name, ["v001", "v002", "v003"])
    resources = _resources(world)
    assets = [
        resume_index,
        candidate_pools,
        judge_scores,
        rankings,
        judge_quote_gate,
        ranking_journal_chain,
    ]
    indexed = dg.materialize([resume_index], resources=resources, instance=instance)
    # the archive is never searched by vector, so it is not embedded
    sync = indexed.asset_materializations_for_node("resume_index")[0].metadata
    active = load_resumes(world.sources_db, layer="active")
    assert sync["indexed"].value == len(active) < len(load_resumes(world.sources_db))
    ok = dg.materialize(
        assets, partition_key="v001", resources=resources, instance=instance,
        selection=[candidate_pools, judge_scores, rankings],
    )  # fmt: skip
    assert ok.success
    assert {e.asset_key.to_user_string() for e in ok.get_asset_materialization_events()} == {
        "candidate_pools", "judge_scores", "rankings",
    }  # fmt: skip
    meta = ok.asset_materializations_for_node("judge_scores")[0].metadata
    assert meta["cold_evaluations"].value == meta["pool"].value > 0

    # a configuration whose quotes do not survive: the blocking check stops the publication
    config = judge_config(LLM(DeterministicBackend(), DETERMINISTIC_MODEL))
    with connect(world.derived_db) as con:
        ensure_judge_schema(con)
        con.execute(
            "INSERT INTO judge_scores (vacancy_id, vacancy_version, resume_id, resume_hash, model,"
            " prompt_version, overall, mandatory_quotes, mandatory_survived, created_at)"
            " VALUES ('x', 'x', 'x', 'x', ?, ?, 1, 100000, 0, now())",
            [config.model, config.prompt_version],
        )
    blocked = dg.materialize(
        assets, partition_key="v002", resources=resources, instance=instance,
        selection=[candidate_pools, judge_scores, rankings], raise_on_error=False,
    )  # fmt: skip
    evaluations = {e.check_name: e for e in blocked.get_asset_check_evaluations()}
    assert not evaluations["judge_quote_gate"].passed
    published = {e.asset_key.to_user_string() for e in blocked.get_asset_materialization_events()}
    assert "rankings" not in published and "judge_scores" in published
    assert [e.vacancy_id for e in journal_entries(world.derived_db)] == ["v001"]

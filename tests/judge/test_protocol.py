"""The judge through the real `openai` client against the local protocol server that misbehaves:
a bad answer is retried or recorded as a failed evaluation with its reason — never cached as a
score, never stopping the other pairs — invented quotes are caught by the validator and the
gate, and a checklist that skips requirements is completed."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
from click.testing import CliRunner

import hltm.judge.tasks  # noqa: F401  (registers JudgeVerdict with the server)
from hltm.judge.data import Resume, Vacancy
from hltm.judge.journal import config_gate, publish_ranking
from hltm.judge.pipeline import cached_scores, judge_config, judge_pool
from hltm.judge.service import JudgeEnv, judge_vacancy, publish_vacancy
from hltm.llm import LLM, make_llm
from hltm.settings import Settings
from hltm.sources.ingest import ingest_directory
from hltm.warehouse import connect
from hltm_cli import main
from hltm_dagster.defs.judge.assets import judge_refresh_job
from hltm_dagster.resources import build_resources
from hltm_devkit.openai_server import LocalOpenAIServer
from tests.support.judge import POOL, VACANCY, make_resume
from tests.support.llm import _clean_server as _clean_server  # noqa: F401 (autouse fixture)
from tests.support.llm import server as server  # noqa: F401 (fixture)


def _llm(server: LocalOpenAIServer, **overrides: Any) -> LLM:
    options: dict[str, Any] = {
        "llm_backend": "openai",
        "openai_base_url": server.base_url,
        "openai_api_key": "test",
        "llm_timeout_s": 1,
        "llm_max_retries": 1,
        "judge_model": "gpt-5-mini",
    }
    settings = Settings.from_env(**{**options, **overrides})
    llm = make_llm(settings, model=settings.judge_model)
    llm.backend.answer_backoff_s = 0.01  # type: ignore[attr-defined]
    return llm


def _scored(db: Path) -> set[str]:
    with connect(db) as con:
        return {r[0] for r in con.execute("SELECT resume_id FROM judge_scores").fetchall()}


def test_the_real_client_path_judges_like_the_offline_backend(
    server: LocalOpenAIServer, tmp_path: Path
) -> None:
    db = tmp_path / "d.duckdb"
    report = judge_pool(db, _llm(server), VACANCY, POOL[:4], workers=4)
    assert (report.evaluated, report.failed) == (4, 0)
    assert server.stats.chat_requests == 4
    assert report.config.model == "gpt-5-mini"


def test_malformed_json_and_http_errors_are_retried(
    server: LocalOpenAIServer, tmp_path: Path
) -> None:
    db = tmp_path / "d.duckdb"
    server.inject("malformed_json", times=1, match="Company 02")
    server.inject("http_500", times=1, match="Company 03")
    report = judge_pool(db, _llm(server), VACANCY, POOL[:5], workers=2)
    assert (report.evaluated, report.failed) == (5, 0)
    assert server.stats.chat_requests == 7  # two answers were asked for again


def test_cut_off_answers_and_timeouts_are_recorded_failures(
    server: LocalOpenAIServer, tmp_path: Path
) -> None:
    db = tmp_path / "d.duckdb"
    server.inject("finish_length", times="always", match="Company 05")
    server.inject("timeout", times="always", match="Company 07", delay_s=2.5)
    report = judge_pool(db, _llm(server), VACANCY, POOL[:8], workers=4)
    assert (report.evaluated, report.failed) == (6, 2)
    reasons = dict(report.failures)
    assert "finish_reason=length" in reasons["r05"]
    assert "timed out" in reasons["r07"]
    assert _scored(db) == {f"r{i:02d}" for i in range(8)} - {"r05", "r07"}
    with connect(db) as con:
        failed = con.execute("SELECT resume_id FROM judge_failures ORDER BY 1").fetchall()
    assert [r[0] for r in failed] == ["r05", "r07"]
    # once the endpoint behaves, only the two failed pairs are sent again
    server.clear_faults()
    server.reset_stats()
    retry = judge_pool(db, _llm(server), VACANCY, POOL[:8])
    assert (retry.evaluated, retry.cached, server.stats.chat_requests) == (2, 6, 2)


def test_invented_quotes_are_dropped_and_the_gate_blocks_the_configuration(
    server: LocalOpenAIServer, tmp_path: Path
) -> None:
    db = tmp_path / "d.duckdb"
    server.inject("invented_quotes", times="always")
    llm = _llm(server, judge_model="cheap-model")
    report = judge_pool(db, llm, VACANCY, POOL[:6], workers=3)
    assert report.evaluated == 6
    counts = report.quote_counts
    assert counts["dropped"] > 0 and counts["exact"] == 0
    assert counts["mandatory_survived"] == 0 and counts["downgraded"] > 0
    config = judge_config(llm)
    with connect(db) as con:
        gate = config_gate(con, config)
    assert not gate.passed and gate.rate == 0.0
    with pytest.raises(PermissionError, match="blocked"):
        publish_ranking(db, VACANCY, POOL[:6], config, gate)


def _verdicts(db: Path, llm: LLM, vacancy: Vacancy, pool: list[Resume]) -> dict[str, Any]:
    rows = cached_scores(db, vacancy, pool, judge_config(llm))
    return {rid: {**row, "verdict": json.loads(row["verdict"])} for rid, row in rows.items()}


def test_a_partial_checklist_is_asked_again_then_counted_not_found(
    server: LocalOpenAIServer, tmp_path: Path
) -> None:
    """A small model listed 1 of a vacancy's requirements and was scored on it: now a verdict
    covers every requirement — asked once more about the missing ones, the rest not found —
    and its overall follows what it covers."""
    db = tmp_path / "d.duckdb"
    server.inject("partial_checklist", times="always")  # every answer lists one requirement
    llm = _llm(server)
    report = judge_pool(db, llm, VACANCY, POOL[:2], workers=1)
    assert (report.evaluated, server.stats.chat_requests) == (2, 4)  # one follow-up each
    for row in _verdicts(db, llm, VACANCY, POOL[:2]).values():
        items = {i["requirement_id"]: i for i in row["verdict"]["checklist"]}
        assert set(items) == {"q1", "q2", "q3"}  # every requirement; q4 (an NDA) is a formality
        assert items["q1"]["status"] == items["q2"]["status"] == "met"  # answer, follow-up
        assert items["q3"]["status"] == "not_found" and items["q3"]["omitted"]
        answered = row["verdict"]["evidence"]["answered_overall"]
        assert row["overall"] == round(answered * 4 / 6) < answered  # 2 of 3 mandatory proven

    server.clear_faults()
    server.reset_stats()
    server.inject("partial_checklist", times=1)  # the follow-up answers in full
    report = judge_pool(db, llm, VACANCY, POOL[2:3], workers=1)
    assert server.stats.chat_requests == 2
    (row,) = _verdicts(db, llm, VACANCY, POOL[2:3]).values()
    assert [i["status"] for i in row["verdict"]["checklist"]] == ["met", "met", "met"]
    assert row["overall"] == row["verdict"]["evidence"]["answered_overall"]


def test_after_an_invented_quotes_spell_a_vacancy_is_neither_published_from_the_cache_nor_left_blocked(
    server: LocalOpenAIServer, tmp_path: Path
) -> None:
    """A recruiter's run: invented quotes on v1 (blocked), a healthy model on v2 and v3 (the
    configuration's recent evaluations pass the gate again), then a plain run of v1. It used
    to publish v1 from its cached evaluations, 0 quotes surviving; now those are not published,
    they are judged again, and v1 is published from healthy ones."""
    db = tmp_path / "d.duckdb"
    llm = _llm(server, judge_model="spell-model")
    env = JudgeEnv(tmp_path / "s.duckdb", db, None, None, llm)  # type: ignore[arg-type]
    v1 = VACANCY
    others = {
        replace(VACANCY, vacancy_id=f"vac-{n}"): [make_resume(100 * n + i) for i in range(20)]
        for n in (2, 3)
    }
    server.inject("invented_quotes", times="always")
    spell = judge_vacancy(env, v1, POOL[:4], workers=4)
    assert spell.evaluated == 4 and spell.quote_counts["mandatory_survived"] == 0
    with pytest.raises(PermissionError, match="blocked"):
        publish_vacancy(env, v1, POOL[:4])

    server.clear_faults()
    for vacancy, pool in others.items():
        judge_vacancy(env, vacancy, pool, workers=4)
    for vacancy, pool in others.items():
        assert publish_vacancy(env, vacancy, pool).published
    with connect(db) as con:
        assert config_gate(con, judge_config(llm)).passed  # 40 healthy of the latest 44
    with pytest.raises(PermissionError, match="blocked"):  # not from the cache
        publish_vacancy(env, v1, POOL[:4])

    server.reset_stats()
    again = judge_vacancy(env, v1, POOL[:4], workers=4)  # a plain run: nothing asked for
    assert (again.rejudged, server.stats.chat_requests) == (4, 4)
    published = publish_vacancy(env, v1, POOL[:4])
    assert published.published and published.live is not None
    healthy = _verdicts(db, llm, v1, POOL[:4])
    assert all(r["mandatory_survived"] == r["mandatory_quotes"] > 0 for r in healthy.values())
    assert {r.resume_id: r.overall for r in published.live.ranking} == {
        rid: r["overall"] for rid, r in healthy.items()
    }


def test_a_gate_with_no_quote_to_measure_is_cleared_by_the_command_it_advises(
    server: LocalOpenAIServer,
    tiny_world: Path,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
    cli_jobs_from: Callable[[dg.Definitions], None],
) -> None:
    """A small model that quotes nothing blocks the gate with 0 of 0 mandatory quotes; the run
    used to advise `--rejudge-failed`, which re-judged nothing (no quote was lost). The advice
    now names a command that works, and running it with a healthy model clears the block."""
    assert ingest_directory(tiny_world, settings.sources_db).quarantined == 0
    with connect(settings.sources_db) as con:  # one vacancy is enough
        for table in ("vacancy_requirements", "vacancies"):
            con.execute(f"DELETE FROM {table} WHERE vacancy_id <> 'v001'")
    remote = {"HLTM_LLM_BACKEND": "openai", "OPENAI_BASE_URL": server.base_url,
              "OPENAI_API_KEY": "test", "HLTM_LLM_MAX_RETRIES": "1"}  # fmt: skip
    for name, value in remote.items():
        monkeypatch.setenv(name, value)
    cli_jobs_from(
        dg.Definitions(jobs=[judge_refresh_job], resources=build_resources(Settings.from_env()))
    )
    server.inject("unquoted", times="always")
    blocked = CliRunner().invoke(main, ["judge", "run"])
    assert blocked.exit_code == 1
    assert "no quotes on mandatory requirements to measure" in blocked.output
    advised = re.search(r"`hltm (judge run[^`]*)`", blocked.output)
    assert advised is not None, blocked.output

    server.clear_faults()  # the model answers well again: run what the run advised
    cleared = CliRunner().invoke(main, advised.group(1).split())
    assert cleared.exit_code == 0, cleared.output
    assert "published 1" in cleared.output and "blocked 0" in cleared.output

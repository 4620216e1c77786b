"""The judge through the real `openai` client against the local protocol server that misbehaves:
a bad answer is retried or recorded as a failed evaluation with its reason — never cached as a
score, never stopping the other pairs — and invented quotes are caught by the validator and the
gate."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import hltm.judge.tasks  # noqa: F401  (registers JudgeVerdict with the server)
from hltm.judge.journal import config_gate, publish_ranking
from hltm.judge.pipeline import judge_config, judge_pool
from hltm.llm import LLM, make_llm
from hltm.settings import Settings
from hltm.warehouse import connect
from hltm_devkit.openai_server import LocalOpenAIServer
from tests.support.judge import POOL, VACANCY
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

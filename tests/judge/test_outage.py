"""A judge outage keeps the last good ranking, and a bad spell of the model does not block the
quote gate for good.

Before: with every LLM call failing, a vacancy's live ranking was replaced by an empty one, and
after a model change with a small budget it was replaced by one ranked on 4 candidates of 170.
Now a ranking replaces the live one only when complete or at least as complete, and the kept
ranking says why (the publication's reason, the Dagster metadata, the run summary, the CLI).

Before, too: invented quotes, then timeouts, then a healthy model left the gate blocked for
good (it counted every cached evaluation, and cached ones were never judged again). Now it
counts a recent window, and the failed evaluations of a pool whose own evaluations fail the
gate are judged again by its next run."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from hltm.judge.data import Vacancy
from hltm.judge.journal import config_gate, journal_entries, publish_ranking, verify_chain
from hltm.judge.pipeline import Budget, judge_config, judge_pool
from hltm.judge.service import RunSummary
from hltm.llm import DETERMINISTIC_MODEL, LLM, DeterministicBackend, LLMError, make_llm
from hltm.settings import Settings
from hltm.warehouse import connect
from hltm_cli import main
from hltm_dagster.defs.judge.assets import ranking_metadata
from hltm_devkit.openai_server import LocalOpenAIServer
from tests.support import REPO
from tests.support.judge import POOL, VACANCY
from tests.support.llm import openai_settings, quick


class Outage(DeterministicBackend):
    """Every call fails, as when the endpoint is down."""

    def complete(self, task: Any, messages: list[dict[str, str]], model: str) -> str:
        raise LLMError(task.name, "", "HTTP 503 after the client's retries: upstream down")


OFFLINE = LLM(DeterministicBackend(), DETERMINISTIC_MODEL)
DOWN = LLM(Outage(), DETERMINISTIC_MODEL)  # the same configuration, its endpoint down
EDITED = replace(VACANCY, version=2, text=VACANCY.text + " Kubernetes is a plus.")


def _publish(db: Path, llm: LLM, vacancy: Vacancy = VACANCY, budget: int | None = None):  # type: ignore[no-untyped-def]
    """One vacancy's judge run: judge the pool within the budget, gate, publish."""
    report = judge_pool(db, llm, vacancy, POOL, budget=Budget(budget), workers=3)
    config = judge_config(llm)
    with connect(db) as con:
        gate = config_gate(con, config)
    return report, publish_ranking(db, vacancy, POOL, config, gate, failed=report.failed)


def _live_rankings(db: Path) -> list[tuple[Any, ...]]:
    with connect(db) as con:
        return con.execute("SELECT * FROM rankings ORDER BY rank").fetchall()


def test_a_total_outage_keeps_the_last_good_ranking(settings: Settings) -> None:
    db = settings.derived_db
    _, good = _publish(db, OFFLINE)
    assert good.published and good.live is not None and good.live.judged == len(POOL)
    before = _live_rankings(db)

    # the vacancy is edited (nothing cached for its new version) while the endpoint is down;
    # the configuration's quote gate still passes on its earlier evaluations
    report, held = _publish(db, DOWN, EDITED)
    assert report.failed == len(POOL) and report.evaluated == 0
    assert not held.published and held.live is not None and held.live.seq == good.live.seq
    assert "kept the live ranking, 12/12 judged (journal #1)" in held.reason
    assert "0/12 judged" in held.reason
    assert _live_rankings(db) == before and len(journal_entries(db)) == 1
    assert verify_chain(db).ok

    meta = ranking_metadata(held)
    assert meta["published"] is False and meta["journal_seq"] == 1 and "kept" in meta["decision"]
    summary = RunSummary(index=None, held={VACANCY.vacancy_id: held.reason})
    assert any("ranking held, kept the live ranking" in line for line in summary.lines())
    shown = CliRunner().invoke(main, ["judge", "show", VACANCY.vacancy_id, "--top", "3"])
    assert shown.exit_code == 0 and shown.output.count("overall") == 3

    # the endpoint is back: the edited vacancy is judged in full and replaces the old ranking
    _, back = _publish(db, OFFLINE, EDITED)
    assert back.published and back.reason.startswith("complete: 12/12")


def test_a_model_change_with_a_small_budget_keeps_the_complete_ranking(tmp_path: Path) -> None:
    db = tmp_path / "derived.duckdb"
    _publish(db, OFFLINE)
    other = LLM(DeterministicBackend(), "other-model")
    _publish(db, other, replace(VACANCY, vacancy_id="vac-2"))  # other-model passes its gate
    _, partial = _publish(db, other, budget=4)
    assert not partial.published and "only 4/12 judged" in partial.reason
    # the next run finishes the new model's pairs; complete, it replaces the old ranking
    _, done = _publish(db, other)
    assert done.published and done.reason.startswith("complete: 12/12")
    assert [e.model for e in journal_entries(db, VACANCY.vacancy_id)] == [
        DETERMINISTIC_MODEL,
        "other-model",
    ]


def test_nothing_is_published_before_a_single_candidate_was_judged(tmp_path: Path) -> None:
    db = tmp_path / "derived.duckdb"
    _publish(db, OFFLINE, replace(VACANCY, vacancy_id="vac-2"))
    _, first = _publish(db, DOWN)
    assert not first.published and first.live is None
    assert "no ranking was published before" in first.reason
    assert journal_entries(db, VACANCY.vacancy_id) == []


def test_the_quote_gate_opens_again_after_a_bad_spell_of_the_model(tmp_path: Path) -> None:
    db = tmp_path / "derived.duckdb"
    with LocalOpenAIServer() as server:
        # The same model (one configuration): a generous timeout where the server answers, a
        # short one where it hangs, so a slow machine cannot turn a good answer into an outage.
        llm = quick(make_llm(openai_settings(server, llm_timeout_s=10, llm_max_retries=0)))
        hasty = quick(make_llm(openai_settings(server, llm_timeout_s=0.5, llm_max_retries=0)))
        config = judge_config(llm)

        def gate(**window: int):  # type: ignore[no-untyped-def]
            with connect(db) as con:
                return config_gate(con, config, **window)

        server.inject("invented_quotes", times="always")
        invented = judge_pool(db, llm, VACANCY, POOL[:6], config=config, workers=3)
        assert invented.evaluated == 6 and invented.quote_counts["mandatory_survived"] == 0
        assert not gate().passed
        server.clear_faults()
        server.inject("timeout", times="always", delay_s=1.0)
        # the pool's evaluations fail the gate: a run judges the failed ones again too
        down = judge_pool(db, hasty, VACANCY, POOL, config=config, workers=3, rejudge_blocked=True)
        assert (down.cached, down.failed, down.rejudged) == (0, 12, 0)  # a failure keeps them
        server.clear_faults()
        server.wait_idle()

        server.reset_stats()
        healthy = judge_pool(db, llm, VACANCY, POOL, config=config, workers=3, rejudge_blocked=True)
        assert (healthy.evaluated, healthy.rejudged, server.stats.chat_requests) == (12, 6, 12)
        assert gate().passed and gate().rate == 1.0
        published = publish_ranking(db, VACANCY, POOL, config, gate())
        assert published.published and published.live is not None
        assert published.live.judged == len(POOL)
        with connect(db) as con:  # one row per pair: the re-judged score replaced the bad one
            assert con.execute("SELECT count(*) FROM judge_scores").fetchone() == (len(POOL),)
        again = judge_pool(db, llm, VACANCY, POOL, config=config, rejudge_failed=True)
        assert again.rejudged == 0 and again.cached == len(POOL)


def test_vacancies_without_any_resume_are_not_a_gate_failure(settings: Settings) -> None:
    """An export of projects and vacancies before any resume (the README's example folder):
    there is nothing to judge, gate or publish, and the run says so instead of failing the
    quote gate for want of quotes."""
    from hltm.judge.service import JudgeEnv, judge_all
    from hltm.sources.ingest import ingest_directory

    example = REPO / "examples" / "own-export"
    assert ingest_directory(example, settings.sources_db).quarantined == 0
    summary = judge_all(JudgeEnv.from_settings(settings), budget=None, workers=1)
    assert summary.totals()["vacancies"] == 2 and summary.totals()["pool_pairs"] == 0
    assert summary.gate is None and not summary.published
    assert any("no resume in any pool" in line for line in summary.lines())

"""Score cache, budget, workers, failure records, the quote gate and the ranking journal.

No embeddings here: pools are given directly, so every test runs in well under a second."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from hltm.judge.data import Requirement, Resume, Vacancy
from hltm.judge.journal import (
    config_gate,
    journal_entries,
    publish_ranking,
    ranking_as_of,
    verify_chain,
)
from hltm.judge.pipeline import Budget, judge_config, judge_pool, postprocess
from hltm.judge.resume import present_month
from hltm.judge.service import fair_shares
from hltm.judge.store import ensure_judge_schema
from hltm.judge.tasks import JudgeVerdict
from hltm.llm import DETERMINISTIC_MODEL, LLM, DeterministicBackend, LLMError
from hltm.llm.registry import payload_from_messages
from hltm.warehouse import connect
from tests.support.judge import POOL, VACANCY, make_resume

_resume = make_resume


class CountingBackend(DeterministicBackend):
    """The offline backend that can fail for chosen resumes and counts what it was sent."""

    def __init__(self, fail_for: set[str] | None = None) -> None:
        self.fail_for = fail_for or set()
        self.seen: list[str] = []

    def complete(self, task: Any, messages: list[dict[str, str]], model: str) -> str:
        rid = payload_from_messages(messages)["resume"]["id"]
        self.seen.append(rid)
        if rid in self.fail_for:
            raise LLMError(
                task.name, "", "the answer was cut off (finish_reason=length) (3 attempts)"
            )
        return super().complete(task, messages, model)


def _llm(backend: CountingBackend) -> LLM:
    return LLM(backend=backend, model=DETERMINISTIC_MODEL)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "derived.duckdb"


def test_warm_rerun_makes_zero_llm_calls_and_a_changed_resume_is_rejudged_alone(db: Path) -> None:
    backend = CountingBackend()
    llm = _llm(backend)
    cold = judge_pool(db, llm, VACANCY, POOL, workers=3)
    assert (cold.evaluated, cold.cached, cold.usage.calls) == (12, 0, 12)

    warm = judge_pool(db, llm, VACANCY, POOL, workers=3)
    assert (warm.evaluated, warm.cached, warm.usage.calls) == (0, 12, 0)

    changed = list(POOL)
    changed[4] = _resume(4, years=2)  # new content hash
    backend.seen.clear()
    again = judge_pool(db, llm, VACANCY, changed, workers=3)
    assert backend.seen == ["r04"]
    assert (again.evaluated, again.cached) == (1, 11)

    # A new vacancy version re-judges everything; the old rows stay (append-only cache).
    v2 = Vacancy(
        VACANCY.vacancy_id, 2, VACANCY.title, VACANCY.text + " Django.", VACANCY.requirements
    )
    assert judge_pool(db, llm, v2, POOL).evaluated == 12
    with connect(db) as con:
        assert con.execute("SELECT count(*) FROM judge_scores").fetchone()[0] == 12 + 1 + 12


def test_budget_defers_the_rest_and_says_how_many(db: Path) -> None:
    llm = _llm(CountingBackend())
    budget = Budget(5)
    report = judge_pool(db, llm, VACANCY, POOL, budget=budget, workers=2)
    assert (report.evaluated, report.deferred) == (5, 7)
    assert report.as_metadata()["deferred_by_budget"] == 7
    # pool order is priority order: the best-ranked pairs were judged first
    with connect(db) as con:
        judged = {r[0] for r in con.execute("SELECT resume_id FROM judge_scores").fetchall()}
    assert judged == {f"r{i:02d}" for i in range(5)}
    # next run: the cached five are free, the budget goes to the deferred ones
    nxt = judge_pool(db, llm, VACANCY, POOL, budget=Budget(5))
    assert (nxt.cached, nxt.evaluated, nxt.deferred) == (5, 5, 2)


def test_fair_shares_split_one_budget_across_vacancies() -> None:
    assert fair_shares({"a": 2, "b": 50, "c": 50}, 30) == {"a": 2, "b": 14, "c": 14}
    assert fair_shares({"a": 2, "b": 3}, None) == {"a": 2, "b": 3}
    assert sum(fair_shares({"a": 7, "b": 9, "c": 1}, 10).values()) == 10


def test_failed_evaluation_is_recorded_not_cached_and_never_stops_the_others(db: Path) -> None:
    backend = CountingBackend(fail_for={"r03", "r07"})
    report = judge_pool(db, _llm(backend), VACANCY, POOL, workers=4)
    assert (report.evaluated, report.failed) == (10, 2)
    assert {rid for rid, _ in report.failures} == {"r03", "r07"}
    assert all("finish_reason=length" in reason for _, reason in report.failures)
    with connect(db) as con:
        scored = {r[0] for r in con.execute("SELECT resume_id FROM judge_scores").fetchall()}
        failed = con.execute("SELECT resume_id, reason FROM judge_failures ORDER BY 1").fetchall()
    assert "r03" not in scored and "r07" not in scored and len(scored) == 10
    assert [r for r, _ in failed] == ["r03", "r07"]
    # the next run retries exactly the failed pairs
    backend.fail_for.clear()
    backend.seen.clear()
    retry = judge_pool(db, _llm(backend), VACANCY, POOL)
    assert sorted(backend.seen) == ["r03", "r07"] and retry.evaluated == 2


def test_postprocess_drops_formal_and_unknown_items_and_trusts_the_vacancy_flags() -> None:
    resume = POOL[0]
    verdict = JudgeVerdict.model_validate(
        {
            "actual_role": "backend",
            **{k: {"score": 80, "explanation": "x"} for k in ("role", "level", "skills", "experience", "overall")},
            "checklist": [
                {"requirement_id": "q2", "requirement": "Python", "mandatory": False,
                 "status": "met", "quote": "Built Python services over PostgreSQL for team 0."},
                {"requirement_id": "q3", "requirement": "PostgreSQL", "mandatory": True,
                 "status": "met", "quote": "Ten years of Oracle RAC tuning at a large bank."},
                {"requirement_id": "q4", "requirement": "Ready to sign an NDA", "mandatory": True,
                 "status": "not_found", "quote": None},
                {"requirement_id": "zz", "requirement": "Likes cats", "mandatory": True,
                 "status": "met", "quote": None},
            ],
        }
    )  # fmt: skip
    settled = postprocess(verdict, VACANCY, resume.text)
    assert (settled.formal, settled.unknown) == (1, 1)
    by_id = {c["requirement_id"]: c for c in settled.checklist}
    assert by_id["q2"]["mandatory"] is True  # the vacancy says mandatory, not the model
    assert by_id["q2"]["quote_outcome"] == "exact" and by_id["q2"]["status"] == "met"
    assert by_id["q3"]["quote_outcome"] == "dropped" and by_id["q3"]["quote"] is None
    assert by_id["q3"]["status"] == "partial"  # an invented quote cannot keep "met"
    counts = settled.counts
    assert (counts["mandatory_quotes"], counts["mandatory_survived"]) == (2, 1)


def test_the_overall_follows_the_evidence_that_survived() -> None:
    """Rankings sort by `overall`: it is what the verdict answered times the share of the
    evidence it claimed that survived validation, a requirement it skipped counting as a claim
    nothing backs; an honest verdict keeps its score."""
    resume = POOL[0]
    present = present_month(resume.text, resume.as_of)
    real = "Built Python services over PostgreSQL for team 0."
    dated = "Senior Backend Engineer — Company 00\n2019-01 – present"

    def verdict(*items: tuple[str, str, str | None]) -> JudgeVerdict:
        return JudgeVerdict.model_validate(
            {
                "actual_role": "backend",
                **{k: {"score": 90, "explanation": "x"} for k in ("role", "level", "skills", "experience", "overall")},
                "checklist": [
                    {"requirement_id": rid, "requirement": rid, "mandatory": True,
                     "status": status, "quote": quote}
                    for rid, status, quote in items
                ],
            }
        )  # fmt: skip

    honest = postprocess(
        verdict(("q1", "met", dated), ("q2", "met", real), ("q3", "met", real)),
        VACANCY, resume.text, present=present,
    )  # fmt: skip
    assert [c["status"] for c in honest.checklist] == ["met", "met", "met"]
    assert (honest.scores["overall"], honest.support) == (90, 1.0)

    invented = "Ten years of Oracle RAC tuning at a large bank."
    lying = postprocess(
        verdict(("q1", "met", invented), ("q2", "met", invented), ("q3", "met", real)),
        VACANCY, resume.text, present=present,
    )  # fmt: skip
    assert lying.answered_overall == 90 and lying.scores["overall"] == 30  # 1 of 3 proven
    skipping = postprocess(verdict(("q2", "met", real)), VACANCY, resume.text, present=present)
    assert [c["requirement_id"] for c in skipping.checklist] == ["q1", "q2", "q3"]
    assert [c["status"] for c in skipping.checklist] == ["not_found", "met", "not_found"]
    assert skipping.counts["missing"] == 2 and skipping.scores["overall"] == 30


def _cache_row(db: Path, config: Any, resume: Resume, overall: int, quotes: int, kept: int) -> None:
    """A score-cache row as a run would leave it (only the columns the gate and ranking read)."""
    with connect(db) as con:
        ensure_judge_schema(con)
        con.execute(
            "INSERT INTO judge_scores (vacancy_id, vacancy_version, resume_id, resume_hash, model,"
            " prompt_version, role, level, skills, experience, overall, mandatory_quotes,"
            " mandatory_survived, created_at) VALUES (?, ?, ?, ?, ?, ?, 90, 90, 90, 90, ?, ?, ?, now())",
            [VACANCY.vacancy_id, VACANCY.version_key, resume.resume_id, resume.content_hash,
             config.model, config.prompt_version, overall, quotes, kept],
        )  # fmt: skip


@pytest.mark.parametrize(("survived", "publishes"), [(89, False), (90, True), (91, True)])
def test_gate_blocks_at_89_and_allows_at_91(db: Path, survived: int, publishes: bool) -> None:
    config = judge_config(_llm(CountingBackend()))
    pool = POOL[:3]
    # 100 quotes on mandatory requirements over the configuration's evaluations
    for resume, (overall, quotes, kept) in zip(
        pool, [(70, 40, 40), (90, 30, 30 - (100 - survived)), (80, 30, 30)], strict=True
    ):
        _cache_row(db, config, resume, overall, quotes, kept)
    with connect(db) as con:
        gate = config_gate(con, config)
    assert gate.passed is publishes and gate.rate == pytest.approx(survived / 100)
    if publishes:
        entry = publish_ranking(db, VACANCY, pool, config, gate).live
        assert entry is not None
        assert [r.resume_id for r in entry.ranking] == ["r01", "r02", "r00"]
        assert entry.gate_rate == pytest.approx(survived / 100)
    else:
        with pytest.raises(PermissionError, match="89.0%"):
            publish_ranking(db, VACANCY, pool, config, gate)
        assert journal_entries(db) == []


def test_rankings_sort_by_overall_alone_and_the_journal_detects_tampering(db: Path) -> None:
    backend = CountingBackend()
    llm = _llm(backend)
    pool = [_resume(1, years=1), _resume(2, years=7), _resume(3, years=7, role="QA Engineer")]
    judge_pool(db, llm, VACANCY, pool)
    config = judge_config(llm)
    with connect(db) as con:
        gate = config_gate(con, config)
    t0 = datetime(2026, 1, 5, 9, 0)
    first = publish_ranking(db, VACANCY, pool, config, gate, now=t0, run_id="run-a").live
    assert first is not None
    overall = [r.overall for r in first.ranking]
    assert overall == sorted(overall, reverse=True)
    assert first.ranking[0].resume_id == "r02"  # senior backend first, junior next, QA last
    assert first.ranking[-1].resume_id == "r03"

    # the pool changes; a later recomputation is appended, the first stays reconstructible
    pool2 = [*pool, _resume(4, years=8)]
    judge_pool(db, llm, VACANCY, pool2)
    second = publish_ranking(db, VACANCY, pool2, config, gate, now=t0 + timedelta(hours=24)).live
    assert second is not None
    assert second.seq == first.seq + 1 and second.prev_hash == first.row_hash
    past = ranking_as_of(db, VACANCY.vacancy_id, t0 + timedelta(hours=1))
    assert past is not None and past.seq == first.seq
    assert [r.resume_id for r in past.ranking] == [r.resume_id for r in first.ranking]
    assert ranking_as_of(db, VACANCY.vacancy_id, t0 - timedelta(seconds=1)) is None
    now = ranking_as_of(db, VACANCY.vacancy_id, t0 + timedelta(days=2))
    assert now is not None and len(now.ranking) == 4
    assert verify_chain(db).ok

    # someone edits the first row behind the code's back: the chain says where
    with connect(db) as con:
        ranking = json.loads(
            con.execute("SELECT ranking FROM ranking_journal WHERE seq = 1").fetchone()[0]
        )
        ranking[0]["overall"] = 1 if ranking[0]["overall"] == 100 else 100
        con.execute("UPDATE ranking_journal SET ranking = ? WHERE seq = 1", [json.dumps(ranking)])
    report = verify_chain(db)
    assert not report.ok and report.first_bad_seq == 1 and "hash" in report.reason


def test_an_unchanged_ranking_is_not_journaled_again(db: Path) -> None:
    """A second refresh with nothing changed appended one journal row per vacancy identical to
    the one before: the same ranking of the same pool keeps its journal row, and says so."""
    llm = _llm(CountingBackend())
    judge_pool(db, llm, VACANCY, POOL[:3])
    config = judge_config(llm)
    with connect(db) as con:
        gate = config_gate(con, config)
    first = publish_ranking(db, VACANCY, POOL[:2], config, gate)
    again = publish_ranking(db, VACANCY, POOL[:2], config, gate)
    assert first.published and not again.published and again.unchanged
    assert again.live == first.live and "unchanged" in again.reason
    assert [e.seq for e in journal_entries(db)] == [1]
    grown = publish_ranking(db, VACANCY, POOL[:3], config, gate)  # a new pool member
    assert grown.published and [e.seq for e in journal_entries(db)] == [1, 2]


def test_a_deleted_journal_row_breaks_the_chain(db: Path) -> None:
    llm = _llm(CountingBackend())
    judge_pool(db, llm, VACANCY, POOL[:3])
    config = judge_config(llm)
    with connect(db) as con:
        gate = config_gate(con, config)
    for size in (1, 2, 3):
        publish_ranking(db, VACANCY, POOL[:size], config, gate)
    with connect(db) as con:
        con.execute("DELETE FROM ranking_journal WHERE seq = 2")
    report = verify_chain(db)
    assert not report.ok and report.first_bad_seq == 3


def test_cli_reconstructs_as_of_and_verifies_the_journal(settings) -> None:  # type: ignore[no-untyped-def]
    from click.testing import CliRunner

    from hltm_cli import main

    db = settings.derived_db
    llm = _llm(CountingBackend())
    config = judge_config(llm)
    judge_pool(db, llm, VACANCY, POOL[:3])
    with connect(db) as con:
        gate = config_gate(con, config)
    t0 = datetime(2026, 1, 5, 9, 0)
    publish_ranking(db, VACANCY, POOL[:2], config, gate, now=t0)
    publish_ranking(db, VACANCY, POOL[:3], config, gate, now=t0 + timedelta(days=1))
    runner = CliRunner()
    past = runner.invoke(main, ["judge", "as-of", "vac-1", "--at", "2026-01-05T12:00"])
    assert past.exit_code == 0, past.output
    assert "journal #1" in past.output and past.output.count("overall") == 2
    latest = runner.invoke(main, ["judge", "as-of", "vac-1"])
    assert "journal #2" in latest.output and latest.output.count("overall") == 3
    assert runner.invoke(main, ["judge", "verify"]).exit_code == 0
    shown = runner.invoke(main, ["judge", "show", "vac-1", "--top", "2"])
    assert shown.exit_code == 0 and "#1 r0" in shown.output and "“" in shown.output
    with connect(db) as con:
        con.execute("UPDATE ranking_journal SET pool_size = 99 WHERE seq = 2")
    broken = runner.invoke(main, ["judge", "verify"])
    assert broken.exit_code == 1 and "seq 2" in broken.output
    early = runner.invoke(main, ["judge", "as-of", "vac-1", "--at", "2026-01-01"])
    assert early.exit_code == 1
    assert (
        "error: no ranking of vac-1 was published at or before 2026-01-01T00:00:00: the first was"
        " published 2026-01-05T09:00:00 (`hltm judge journal vac-1` lists each publication)"
    ) in early.output


def test_formal_item_list_is_configurable(db: Path) -> None:
    from hltm.judge.formal import DEFAULT_FORMAL_PATTERNS

    vacancy = Vacancy(
        "vac-2", 1, VACANCY.title, VACANCY.text,
        (*VACANCY.requirements, Requirement("q5", "Willing to wear the company t-shirt", True)),
    )  # fmt: skip
    llm = _llm(CountingBackend())
    default = judge_pool(db, llm, vacancy, POOL[:2])
    assert default.formal_dropped == 0  # the offline judge already skips the NDA item
    custom = judge_pool(
        tmp := db.with_name("custom.duckdb"), llm, vacancy, POOL[:2],
        formal_patterns=(*DEFAULT_FORMAL_PATTERNS, r"company t-shirt"),
    )  # fmt: skip
    assert custom.formal_dropped == 2  # one item per pair, dropped before validation
    with connect(tmp) as con:
        verdict = json.loads(con.execute("SELECT verdict FROM judge_scores LIMIT 1").fetchone()[0])
    assert "q5" not in {c["requirement_id"] for c in verdict["checklist"]}


def test_the_vector_cut_is_the_same_whatever_the_index_order(tmp_path: Path) -> None:
    """The pool size varied between runs with no source change, because the
    HNSW search orders ties arbitrarily and the top-k cut went through a tie. Ten exact copies
    of each of six vectors, inserted in four orders: the cut at 15 splits a tie every time."""
    import random

    import numpy as np

    from hltm.judge.candidates import RESUMES_COLLECTION, vector_top
    from hltm.settings import Settings
    from hltm.vectors import VectorStore

    rng = np.random.default_rng(3)
    base = rng.normal(size=(6, 16))
    vectors = {f"r{i:03d}": (base[i % 6] / np.linalg.norm(base[i % 6])).tolist() for i in range(60)}
    query = base[0] + 0.3 * base[1]
    cuts = set()
    for order in range(4):
        settings = Settings.from_env(data_dir=tmp_path / f"d{order}", chroma_host=None)
        store = VectorStore(settings, None)  # type: ignore[arg-type]  (vectors are given)
        ids = list(vectors)
        random.Random(order).shuffle(ids)
        store.collection(RESUMES_COLLECTION).add(
            ids=ids,
            embeddings=[vectors[i] for i in ids],
            metadatas=[{"layer": "active"}] * len(ids),
        )
        hits = vector_top(store, query / np.linalg.norm(query), 15, set(vectors))
        cuts.add(tuple(rid for rid, _ in hits))
    assert len(cuts) == 1 and len(next(iter(cuts))) == 15


def test_the_vector_top_k_is_the_exact_one_and_the_same_after_a_reopen(tmp_path: Path) -> None:
    """With nothing changed, a second refresh built another pool (205 members, then 204): the
    approximate search (HNSW) returns a slightly different top-k each time the index is opened.
    Clustered vectors, as resumes of one trade are: the pool's vector top-k is the exact cosine
    top-k (ties by id), on the first open and after a reopen."""
    import numpy as np

    from hltm.judge.candidates import RESUMES_COLLECTION, vector_top
    from hltm.judge.pools import stable_top
    from hltm.settings import Settings
    from hltm.vectors import VectorStore

    rng = np.random.default_rng(3)
    centers = rng.normal(size=(20, 384))
    vectors = centers[rng.integers(0, 20, 2500)] + 0.35 * rng.normal(size=(2500, 384))
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    ids = [f"r{i:04d}" for i in range(len(vectors))]
    stored = vectors.astype(np.float32).astype(np.float64)  # as the index keeps them
    stored /= np.linalg.norm(stored, axis=1, keepdims=True)
    queries = centers + 0.3 * rng.normal(size=centers.shape)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    store = VectorStore(Settings.from_env(data_dir=tmp_path, chroma_host=None), None)  # type: ignore[arg-type]
    for start in range(0, len(ids), 1000):  # as the index sync adds them
        store.collection(RESUMES_COLLECTION).add(
            ids=ids[start : start + 1000],
            embeddings=vectors[start : start + 1000].tolist(),
            metadatas=[{"layer": "active"}] * len(ids[start : start + 1000]),
        )
    exact = [
        [rid for rid, _ in stable_top(list(zip(ids, (stored @ q).tolist(), strict=True)), 100)]
        for q in queries
    ]

    def top_ks() -> list[list[str]]:
        return [[rid for rid, _ in vector_top(store, q, 100, set(ids))] for q in queries]

    assert top_ks() == exact
    store.reopen(store.generation)
    assert top_ks() == exact

"""Judging a vacancy's pool: score cache first, a budget of cold evaluations, parallel workers.

For each (vacancy, resume) pair of a pool:

1. **Cache**: the pair's key is (vacancy id, vacancy version key, resume id, resume content
   hash, model id, prompt version). A key already in ``judge_scores`` is free — it is never sent
   to the LLM again. A changed resume or vacancy has a new key and is judged anew.
2. **Budget**: cold pairs are taken in pool priority order (best retrieval rank first) until the
   run's budget of cold evaluations is spent; the rest is *deferred* to the next run and counted.
   One `Budget` is shared by every vacancy of a run (thread-safe).
3. **Workers**: W threads share one `LLM` (thread-safe, counts calls and tokens).
4. **Post-processing**, deterministic (`postprocess`): formal items are dropped (before
   validation), each item's ``mandatory`` flag is taken from the vacancy (the model's copy is
   not trusted), items naming no requirement of the vacancy are dropped. A verdict must cover
   every requirement: the model is asked once more about the ones it left out, and what is
   still missing is not found. Every quote is validated and held to the evidence rules
   (`quotes.apply_validation`, `hltm.judge.evidence`: exact / repaired / dropped, then
   irrelevant / thin / short / undated), each item capped at what its quote proves; then
   ``overall`` — what rankings sort by — becomes the answered overall times the share of the
   claimed evidence that survived. Counts of each outcome are stored with the score.
5. **Re-judging**: a cached evaluation that failed the evidence check (`FAILED_EVALUATION`: a
   mandatory quote lost to validation, requirements left out, a mandatory "met" without a
   quote) is judged again as a cold pair under the budget — on request (`rejudge_failed`), and
   in every run of the product when the pool's evaluations fail the quote gate (`pool_gate`,
   `rejudge_blocked`), so a bad spell of the model neither reaches a ranking nor keeps the
   vacancy blocked once the model answers well. A new score replaces it, a failure leaves it as
   it was.
6. **Failures**: an `LLMError` (malformed JSON, cut-off answer, timeouts, HTTP errors after
   retries…) is recorded in ``judge_failures`` with its reason; it never enters the cache as a
   score, never stops the other pairs, and the pair is tried again next run.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hltm.judge.data import Requirement, Resume, Vacancy
from hltm.judge.evidence import surviving_share
from hltm.judge.formal import DEFAULT_FORMAL_PATTERNS, is_formal, split_formal
from hltm.judge.gate import GateDecision, gate_decision
from hltm.judge.quotes import NormalisedText, apply_validation, empty_counts, normalise, sum_counts
from hltm.judge.resume import present_month
from hltm.judge.store import ensure_judge_schema
from hltm.judge.tasks import JUDGE_TASK, JudgeVerdict, build_payload
from hltm.llm import LLM, LLMError, LLMUsage
from hltm.warehouse import connect, insert_rows

__all__ = [
    "DEFAULT_BUDGET",
    "DEFAULT_WORKERS",
    "Budget",
    "Coverage",
    "cache_key",
    "cold_count",
    "JudgeConfig",
    "JudgeReport",
    "judge_config",
    "judge_pool",
]

log = logging.getLogger(__name__)

DEFAULT_BUDGET = 3000  # cold evaluations per run
DEFAULT_WORKERS = 0  # 0: as many as the LLM keeps in flight (the server's slots)


@dataclass(frozen=True)
class JudgeConfig:
    """What a score was produced by: the model id (with reasoning effort) and prompt version."""

    model: str
    prompt_version: str

    def as_metadata(self) -> dict[str, str]:
        return {"judge_model": self.model, "prompt_version": self.prompt_version}


def judge_config(llm: LLM, reasoning_effort: str | None = None) -> JudgeConfig:
    """The configuration of ``llm``: a reasoning effort is part of the model id (``@low``)."""
    model = llm.model
    if reasoning_effort and llm.backend_name != "offline":
        model = f"{model}@{reasoning_effort}"
    return JudgeConfig(model, JUDGE_TASK.version)


class Budget:
    """At most ``limit`` cold evaluations per run (None = unlimited); shared by threads."""

    def __init__(self, limit: int | None = DEFAULT_BUDGET) -> None:
        if limit is not None and limit < 0:
            raise ValueError("budget must be ≥ 0")
        self.limit = limit
        self.used = 0
        self.deferred = 0
        self._lock = threading.Lock()

    def claim(self, wanted: int) -> int:
        with self._lock:
            granted = wanted if self.limit is None else max(0, min(wanted, self.limit - self.used))
            self.used += granted
            self.deferred += wanted - granted
            return granted

    @property
    def remaining(self) -> int | None:
        return None if self.limit is None else self.limit - self.used


@dataclass
class JudgeReport:
    vacancy_id: str
    vacancy_version: str
    config: JudgeConfig
    pool: int = 0
    cached: int = 0  # warm: already in the score cache
    evaluated: int = 0  # cold evaluations that produced a score
    failed: int = 0  # cold evaluations that failed (recorded, not cached)
    deferred: int = 0  # cold pairs left for the next run by the budget
    rejudged: int = 0  # cached evaluations judged again (a mandatory quote had failed)
    failures: list[tuple[str, str]] = field(default_factory=list)  # (resume id, reason)
    quote_counts: dict[str, int] = field(default_factory=empty_counts)  # this run's evaluations
    formal_dropped: int = 0
    unknown_items: int = 0
    usage: LLMUsage = field(default_factory=LLMUsage)
    seconds: float = 0.0
    standing: Coverage | None = None  # the pool's coverage in the cache after this run

    @property
    def cold(self) -> int:
        return self.evaluated + self.failed

    def as_metadata(self) -> dict[str, Any]:
        return {
            "pool": self.pool,
            "cached_pairs": self.cached,
            "cold_evaluations": self.cold,
            "judged_now": self.evaluated,
            "failed_now": self.failed,
            "deferred_by_budget": self.deferred,
            "rejudged": self.rejudged,
            "formal_items_dropped": self.formal_dropped,
            **{f"quotes_{k}": v for k, v in self.quote_counts.items() if k in _SHOWN_COUNTS},
            **self.config.as_metadata(),
            **self.usage.as_metadata(),
            **(self.standing.as_metadata() if self.standing else {}),
            "seconds": round(self.seconds, 2),
        }

    def summary(self) -> str:
        text = (
            f"{self.vacancy_id}: pool {self.pool}, cached {self.cached}, judged {self.evaluated},"
            f" failed {self.failed}, deferred {self.deferred}; {self.usage.calls} LLM calls,"
            f" {self.usage.prompt_tokens + self.usage.completion_tokens} tokens"
        )
        return text


_SHOWN_COUNTS = (
    "exact", "repaired", "dropped", "absent", "irrelevant", "thin", "short", "undated",
    "mandatory_quotes", "mandatory_survived", "missing", "asked_again",
)  # fmt: skip


def _now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


def required(
    vacancy: Vacancy, formal_patterns: Sequence[str] = DEFAULT_FORMAL_PATTERNS
) -> list[Requirement]:
    """The requirements every verdict must cover: the vacancy's, formalities left out."""
    return [r for r in vacancy.requirements if not is_formal(r.text, formal_patterns)]


def _known(
    verdict: JudgeVerdict, vacancy: Vacancy, formal_patterns: Sequence[str]
) -> tuple[dict[str, dict[str, Any]], int, int]:
    """(requirement id → the verdict's item for it, formal items, items naming no requirement
    of the vacancy). The item's ``mandatory`` flag is the vacancy's (the model's copy is not
    trusted); the first item wins when one requirement is listed twice."""
    items = [item.model_dump() for item in verdict.checklist]
    kept, formal = split_formal(items, key="requirement", patterns=formal_patterns)
    by_id = {r.requirement_id: r for r in vacancy.requirements}
    by_text = {" ".join(r.text.lower().split()): r for r in vacancy.requirements}
    known: dict[str, dict[str, Any]] = {}
    unknown = 0
    for item in kept:
        req = by_id.get(str(item.get("requirement_id")))
        if req is None:
            req = by_text.get(" ".join(str(item.get("requirement", "")).lower().split()))
        if req is None:
            unknown += 1
            continue
        known.setdefault(
            req.requirement_id,
            {**item, "requirement_id": req.requirement_id, "requirement": req.text,
             "mandatory": req.mandatory},
        )  # fmt: skip
    return known, len(formal), unknown


def missing_requirements(
    verdict: JudgeVerdict,
    vacancy: Vacancy,
    formal_patterns: Sequence[str] = DEFAULT_FORMAL_PATTERNS,
) -> list[Requirement]:
    """The requirements the verdict's checklist leaves out (what a follow-up asks about)."""
    known = _known(verdict, vacancy, formal_patterns)[0]
    return [r for r in required(vacancy, formal_patterns) if r.requirement_id not in known]


@dataclass(frozen=True)
class Settled:
    """A verdict after post-processing: its validated checklist and the scores it keeps."""

    checklist: list[dict[str, Any]]
    counts: dict[str, int]
    formal: int
    unknown: int
    scores: dict[str, int]
    support: float  # share of the evidence the verdict claimed that survived validation
    answered_overall: int


def postprocess(
    verdict: JudgeVerdict,
    vacancy: Vacancy,
    resume_text: str,
    formal_patterns: Sequence[str] = DEFAULT_FORMAL_PATTERNS,
    *,
    followup: JudgeVerdict | None = None,
    present: int | None = None,
) -> Settled:
    """The checklist covering every requirement, validated, and the scores that follow it.

    Items come from ``verdict``, then from ``followup`` (the answer to asking again about the
    requirements the verdict left out); a requirement still left out is not found. Quotes are
    validated (`quotes.apply_validation`), then ``overall`` becomes the answered overall times
    the share of the claimed evidence that survived (`evidence.surviving_share`): a verdict whose
    quotes were dropped, or that skipped requirements, cannot keep its score.
    """
    known, formal, unknown = _known(verdict, vacancy, formal_patterns)
    if followup is not None:
        extra, more_formal, more_unknown = _known(followup, vacancy, formal_patterns)
        for rid, item in extra.items():
            known.setdefault(rid, item)
        formal, unknown = formal + more_formal, unknown + more_unknown
    checklist: list[dict[str, Any]] = []
    omitted: list[dict[str, Any]] = []
    for req in required(vacancy, formal_patterns):
        item = known.get(req.requirement_id)
        if item is None:
            item = {
                "requirement_id": req.requirement_id, "requirement": req.text,
                "mandatory": req.mandatory, "status": "not_found", "quote": None,
                "omitted": True,
            }  # fmt: skip
            omitted.append(item)
        checklist.append(item)
    validated, counts = apply_validation(checklist, _normalised(resume_text), present=present)
    counts["missing"] = len(omitted)
    counts["mandatory_unquoted_met"] = sum(
        1
        for item in checklist
        if item["mandatory"]
        and item["status"] == "met"
        and not str(item.get("quote") or "").strip()
    )
    share = surviving_share(checklist, validated)
    scores = verdict.scores()
    answered = scores["overall"]
    scores["overall"] = round(answered * share)
    return Settled(validated, counts, formal, unknown, scores, share, answered)


_NORMALISED: dict[str, NormalisedText] = {}
_NORMALISED_LOCK = threading.Lock()


def _normalised(text: str) -> NormalisedText:
    """The validator's normalised view of a resume, computed once per text in a process."""
    with _NORMALISED_LOCK:
        got = _NORMALISED.get(text)
    if got is None:
        got = normalise(text)
        with _NORMALISED_LOCK:
            if len(_NORMALISED) > 2048:
                _NORMALISED.clear()
            _NORMALISED[text] = got
    return got


def cache_key(vacancy: Vacancy, config: JudgeConfig) -> dict[str, str]:
    """The score-cache key a vacancy's pairs share (each pair adds resume id + content hash).

    The one place that says what invalidates a score: extend it here, and every read and write
    of ``judge_scores`` and ``judge_failures`` follows."""
    return {
        "vacancy_id": vacancy.vacancy_id,
        "vacancy_version": vacancy.version_key,
        "model": config.model,
        "prompt_version": config.prompt_version,
    }


def _key_filter(vacancy: Vacancy, config: JudgeConfig) -> tuple[str, list[str]]:
    key = cache_key(vacancy, config)
    return " AND ".join(f"{column} = ?" for column in key), list(key.values())


def _keys_in(con: Any, table: str, vacancy: Vacancy, config: JudgeConfig) -> set[tuple[str, str]]:
    where, params = _key_filter(vacancy, config)
    rows = con.execute(f"SELECT resume_id, resume_hash FROM {table} WHERE {where}", params)
    return {(r, h) for r, h in rows.fetchall()}


# An evaluation that failed the evidence check: it lost a mandatory quote to validation, left
# requirements out even when asked again, or said "met" on a mandatory one without a quote.
FAILED_EVALUATION = (
    "mandatory_survived < mandatory_quotes"
    " OR coalesce(TRY_CAST(json_extract_string(quote_counts, '$.missing') AS INTEGER), 0) > 0"
    " OR coalesce(TRY_CAST(json_extract_string(quote_counts, '$.mandatory_unquoted_met')"
    " AS INTEGER), 0) > 0"
)
# An evaluation that quoted nothing on a mandatory requirement.
UNQUOTED_EVALUATION = "mandatory_quotes = 0"


def _cached_keys(
    con: Any, vacancy: Vacancy, config: JudgeConfig, rejudge: Sequence[str] = ()
) -> set[tuple[str, str]]:
    """The pairs the score cache answers, less those matching any ``rejudge`` condition (they
    are judged again)."""
    cached = _keys_in(con, "judge_scores", vacancy, config)
    if rejudge:
        where, params = _key_filter(vacancy, config)
        either = " OR ".join(f"({condition})" for condition in rejudge)
        cached -= set(
            con.execute(
                f"SELECT resume_id, resume_hash FROM judge_scores WHERE {where} AND ({either})",
                params,
            ).fetchall()
        )
    return cached


def pool_gate(
    con: Any, vacancy: Vacancy, resumes: Sequence[Resume], config: JudgeConfig
) -> GateDecision:
    """The quote gate over the pool's own evaluations in the cache (what a ranking of it would
    be made of). With no mandatory quote among them it passes, unmeasured: whether the
    configuration quotes at all is the configuration gate's question."""
    where, params = _key_filter(vacancy, config)
    pool = {(r.resume_id, r.content_hash) for r in resumes}
    rows = con.execute(
        f"SELECT resume_id, resume_hash, mandatory_quotes, mandatory_survived FROM judge_scores"
        f" WHERE {where}",
        params,
    ).fetchall()
    quotes = sum(int(q or 0) for rid, rh, q, _ in rows if (rid, rh) in pool)
    survived = sum(int(v or 0) for rid, rh, _, v in rows if (rid, rh) in pool)
    if not quotes:
        return GateDecision(True, 1.0, "no quotes on mandatory requirements to measure", False)
    return gate_decision(quotes, survived)


def _rejudged(
    con: Any,
    vacancy: Vacancy,
    resumes: Sequence[Resume],
    config: JudgeConfig,
    rejudge_failed: bool,
    rejudge_unquoted: bool,
    rejudge_blocked: bool,
) -> tuple[str, ...]:
    """Which cached evaluations are judged again: the failed ones when asked, or when the
    pool's evaluations fail the quote gate and `rejudge_blocked` (a bad spell of the model must
    not keep the vacancy blocked once the model answers well); those that quoted nothing when
    asked (`rejudge_unquoted`)."""
    conditions = []
    blocked = rejudge_blocked and not pool_gate(con, vacancy, resumes, config).passed
    if rejudge_failed or blocked:
        conditions.append(FAILED_EVALUATION)
    if rejudge_unquoted:
        conditions.append(UNQUOTED_EVALUATION)
    return tuple(conditions)


@dataclass(frozen=True)
class Coverage:
    """Where a vacancy's pool stands in the score cache, whatever this run did."""

    pool: int
    scored: int
    failed: int  # tried, failed, no score yet
    pending: int  # never tried (deferred by the budget, or new)

    def as_metadata(self) -> dict[str, Any]:
        return {
            "coverage": f"{self.scored}/{self.pool} scored, {self.failed} failed,"
            f" {self.pending} pending",
            "coverage_pool": self.pool,
            "coverage_scored": self.scored,
            "coverage_failed": self.failed,
            "coverage_pending": self.pending,
        }


def _coverage(
    con: Any, vacancy: Vacancy, resumes: Sequence[Resume], config: JudgeConfig
) -> Coverage:
    keys = {(r.resume_id, r.content_hash) for r in resumes}
    scored = keys & _cached_keys(con, vacancy, config)
    failed = (keys & _keys_in(con, "judge_failures", vacancy, config)) - scored
    return Coverage(len(keys), len(scored), len(failed), len(keys) - len(scored) - len(failed))


def cold_count(
    derived_db: Path | str,
    vacancy: Vacancy,
    resumes: Sequence[Resume],
    config: JudgeConfig,
    rejudge_failed: bool = False,
    rejudge_unquoted: bool = False,
    rejudge_blocked: bool = False,
) -> int:
    """How many of ``resumes`` are not in the score cache for this vacancy and configuration
    (or are to be judged again, see `judge_pool`)."""
    with connect(derived_db) as con:
        ensure_judge_schema(con)
        rejudge = _rejudged(
            con, vacancy, resumes, config, rejudge_failed, rejudge_unquoted, rejudge_blocked
        )
        cached = _cached_keys(con, vacancy, config, rejudge)
    return sum(1 for r in resumes if (r.resume_id, r.content_hash) not in cached)


def _ask_again(
    llm: LLM,
    verdict: JudgeVerdict,
    vacancy: Vacancy,
    resume: Resume,
    formal_patterns: Sequence[str],
    context: str,
) -> tuple[JudgeVerdict | None, LLMUsage, bool]:
    """Ask once more about the requirements a verdict left out (the same task, the vacancy
    narrowed to them). A failed follow-up is no failure of the evaluation: what is still
    missing counts as not found."""
    missing = missing_requirements(verdict, vacancy, formal_patterns)
    if not missing:
        return None, LLMUsage(), False
    narrowed = replace(vacancy, requirements=tuple(missing))
    try:
        followup, spent = llm.run_counted(
            JUDGE_TASK, build_payload(narrowed, resume), context=f"{context}, asked again"
        )
    except LLMError as err:
        log.warning("%s: asking again about %d requirements failed: %s", context, len(missing),
                    err.reason)  # fmt: skip
        return None, LLMUsage(), True
    return followup, spent, True


def judge_pool(
    derived_db: Path | str,
    llm: LLM,
    vacancy: Vacancy,
    resumes: Sequence[Resume],
    *,
    config: JudgeConfig | None = None,
    budget: Budget | None = None,
    workers: int = DEFAULT_WORKERS,
    run_id: str = "",
    formal_patterns: Sequence[str] = DEFAULT_FORMAL_PATTERNS,
    on_result: Callable[[str, str], None] | None = None,
    rejudge_failed: bool = False,
    rejudge_unquoted: bool = False,
    rejudge_blocked: bool = False,
) -> JudgeReport:
    """Judge ``resumes`` (the pool, in priority order) for ``vacancy``; see the module docstring.

    ``on_result(resume_id, "ok" | reason)`` is called as each cold evaluation finishes.
    ``rejudge_failed``: also judge again the cached evaluations that failed the evidence check
    (`FAILED_EVALUATION`); ``rejudge_blocked``: the same, only when the pool's evaluations fail
    the quote gate (what every run of the product does; a measurement keeps the answers it
    measures); ``rejudge_unquoted``: also those that quoted nothing on a mandatory requirement.
    """
    started = time.perf_counter()
    config = config or judge_config(llm)
    budget = budget or Budget(None)
    report = JudgeReport(vacancy.vacancy_id, vacancy.version_key, config, pool=len(resumes))
    with connect(derived_db) as con:
        ensure_judge_schema(con)
        rejudge = _rejudged(
            con, vacancy, resumes, config, rejudge_failed, rejudge_unquoted, rejudge_blocked
        )
        cached = _cached_keys(con, vacancy, config, rejudge)
        stored = _cached_keys(con, vacancy, config) if rejudge else cached
    cold = [r for r in resumes if (r.resume_id, r.content_hash) not in cached]
    report.cached = len(resumes) - len(cold)
    granted = budget.claim(len(cold))
    todo, report.deferred = cold[:granted], len(cold) - granted
    usage_before = llm.snapshot()
    if todo:
        llm.prepare(JUDGE_TASK, (build_payload(vacancy, r) for r in resumes))

    def evaluate(resume: Resume) -> tuple[Resume, dict[str, Any] | None, str | None]:
        payload = build_payload(vacancy, resume)
        context = f"vacancy {vacancy.vacancy_id} × resume {resume.resume_id}"
        t0 = time.perf_counter()
        try:
            verdict, spent = llm.run_counted(JUDGE_TASK, payload, context=context)
            followup, again, asked = _ask_again(
                llm, verdict, vacancy, resume, formal_patterns, context
            )
            settled = postprocess(
                verdict, vacancy, resume.text, formal_patterns, followup=followup,
                present=present_month(resume.text, resume.as_of),
            )  # fmt: skip
        except LLMError as err:
            return resume, None, err.reason
        except Exception as err:  # a bug in one pair must not stop the others; it is recorded
            log.exception("judging %s failed", context)
            return resume, None, f"{type(err).__name__}: {err}"
        spent = spent + again
        answer = verdict.model_dump()
        answer["checklist"] = settled.checklist
        answer["overall"] = {
            "score": settled.scores["overall"],
            "explanation": answer["overall"]["explanation"]
            + (
                f" [answered {settled.answered_overall}; {settled.support:.0%} of the evidence"
                " it claimed survived validation]"
                if settled.support < 1
                else ""
            ),
        }
        answer["evidence"] = {
            "answered_overall": settled.answered_overall,
            "support": round(settled.support, 4),
            "asked_again": asked,
        }
        settled.counts["asked_again"] = int(asked)
        row = {
            "scores": settled.scores,
            "actual_role": verdict.actual_role,
            "verdict": answer,
            "counts": settled.counts,
            "formal": settled.formal,
            "unknown": settled.unknown,
            "prompt_tokens": spent.prompt_tokens,
            "completion_tokens": spent.completion_tokens,
            "seconds": time.perf_counter() - t0,
        }
        return resume, row, None

    results: list[tuple[Resume, dict[str, Any] | None, str | None]] = []
    if todo:
        threads = max(1, workers or llm.concurrency)
        with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="judge") as pool:
            for result in pool.map(evaluate, todo):
                results.append(result)
                if on_result is not None:
                    on_result(result[0].resume_id, result[2] or "ok")
    now = _now()
    score_rows: list[list[Any]] = []
    failure_rows: list[list[Any]] = []
    all_counts = []
    replaced: list[tuple[str, str]] = []  # re-judged pairs: their old row goes
    key = cache_key(vacancy, config)
    for resume, row, reason in results:
        pair = {**key, "resume_id": resume.resume_id, "resume_hash": resume.content_hash}
        if row is None:
            report.failed += 1
            report.failures.append((resume.resume_id, str(reason)))
            failure_rows.append(
                {**pair, "reason": str(reason), "run_id": run_id, "created_at": now}
            )
            continue
        report.evaluated += 1
        if (resume.resume_id, resume.content_hash) in stored:
            replaced.append((resume.resume_id, resume.content_hash))
        report.formal_dropped += row["formal"]
        report.unknown_items += row["unknown"]
        all_counts.append(row["counts"])
        score_rows.append(
            {
                **pair, **row["scores"], "actual_role": row["actual_role"],
                "verdict": json.dumps(row["verdict"], ensure_ascii=False),
                "quote_counts": json.dumps(row["counts"], sort_keys=True),
                "mandatory_quotes": row["counts"]["mandatory_quotes"],
                "mandatory_survived": row["counts"]["mandatory_survived"],
                "formal_dropped": row["formal"], "prompt_tokens": row["prompt_tokens"],
                "completion_tokens": row["completion_tokens"],
                "seconds": round(row["seconds"], 4), "run_id": run_id, "created_at": now,
            }
        )  # fmt: skip
    report.quote_counts = sum_counts(all_counts)
    report.rejudged = len(replaced)
    with connect(derived_db) as con:
        ensure_judge_schema(con)
        con.execute("BEGIN TRANSACTION")
        if replaced:
            where, params = _key_filter(vacancy, config)
            con.executemany(
                f"DELETE FROM judge_scores WHERE {where} AND resume_id = ? AND resume_hash = ?",
                [[*params, rid, rhash] for rid, rhash in replaced],
            )
        # INSERT only: a key written by a concurrent run first stays as it was.
        _insert(con, "INSERT OR IGNORE INTO judge_scores", score_rows)
        _insert(con, "INSERT INTO judge_failures", failure_rows)
        con.execute("COMMIT")
        report.standing = _coverage(con, vacancy, resumes, config)
    report.usage = llm.snapshot() - usage_before
    report.seconds = time.perf_counter() - started
    return report


def _insert(con: Any, statement: str, rows: Sequence[Mapping[str, Any]]) -> None:
    if rows:
        columns = list(rows[0])
        insert_rows(con, statement, [[r[c] for c in columns] for r in rows], columns)


def cached_scores(
    derived_db: Path | str,
    vacancy: Vacancy,
    resumes: Sequence[Resume],
    config: JudgeConfig,
) -> dict[str, Mapping[str, Any]]:
    """resume id → cached row (scores + verdict) for the pool's current keys."""
    want = {r.resume_id: r.content_hash for r in resumes}
    with connect(derived_db) as con:
        ensure_judge_schema(con)
        where, params = _key_filter(vacancy, config)
        rows = con.execute(
            "SELECT resume_id, resume_hash, role, level, skills, experience, overall,"
            " actual_role, verdict, mandatory_quotes, mandatory_survived FROM judge_scores"
            f" WHERE {where}",
            params,
        ).fetchall()
    out: dict[str, Mapping[str, Any]] = {}
    for rid, rhash, role, level, skills, exp, overall, actual, verdict, mq, ms in rows:
        if want.get(rid) != rhash:
            continue
        out[rid] = {
            "role": role, "level": level, "skills": skills, "experience": exp,
            "overall": overall, "actual_role": actual, "verdict": verdict,
            "mandatory_quotes": mq, "mandatory_survived": ms,
        }  # fmt: skip
    return out

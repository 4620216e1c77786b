"""The judge's steps wired to storage: index, pools, judging, rankings — one vacancy or all.

Dagster assets, the nightly op job, the CLI and the demo all call these functions, so every
path computes the same thing. Nothing here imports Dagster.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hltm.embeddings import CachedEmbedder
from hltm.judge.calibration import calibrated_vacancies
from hltm.judge.candidates import (
    K_BM25,
    K_VECTOR,
    IndexSync,
    QueryVectors,
    bm25_index,
    build_pool,
    index_hashes,
    sync_resume_index,
    vector_top,
)
from hltm.judge.data import Resume, Vacancy, load_resumes
from hltm.judge.formal import DEFAULT_FORMAL_PATTERNS
from hltm.judge.gate import GateDecision, blocked_advice
from hltm.judge.journal import JournalEntry, Publication, config_gate, publish_ranking
from hltm.judge.pipeline import (
    DEFAULT_BUDGET,
    DEFAULT_WORKERS,
    Budget,
    JudgeConfig,
    JudgeReport,
    cold_count,
    judge_config,
    judge_pool,
    pool_gate,
)
from hltm.judge.pools import PoolEntry
from hltm.judge.store import ensure_judge_schema
from hltm.llm import LLM
from hltm.vectors import VectorStore
from hltm.warehouse import connect, insert_rows

__all__ = [
    "JudgeEnv",
    "PoolResult",
    "RunSummary",
    "build_vacancy_pool",
    "judge_all",
    "judge_vacancy",
    "load_pool",
    "publish_vacancy",
    "refresh_index",
]


@dataclass
class JudgeEnv:
    """Where the judge reads and writes, and with what models."""

    sources_db: Path
    derived_db: Path
    store: VectorStore
    embedder: CachedEmbedder
    llm: LLM
    reasoning_effort: str | None = None
    k_vector: int = K_VECTOR
    k_bm25: int = K_BM25
    formal_patterns: tuple[str, ...] = DEFAULT_FORMAL_PATTERNS

    @property
    def config(self) -> JudgeConfig:
        return judge_config(self.llm, self.reasoning_effort)

    @classmethod
    def from_settings(cls, settings: Any, llm: LLM | None = None) -> JudgeEnv:
        from hltm.embeddings import make_embedder
        from hltm.llm import make_llm

        embedder = make_embedder(settings)
        return cls(
            sources_db=settings.sources_db,
            derived_db=settings.derived_db,
            store=VectorStore(settings, embedder),
            embedder=embedder,
            llm=llm or make_llm(settings, model=settings.judge_model),
            reasoning_effort=settings.reasoning_effort,
        )


def refresh_index(env: JudgeEnv) -> IndexSync:
    """Bring the ``resumes`` vector collection in line with the sources' active layer (changed
    ones only). The archive is not embedded: no vector search reads it (it never enters a
    normal pool, and the recall probe samples it by BM25), and embedding is most of a cold
    run's CPU. A resume moved between layers is added or removed here; its vector stays in
    the embedding cache."""
    return sync_resume_index(env.store, env.embedder, load_resumes(env.sources_db, "active"))


@dataclass
class PoolResult:
    vacancy: Vacancy
    entries: list[PoolEntry]
    resumes: list[Resume]  # pool members in pool order (current source content)
    not_indexed: int = 0  # active resumes the vector index does not have (yet)

    @property
    def bm25_only(self) -> int:
        return sum(1 for e in self.entries if e.bm25_only)

    def as_metadata(self) -> dict[str, Any]:
        return {
            "pool": len(self.entries),
            "from_vector": sum(1 for e in self.entries if e.vector_rank is not None),
            "from_bm25": sum(1 for e in self.entries if e.bm25_rank is not None),
            "bm25_only": self.bm25_only,
            "active_resumes_not_in_vector_index": self.not_indexed,
            "vacancy_version": self.vacancy.version_key,
        }


def build_vacancy_pool(env: JudgeEnv, vacancy: Vacancy, run_id: str = "") -> PoolResult:
    """Vector top-k ∪ BM25 top-k over the active layer; stored in ``judge_pools``."""
    active = load_resumes(env.sources_db, layer="active")
    by_id = {r.resume_id: r for r in active}
    indexed = index_hashes(env.store)
    not_indexed = sum(1 for r in active if indexed.get(r.resume_id) != r.content_hash)
    query = QueryVectors(env.embedder, env.derived_db).get(vacancy.vector_query())
    hits = vector_top(env.store, query, env.k_vector, set(by_id))
    entries = build_pool(vacancy, hits, bm25_index(active), env.k_vector, env.k_bm25)
    entries = [e for e in entries if e.id in by_id]
    now = datetime.now(UTC).replace(tzinfo=None)
    with connect(env.derived_db) as con:
        ensure_judge_schema(con)
        con.execute("BEGIN TRANSACTION")
        con.execute("DELETE FROM judge_pools WHERE vacancy_id = ?", [vacancy.vacancy_id])
        insert_rows(
            con,
            "INSERT INTO judge_pools",
            [
                [vacancy.vacancy_id, vacancy.version_key, i, e.id,
                 by_id[str(e.id)].content_hash, e.vector_rank, e.vector_score, e.bm25_rank,
                 e.bm25_score, now, run_id]
                for i, e in enumerate(entries)
            ],
        )  # fmt: skip
        con.execute("COMMIT")
    return PoolResult(vacancy, entries, [by_id[str(e.id)] for e in entries], not_indexed)


def load_pool(env: JudgeEnv, vacancy: Vacancy) -> list[Resume]:
    """The stored pool of a vacancy, in pool order, with the resumes' *current* content.

    Members deleted from the sources or moved to the archive since the pool was built drop out.
    """
    with connect(env.derived_db) as con:
        ensure_judge_schema(con)
        ids = [
            r[0]
            for r in con.execute(
                "SELECT resume_id FROM judge_pools WHERE vacancy_id = ? ORDER BY position",
                [vacancy.vacancy_id],
            ).fetchall()
        ]
    current = {r.resume_id: r for r in load_resumes(env.sources_db, layer="active", ids=ids)}
    return [current[i] for i in ids if i in current]


def judge_vacancy(
    env: JudgeEnv,
    vacancy: Vacancy,
    pool: Sequence[Resume] | None = None,
    budget: Budget | None = None,
    workers: int = DEFAULT_WORKERS,
    run_id: str = "",
    on_result: Callable[[str, str], None] | None = None,
    rejudge_failed: bool = False,
    rejudge_unquoted: bool = False,
) -> JudgeReport:
    pool = load_pool(env, vacancy) if pool is None else pool
    return judge_pool(
        env.derived_db, env.llm, vacancy, pool, config=env.config, budget=budget,
        workers=workers, run_id=run_id, formal_patterns=env.formal_patterns, on_result=on_result,
        rejudge_failed=rejudge_failed, rejudge_unquoted=rejudge_unquoted, rejudge_blocked=True,
    )  # fmt: skip


def gate(env: JudgeEnv) -> GateDecision:
    with connect(env.derived_db) as con:
        return config_gate(con, env.config)


def vacancy_gate(
    derived_db: Path | str, vacancy: Vacancy, pool: Sequence[Resume], config: JudgeConfig
) -> GateDecision:
    """The configuration's gate, and the gate over the pool's own evaluations: a ranking is
    made only of evaluations that pass it, however well the configuration does elsewhere."""
    with connect(derived_db) as con:
        overall = config_gate(con, config)
        if not overall.passed:
            return overall
        own = pool_gate(con, vacancy, pool, config)
    if own.passed:
        return overall
    reason = own.reason.replace("blocked: ", f"blocked for {vacancy.vacancy_id}: ", 1)
    return GateDecision(False, own.rate, f"{reason} in its own evaluations")


def pool_advice(vacancy_id: str) -> str:
    """What clears a vacancy blocked by its own evaluations: any run of it judges its failed
    evaluations again (`judge_pool`), so once the model answers well the next one publishes."""
    return (
        "its failed evaluations are judged again by its next run; once the model answers well:"
        f" `hltm judge run --vacancy {vacancy_id}`"
    )


def publish_vacancy(
    env: JudgeEnv,
    vacancy: Vacancy,
    pool: Sequence[Resume] | None = None,
    failed: int = 0,
    run_id: str = "",
) -> Publication:
    """Gate, then rank by ``overall`` and append to the journal unless the live ranking is more
    complete. Raises PermissionError when the configuration's quote survival, or the pool's
    own, is below the gate (`vacancy_gate`)."""
    pool = load_pool(env, vacancy) if pool is None else pool
    decision = vacancy_gate(env.derived_db, vacancy, pool, env.config)
    return publish_ranking(
        env.derived_db, vacancy, pool, env.config, decision, failed=failed, run_id=run_id
    )


def fair_shares(wanted: dict[str, int], limit: int | None) -> dict[str, int]:
    """Split a budget across vacancies by water-filling: small needs are met in full, the rest
    share what is left equally (deterministic; ties by vacancy id)."""
    if limit is None:
        return dict(wanted)
    shares: dict[str, int] = {}
    left = limit
    order = sorted(wanted, key=lambda k: (wanted[k], k))
    for i, key in enumerate(order):
        fair = left // (len(order) - i)
        shares[key] = min(wanted[key], fair)
        left -= shares[key]
    # hand out the remainder one by one in id order
    for key in sorted(wanted):
        if left <= 0:
            break
        extra = min(left, wanted[key] - shares[key])
        shares[key] += extra
        left -= extra
    return shares


@dataclass
class RunSummary:
    index: IndexSync | None
    pools: dict[str, PoolResult] = field(default_factory=dict)
    reports: dict[str, JudgeReport] = field(default_factory=dict)
    published: dict[str, JournalEntry] = field(default_factory=dict)
    held: dict[str, str] = field(default_factory=dict)  # vacancy id → why the live one stays
    unchanged: dict[str, JournalEntry] = field(default_factory=dict)  # the live one is the same
    blocked: dict[str, str] = field(default_factory=dict)  # vacancy id → its own gate's reason
    gate: GateDecision | None = None
    budget: int | None = None
    seconds: float = 0.0

    @property
    def deferred(self) -> int:
        return sum(r.deferred for r in self.reports.values())

    def totals(self) -> dict[str, int]:
        reps = self.reports.values()
        return {
            "vacancies": len(self.reports),
            "pool_pairs": sum(r.pool for r in reps),
            "cached": sum(r.cached for r in reps),
            "judged": sum(r.evaluated for r in reps),
            "failed": sum(r.failed for r in reps),
            "deferred": self.deferred,
            "rejudged": sum(r.rejudged for r in reps),
            "llm_calls": sum(r.usage.calls for r in reps),
            "tokens": sum(r.usage.prompt_tokens + r.usage.completion_tokens for r in reps),
            "published": len(self.published),
            "unchanged": len(self.unchanged),
            "held": len(self.held),
            "blocked": len(self.blocked),
        }

    def lines(self) -> list[str]:
        t = self.totals()
        out = [
            f"{t['vacancies']} vacancies, {t['pool_pairs']} pool pairs: {t['cached']} cached,"
            f" {t['judged']} judged, {t['failed']} failed, {t['deferred']} deferred by the"
            f" budget ({self.budget if self.budget is not None else 'no'} cap);"
            f" {t['llm_calls']} LLM calls, {t['tokens']} tokens, {self.seconds:.1f}s",
        ]
        if self.gate is not None:
            out.append(f"quote gate {self.gate.reason}")
            if not self.gate.passed:
                out.append(blocked_advice(self.gate))
        elif t["vacancies"] and not t["pool_pairs"]:
            out.append("no resume in any pool: nothing to judge or publish (ingest resumes first)")
        for vid, entry in sorted(self.published.items()):
            top = ", ".join(f"{r.resume_id}:{r.overall}" for r in entry.top(3))
            out.append(f"{vid}: journal #{entry.seq}, {entry.judged} ranked, top 3: {top}")
        for vid, entry in sorted(self.unchanged.items()):
            out.append(f"{vid}: ranking unchanged, journal #{entry.seq}")
        for vid, reason in sorted(self.held.items()):
            out.append(f"{vid}: ranking held, {reason}")
        for vid, reason in sorted(self.blocked.items()):
            out.append(f"{vid}: ranking not published, quote gate {reason}; {pool_advice(vid)}")
        return out

    def __str__(self) -> str:
        return "\n".join(self.lines())


def judge_all(
    env: JudgeEnv,
    vacancy_ids: Sequence[str] | None = None,
    budget: int | None = DEFAULT_BUDGET,
    workers: int = DEFAULT_WORKERS,
    run_id: str = "",
    refresh: bool = True,
    publish: bool = True,
    on_vacancy: Callable[[str, str, Any], None] | None = None,
    rejudge_failed: bool = False,
) -> RunSummary:
    """The nightly run: refresh the index, rebuild pools, judge with one budget, publish.

    ``on_vacancy(vacancy_id, step, result)`` is called after each step of each vacancy
    (``"pool"``, ``"judge"``, ``"publish"`` or ``"blocked"``), so a caller (the Dagster op job)
    can record materialisations as they happen. ``rejudge_failed``: cached evaluations that
    failed the evidence check are judged again, within the budget (see `judge_pool`), and when
    the configuration's gate has no mandatory quote to measure, those that quoted none.
    A vacancy whose own evaluations fail the quote gate is not published (`vacancy_gate`);
    its failed evaluations are judged again on the next run.
    """
    started = time.perf_counter()
    summary = RunSummary(index=refresh_index(env) if refresh else None, budget=budget)
    rejudge_unquoted = rejudge_failed and not gate(env).measured
    vacancies = calibrated_vacancies(env.sources_db, env.derived_db, vacancy_ids)
    for vacancy in vacancies:
        result = build_vacancy_pool(env, vacancy, run_id)
        summary.pools[vacancy.vacancy_id] = result
        if on_vacancy:
            on_vacancy(vacancy.vacancy_id, "pool", result)
    # One budget for the run, shared fairly: count cold pairs first, then give each its share.
    wanted = {
        v.vacancy_id: cold_count(
            env.derived_db,
            v,
            summary.pools[v.vacancy_id].resumes,
            env.config,
            rejudge_failed,
            rejudge_unquoted,
        )  # fmt: skip
        for v in vacancies
    }
    shares = fair_shares(wanted, budget)
    for vacancy in vacancies:
        report = judge_vacancy(
            env, vacancy, summary.pools[vacancy.vacancy_id].resumes,
            Budget(shares[vacancy.vacancy_id]), workers, run_id, rejudge_failed=rejudge_failed,
            rejudge_unquoted=rejudge_unquoted,
        )  # fmt: skip
        summary.reports[vacancy.vacancy_id] = report
        if on_vacancy:
            on_vacancy(vacancy.vacancy_id, "judge", report)
    if not summary.totals()["pool_pairs"]:  # no resume in any pool: nothing to gate or publish
        summary.seconds = time.perf_counter() - started
        return summary
    summary.gate = gate(env)
    if publish:
        for vacancy in vacancies:
            pool = summary.pools[vacancy.vacancy_id].resumes
            decision = summary.gate
            if decision.passed:
                decision = vacancy_gate(env.derived_db, vacancy, pool, env.config)
            if not decision.passed:
                if summary.gate.passed:
                    summary.blocked[vacancy.vacancy_id] = decision.reason
                if on_vacancy:
                    on_vacancy(vacancy.vacancy_id, "blocked", decision)
                continue
            publication = publish_vacancy(
                env, vacancy, pool, failed=summary.reports[vacancy.vacancy_id].failed,
                run_id=run_id,
            )  # fmt: skip
            if publication.published and publication.live is not None:
                summary.published[vacancy.vacancy_id] = publication.live
            elif publication.unchanged and publication.live is not None:
                summary.unchanged[vacancy.vacancy_id] = publication.live
            else:
                summary.held[vacancy.vacancy_id] = publication.reason
            if on_vacancy:
                on_vacancy(vacancy.vacancy_id, "publish", publication)
    summary.seconds = time.perf_counter() - started
    return summary

"""The monthly recall probe: does the judge's pool miss people who would make the top 10?

Once a month, for every **active vacancy** (one with a published ranking — the results a
recruiter sees), take `sample_size` candidates from **outside** its current pool and results,
including the **archive layer** that never enters a normal pool, and have the judge score them
through the same score cache and the same kind of budget as the nightly run. Alert only on
**displacing finds**: `overall ≥ min_overall` *and* above the lowest `overall` in the vacancy's
current top `top_k` (or the top list is shorter than `top_k`). A strong candidate who would not
even enter the top 10 is no recall problem — mass roles with more than ten strong people would
otherwise alarm every month.

The sample, per vacancy and month, is deterministic (same month → same sample → all cache hits
on a re-run). Per layer, `targeted_share` of the slots go to the outside candidates BM25 ranks
highest for the vacancy (where misses are likely: what a deeper or archive search would surface),
the rest are drawn uniformly at random (an unbiased look at everything else). `archive_share` of
the sample comes from the archive layer when it has enough candidates.

`plan()` picks the samples and estimates the cost (cold pairs, prompt/completion tokens and, with
prices configured, dollars) before anything is sent to the LLM; `judge()` runs the plan; `run()`
does both and stores the month's results in `recall_probe_results`.

Dagster-free; `hltm_dagster/defs/probe/assets.py` wires it to a monthly partition and a warning check.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hltm.judge.calibration import calibrated_vacancies
from hltm.judge.candidates import bm25_index
from hltm.judge.data import Resume, Vacancy, load_resumes
from hltm.judge.formal import DEFAULT_FORMAL_PATTERNS
from hltm.judge.pipeline import (
    DEFAULT_BUDGET,
    DEFAULT_WORKERS,
    Budget,
    JudgeConfig,
    JudgeReport,
    cached_scores,
    judge_pool,
)
from hltm.judge.store import ensure_judge_schema
from hltm.judge.tasks import JUDGE_TASK, build_payload
from hltm.llm import LLM
from hltm.settings import JUDGE_ENV, PROBE_ENV, read_env
from hltm.tokens import count_tokens
from hltm.warehouse import connect, insert_rows, table_exists

RESULTS_TABLE = "recall_probe_results"
_TOKENS_PER_MESSAGE = 3
_DEFAULT_COMPLETION_TOKENS = 700


@dataclass(frozen=True)
class ProbeSettings:
    """Thresholds, sample size and budget of the probe, from the environment (`HLTM_PROBE_*`)."""

    sample_size: int = 20
    min_overall: int = 80
    top_k: int = 10
    archive_share: float = 0.5
    targeted_share: float = 0.5
    budget: int | None = DEFAULT_BUDGET  # cold evaluations per probe run (None: unlimited)
    workers: int = DEFAULT_WORKERS
    start_date: str = "2025-01-01"  # first month partition
    price_input_per_1m: float | None = None  # USD per 1M prompt tokens, for the cost estimate
    price_output_per_1m: float | None = None

    @classmethod
    def from_env(cls, **overrides: Any) -> ProbeSettings:
        # The probe spends the judge's kind of budget: its own setting, else the judge's.
        judge = read_env(JUDGE_ENV)
        inherited = {name: judge[name] for name in ("budget", "workers") if name in judge}
        values: dict[str, Any] = {**inherited, **read_env(PROBE_ENV), **overrides}
        settings = cls(**values)
        if settings.sample_size < 1 or settings.top_k < 1:
            raise ValueError("sample_size and top_k must be at least 1")
        for name in ("archive_share", "targeted_share"):
            if not 0.0 <= getattr(settings, name) <= 1.0:
                raise ValueError(f"{name} must be within [0, 1]")
        return settings


# ---- the plan: samples and the cost estimate ----------------------------------------------------


@dataclass(frozen=True)
class Candidate:
    resume: Resume
    selection: str  # "targeted" | "random"
    bm25_rank: int | None  # rank among the layer's outside candidates (targeted only)

    @property
    def layer(self) -> str:
        return self.resume.layer


@dataclass
class VacancyProbe:
    vacancy: Vacancy
    top: list[tuple[str, int]]  # current top-k (resume id, overall), best first
    ranking_version: str  # the vacancy version the ranking was computed for
    excluded: int  # pool ∪ results size
    sample: list[Candidate]
    cold: int = 0
    prompt_tokens: int = 0  # cold pairs only
    completion_tokens: int = 0  # estimated, cold pairs only

    @property
    def top_min(self) -> int | None:
        return min(o for _, o in self.top) if self.top else None

    @property
    def stale_ranking(self) -> bool:
        return self.ranking_version != self.vacancy.version_key


@dataclass
class ProbePlan:
    month: str
    config: JudgeConfig
    settings: ProbeSettings
    vacancies: list[VacancyProbe]
    skipped: dict[str, str] = field(default_factory=dict)  # vacancy id → why

    @property
    def pairs(self) -> int:
        return sum(len(v.sample) for v in self.vacancies)

    @property
    def cold_pairs(self) -> int:
        return sum(v.cold for v in self.vacancies)

    @property
    def pairs_within_budget(self) -> int:
        limit = self.settings.budget
        return self.cold_pairs if limit is None else min(limit, self.cold_pairs)

    @property
    def prompt_tokens(self) -> int:
        return sum(v.prompt_tokens for v in self.vacancies)

    @property
    def completion_tokens(self) -> int:
        return sum(v.completion_tokens for v in self.vacancies)

    @property
    def estimated_usd(self) -> float | None:
        s = self.settings
        if s.price_input_per_1m is None or s.price_output_per_1m is None:
            return None
        return round(
            self.prompt_tokens / 1e6 * s.price_input_per_1m
            + self.completion_tokens / 1e6 * s.price_output_per_1m,
            4,
        )

    def estimate(self) -> dict[str, Any]:
        return {
            "month": self.month,
            "vacancies": len(self.vacancies),
            "skipped_vacancies": len(self.skipped),
            "pairs": self.pairs,
            "cold_pairs": self.cold_pairs,
            "cached_pairs": self.pairs - self.cold_pairs,
            "pairs_within_budget": self.pairs_within_budget,
            "budget": self.settings.budget if self.settings.budget is not None else "none",
            "est_prompt_tokens": self.prompt_tokens,
            "est_completion_tokens": self.completion_tokens,
            "est_tokens": self.prompt_tokens + self.completion_tokens,
            "est_usd": self.estimated_usd if self.estimated_usd is not None else "no prices set",
            "model": self.config.model,
            "prompt_version": self.config.prompt_version,
        }


def _seed(*parts: str) -> int:
    return int(hashlib.sha1("\x00".join(parts).encode()).hexdigest()[:16], 16)


def _current_results(
    con: Any, vacancy_id: str, top_k: int
) -> tuple[list[tuple[str, int]], set[str], str | None]:
    """(top-k of the latest published ranking, every ranked or pooled id, ranking's version)."""
    top: list[tuple[str, int]] = []
    ids: set[str] = set()
    version = None
    if table_exists(con, "rankings"):
        rows = con.execute(
            "SELECT resume_id, overall, journal_seq FROM rankings WHERE vacancy_id = ?"
            " ORDER BY rank",
            [vacancy_id],
        ).fetchall()
        ids.update(r[0] for r in rows)
        top = [(r[0], int(r[1])) for r in rows[:top_k]]
        if rows:
            got = con.execute(
                "SELECT vacancy_version FROM ranking_journal WHERE seq = ?", [rows[0][2]]
            ).fetchone()
            version = got[0] if got else None
    if table_exists(con, "judge_pools"):
        ids.update(
            r[0]
            for r in con.execute(
                "SELECT resume_id FROM judge_pools WHERE vacancy_id = ?", [vacancy_id]
            ).fetchall()
        )
    return top, ids, version


def _pick(
    vacancy: Vacancy,
    layer_resumes: Sequence[Resume],
    excluded: set[str],
    n: int,
    targeted_share: float,
    month: str,
) -> list[Candidate]:
    outside = [r for r in layer_resumes if r.resume_id not in excluded]
    n = min(n, len(outside))
    if n <= 0:
        return []
    n_targeted = round(n * targeted_share)
    picked: list[Candidate] = []
    if n_targeted:
        index = bm25_index(layer_resumes)  # cached while the layer is unchanged
        ranked = [rid for rid, _ in index.search(vacancy.bm25_query(), len(layer_resumes))]
        by_id = {r.resume_id: r for r in outside}
        rank = 0
        for rid in ranked:
            if rid not in by_id:
                continue
            rank += 1
            picked.append(Candidate(by_id[rid], "targeted", rank))
            if len(picked) >= n_targeted:
                break
    chosen = {c.resume.resume_id for c in picked}
    rest = [r for r in outside if r.resume_id not in chosen]
    rng = random.Random(_seed(month, vacancy.vacancy_id, layer_resumes[0].layer))
    for r in rng.sample(rest, min(n - len(picked), len(rest))):
        picked.append(Candidate(r, "random", None))
    return picked


def _prompt_tokens(vacancy: Vacancy, resume: Resume) -> int:
    messages = JUDGE_TASK.messages(build_payload(vacancy, resume))
    return sum(count_tokens(m["content"]) + _TOKENS_PER_MESSAGE for m in messages)


def _completion_estimate(con: Any, config: JudgeConfig) -> int:
    if not table_exists(con, "judge_scores"):
        return _DEFAULT_COMPLETION_TOKENS
    row = con.execute(
        "SELECT avg(completion_tokens) FROM judge_scores WHERE model = ? AND prompt_version = ?",
        [config.model, config.prompt_version],
    ).fetchone()
    return int(round(row[0])) if row and row[0] is not None else _DEFAULT_COMPLETION_TOKENS


def plan(
    sources_db: Path | str,
    derived_db: Path | str,
    config: JudgeConfig,
    month: str,
    settings: ProbeSettings | None = None,
    vacancy_ids: Sequence[str] | None = None,
) -> ProbePlan:
    """Pick each active vacancy's sample and estimate the cost; nothing is judged."""
    settings = settings or ProbeSettings.from_env()
    vacancies = calibrated_vacancies(sources_db, derived_db, vacancy_ids)
    resumes = load_resumes(sources_db)
    layers: dict[str, list[Resume]] = {}
    for r in resumes:
        layers.setdefault(r.layer, []).append(r)
    out = ProbePlan(month, config, settings, [])
    with connect(derived_db) as con:
        ensure_judge_schema(con)
        completion = _completion_estimate(con, config)
        for vacancy in vacancies:
            top, excluded, version = _current_results(con, vacancy.vacancy_id, settings.top_k)
            if not top:
                out.skipped[vacancy.vacancy_id] = "no published ranking (not an active vacancy)"
                continue
            archive = layers.get("archive", [])
            active = layers.get("active", [])
            n_archive = min(
                round(settings.sample_size * settings.archive_share),
                sum(1 for r in archive if r.resume_id not in excluded),
            )
            sample = _pick(
                vacancy, archive, excluded, n_archive, settings.targeted_share, month
            ) if archive else []  # fmt: skip
            if active:
                sample += _pick(
                    vacancy, active, excluded, settings.sample_size - len(sample),
                    settings.targeted_share, month,
                )  # fmt: skip
            if len(sample) < settings.sample_size and archive:  # few active outsiders left
                taken = excluded | {c.resume.resume_id for c in sample}
                sample += _pick(
                    vacancy, archive, taken, settings.sample_size - len(sample),
                    settings.targeted_share, month + "/fill",
                )  # fmt: skip
            probe = VacancyProbe(vacancy, top, version or "", len(excluded), sample)
            out.vacancies.append(probe)
    for probe in out.vacancies:
        resumes_ = [c.resume for c in probe.sample]
        cached = cached_scores(derived_db, probe.vacancy, resumes_, config)
        cold = [r for r in resumes_ if r.resume_id not in cached]
        probe.cold = len(cold)
        probe.prompt_tokens = sum(_prompt_tokens(probe.vacancy, r) for r in cold)
        probe.completion_tokens = completion * len(cold)
    return out


# ---- judging and results -------------------------------------------------------------------------


@dataclass(frozen=True)
class ProbeRow:
    vacancy_id: str
    resume_id: str
    layer: str
    selection: str
    bm25_rank: int | None
    status: str  # scored | pending (deferred by the budget or failed; retried next run)
    overall: int | None
    scores: dict[str, int] | None
    actual_role: str | None
    top_min: int | None
    top_size: int
    displacing: bool

    def as_find(self) -> dict[str, Any]:
        return {
            "vacancy_id": self.vacancy_id,
            "resume_id": self.resume_id,
            "layer": self.layer,
            "overall": self.overall,
            "top_min": self.top_min,
            "actual_role": self.actual_role,
            "selection": self.selection,
        }


@dataclass
class ProbeResult:
    plan: ProbePlan
    rows: list[ProbeRow]
    reports: dict[str, JudgeReport]
    deferred: int
    failed: int
    run_id: str = ""

    @property
    def finds(self) -> list[ProbeRow]:
        return [r for r in self.rows if r.displacing]

    @property
    def scored(self) -> int:
        return sum(1 for r in self.rows if r.status == "scored")

    def summary(self) -> dict[str, Any]:
        strong = [
            r
            for r in self.rows
            if r.overall is not None and r.overall >= self.plan.settings.min_overall
        ]
        return {
            **self.plan.estimate(),
            "scored": self.scored,
            "judged_now": sum(r.evaluated for r in self.reports.values()),
            "deferred_by_budget": self.deferred,
            "failed": self.failed,
            "strong_outside": len(strong),
            "strong_but_not_displacing": len(strong) - len(self.finds),
            "displacing_finds": len(self.finds),
            "archive_in_sample": sum(1 for r in self.rows if r.layer == "archive"),
            "llm_calls": sum(r.usage.calls for r in self.reports.values()),
            "tokens": sum(
                r.usage.prompt_tokens + r.usage.completion_tokens for r in self.reports.values()
            ),
        }


def is_displacing(overall: int, top: Sequence[int], min_overall: int, top_k: int) -> bool:
    """`overall ≥ min_overall` and it would enter the top `top_k` by beating its lowest."""
    if overall < min_overall:
        return False
    return len(top) < top_k or overall > min(top)


def judge(
    plan_: ProbePlan,
    derived_db: Path | str,
    llm: LLM,
    run_id: str = "",
    budget: Budget | None = None,
    formal_patterns: Sequence[str] = DEFAULT_FORMAL_PATTERNS,
) -> ProbeResult:
    """Judge the plan's samples (cache first, one budget for the run), then find displacers.

    `formal_patterns`: the nightly judge's formal-item filter, so both post-process alike."""
    settings = plan_.settings
    budget = budget or Budget(settings.budget)
    reports: dict[str, JudgeReport] = {}
    rows: list[ProbeRow] = []
    for probe in plan_.vacancies:
        resumes = [c.resume for c in probe.sample]
        report = judge_pool(
            derived_db, llm, probe.vacancy, resumes, config=plan_.config, budget=budget,
            workers=settings.workers, run_id=run_id, formal_patterns=formal_patterns,
        )  # fmt: skip
        reports[probe.vacancy.vacancy_id] = report
        scores = cached_scores(derived_db, probe.vacancy, resumes, plan_.config)
        top = [o for _, o in probe.top]
        for c in probe.sample:
            got = scores.get(c.resume.resume_id)
            overall = int(got["overall"]) if got else None
            rows.append(
                ProbeRow(
                    vacancy_id=probe.vacancy.vacancy_id,
                    resume_id=c.resume.resume_id,
                    layer=c.layer,
                    selection=c.selection,
                    bm25_rank=c.bm25_rank,
                    status="scored" if got else "pending",
                    overall=overall,
                    scores={
                        k: int(got[k]) for k in ("role", "level", "skills", "experience", "overall")
                    }
                    if got
                    else None,
                    actual_role=(got or {}).get("actual_role"),
                    top_min=probe.top_min,
                    top_size=len(top),
                    displacing=overall is not None
                    and is_displacing(overall, top, settings.min_overall, settings.top_k),
                )
            )
    return ProbeResult(
        plan_, rows, reports,
        deferred=sum(r.deferred for r in reports.values()),
        failed=sum(r.failed for r in reports.values()),
        run_id=run_id,
    )  # fmt: skip


def ensure_results_table(con: Any) -> None:
    con.execute(
        f"CREATE TABLE IF NOT EXISTS {RESULTS_TABLE} (month VARCHAR NOT NULL,"
        " vacancy_id VARCHAR NOT NULL, vacancy_version VARCHAR NOT NULL,"
        " resume_id VARCHAR NOT NULL, layer VARCHAR NOT NULL, selection VARCHAR NOT NULL,"
        " bm25_rank INTEGER, status VARCHAR NOT NULL, overall INTEGER, scores VARCHAR,"
        " actual_role VARCHAR, top_min INTEGER, top_size INTEGER NOT NULL,"
        " displacing BOOLEAN NOT NULL, model VARCHAR NOT NULL, prompt_version VARCHAR NOT NULL,"
        " run_id VARCHAR NOT NULL, probed_at TIMESTAMP NOT NULL,"
        " PRIMARY KEY (month, vacancy_id, resume_id))"
    )


def store(result: ProbeResult, derived_db: Path | str) -> None:
    """The month's rows replace the previous run of the same month (the scores themselves stay
    in the append-only score cache)."""
    now = datetime.now(UTC).replace(tzinfo=None)
    versions = {p.vacancy.vacancy_id: p.vacancy.version_key for p in result.plan.vacancies}
    with connect(derived_db) as con:
        ensure_results_table(con)
        con.execute("BEGIN TRANSACTION")
        con.execute(f"DELETE FROM {RESULTS_TABLE} WHERE month = ?", [result.plan.month])
        insert_rows(
            con,
            f"INSERT INTO {RESULTS_TABLE}",
            [
                [result.plan.month, r.vacancy_id, versions[r.vacancy_id], r.resume_id,
                 r.layer, r.selection, r.bm25_rank, r.status, r.overall,
                 json.dumps(r.scores) if r.scores else None, r.actual_role, r.top_min,
                 r.top_size, r.displacing, result.plan.config.model,
                 result.plan.config.prompt_version, result.run_id, now]
                for r in result.rows
            ],
        )  # fmt: skip
        con.execute("COMMIT")


def run(
    sources_db: Path | str,
    derived_db: Path | str,
    llm: LLM,
    config: JudgeConfig,
    month: str,
    settings: ProbeSettings | None = None,
    vacancy_ids: Sequence[str] | None = None,
    run_id: str = "",
) -> ProbeResult:
    """Plan (with the cost estimate), judge, store."""
    plan_ = plan(sources_db, derived_db, config, month, settings, vacancy_ids)
    result = judge(plan_, derived_db, llm, run_id)
    store(result, derived_db)
    return result

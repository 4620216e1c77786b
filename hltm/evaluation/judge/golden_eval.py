"""Scoring the judge and its baselines on a golden set: the costly part, apart from the pin test."""

from __future__ import annotations

import json
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from hltm.embeddings import CachedEmbedder
from hltm.evaluation.judge.golden import (
    GoldenSet,
    K,
    bm25_rankings,
    cosine_rankings,
    golden_vectors,
    labelled_in,
)
from hltm.evaluation.judge.metrics import PrecisionResult, overall_fit_recall, overall_precision
from hltm.judge.candidates import K_BM25, K_VECTOR, QueryVectors
from hltm.judge.data import Resume
from hltm.judge.evidence import MET_SHARE, quoted_years, required_years, support, term_share
from hltm.judge.gate import GateDecision, gate_from_counts
from hltm.judge.journal import rank_pool
from hltm.judge.pipeline import Budget, JudgeConfig, cached_scores, judge_config, judge_pool
from hltm.judge.pools import rrf, union_pool
from hltm.judge.quotes import sum_counts
from hltm.judge.resume import present_month
from hltm.judge.tasks import build_payload
from hltm.llm import LLM, LLMUsage

__all__ = [
    "GoldenReport",
    "evidence_counts",
    "RelevanceMeasure",
    "evaluate_golden",
    "measure_relevance",
    "save_report",
]

METHODS = ("cosine", "bm25", "rrf", "union+judge")


# --------------------------------------------------------------------------------- evaluation


@dataclass
class GoldenReport:
    config: JudgeConfig
    precision: dict[tuple[str, str, str], PrecisionResult]  # (setting, method, strict|soft)
    recall: dict[str, tuple[int, int]]  # pool name → (fits found, fits labelled)
    invisible_fits: int  # fits outside the vector top-100
    rescued_fits: int  # of those, in the union pool
    rrf_rescued: int  # of those, in the RRF top-100
    judged: int
    cached: int
    failed: int
    usage: LLMUsage
    gate: GateDecision
    pins: dict[str, Any]
    vacancies: list[str] = field(default_factory=list)
    spread: dict[str, tuple[float, float]] = field(default_factory=dict)
    # label (fit | borderline | miss) → checklist status → items, over the judged closed set
    checklist: dict[str, dict[str, int]] = field(default_factory=dict)
    # what the "met" items of the live top 10s quote (`evidence_counts`)
    evidence: dict[str, int] = field(default_factory=dict)

    def value(self, setting: str, method: str, soft: bool = False) -> float:
        return self.precision[(setting, method, "soft" if soft else "strict")].value

    def as_dict(self) -> dict[str, Any]:
        return {
            "config": self.config.as_metadata(),
            "precision": {
                f"{s}/{m}/{kind}": {"hits": p.hits, "shown": p.shown, "value": round(p.value, 4)}
                for (s, m, kind), p in self.precision.items()
            },
            "fit_recall": {k: {"found": f, "of": t} for k, (f, t) in self.recall.items()},
            "invisible_fits": self.invisible_fits,
            "rescued_by_union": self.rescued_fits,
            "rescued_by_rrf": self.rrf_rescued,
            "judged": self.judged,
            "cached": self.cached,
            "failed": self.failed,
            "gate": {"passed": self.gate.passed, "rate": round(self.gate.rate, 4)},
            "pins": self.pins,
            "checklist": self.checklist,
            "evidence": self.evidence,
        }

    def evidence_table(self) -> str:
        """What the top 10s show a recruiter: "met" years requirements whose quote holds dated
        work, other "met" items whose quote bears on the requirement."""
        e = self.evidence

        def share(part: str, whole: str) -> str:
            return (
                f"{e.get(part, 0) / e[whole]:.1%} ({e.get(part, 0)}/{e[whole]})"
                if e.get(whole)
                else "–"
            )

        return "\n".join(
            [
                "| in the live top 10s | share |",
                "|---|---|",
                f'| "met" years requirements whose quote holds a date range | {share("years_dated", "years_met")} |',
                f"| … or states the years | {share('years_backed', 'years_met')} |",
                f'| other "met" items whose quote bears on the requirement | {share("other_bearing", "other_met")} |',
                f"| … and states at least half of its key terms | {share('other_terms', 'other_met')} |",
            ]
        )

    def checklist_table(self) -> str:
        """Checklist statuses by label: fits should read mostly "met", misses mostly not."""
        lines = ["| label | items | met | partial | not found |", "|---|---|---|---|---|"]
        for label, counts in self.checklist.items():
            total = sum(counts.values())
            shares = " | ".join(
                f"{counts.get(s, 0) / total:.1%}" if total else "–"
                for s in ("met", "partial", "not_found")
            )
            lines.append(f"| {label} | {total} | {shares} |")
        return "\n".join(lines)

    def table(self) -> str:
        """The evaluation as a Markdown table (what the closing note and the UI show)."""

        def cell(setting: str, method: str, soft: bool) -> str:
            p = self.precision[(setting, method, "soft" if soft else "strict")]
            return f"{p.value:.1%} ({p.hits}/{p.shown})"

        lines = [
            "| method | closed strict P@10 | closed soft P@10 | live strict P@10 | live soft P@10 |",
            "|---|---|---|---|---|",
        ]
        for m in METHODS:
            lines.append(
                f"| {m} | {cell('closed', m, False)} | {cell('closed', m, True)} |"
                f" {cell('live', m, False)} | {cell('live', m, True)} |"
            )
        lines += ["", "| pool | fit recall |", "|---|---|"]
        for name, (found, total) in self.recall.items():
            lines.append(
                f"| {name} | {found}/{total} ({found / total:.1%}) |"
                if total
                else f"| {name} | – |"
            )
        lines.append("")
        lines.append(
            f"Fits outside the vector top-{K_VECTOR}: {self.invisible_fits}; the union pool"
            f" rescues {self.rescued_fits}, the RRF top-{K_VECTOR} {self.rrf_rescued}."
        )
        lo_c, hi_c = self.spread.get("cosine", (0.0, 0.0))
        lo_j, hi_j = self.spread.get("union+judge", (0.0, 0.0))
        lines.append(
            f"Per-vacancy strict P@10 (closed): cosine {lo_c:.0%}–{hi_c:.0%},"
            f" union+judge {lo_j:.0%}–{hi_j:.0%}. Judge: {self.config.model}"
            f" ({self.config.prompt_version}); {self.judged} pairs judged now, {self.cached} from"
            f" the cache, {self.failed} failed; {self.usage.calls} LLM calls,"
            f" {self.usage.prompt_tokens + self.usage.completion_tokens} tokens; quote gate"
            f" {self.gate.reason}."
        )
        return "\n".join(lines)

    def per_vacancy_table(self) -> str:
        """Strict · soft hits in each vacancy's top 10, every method, closed set and live pool."""
        head = " | ".join(f"{m} {s}" for s in ("closed", "live") for m in METHODS)
        lines = [f"| vacancy | {head} |", "|---" * (1 + 2 * len(METHODS)) + "|"]
        for vid in self.vacancies:
            cells = []
            for setting in ("closed", "live"):
                for method in METHODS:
                    h, n = self.precision[(setting, method, "strict")].per_vacancy.get(vid, (0, 0))
                    soft, _ = self.precision[(setting, method, "soft")].per_vacancy.get(vid, (0, 0))
                    cells.append(f"{h} · {soft} /{n}")
            lines.append(f"| {vid} | " + " | ".join(cells) + " |")
        return "\n".join(lines)


def evaluate_golden(
    gs: GoldenSet,
    llm: LLM,
    embedder: CachedEmbedder,
    derived_db: Path | str,
    *,
    reasoning_effort: str | None = None,
    workers: int = 0,  # 0: the LLM's slots
    run_id: str = "golden",
    vacancy_ids: Sequence[str] | None = None,
) -> GoldenReport:
    """Judge the golden pairs (cached ones are free) and compute every baseline's numbers."""
    config = judge_config(llm, reasoning_effort)
    vectors = golden_vectors(gs, embedder, QueryVectors(embedder, derived_db))
    cos = cosine_rankings(gs, vectors)
    bm = bm25_rankings(gs)
    by_id = gs.resume_by_id
    vacancies = [v for v in gs.vacancies if vacancy_ids is None or v.vacancy_id in vacancy_ids]
    labels = {v.vacancy_id: gs.labels.get(v.vacancy_id, {}) for v in vacancies}

    rankings: dict[tuple[str, str], dict[str, list[str]]] = {}
    pools: dict[str, dict[str, list[str]]] = {"vector": {}, "bm25": {}, "rrf": {}, "union": {}}
    judged = cached = failed = 0
    usage = LLMUsage()
    counts = []
    evidence: list[dict[str, int]] = []
    invisible = rescued = rrf_rescued = 0
    checklist: dict[str, dict[str, int]] = {label: {} for label in ("fit", "borderline", "miss")}
    for v in vacancies:
        vid = v.vacancy_id
        lab = labels[vid]
        cos_ids = [r for r, _ in cos[vid]]
        bm_ids = [r for r, _ in bm[vid]]
        fused_all = [r for r, _ in rrf([cos_ids, bm_ids])]
        vec_top = cos[vid][:K_VECTOR]
        bm_top = bm[vid][:K_BM25]
        union = [str(e.id) for e in union_pool(vec_top, bm_top, K_VECTOR, K_BM25)]
        fused_live = [r for r, _ in rrf([[r for r, _ in vec_top], [r for r, _ in bm_top]])][
            :K_VECTOR
        ]
        pools["vector"][vid] = [r for r, _ in vec_top]
        pools["bm25"][vid] = [r for r, _ in bm_top]
        pools["rrf"][vid] = fused_live
        pools["union"][vid] = union
        fits = {r for r, label in lab.items() if label == "fit"}
        outside = fits - set(pools["vector"][vid])
        invisible += len(outside)
        rescued += len(outside & set(union))
        rrf_rescued += len(outside & set(fused_live))

        # judge every labelled pair (closed set ⊇ live pool), ties in cosine order
        closed_order = labelled_in(cos_ids, lab)
        report = judge_pool(
            derived_db, llm, v, [by_id[r] for r in closed_order], config=config,
            budget=Budget(None), workers=workers, run_id=run_id,
        )  # fmt: skip
        judged += report.evaluated
        cached += report.cached
        failed += report.failed
        usage = _add(usage, report.usage)
        scores = cached_scores(derived_db, v, [by_id[r] for r in closed_order], config)
        counts.append(_counts_from(scores))
        _count_statuses(checklist, scores, lab)

        def by_overall(order: Sequence[str], scores: Mapping[str, Any] = scores) -> list[str]:
            return [r.resume_id for r in rank_pool([by_id[rid] for rid in order], scores)]

        rankings.setdefault(("closed", "cosine"), {})[vid] = closed_order
        rankings.setdefault(("closed", "bm25"), {})[vid] = labelled_in(
            bm_ids + [r for r in cos_ids if r not in set(bm_ids)], lab
        )
        rankings.setdefault(("closed", "rrf"), {})[vid] = labelled_in(
            fused_all + [r for r in cos_ids if r not in set(fused_all)], lab
        )
        rankings.setdefault(("closed", "union+judge"), {})[vid] = by_overall(closed_order)
        rankings.setdefault(("live", "cosine"), {})[vid] = labelled_in(pools["vector"][vid], lab)
        rankings.setdefault(("live", "bm25"), {})[vid] = labelled_in(pools["bm25"][vid], lab)
        rankings.setdefault(("live", "rrf"), {})[vid] = labelled_in(fused_live, lab)
        rankings.setdefault(("live", "union+judge"), {})[vid] = by_overall(labelled_in(union, lab))
        top = [by_id[r] for r in rankings[("live", "union+judge")][vid][:K]]
        evidence.append(evidence_counts(top, scores))

    precision = {}
    for (setting, method), ranked in rankings.items():
        for kind in ("strict", "soft"):
            precision[(setting, method, kind)] = overall_precision(
                ranked, labels, k=K, soft=kind == "soft"
            )
    recall = {
        f"vector top-{K_VECTOR}": overall_fit_recall(pools["vector"], labels),
        f"BM25 top-{K_BM25}": overall_fit_recall(pools["bm25"], labels),
        f"RRF top-{K_VECTOR}": overall_fit_recall(pools["rrf"], labels),
        f"union (vector {K_VECTOR} ∪ BM25 {K_BM25})": overall_fit_recall(pools["union"], labels),
    }
    spread = {}
    for method in ("cosine", "union+judge"):
        values = list(precision[("closed", method, "strict")].per_vacancy_values().values())
        spread[method] = (min(values), max(values)) if values else (0.0, 0.0)
    return GoldenReport(
        config=config, precision=precision, recall=recall, invisible_fits=invisible,
        rescued_fits=rescued, rrf_rescued=rrf_rescued, judged=judged, cached=cached,
        failed=failed, usage=usage, gate=gate_from_counts(sum_counts(counts)),
        pins=gs.pins, vacancies=[v.vacancy_id for v in vacancies], spread=spread,
        checklist=checklist, evidence={k: sum(e[k] for e in evidence) for k in evidence[0]} if evidence else {},
    )  # fmt: skip


def evidence_counts(
    top: Sequence[Resume], scores: Mapping[str, Mapping[str, Any]]
) -> dict[str, int]:
    """Over the "met" items of a top: years requirements (``years_met``) whose quote holds a
    date range (``years_dated``) or at least states years (``years_backed``), and the other
    items (``other_met``) whose quote bears on the requirement (``other_bearing``: a shared key
    term or, by meaning, nearer it than any other requirement) and states at least half of its
    key terms (``other_terms``). Checked by `hltm.judge.evidence`, whatever judged them."""
    out = dict.fromkeys(
        ("years_met", "years_dated", "years_backed", "other_met", "other_bearing", "other_terms"), 0
    )
    for resume in top:
        row = scores.get(resume.resume_id)
        checklist = json.loads(row["verdict"] or "{}").get("checklist", []) if row else []
        present = present_month(resume.text, resume.as_of)
        requirements = [str(item.get("requirement") or "") for item in checklist]
        for item in checklist:
            quote = str(item.get("quote") or "")
            if item.get("status") != "met":
                continue
            requirement = str(item.get("requirement") or "")
            if required_years(requirement) is not None:
                dated, stated = quoted_years(quote, present)
                out["years_met"] += 1
                out["years_dated"] += int(dated > 0)
                out["years_backed"] += int(dated > 0 or stated > 0)
                continue
            out["other_met"] += 1
            backed = support(requirement, quote, present, others=requirements)
            out["other_bearing"] += int(bool(quote) and backed.relevant)
            out["other_terms"] += int(term_share(requirement, quote) >= MET_SHARE)
    return out


def _add(a: LLMUsage, b: LLMUsage) -> LLMUsage:
    return LLMUsage(
        a.calls + b.calls, a.prompt_tokens + b.prompt_tokens,
        a.completion_tokens + b.completion_tokens, a.failed_calls + b.failed_calls,
        a.seconds + b.seconds,
    )  # fmt: skip


def _count_statuses(
    into: dict[str, dict[str, int]],
    scores: Mapping[str, Mapping[str, Any]],
    labels: Mapping[str, str],
) -> None:
    for rid, row in scores.items():
        bucket = into.setdefault(labels.get(rid, "miss"), {})
        for item in json.loads(row["verdict"] or "{}").get("checklist", ()):
            bucket[item["status"]] = bucket.get(item["status"], 0) + 1


def _counts_from(scores: Mapping[str, Mapping[str, Any]]) -> dict[str, int]:
    return {
        "mandatory_quotes": sum(int(s["mandatory_quotes"] or 0) for s in scores.values()),
        "mandatory_survived": sum(int(s["mandatory_survived"] or 0) for s in scores.values()),
    }


def save_report(derived_db: Path | str, report: GoldenReport, run_id: str = "") -> None:
    """Append an evaluation to ``judge_golden_evaluations`` (one JSON row per run)."""
    from datetime import UTC, datetime

    from hltm.warehouse import connect

    with connect(derived_db) as con:
        con.execute(
            "CREATE TABLE IF NOT EXISTS judge_golden_evaluations (evaluated_at TIMESTAMP,"
            " run_id VARCHAR, model VARCHAR, prompt_version VARCHAR, report VARCHAR)"
        )
        con.execute(
            "INSERT INTO judge_golden_evaluations VALUES (?, ?, ?, ?, ?)",
            [
                datetime.now(UTC).replace(tzinfo=None), run_id, report.config.model,
                report.config.prompt_version, json.dumps(report.as_dict(), ensure_ascii=False),
            ],
        )  # fmt: skip


# ------------------------------------------------------------------- quote relevance threshold


@dataclass(frozen=True)
class RelevanceMeasure:
    """The meaning test of `hltm.judge.evidence` on requirement–quote pairs: the raw e5 cosine
    of each quote to its requirement, and whether that requirement is the nearest of its
    vacancy's."""

    supporting: list[tuple[float, bool]]  # the judge's own quote for the requirement
    foreign: list[tuple[float, bool]]  # a quote the judge cited for another vacancy
    threshold: float
    accuracy: float  # balanced accuracy of "nearest and ≥ threshold" on the two lists

    def summary(self) -> str:
        def q(values: list[tuple[float, bool]]) -> str:
            if not values:
                return "none"
            p = np.percentile([s for s, _ in values], [10, 50, 90])
            nearest = sum(n for _, n in values) / len(values)
            return (
                f"n={len(values)}, cosine p10 {p[0]:.3f}, median {p[1]:.3f}, p90 {p[2]:.3f};"
                f" nearest to its requirement {nearest:.1%}"
            )

        return (
            f"supporting quotes: {q(self.supporting)}\nforeign quotes: {q(self.foreign)}\n"
            f"threshold {self.threshold:.3f} (balanced accuracy {self.accuracy:.1%})"
        )


def measure_relevance(gs: GoldenSet, per_vacancy: int = 5, seed: int = 0) -> RelevanceMeasure:
    """How `evidence.RELEVANCE_THRESHOLD` is measured: the offline judge's "met" quotes on up
    to ``per_vacancy`` fit pairs per vacancy are *supporting* for their own requirement and a
    quote cited for another vacancy is *foreign* to it; a quote passes by meaning when its
    requirement is the nearest of the vacancy's and at least the threshold, which is chosen to
    maximise balanced accuracy between the two (key terms left aside: the test is the one a
    paraphrase must pass)."""
    from hltm.embeddings import prefetch_texts, similarities
    from hltm.judge.offline.heuristic import judge_offline

    rng = random.Random(seed)
    by_id = gs.resume_by_id
    requirements = {v.vacancy_id: [r.text for r in v.requirements] for v in gs.vacancies}
    cited: list[tuple[str, str, str]] = []  # (vacancy id, requirement, quote)
    for v in gs.vacancies:
        fits = sorted(r for r, label in gs.labels.get(v.vacancy_id, {}).items() if label == "fit")
        for rid in rng.sample(fits, k=min(per_vacancy, len(fits))):
            verdict = judge_offline(build_payload(v, by_id[rid]))
            for item in verdict["checklist"]:
                if item["quote"] and item["status"] == "met":
                    cited.append((v.vacancy_id, item["requirement"], item["quote"]))
    pairs: list[tuple[bool, str, str, str]] = []  # (own, vacancy id, requirement, quote)
    for vid, req, quote in cited:
        pairs.append((True, vid, req, quote))
        others = [c for c in cited if c[0] != vid]
        if others:
            pairs.append((False, vid, req, rng.choice(others)[2]))
    prefetch_texts([t for _, vid, _, quote in pairs for t in (quote, *requirements[vid])])
    scored: list[tuple[bool, float, bool]] = []
    for own, vid, req, quote in pairs:
        rest = [r for r in requirements[vid] if r != req]
        sim, *other = similarities(quote, [req, *rest])
        scored.append((own, sim, sim > max(other, default=-1.0)))
    pos = [(s, n) for ok, s, n in scored if ok]
    neg = [(s, n) for ok, s, n in scored if not ok]
    best = (0.0, 1.0)
    for cut in sorted({round(s, 3) for _, s, _ in scored}):
        tpr = sum(s >= cut and n for s, n in pos) / len(pos) if pos else 0.0
        tnr = sum(not (s >= cut and n) for s, n in neg) / len(neg) if neg else 0.0
        if (tpr + tnr) / 2 > best[0]:
            best = ((tpr + tnr) / 2, cut)
    return RelevanceMeasure(pos, neg, best[1], best[0])

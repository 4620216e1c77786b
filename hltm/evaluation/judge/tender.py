"""The judge's statistics report: golden-set numbers, the model tender, and "are weights needed?".

For every configured judge model (`HLTM_TENDER_MODELS`, default the configured judge; with the
offline backend there is exactly one, the rule-based judge) the golden set is judged through the
score cache (`hltm.evaluation.judge.golden_eval.evaluate_golden`: cached pairs are free) and one **tender
row** is computed:

* strict and soft precision@10 of union + judge (sort by `overall`), on the closed golden set and
  on the live pool (vector top-100 ∪ BM25 top-150);
* **quote mismatch rate before validation** — of the quotes the judge gave, the share not found
  verbatim in the resume after normalising whitespace and case (repaired + dropped over exact +
  repaired + dropped; the validator then repairs near matches and drops the rest);
* **mandatory-quote survival** — of the quotes given on mandatory requirements, the share kept
  (exact or repaired), and whether the 90% ship gate passes;
* cost and latency per pair — prompt and completion tokens (o200k_base) per evaluation, dollars
  when prices are configured (`HLTM_MODEL_PRICES="model=in/out;…"`, USD per 1M tokens), mean and
  median seconds per evaluation as recorded in the score cache.

For the first model (the production judge) the weight study of `hltm.evaluation.judge.stats` runs on its
five scores over the golden pairs, in cosine order (ties keep retrieval order): a simplex grid of
1,001 weightings with leave-one-vacancy-out CV, a permutation test (labels shuffled within
vacancies ≥ 1,000 times; the 95th percentile of the best score on noise is the bar to beat),
bootstrap CIs over vacancies (scipy) and the paired difference weighted − `overall`; cosine is
shown as a baseline.

Output: `judge_stats.md` (the report), `tender.png`, `weight_study.md` + its PNGs and JSON, and
`judge_stats.json` (every number), in one directory. Dagster-free; `hltm_dagster/defs/analysis/assets.py` and
`hltm stats report` call `build_report`.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from hltm.evaluation.judge.golden import GoldenSet, cosine_rankings, golden_vectors, load_golden
from hltm.evaluation.judge.golden_eval import GoldenReport, evaluate_golden
from hltm.evaluation.judge.stats import SCORE_NAMES, WeightStudy, run_weight_study
from hltm.evaluation.judge.stats_report import agg_figure, render_report
from hltm.judge.pipeline import cached_scores
from hltm.judge.quotes import survival_rate
from hltm.llm import LLM, make_llm
from hltm.settings import OFFLINE_BACKEND, STATS_ENV, Settings, read_env
from hltm.settings import parse_prices as parse_prices  # its public home used to be here
from hltm.warehouse import connect

REPORT_NAME = "judge_stats.md"


@dataclass(frozen=True)
class ReportSettings:
    models: tuple[str, ...] = ()  # empty: the configured judge model
    prices: dict[str, tuple[float, float]] = field(default_factory=dict)
    step: float = 0.1  # simplex grid step: 5 scores → 1,001 weightings
    k: int = 10
    n_permutations: int = 1000
    n_resamples: int = 10_000
    seed: int = 0
    workers: int = 0  # 0: the LLM's slots

    @classmethod
    def from_env(cls, **overrides: Any) -> ReportSettings:
        values: dict[str, Any] = {
            **read_env(STATS_ENV),
            **{k: v for k, v in overrides.items() if v is not None},
        }
        return cls(**values)


def judge_llms(settings: Settings, models: Sequence[str] = ()) -> list[LLM]:
    """One LLM per configured judge model. The offline backend is one rule-based judge."""
    if settings.llm_backend == OFFLINE_BACKEND:
        return [make_llm(settings, model=settings.judge_model)]
    names = list(dict.fromkeys(models or (settings.judge_model,)))
    return [make_llm(settings, model=name) for name in names]


# ---- the tender ---------------------------------------------------------------------------------


@dataclass
class TenderRow:
    model: str
    prompt_version: str
    pairs: int
    failed: int
    strict_p10: float
    soft_p10: float
    live_strict_p10: float
    live_soft_p10: float
    quotes_given: int
    quote_mismatch_rate: float  # before validation
    mandatory_quotes: int
    mandatory_survival: float
    gate_passed: bool
    prompt_tokens_per_pair: float
    completion_tokens_per_pair: float
    usd_per_pair: float | None
    latency_mean_s: float
    latency_median_s: float
    strict_hits: tuple[int, int] = (0, 0)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _pair_rows(
    derived_db: Path | str, gs: GoldenSet, config: Any, vacancy_ids: Sequence[str]
) -> list[tuple[dict[str, int], int, int, float]]:
    """(quote counts, prompt tokens, completion tokens, seconds) of every golden pair's score."""
    by_id = gs.resume_by_id
    wanted = {
        (v.vacancy_id, v.version_key, rid, by_id[rid].content_hash)
        for v in gs.vacancies
        if v.vacancy_id in vacancy_ids
        for rid in gs.labels.get(v.vacancy_id, {})
        if rid in by_id
    }
    with connect(derived_db) as con:
        rows = con.execute(
            "SELECT vacancy_id, vacancy_version, resume_id, resume_hash, quote_counts,"
            " prompt_tokens, completion_tokens, seconds FROM judge_scores"
            " WHERE model = ? AND prompt_version = ?",
            [config.model, config.prompt_version],
        ).fetchall()
    out = []
    for vid, vver, rid, rhash, counts, pt, ct, secs in rows:
        if (vid, vver, rid, rhash) in wanted:
            out.append((json.loads(counts or "{}"), int(pt or 0), int(ct or 0), float(secs or 0)))
    return out


def tender_row(
    report: GoldenReport,
    gs: GoldenSet,
    derived_db: Path | str,
    prices: Mapping[str, tuple[float, float]],
) -> TenderRow:
    rows = _pair_rows(derived_db, gs, report.config, report.vacancies)
    counts: dict[str, int] = {}
    for c, *_ in rows:
        for key, value in c.items():
            counts[key] = counts.get(key, 0) + int(value)
    given = counts.get("exact", 0) + counts.get("repaired", 0) + counts.get("dropped", 0)
    mismatched = counts.get("repaired", 0) + counts.get("dropped", 0)
    n = max(1, len(rows))
    prompt = sum(r[1] for r in rows) / n
    completion = sum(r[2] for r in rows) / n
    seconds = [r[3] for r in rows] or [0.0]
    base_model = report.config.model.split("@", 1)[0]
    price = prices.get(report.config.model) or prices.get(base_model)
    usd = None
    if price is not None:
        usd = round(prompt / 1e6 * price[0] + completion / 1e6 * price[1], 6)
    strict = report.precision[("closed", "union+judge", "strict")]
    return TenderRow(
        model=report.config.model,
        prompt_version=report.config.prompt_version,
        pairs=len(rows),
        failed=report.failed,
        strict_p10=strict.value,
        soft_p10=report.value("closed", "union+judge", soft=True),
        live_strict_p10=report.value("live", "union+judge"),
        live_soft_p10=report.value("live", "union+judge", soft=True),
        quotes_given=given,
        quote_mismatch_rate=mismatched / given if given else 0.0,
        mandatory_quotes=counts.get("mandatory_quotes", 0),
        mandatory_survival=survival_rate(counts),
        gate_passed=report.gate.passed,
        prompt_tokens_per_pair=round(prompt, 1),
        completion_tokens_per_pair=round(completion, 1),
        usd_per_pair=usd,
        latency_mean_s=round(statistics.fmean(seconds), 4),
        latency_median_s=round(statistics.median(seconds), 4),
        strict_hits=(strict.hits, strict.shown),
    )


def tender_table(rows: Sequence[TenderRow], cosine: tuple[float, float] | None = None) -> str:
    lines = [
        "| model | strict P@10 | soft P@10 | live strict | live soft | quote mismatch (before"
        " validation) | mandatory-quote survival | gate | tokens/pair (in+out) | $/pair |"
        " latency/pair mean (median) | pairs |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    if cosine is not None:
        lines.append(f"| *cosine baseline* | {cosine[0]:.1%} | {cosine[1]:.1%} | | | | | | | | | |")
    for r in rows:
        usd = f"{r.usd_per_pair:.4f}" if r.usd_per_pair is not None else "n/a (no price set)"
        lines.append(
            f"| {r.model} | {r.strict_p10:.1%} ({r.strict_hits[0]}/{r.strict_hits[1]}) "
            f"| {r.soft_p10:.1%} | {r.live_strict_p10:.1%} | {r.live_soft_p10:.1%} "
            f"| {r.quote_mismatch_rate:.1%} of {r.quotes_given} "
            f"| {r.mandatory_survival:.1%} of {r.mandatory_quotes} "
            f"| {'pass' if r.gate_passed else 'BLOCKED'} "
            f"| {r.prompt_tokens_per_pair:.0f}+{r.completion_tokens_per_pair:.0f} | {usd} "
            f"| {r.latency_mean_s:.3f}s ({r.latency_median_s:.3f}s) | {r.pairs} |"
        )
    return "\n".join(lines)


def plot_tender(rows: Sequence[TenderRow], path: Path, cosine: tuple[float, float] | None) -> Path:
    fig = agg_figure(7.5, 4.8)  # Agg canvas, no pyplot state
    ax = fig.add_subplot()
    names = [r.model for r in rows]
    metrics = {
        "strict P@10": [r.strict_p10 for r in rows],
        "soft P@10": [r.soft_p10 for r in rows],
        "mandatory-quote survival": [r.mandatory_survival for r in rows],
        "quote mismatch (before validation)": [r.quote_mismatch_rate for r in rows],
    }
    x = np.arange(len(names))
    width = 0.8 / len(metrics)
    for j, (label, values) in enumerate(metrics.items()):
        ax.bar(x + j * width - 0.4 + width / 2, np.array(values) * 100, width, label=label)
    if cosine is not None:
        ax.axhline(cosine[0] * 100, color="#c0392b", ls="--", lw=1, label="cosine strict P@10")
    ax.axhline(90, color="#555", ls=":", lw=1, label="90% quote gate")
    ax.set_xticks(x, names, fontsize=8)
    ax.set_ylim(0, 105)
    ax.set_ylabel("%")
    ax.set_title("Model tender on the golden set")
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=3, frameon=False)
    fig.tight_layout()
    fig.savefig(path)
    return path


# ---- the whole report ---------------------------------------------------------------------------


@dataclass
class StatsReport:
    out_dir: Path
    path: Path
    golden: dict[str, GoldenReport]  # model → golden evaluation
    tender: list[TenderRow]
    study: WeightStudy
    cosine: tuple[float, float]
    seconds: float

    @property
    def primary(self) -> TenderRow:
        return self.tender[0]

    def headline(self) -> dict[str, Any]:
        s, p = self.study, self.study.permutation
        return {
            "vacancies": s.n_vacancies,
            "pairs": s.n_pairs,
            "models": [r.model for r in self.tender],
            "cosine_strict_p10": round(self.cosine[0], 4),
            "cosine_soft_p10": round(self.cosine[1], 4),
            "judge_strict_p10": round(self.primary.strict_p10, 4),
            "judge_soft_p10": round(self.primary.soft_p10, 4),
            "judge_live_strict_p10": round(self.primary.live_strict_p10, 4),
            "sort_by_overall_p10": round(s.loocv.reference_precision, 4),
            "weighted_loocv_p10": round(s.loocv.loocv_precision, 4),
            "best_in_sample_p10": round(s.loocv.best_precision, 4),
            "best_in_sample_weights": s.loocv.best_weights,
            "permutation_p95": round(p.p95_best, 4),
            "permutation_p_value": round(p.p_value_best, 4),
            "paired_difference": [
                round(s.ci_difference.estimate, 4),
                round(s.ci_difference.low, 4),
                round(s.ci_difference.high, 4),
            ],
            "ci_overall": [round(s.ci_reference.low, 4), round(s.ci_reference.high, 4)],
            "ci_cosine": [
                round(s.ci_baselines["cosine"].low, 4),
                round(s.ci_baselines["cosine"].high, 4),
            ]
            if "cosine" in s.ci_baselines
            else None,
            "weights_needed": s.weights_needed,
            "quote_mismatch_rate": round(self.primary.quote_mismatch_rate, 4),
            "mandatory_survival": round(self.primary.mandatory_survival, 4),
            "gate_passed": self.primary.gate_passed,
        }


def _study_data(
    gs: GoldenSet, report: GoldenReport, derived_db: Path | str, embedder: Any
) -> dict[str, list[tuple[str, dict[str, float]]]]:
    """The primary judge's five scores per labelled pair, each vacancy in cosine order."""
    vectors = golden_vectors(gs, embedder)
    cos = cosine_rankings(gs, vectors)
    by_id = gs.resume_by_id
    data: dict[str, list[tuple[str, dict[str, float]]]] = {}
    for v in gs.vacancies:
        if v.vacancy_id not in report.vacancies:
            continue
        labels = gs.labels.get(v.vacancy_id, {})
        order = [rid for rid, _ in cos[v.vacancy_id] if rid in labels]
        scores = cached_scores(derived_db, v, [by_id[r] for r in order], report.config)
        data[v.vacancy_id] = [
            (rid, {name: float(scores[rid][name]) for name in SCORE_NAMES})
            for rid in order
            if rid in scores
        ]
    return data


def build_report(
    settings: Settings,
    out_dir: Path | str,
    report_settings: ReportSettings | None = None,
    gs: GoldenSet | None = None,
    llms: Sequence[LLM] | None = None,
    embedder: Any = None,
    vacancy_ids: Sequence[str] | None = None,
) -> StatsReport:
    """Judge the golden set with every tender model, run the weight study, write the report."""
    from hltm.embeddings import make_embedder

    started = time.perf_counter()
    rs = report_settings or ReportSettings.from_env()
    gs = gs or load_golden()
    embedder = embedder or make_embedder(settings)
    llms = list(llms) if llms is not None else judge_llms(settings, rs.models)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)

    golden: dict[str, GoldenReport] = {}
    tender: list[TenderRow] = []
    for llm in llms:
        report = evaluate_golden(
            gs, llm, embedder, settings.derived_db, reasoning_effort=settings.reasoning_effort,
            workers=rs.workers, run_id="stats-report", vacancy_ids=vacancy_ids,
        )  # fmt: skip
        golden[report.config.model] = report
        tender.append(tender_row(report, gs, settings.derived_db, rs.prices))
    primary = golden[tender[0].model]
    cosine = (primary.value("closed", "cosine"), primary.value("closed", "cosine", soft=True))

    data = _study_data(gs, primary, settings.derived_db, embedder)
    cosine_per_vacancy = primary.precision[("closed", "cosine", "strict")].per_vacancy_values()
    study = run_weight_study(
        data, gs.labels, step=rs.step, k=rs.k, n_permutations=rs.n_permutations,
        n_resamples=rs.n_resamples, seed=rs.seed,
        baselines={"cosine": {v: cosine_per_vacancy[v] for v in data}},
    )  # fmt: skip
    render_report(study, out, title=f"Do the judge's scores need weights? ({tender[0].model})")
    plot_tender(tender, out / "tender.png", cosine)

    result = StatsReport(out, out / REPORT_NAME, golden, tender, study, cosine, 0.0)
    result.seconds = time.perf_counter() - started
    _write(result, gs)
    return result


def _write(r: StatsReport, gs: GoldenSet) -> None:
    h = r.headline()
    s = r.study
    lo = s.loocv
    frozen = gs.manifest.get("frozen_on", "?")
    pins = gs.manifest.get("pins", {})
    pin = pins.get("cosine_strict_p10", {})
    lines = [
        "# Judge statistics report",
        "",
        f"Golden set frozen on {frozen}: {s.n_vacancies} vacancies, {s.n_pairs} labelled pairs "
        f"(pinned cosine strict P@10 {pin.get('hits', '?')}/{pin.get('shown', '?')}). "
        f"Models in the tender: {', '.join(f'`{m}`' for m in h['models'])}. "
        f"Built in {r.seconds:.1f}s.",
        "",
        "## Headline",
        "",
        "| quantity | value |",
        "|---|---|",
        f"| cosine baseline, strict / soft P@10 | {h['cosine_strict_p10']:.1%} / "
        f"{h['cosine_soft_p10']:.1%} |",
        f"| judge (`{r.primary.model}`), sort by `overall`, strict / soft P@10 | "
        f"{h['judge_strict_p10']:.1%} / {h['judge_soft_p10']:.1%} |",
        f"| judge on the live pool (vector top-100 ∪ BM25 top-150), strict P@10 | "
        f"{h['judge_live_strict_p10']:.1%} |",
        f"| best weighting in-sample (optimistic) | {h['best_in_sample_p10']:.1%} "
        f"`{h['best_in_sample_weights']}` |",
        f"| weighted, leave-one-vacancy-out | {h['weighted_loocv_p10']:.1%} |",
        f"| permutation ceiling (95th pct of best on shuffled labels, {s.permutation.n_permutations}"
        f" shuffles) | {h['permutation_p95']:.1%} (p = {h['permutation_p_value']:.3f}) |",
        f"| paired difference weighted − overall, 95% CI over vacancies | "
        f"{h['paired_difference'][0] * 100:+.1f} pt [{h['paired_difference'][1] * 100:+.1f}, "
        f"{h['paired_difference'][2] * 100:+.1f}] |",
        f"| 95% bootstrap CI over vacancies, sort by overall | "
        f"[{h['ci_overall'][0]:.1%}, {h['ci_overall'][1]:.1%}] |",
    ]
    if h["ci_cosine"]:
        lines.append(
            f"| 95% bootstrap CI over vacancies, cosine | [{h['ci_cosine'][0]:.1%}, "
            f"{h['ci_cosine'][1]:.1%}] |"
        )
    lines += [
        f"| quote mismatch before validation / mandatory-quote survival | "
        f"{h['quote_mismatch_rate']:.1%} / {h['mandatory_survival']:.1%} "
        f"({'gate passes' if h['gate_passed'] else 'gate BLOCKS'}) |",
        "",
        "**Verdict:** "
        + (
            "weights beat sorting by `overall` out of sample and beat noise — re-check before "
            "shipping them."
            if s.weights_needed
            else "ship the single `overall` score (zero fitted parameters): the weighted sum "
            "does not beat it out of sample with an interval above zero, or does not clear the "
            "permutation ceiling."
        ),
        "",
        "## Model tender",
        "",
        tender_table(r.tender, r.cosine),
        "",
        "Quote mismatch = quotes the judge gave that are not in the resume verbatim (after "
        "normalising whitespace and case), before the validator repairs or drops them. Survival "
        "= mandatory-requirement quotes kept after validation; the gate needs ≥ 90%. Latency is "
        "the recorded time per evaluation (for the offline rule-based judge, compute time only).",
        "",
        "![tender](tender.png)",
        "",
        f"## Golden evaluation (`{r.primary.model}`)",
        "",
        r.golden[r.primary.model].table(),
        "",
        "## Weight study",
        "",
        f"Simplex grid of {lo.grid_size} weightings of {', '.join(lo.score_names)}, "
        f"leave-one-vacancy-out CV (the weighting chosen on the other vacancies is applied to "
        f"the held-out one; {lo.distinct_weightings} distinct weightings chosen across "
        f"{len(lo.folds)} folds); full tables and figures in [weight_study.md](weight_study.md).",
        "",
        "![permutation null](permutation_null.png)",
        "",
        "![intervals](precision_intervals.png)",
        "",
        "![per vacancy](per_vacancy_precision.png)",
        "",
        "![fold weights](fold_weights.png)",
        "",
    ]
    r.path.write_text("\n".join(lines), encoding="utf-8")
    (r.out_dir / "judge_stats.json").write_text(
        json.dumps(
            {
                "headline": h,
                "tender": [t.as_dict() for t in r.tender],
                "golden": {m: g.as_dict() for m, g in r.golden.items()},
                "weight_study": s.to_dict(),
            },
            ensure_ascii=False,
            indent=1,
            default=str,
        ),
        encoding="utf-8",
    )

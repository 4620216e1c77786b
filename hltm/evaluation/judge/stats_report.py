"""Renders the weight study (plots, Markdown, JSON) so that ``stats`` holds only the statistics."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from hltm.evaluation.judge.stats import BootstrapCI, Id, LoocvResult, PermutationResult, WeightStudy

__all__ = [
    "agg_figure",
    "plot_fold_weights",
    "plot_intervals",
    "plot_null_distribution",
    "plot_per_vacancy",
    "render_report",
]


def agg_figure(width: float = 7.0, height: float = 4.0):
    # Figure + Agg canvas directly: no pyplot global state, safe in worker threads/processes.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=110)
    FigureCanvasAgg(fig)
    return fig


def plot_null_distribution(perm: PermutationResult, path: str | Path) -> Path:
    """Histogram of best-on-noise precision with the 95th percentile and the real scores."""
    path = Path(path)
    fig = agg_figure()
    ax = fig.add_subplot()
    values = perm.null_best * 100
    uniq = np.unique(values)
    bins: Any = 30
    if 1 < len(uniq) <= 80:  # precision is discrete (hits/shown): one bar per attainable value
        half = np.diff(uniq).min() / 2
        bins = np.append(uniq - half, uniq[-1] + half)
    ax.hist(values, bins=bins, color="#9db4d0", label="best weighting, shuffled labels")
    ax.axvline(perm.p95_best * 100, color="#c0392b", ls="--", label=f"95th pct {perm.p95_best:.1%}")
    ax.axvline(
        perm.observed_best * 100, color="#2c3e50", label=f"real, in-sample {perm.observed_best:.1%}"
    )
    ax.axvline(
        perm.observed_loocv * 100,
        color="#27ae60",
        ls=":",
        label=f"real, LOOCV {perm.observed_loocv:.1%}",
    )
    ax.set_xlabel("strict precision@k, %")
    ax.set_ylabel("permutations")
    ax.set_title(f"Permutation test ({perm.n_permutations} shuffles within vacancies)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    return path


def plot_per_vacancy(series: Mapping[str, Mapping[Id, float]], path: str | Path) -> Path:
    """Grouped bars: precision per vacancy for each named ranking."""
    path = Path(path)
    names = list(series)
    vacancies = sorted({v for s in series.values() for v in s}, key=str)
    fig = agg_figure(max(7.0, 0.45 * len(vacancies) + 2), 4.2)
    ax = fig.add_subplot()
    width = 0.8 / max(1, len(names))
    x = np.arange(len(vacancies))
    for j, name in enumerate(names):
        vals = [series[name].get(v, np.nan) * 100 for v in vacancies]
        ax.bar(x + j * width - 0.4 + width / 2, vals, width, label=name)
    ax.set_xticks(x, [str(v) for v in vacancies], rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("precision@k, %")
    ax.set_ylim(0, 100)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    return path


def plot_intervals(cis: Mapping[str, BootstrapCI], path: str | Path, unit: str = "%") -> Path:
    """Point estimates with bootstrap intervals, one row per named quantity."""
    path = Path(path)
    names = list(cis)
    fig = agg_figure(7.0, 0.5 * len(names) + 1.5)
    ax = fig.add_subplot()
    y = np.arange(len(names))
    est = np.array([cis[n].estimate for n in names]) * 100
    low = np.array([cis[n].low for n in names]) * 100
    high = np.array([cis[n].high for n in names]) * 100
    ax.errorbar(est, y, xerr=[est - low, high - est], fmt="o", capsize=4, color="#2c3e50")
    if low.min() < 0 < high.max():
        ax.axvline(0, color="#999", lw=0.8)
    ax.set_ylim(-0.6, len(names) - 0.4)
    ax.set_yticks(y, names)
    ax.set_xlabel(f"{unit} (95% bootstrap over vacancies)" if unit else "95% bootstrap")
    fig.tight_layout()
    fig.savefig(path)
    return path


def plot_fold_weights(loocv: LoocvResult, path: str | Path) -> Path:
    """Stacked bars of the weighting chosen in each LOOCV fold."""
    path = Path(path)
    fig = agg_figure(max(7.0, 0.45 * len(loocv.folds) + 2), 4.0)
    ax = fig.add_subplot()
    x = np.arange(len(loocv.folds))
    bottom = np.zeros(len(loocv.folds))
    for name in loocv.score_names:
        vals = np.array([f.weights[name] for f in loocv.folds])
        ax.bar(x, vals, bottom=bottom, label=name)
        bottom += vals
    ax.set_xticks(x, [str(f.held_out) for f in loocv.folds], rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("weight")
    ax.set_title("Weights chosen per held-out vacancy")
    ax.legend(fontsize=8, ncol=len(loocv.score_names))
    fig.tight_layout()
    fig.savefig(path)
    return path


def _pct(x: float) -> str:
    return f"{x * 100:.1f}%"


def _ci_text(c: BootstrapCI, points: bool = False) -> str:
    if points:
        return f"{c.estimate * 100:+.1f} pt [{c.low * 100:+.1f}, {c.high * 100:+.1f}]"
    return f"{_pct(c.estimate)} [{_pct(c.low)}, {_pct(c.high)}]"


def render_report(
    study: WeightStudy, out_dir: str | Path, title: str = "Judge score weights study"
) -> Path:
    """Write ``weight_study.md`` (+ PNGs and ``weight_study.json``) into ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    lo, perm = study.loocv, study.permutation
    ref_name = "+".join(n for n, w in lo.reference_weights.items() if w > 0)
    series = {
        f"sort by {ref_name}": lo.reference_per_vacancy_values,
        "weighted (LOOCV)": lo.weighted_per_vacancy,
    }
    series.update(study.baselines)
    cis = {f"sort by {ref_name}": study.ci_reference, "weighted (LOOCV)": study.ci_weighted}
    cis.update(study.ci_baselines)
    plot_null_distribution(perm, out / "permutation_null.png")
    plot_per_vacancy(series, out / "per_vacancy_precision.png")
    plot_intervals(cis, out / "precision_intervals.png")
    plot_fold_weights(lo, out / "fold_weights.png")
    (out / "weight_study.json").write_text(
        json.dumps(study.to_dict(), ensure_ascii=False, indent=2, default=str), encoding="utf-8"
    )

    metric = f"{'soft' if lo.soft else 'strict'} precision@{lo.k}"
    verdict = (
        "**Weights help**: the LOOCV-chosen weighting beats the reference out of sample, with a "
        "paired interval above zero, and beats the permutation ceiling. Re-check before shipping."
        if study.weights_needed
        else f"**Weights are not needed**: ship the single `{ref_name}` score (zero fitted "
        "parameters). The weighted sum does not beat it out of sample with an interval above "
        "zero, or does not clear the permutation ceiling."
    )
    lines = [
        f"# {title}",
        "",
        f"{study.n_vacancies} vacancies, {study.n_pairs} labelled pairs; metric: {metric} "
        "(pooled Σfit/Σshown). Grid: "
        f"{lo.grid_size} weightings of {', '.join(lo.score_names)}.",
        "",
        "## Verdict",
        "",
        verdict,
        "",
        "## Numbers",
        "",
        "| quantity | value |",
        "|---|---|",
        f"| sort by `{ref_name}` | {_ci_text(study.ci_reference)} |",
        f"| weighted, leave-one-vacancy-out | {_ci_text(study.ci_weighted)} |",
        f"| paired difference weighted − `{ref_name}` | {_ci_text(study.ci_difference, True)} |",
        f"| best weighting in-sample (optimistic) | {_pct(lo.best_precision)} "
        f"`{lo.best_weights}` |",
        f"| permutation ceiling (95th pct of best on noise) | {_pct(perm.p95_best)} |",
        f"| p-value, in-sample best vs noise | {perm.p_value_best:.3f} |",
        f"| LOOCV on noise, 95th pct | {_pct(perm.p95_loocv)} (p = {perm.p_value_loocv:.3f}) |",
        f"| distinct weightings chosen across folds | {lo.distinct_weightings} "
        f"of {len(lo.folds)} |",
    ]
    for name, c in study.ci_baselines.items():
        lines.append(f"| baseline `{name}` (mean over vacancies) | {_ci_text(c)} |")
    lines += [
        "",
        f"Intervals: {int(study.ci_reference.confidence * 100)}% bootstrap over vacancies "
        f"({study.ci_reference.method}, {study.ci_reference.n_resamples} resamples); "
        f"permutations: {perm.n_permutations} (seed {perm.seed}), labels shuffled within "
        "vacancies, the whole grid search repeated on each.",
        "",
        "## Permutation test",
        "",
        "![permutation null](permutation_null.png)",
        "",
        "## Precision per vacancy",
        "",
        "![per vacancy](per_vacancy_precision.png)",
        "",
        "![intervals](precision_intervals.png)",
        "",
        "## Weights chosen in each fold",
        "",
        "![fold weights](fold_weights.png)",
        "",
        "| held-out vacancy | weights | train | held-out |",
        "|---|---|---|---|",
    ]
    for f in lo.folds:
        w = ", ".join(f"{n}={v:g}" for n, v in f.weights.items() if v > 0)
        lines.append(
            f"| {f.held_out} | {w} | {_pct(f.train_precision)} | {f.test_hits}/{f.test_shown} |"
        )
    path = out / "weight_study.md"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path

"""Statistics toolkit for the question "do the judge's five scores need weights?".

Why: a weighted sum of role/level/skills/experience/overall *looks* like it must beat sorting by
``overall`` alone, and a grid search will always find some weighting that wins in-sample. The
write-up's answer, which this module reproduces on our own judge scores:

* **grid** — every weighting of the scores on a simplex grid (5 scores, step 0.1 → 1,001);
* **leave-one-vacancy-out CV** — choose the best weighting on the other vacancies by strict
  P@10, evaluate it on the held-out one; ties go to the weighting closest to the reference
  (all weight on ``overall``), so the search only moves away from "no weights" when it pays;
* **permutation test** — shuffle labels *within* vacancies, redo the whole grid search, and
  read the 95th percentile of the best score on noise: below it, an "improvement" is fitting;
* **bootstrap over vacancies** (never over pairs: pairs of one vacancy are not independent)
  for confidence intervals, including the paired difference weighted − overall.

Ranking conventions match ``metrics``: only labelled candidates are ranked, the top ``k`` is
scored over ``min(k, n)`` rows, pooled precision = Σ hits / Σ shown. Ties in a weighted total
keep the input order, so pass each vacancy's candidates in pool (e.g. vector) order.

Everything is vectorised: rankings do not depend on labels, so the top-``k`` membership of every
(candidate, weighting) is computed once per vacancy and a permutation is just a matrix product
(1,000 permutations × 1,001 weightings × 20 vacancies run in about a second).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from itertools import combinations
from typing import Any

import numpy as np
from scipy import stats as sps

__all__ = [
    "SCORE_NAMES",
    "BootstrapCI",
    "Fold",
    "LoocvResult",
    "PermutationResult",
    "VacancyScores",
    "WeightStudy",
    "bootstrap_ci",
    "grid_search_loocv",
    "paired_difference_ci",
    "permutation_test",
    "prepare",
    "run_weight_study",
    "simplex_grid",
    "simplex_grid_units",
]

SCORE_NAMES: tuple[str, ...] = ("role", "level", "skills", "experience", "overall")

Id = Hashable
ScoreData = Mapping[Id, Sequence[tuple[Id, Mapping[str, float]]]]
LabelData = Mapping[Id, Mapping[Id, str]]


# --------------------------------------------------------------------------- grid


def simplex_grid_units(n_scores: int = 5, n_steps: int = 10) -> np.ndarray:
    """All non-negative integer vectors of length ``n_scores`` summing to ``n_steps``.

    Stars and bars: C(n_steps + n_scores − 1, n_scores − 1) rows (5 scores, 10 steps → 1,001),
    in a fixed deterministic order.
    """
    if n_scores < 1 or n_steps < 0:
        raise ValueError("need n_scores ≥ 1 and n_steps ≥ 0")
    rows = []
    for bars in combinations(range(n_steps + n_scores - 1), n_scores - 1):
        edges = (-1, *bars, n_steps + n_scores - 1)
        rows.append([edges[i + 1] - edges[i] - 1 for i in range(n_scores)])
    return np.asarray(rows, dtype=np.int64)


def _steps_for(step: float) -> int:
    n_steps = round(1.0 / step)
    if n_steps < 1 or not math.isclose(n_steps * step, 1.0, rel_tol=1e-9):
        raise ValueError(f"1/step must be a whole number, got step={step}")
    return n_steps


def simplex_grid(n_scores: int = 5, step: float = 0.1) -> np.ndarray:
    """Weightings of ``n_scores`` scores on a grid of ``step``, each row summing to 1."""
    n_steps = _steps_for(step)
    return simplex_grid_units(n_scores, n_steps) / n_steps


# --------------------------------------------------------------------------- data


@dataclass(frozen=True)
class VacancyScores:
    """One vacancy's labelled candidates as arrays (input order preserved)."""

    vacancy: Id
    resume_ids: tuple[Id, ...]
    scores: np.ndarray  # (n, n_scores) float64
    fit: np.ndarray  # (n,) bool
    borderline: np.ndarray  # (n,) bool

    def positive(self, soft: bool) -> np.ndarray:
        return self.fit | self.borderline if soft else self.fit


def prepare(
    data: ScoreData,
    labels: LabelData,
    score_names: Sequence[str] = SCORE_NAMES,
) -> list[VacancyScores]:
    """Turn ``{vacancy: [(resume_id, {score: value})]}`` + labels into arrays.

    Unlabelled candidates are skipped (as in ``metrics``); vacancies left empty are dropped.
    A missing score is an error — silently imputing it would bias the ranking.
    """
    out: list[VacancyScores] = []
    for vacancy, rows in data.items():
        vlabels = labels.get(vacancy, {})
        ids: list[Id] = []
        matrix: list[list[float]] = []
        lab: list[str] = []
        seen: set[Id] = set()
        for resume_id, scores in rows:
            label = vlabels.get(resume_id)
            if label is None or resume_id in seen:
                continue
            if label not in ("fit", "borderline", "miss"):
                raise ValueError(f"unknown label {label!r} for {vacancy}/{resume_id}")
            missing = [s for s in score_names if s not in scores or scores[s] is None]
            if missing:
                raise ValueError(f"{vacancy}/{resume_id} lacks scores {missing}")
            seen.add(resume_id)
            ids.append(resume_id)
            matrix.append([float(scores[s]) for s in score_names])
            lab.append(label)
        if not ids:
            continue
        arr = np.asarray(lab)
        out.append(
            VacancyScores(
                vacancy=vacancy,
                resume_ids=tuple(ids),
                scores=np.asarray(matrix, dtype=np.float64),
                fit=arr == "fit",
                borderline=arr == "borderline",
            )
        )
    return out


def _topk_membership(vac: VacancyScores, weights: np.ndarray, k: int) -> np.ndarray:
    """(n, n_weightings) bool: is the candidate in the top ``k`` under each weighting."""
    totals = vac.scores @ weights.T  # (n, W)
    order = np.argsort(-totals, axis=0, kind="stable")[:k]  # ties keep input order
    member = np.zeros(totals.shape, dtype=bool)
    np.put_along_axis(member, order, True, axis=0)
    return member


def _preference(grid_units: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """Tie-break score per weighting: higher = closer (L1) to the reference, then grid order."""
    dist = np.abs(grid_units / grid_units.sum(axis=1, keepdims=True) - reference).sum(axis=1)
    order = np.lexsort((np.arange(len(dist)), np.round(dist, 9)))  # best first
    pref = np.empty(len(dist), dtype=np.int64)
    pref[order] = np.arange(len(dist) - 1, -1, -1)
    return pref


def _reference_vector(score_names: Sequence[str], reference: str | Mapping[str, float]):
    if isinstance(reference, str):
        if reference not in score_names:
            raise ValueError(f"reference score {reference!r} not in {list(score_names)}")
        vec = np.array([1.0 if s == reference else 0.0 for s in score_names])
    else:
        vec = np.array([float(reference.get(s, 0.0)) for s in score_names])
    if vec.sum() <= 0:
        raise ValueError("reference weights must sum to a positive number")
    return vec / vec.sum()


def _weights_dict(score_names: Sequence[str], row: np.ndarray) -> dict[str, float]:
    return {name: round(float(w), 6) for name, w in zip(score_names, row, strict=True)}


# --------------------------------------------------------------------------- grid search + CV


@dataclass(frozen=True)
class Fold:
    """One leave-one-vacancy-out split."""

    held_out: Id
    weights: dict[str, float]
    train_precision: float
    test_hits: int
    test_shown: int

    @property
    def test_precision(self) -> float:
        return self.test_hits / self.test_shown if self.test_shown else 0.0


@dataclass(frozen=True)
class LoocvResult:
    score_names: tuple[str, ...]
    grid_size: int
    k: int
    soft: bool
    folds: list[Fold]
    best_weights: dict[str, float]  # in-sample best on all vacancies
    best_precision: float  # in-sample (optimistic) pooled precision of that weighting
    loocv_hits: int
    loocv_shown: int
    reference_weights: dict[str, float]
    reference_per_vacancy: dict[Id, tuple[int, int]]  # (hits, shown) sorting by reference

    @property
    def loocv_precision(self) -> float:
        return self.loocv_hits / self.loocv_shown if self.loocv_shown else 0.0

    @property
    def reference_precision(self) -> float:
        hits = sum(h for h, _ in self.reference_per_vacancy.values())
        shown = sum(s for _, s in self.reference_per_vacancy.values())
        return hits / shown if shown else 0.0

    @property
    def weighted_per_vacancy(self) -> dict[Id, float]:
        return {f.held_out: f.test_precision for f in self.folds}

    @property
    def reference_per_vacancy_values(self) -> dict[Id, float]:
        return {v: (h / s if s else 0.0) for v, (h, s) in self.reference_per_vacancy.items()}

    @property
    def distinct_weightings(self) -> int:
        return len({tuple(sorted(f.weights.items())) for f in self.folds})


@dataclass
class _Prepared:
    vacancies: list[VacancyScores]
    grid_units: np.ndarray
    weights: np.ndarray
    membership: list[np.ndarray]
    shown: np.ndarray
    pref: np.ndarray
    reference: np.ndarray


def _prepare_all(
    data: ScoreData,
    labels: LabelData,
    score_names: Sequence[str],
    step: float,
    k: int,
    reference: str | Mapping[str, float],
) -> _Prepared:
    vacancies = prepare(data, labels, score_names)
    if not vacancies:
        raise ValueError("no labelled candidates to analyse")
    units = simplex_grid_units(len(score_names), _steps_for(step))
    weights = units / units.sum(axis=1, keepdims=True)
    # Integer grid units keep weighted totals exact for integer scores, so ties are real ties.
    membership = [_topk_membership(v, units.astype(np.float64), k) for v in vacancies]
    shown = np.array([min(k, len(v.resume_ids)) for v in vacancies], dtype=np.int64)
    ref = _reference_vector(score_names, reference)
    return _Prepared(vacancies, units, weights, membership, shown, _preference(units, ref), ref)


def _hits(prep: _Prepared, soft: bool) -> np.ndarray:
    """(n_vacancies, n_weightings) positives in the top k."""
    return np.stack(
        [
            v.positive(soft).astype(np.int64) @ m
            for v, m in zip(prep.vacancies, prep.membership, strict=True)
        ]
    )


def _argbest(hits: np.ndarray, pref: np.ndarray) -> np.ndarray:
    """argmax over the last axis of integer hits, ties broken by preference."""
    return np.argmax(hits * len(pref) + pref, axis=-1)


def grid_search_loocv(
    data: ScoreData,
    labels: LabelData,
    step: float = 0.1,
    k: int = 10,
    soft: bool = False,
    score_names: Sequence[str] = SCORE_NAMES,
    reference: str | Mapping[str, float] = "overall",
) -> LoocvResult:
    """Grid search over weightings with leave-one-vacancy-out cross-validation.

    For each vacancy: the weighting with the most positives in the top ``k`` of the *other*
    vacancies is applied to it. ``reference`` (default: sort by ``overall`` alone) is both the
    tie-break anchor and the comparison baseline.
    """
    prep = _prepare_all(data, labels, score_names, step, k, reference)
    hits = _hits(prep, soft)
    total = hits.sum(axis=0)
    shown_total = int(prep.shown.sum())
    folds: list[Fold] = []
    for i, vac in enumerate(prep.vacancies):
        train = total - hits[i]
        best = int(_argbest(train, prep.pref))
        train_shown = shown_total - int(prep.shown[i])
        folds.append(
            Fold(
                held_out=vac.vacancy,
                weights=_weights_dict(score_names, prep.weights[best]),
                train_precision=float(train[best] / train_shown) if train_shown else 0.0,
                test_hits=int(hits[i, best]),
                test_shown=int(prep.shown[i]),
            )
        )
    best_all = int(_argbest(total, prep.pref))
    ref_hits = [
        int(
            v.positive(soft).astype(np.int64)
            @ _topk_membership(v, prep.reference[None, :], k)[:, 0]
        )
        for v in prep.vacancies
    ]
    return LoocvResult(
        score_names=tuple(score_names),
        grid_size=len(prep.weights),
        k=k,
        soft=soft,
        folds=folds,
        best_weights=_weights_dict(score_names, prep.weights[best_all]),
        best_precision=float(total[best_all] / shown_total),
        loocv_hits=sum(f.test_hits for f in folds),
        loocv_shown=shown_total,
        reference_weights=_weights_dict(score_names, prep.reference),
        reference_per_vacancy={
            v.vacancy: (h, int(s))
            for v, h, s in zip(prep.vacancies, ref_hits, prep.shown, strict=True)
        },
    )


# --------------------------------------------------------------------------- permutation test


@dataclass(frozen=True)
class PermutationResult:
    """Null distributions of the grid search's best score under labels shuffled in vacancies."""

    n_permutations: int
    seed: int
    observed_best: float  # in-sample best pooled precision on the real labels
    observed_loocv: float  # LOOCV pooled precision on the real labels
    null_best: np.ndarray  # (n_permutations,)
    null_loocv: np.ndarray  # (n_permutations,)

    @property
    def p95_best(self) -> float:
        """The "permutation ceiling": best-on-noise precision a search reaches 5% of the time."""
        return float(np.percentile(self.null_best, 95))

    @property
    def p95_loocv(self) -> float:
        return float(np.percentile(self.null_loocv, 95))

    @property
    def p_value_best(self) -> float:
        return float((1 + np.sum(self.null_best >= self.observed_best)) / (1 + self.n_permutations))

    @property
    def p_value_loocv(self) -> float:
        return float(
            (1 + np.sum(self.null_loocv >= self.observed_loocv)) / (1 + self.n_permutations)
        )


def permutation_test(
    data: ScoreData,
    labels: LabelData,
    n: int = 1000,
    seed: int = 0,
    step: float = 0.1,
    k: int = 10,
    soft: bool = False,
    score_names: Sequence[str] = SCORE_NAMES,
    reference: str | Mapping[str, float] = "overall",
) -> PermutationResult:
    """Repeat the grid search (in-sample best and LOOCV) on labels shuffled within vacancies.

    Shuffling within a vacancy keeps each vacancy's number of fit candidates, so the null
    keeps the per-vacancy base rates and only breaks the link between scores and labels.
    """
    prep = _prepare_all(data, labels, score_names, step, k, reference)
    rng = np.random.default_rng(seed)
    shown_total = float(prep.shown.sum())
    real = _hits(prep, soft)
    real_total = real.sum(axis=0)
    observed_best = float(real_total.max() / shown_total)
    observed_loocv = float(
        sum(real[i, _argbest(real_total - real[i], prep.pref)] for i in range(len(real)))
        / shown_total
    )

    def perm_hits(shuffled: np.ndarray, member: np.ndarray) -> np.ndarray:
        # (n, n_v) @ (n_v, W): positives in the top k for every permutation and weighting.
        return np.rint(shuffled @ member.astype(np.float32)).astype(np.int64)

    shuffles = [
        rng.permuted(np.tile(v.positive(soft), (n, 1)), axis=1).astype(np.float32)
        for v in prep.vacancies
    ]
    total = np.zeros((n, len(prep.weights)), dtype=np.int64)
    for shuffled, member in zip(shuffles, prep.membership, strict=True):
        total += perm_hits(shuffled, member)
    null_best = total.max(axis=1) / shown_total

    # Second pass recomputes per-vacancy hits (cheap) instead of holding n_vac × n × W ints.
    loocv_hits = np.zeros(n, dtype=np.int64)
    rows = np.arange(n)
    for shuffled, member in zip(shuffles, prep.membership, strict=True):
        h = perm_hits(shuffled, member)
        loocv_hits += h[rows, _argbest(total - h, prep.pref)]
    null_loocv = loocv_hits / shown_total
    return PermutationResult(n, seed, observed_best, observed_loocv, null_best, null_loocv)


# --------------------------------------------------------------------------- bootstrap


@dataclass(frozen=True)
class BootstrapCI:
    estimate: float
    low: float
    high: float
    confidence: float
    method: str  # "percentile", "BCa", or "degenerate" (no spread to resample)
    n_resamples: int
    n: int

    def contains(self, value: float) -> bool:
        return self.low - 1e-12 <= value <= self.high + 1e-12


def _values(x: Mapping[Id, float] | Sequence[float]) -> np.ndarray:
    return np.asarray(list(x.values()) if isinstance(x, Mapping) else list(x), dtype=np.float64)


def bootstrap_ci(
    per_vacancy_values: Mapping[Id, float] | Sequence[float],
    n_resamples: int = 10_000,
    seed: int = 0,
    confidence: float = 0.95,
    method: str = "percentile",
    weights: Mapping[Id, float] | Sequence[float] | None = None,
) -> BootstrapCI:
    """CI of the mean over vacancies by resampling vacancies (``scipy.stats.bootstrap``).

    ``weights`` (e.g. rows shown per vacancy) turns the statistic into a weighted mean — the
    pooled Σhits/Σshown when values are per-vacancy precisions. Degenerate input (fewer than two
    vacancies, or no spread) yields a zero-width interval instead of BCa's NaN; a NaN from BCa
    falls back to the percentile method.
    """
    x = _values(per_vacancy_values)
    w = None if weights is None else _values(weights)
    if w is not None and (len(w) != len(x) or w.sum() <= 0):
        raise ValueError("weights must match values and sum to a positive number")
    if len(x) == 0:
        raise ValueError("no values to bootstrap")
    estimate = float(np.average(x, weights=w))
    if len(x) < 2 or np.ptp(x) == 0:
        return BootstrapCI(estimate, estimate, estimate, confidence, "degenerate", 0, len(x))

    if w is None:
        samples: tuple[np.ndarray, ...] = (x,)

        def statistic(a, axis=-1):
            return np.mean(a, axis=axis)
    else:
        samples = (x, w)

        def statistic(a, b, axis=-1):
            return np.sum(a * b, axis=axis) / np.sum(b, axis=axis)

    def run(m: str) -> tuple[float, float]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = sps.bootstrap(
                samples,
                statistic,
                n_resamples=n_resamples,
                confidence_level=confidence,
                method=m,
                paired=w is not None,
                vectorized=True,
                rng=np.random.default_rng(seed),
            )
        return float(res.confidence_interval.low), float(res.confidence_interval.high)

    used = method
    low, high = run(method)
    if (math.isnan(low) or math.isnan(high)) and method.lower() != "percentile":
        used = "percentile"
        low, high = run("percentile")
    if math.isnan(low) or math.isnan(high):
        return BootstrapCI(estimate, estimate, estimate, confidence, "degenerate", 0, len(x))
    return BootstrapCI(estimate, low, high, confidence, used, n_resamples, len(x))


def paired_difference_ci(
    weighted_per_vacancy: Mapping[Id, float] | Sequence[float],
    overall_per_vacancy: Mapping[Id, float] | Sequence[float],
    n_resamples: int = 10_000,
    seed: int = 0,
    confidence: float = 0.95,
    method: str = "percentile",
) -> BootstrapCI:
    """CI of mean(weighted − overall) over vacancies, resampling vacancies as pairs."""
    if isinstance(weighted_per_vacancy, Mapping) and isinstance(overall_per_vacancy, Mapping):
        if set(weighted_per_vacancy) != set(overall_per_vacancy):
            raise ValueError("both sides must cover the same vacancies")
        keys = list(weighted_per_vacancy)
        diff = [weighted_per_vacancy[v] - overall_per_vacancy[v] for v in keys]
    else:
        a, b = _values(weighted_per_vacancy), _values(overall_per_vacancy)
        if len(a) != len(b):
            raise ValueError("both sides must have one value per vacancy")
        diff = list(a - b)
    return bootstrap_ci(diff, n_resamples, seed, confidence, method)


# --------------------------------------------------------------------------- the whole study


@dataclass
class WeightStudy:
    """Everything the report needs; plain data, serialisable with :meth:`to_dict`."""

    loocv: LoocvResult
    permutation: PermutationResult
    ci_reference: BootstrapCI
    ci_weighted: BootstrapCI
    ci_difference: BootstrapCI
    n_vacancies: int
    n_pairs: int
    baselines: dict[str, dict[Id, float]] = field(default_factory=dict)
    ci_baselines: dict[str, BootstrapCI] = field(default_factory=dict)

    @property
    def weights_needed(self) -> bool:
        """Ship weights only if they beat the reference out of sample *and* beat noise."""
        return (
            self.ci_difference.low > 0
            and self.permutation.observed_loocv > self.permutation.p95_loocv
            and self.loocv.loocv_precision > self.loocv.reference_precision
        )

    def to_dict(self) -> dict[str, Any]:
        def ci(c: BootstrapCI) -> dict[str, Any]:
            return asdict(c)

        perm = self.permutation
        return {
            "n_vacancies": self.n_vacancies,
            "n_pairs": self.n_pairs,
            "grid_size": self.loocv.grid_size,
            "k": self.loocv.k,
            "reference_weights": self.loocv.reference_weights,
            "reference_precision": self.loocv.reference_precision,
            "best_weights_in_sample": self.loocv.best_weights,
            "best_precision_in_sample": self.loocv.best_precision,
            "loocv_precision": self.loocv.loocv_precision,
            "distinct_fold_weightings": self.loocv.distinct_weightings,
            "folds": [
                {**asdict(f), "held_out": str(f.held_out), "test_precision": f.test_precision}
                for f in self.loocv.folds
            ],
            "permutation": {
                "n": perm.n_permutations,
                "seed": perm.seed,
                "observed_best": perm.observed_best,
                "observed_loocv": perm.observed_loocv,
                "p95_best": perm.p95_best,
                "p95_loocv": perm.p95_loocv,
                "p_value_best": perm.p_value_best,
                "p_value_loocv": perm.p_value_loocv,
            },
            "ci_reference": ci(self.ci_reference),
            "ci_weighted": ci(self.ci_weighted),
            "ci_difference": ci(self.ci_difference),
            "ci_baselines": {k: ci(v) for k, v in self.ci_baselines.items()},
            "weights_needed": self.weights_needed,
        }


def run_weight_study(
    data: ScoreData,
    labels: LabelData,
    step: float = 0.1,
    k: int = 10,
    soft: bool = False,
    n_permutations: int = 1000,
    n_resamples: int = 10_000,
    seed: int = 0,
    score_names: Sequence[str] = SCORE_NAMES,
    reference: str | Mapping[str, float] = "overall",
    baselines: Mapping[str, Mapping[Id, float]] | None = None,
) -> WeightStudy:
    """Grid + LOOCV, permutation test and bootstraps in one call.

    ``baselines`` are other rankings' per-vacancy precisions (e.g. ``{"cosine": {...}}`` from
    ``metrics.overall_precision(...).per_vacancy_values()``), shown alongside with their CIs.
    """
    loocv = grid_search_loocv(data, labels, step, k, soft, score_names, reference)
    perm = permutation_test(
        data, labels, n_permutations, seed, step, k, soft, score_names, reference
    )
    ref = loocv.reference_per_vacancy_values
    shown = [s for _, s in loocv.reference_per_vacancy.values()]
    weighted = loocv.weighted_per_vacancy
    n_pairs = sum(len(v.resume_ids) for v in prepare(data, labels, score_names))
    return WeightStudy(
        loocv=loocv,
        permutation=perm,
        ci_reference=bootstrap_ci(ref, n_resamples, seed, weights=shown),
        ci_weighted=bootstrap_ci(weighted, n_resamples, seed, weights=shown),
        ci_difference=paired_difference_ci(weighted, ref, n_resamples, seed),
        n_vacancies=len(ref),
        n_pairs=n_pairs,
        baselines={name: dict(vals) for name, vals in (baselines or {}).items()},
        ci_baselines={
            name: bootstrap_ci(vals, n_resamples, seed) for name, vals in (baselines or {}).items()
        },
    )

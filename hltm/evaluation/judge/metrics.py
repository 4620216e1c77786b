"""Ranking metrics of the golden set: precision@10 (strict/soft) and fit recall of a pool.

Why these: the recruiter's question is "would I show this candidate?", so the main metric is
*strict precision@10* — the share of ``fit`` among the top 10 of each vacancy; *soft* also
counts ``borderline``. Overall precision pools counts across vacancies, as in the write-up
(cosine baseline 83 fit of 190 shown = 43.7%), rather than averaging per-vacancy ratios.

Conventions (documented because they move the numbers):

* Labels are ``fit`` / ``borderline`` / ``miss`` per (vacancy, resume); the same resume can be
  fit for one vacancy and a miss for another, so labels are always per vacancy.
* Unlabelled candidates are *skipped* by default (``unlabelled="skip"``): the golden-set
  measurement ranks only labelled pairs, so the top 10 is the first 10 labelled candidates
  of the ranking. ``unlabelled="miss"`` counts them as shown and not fit (conservative, for
  live rankings where the unlabelled are real rows on screen).
* A short list (< k candidates) is scored over what was shown: the denominator is
  ``min(k, len(list))``, so a vacancy with 6 candidates, 3 fit, scores 3/6. Pooled precision
  adds the same numerators and denominators. An empty list shows nothing (0 of 0) and is
  reported as 0.0 per vacancy but contributes nothing to the pooled figure.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

__all__ = [
    "LABELS",
    "PrecisionResult",
    "fit_recall",
    "fit_recall_counts",
    "overall_fit_recall",
    "overall_precision",
    "precision_at_k",
    "precision_counts",
]

LABELS = ("fit", "borderline", "miss")

Id = Hashable
Unlabelled = Literal["skip", "miss"]


def _positive(soft: bool) -> frozenset[str]:
    return frozenset({"fit", "borderline"}) if soft else frozenset({"fit"})


def precision_counts(
    ranked_ids: Sequence[Id],
    labels: Mapping[Id, str],
    k: int = 10,
    soft: bool = False,
    unlabelled: Unlabelled = "skip",
) -> tuple[int, int]:
    """(positives in the top ``k``, rows shown) for one vacancy's ranking."""
    if unlabelled not in ("skip", "miss"):
        raise ValueError("unlabelled must be 'skip' or 'miss'")
    positive = _positive(soft)
    shown: list[str | None] = []
    seen: set[Id] = set()
    for doc_id in ranked_ids:
        if len(shown) >= k:
            break
        if doc_id in seen:
            continue
        seen.add(doc_id)
        label = labels.get(doc_id)
        if label is None and unlabelled == "skip":
            continue
        shown.append(label)
    hits = sum(1 for label in shown if label in positive)
    return hits, len(shown)


def precision_at_k(
    ranked_ids: Sequence[Id],
    labels: Mapping[Id, str],
    k: int = 10,
    soft: bool = False,
    unlabelled: Unlabelled = "skip",
) -> float:
    """Share of ``fit`` (soft: ``fit`` or ``borderline``) among the top ``k`` shown."""
    hits, shown = precision_counts(ranked_ids, labels, k, soft, unlabelled)
    return hits / shown if shown else 0.0


@dataclass(frozen=True)
class PrecisionResult:
    """Pooled precision over vacancies, with the counts behind it."""

    hits: int
    shown: int
    per_vacancy: dict[Id, tuple[int, int]] = field(default_factory=dict)

    @property
    def value(self) -> float:
        return self.hits / self.shown if self.shown else 0.0

    def per_vacancy_values(self) -> dict[Id, float]:
        return {v: (h / s if s else 0.0) for v, (h, s) in self.per_vacancy.items()}


def overall_precision(
    rankings: Mapping[Id, Sequence[Id]],
    labels: Mapping[Id, Mapping[Id, str]],
    k: int = 10,
    soft: bool = False,
    unlabelled: Unlabelled = "skip",
) -> PrecisionResult:
    """Total positives in every vacancy's top ``k`` / total rows shown (e.g. 83/190)."""
    per: dict[Id, tuple[int, int]] = {}
    for vacancy, ranked in rankings.items():
        per[vacancy] = precision_counts(ranked, labels.get(vacancy, {}), k, soft, unlabelled)
    return PrecisionResult(
        hits=sum(h for h, _ in per.values()),
        shown=sum(s for _, s in per.values()),
        per_vacancy=per,
    )


def fit_recall_counts(pool_ids: Iterable[Id], labels: Mapping[Id, str]) -> tuple[int, int]:
    """(fit candidates present in the pool, fit candidates labelled) for one vacancy."""
    fit = {doc_id for doc_id, label in labels.items() if label == "fit"}
    return len(fit.intersection(pool_ids)), len(fit)


def fit_recall(pool_ids: Iterable[Id], labels: Mapping[Id, str]) -> float:
    """Share of the vacancy's ``fit`` candidates that the pool contains (1.0 if none exist)."""
    found, total = fit_recall_counts(pool_ids, labels)
    return found / total if total else 1.0


def overall_fit_recall(
    pools: Mapping[Id, Iterable[Id]], labels: Mapping[Id, Mapping[Id, str]]
) -> tuple[int, int]:
    """Pooled (found, total) fit recall over vacancies, e.g. 140 of 174."""
    found = total = 0
    for vacancy, vacancy_labels in labels.items():
        f, t = fit_recall_counts(pools.get(vacancy, ()), vacancy_labels)
        found += f
        total += t
    return found, total

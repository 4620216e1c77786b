"""Ship gate for a judge configuration: enough mandatory-requirement quotes must survive.

Why: a configuration can win on precision and still quote from memory. The low-reasoning
variant halved latency and cost at equal precision but only 86.8% of mandatory quotes
survived validation, so it was rejected. Rule: at least 90% of the quotes given on mandatory
requirements must survive (exact or repaired); exactly 90% passes. Compared with exact
fractions so 9/10 is never lost to floating point.

Window: the gate judges a configuration on its latest `GATE_WINDOW` evaluations, not on every
evaluation it ever made: a bad spell of the model (invented quotes) would otherwise block it
for good, since cached evaluations are never judged again unless asked to.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction

__all__ = [
    "GATE_MIN_SURVIVAL",
    "GATE_WINDOW",
    "REJUDGE_COMMAND",
    "GateDecision",
    "blocked_advice",
    "gate_decision",
    "gate_from_counts",
]

GATE_MIN_SURVIVAL = 0.90
GATE_WINDOW = 200  # evaluations, several hundred mandatory quotes: a 90% rate is measurable
REJUDGE_COMMAND = "hltm judge run --rejudge-failed"


@dataclass(frozen=True)
class GateDecision:
    passed: bool
    rate: float
    reason: str
    measured: bool = True  # False: no mandatory quote was given, the rate means nothing


def gate_decision(
    mandatory_quotes: int,
    survived: int,
    min_survival: float = GATE_MIN_SURVIVAL,
) -> GateDecision:
    """Decide whether a configuration may ship given its mandatory-quote survival.

    ``mandatory_quotes`` counts quotes the judge *gave* on mandatory requirements, ``survived``
    how many of them validation kept. With no mandatory quotes at all the rate is 1.0 by
    definition (see ``quotes.survival_rate``) but the gate *fails*: a run without evidence
    cannot show that the configuration quotes honestly, and a judge that never quotes must
    not slip through.
    """
    if mandatory_quotes < 0 or survived < 0 or survived > mandatory_quotes:
        raise ValueError(f"invalid counts: survived={survived}, quotes={mandatory_quotes}")
    threshold = Fraction(str(min_survival))
    if mandatory_quotes == 0:
        return GateDecision(False, 1.0, "no quotes on mandatory requirements to measure", False)
    rate = Fraction(survived, mandatory_quotes)
    passed = rate >= threshold
    verdict = "passes" if passed else "blocked"
    reason = (
        f"{verdict}: {survived}/{mandatory_quotes} mandatory quotes survived "
        f"({float(rate):.1%}, minimum {float(threshold):.0%})"
    )
    return GateDecision(passed, float(rate), reason)


def gate_from_counts(
    counts: Mapping[str, int], min_survival: float = GATE_MIN_SURVIVAL
) -> GateDecision:
    """Gate on the counters produced by ``quotes.apply_validation`` / ``quotes.sum_counts``."""
    return gate_decision(
        int(counts.get("mandatory_quotes", 0)),
        int(counts.get("mandatory_survived", 0)),
        min_survival,
    )


def blocked_advice(decision: GateDecision) -> str:
    """What clears a blocked configuration, for the case at hand. `REJUDGE_COMMAND` judges
    again the evaluations that failed the evidence check (a mandatory quote lost, requirements
    left out, a mandatory "met" without a quote) and, when the window holds no mandatory quote
    at all, every evaluation that quoted none: a new score replaces each."""
    if decision.measured:
        what = "the evaluations whose mandatory quotes did not survive"
    else:
        what = "the evaluations that quoted nothing on a mandatory requirement"
    return (
        f"once the model answers well again (check its quotes on one vacancy), judge {what}"
        f" again: `{REJUDGE_COMMAND}`"
    )

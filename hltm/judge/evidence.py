"""What a quote proves about its requirement: the rules every verdict is held to, whoever wrote it.

The offline judge builds its checklist by these rules, and the validator
(`quotes.apply_validation`) holds every backend's verdicts to them, the LLM's included, after it
has checked that the quote is verbatim:

* **Years** ("5+ years of general ledger accounting"): *met* only by dated work. The quote holds
  the date range(s) — a job title with its dates, several positions as fragments joined by "…" —
  whose months add up to the years asked, or a stated "N years" (counted at its value). Fewer
  years than asked is *partial* ("short"); a quote with no date and no stated years (a bare job
  title) proves no years and is *partial* at most ("undated"). The rest of the quote must bear on
  what the years are of (the requirement's substance): one of its key terms is enough there.
* **Substance**: any other *met* quote states what the requirement asks — at least half of its
  key terms (of one of the alternatives it offers, "Python or Java"), or the same by meaning, for
  a paraphrase: its e5 similarity to the requirement reaches `RELEVANCE_THRESHOLD` and is higher
  than to any other requirement of the vacancy (e5 puts every pair of work sentences within a few
  hundredths, so only the comparison says which requirement a sentence is about). A quote sharing
  fewer key terms backs *partial* at most ("thin").
* **Irrelevant**: a quote sharing no key term and not close by meaning proves nothing; neither
  does a line that speaks to whoever reads the resume ("you", "your"): instructions addressed to
  the judge are not evidence about the candidate. An irrelevant quote is not shown, its item is
  *partial* at most, and the quote gate counts it as not surviving.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hltm.judge.lexicon import LANGUAGE_NAMES
from hltm.judge.resume import dated_intervals, merged_months
from hltm.judge.text import key_terms, stem, tokenize

__all__ = [
    "FRAGMENT_SEPARATOR",
    "MET_SHARE",
    "RELEVANCE_THRESHOLD",
    "STATUS_ORDER",
    "Support",
    "addresses_reader",
    "alternatives",
    "capped",
    "prefetch",
    "quoted_years",
    "required_years",
    "substance",
    "support",
    "surviving_share",
    "term_share",
]

# Raw e5 cosine (passage/passage) a quote sharing too few key terms must reach to back its
# requirement by meaning, that requirement being also the nearest of its vacancy's. Measured by
# `hltm judge golden relevance` (2026-12-06): the offline judge's own "met" quotes against quotes
# cited for another vacancy, best balanced accuracy 74.8% at 0.803 on the sample set and 83.1% at
# 0.849 on livecareer; 0.81 sits between (the nearest-requirement condition does most of it).
RELEVANCE_THRESHOLD = 0.81
# Share of a requirement's key terms a quote must state to back "met".
MET_SHARE = 0.5
FRAGMENT_SEPARATOR = " … "
STATUS_ORDER = ("not_found", "partial", "met")

YEARS_RE = re.compile(
    r"(?:(?:at least|minimum(?: of)?|min\.?|over|more than|не менее|минимум|от|более)\s+)?"
    r"(?<![\d.,])(?P<n>\d{1,2})(?:[.,]\d)?\s*\+?\s*(?:-|–|to|до)?\s*(?:\d{1,2}\s*)?\+?\s*"
    r"(?:years?|yrs?|лет|года?)(?!\w)",
    re.IGNORECASE,
)
# "A or B", "A, B или C", "A/B": the items a requirement offers as alternatives
_OR_RE = re.compile(r"\s(?:or|или|либо)\s|/", re.IGNORECASE)
_ITEM_SPLIT_RE = re.compile(r"\s(?:or|или|либо)\s|/|,|;|\(|\)", re.IGNORECASE)
# Second-person address: a resume speaks of its owner, not to its reader.
_READER_RE = re.compile(
    r"(?<!\w)(?:you|your|yours|yourself|вы|вас|вам|вами|ваш\w*|ты|тебя|тебе|твой\w*)(?!\w)",
    re.IGNORECASE,
)


def required_years(requirement: str) -> float | None:
    """The years a requirement asks for ("5+ years of …" → 5.0), None when it asks none."""
    m = YEARS_RE.search(requirement or "")
    return float(m.group("n")) if m else None


def substance(requirement: str) -> str:
    """What a years requirement's years are of: its text without the years phrase."""
    return YEARS_RE.sub(" ", requirement or "")


def stated_years(text: str) -> float:
    """The most years ``text`` states ("Experience of 2 Yrs as a Java Developer" → 2.0)."""
    return max((float(m.group("n")) for m in YEARS_RE.finditer(text or "")), default=0.0)


def quoted_years(quote: str, present: int | None) -> tuple[float, float]:
    """(years its date ranges add up to, years it states) — "present" read as ``present``."""
    months = merged_months(dated_intervals(quote, present))
    return months / 12.0, stated_years(quote)


def addresses_reader(text: str) -> bool:
    """Whether ``text`` speaks to whoever reads the resume (second person)."""
    return bool(_READER_RE.search(text or ""))


def alternatives(requirement: str) -> list[list[str]]:
    """The key-term sets a requirement accepts: one set, or — when it offers alternatives
    ("Python or Java", "AWS, GCP или Azure") — one per item."""
    whole = key_terms(requirement)
    if not _OR_RE.search(requirement):
        return [whole] if whole else []
    items = [key_terms(part) for part in _ITEM_SPLIT_RE.split(requirement)]
    return [item for item in items if item] or ([whole] if whole else [])


def _canonical(term: str) -> str:
    """A language's name in any of the languages the lexicon knows, as its English name
    ("английский" for "English")."""
    for name, forms in LANGUAGE_NAMES.items():
        if any(
            term.startswith(form) or (len(term) > 4 and form.startswith(term)) for form in forms
        ):
            return name
    return term


def term_share(requirement: str, text: str) -> float:
    """The best share of one alternative's key terms that ``text`` states (0 when the
    requirement names no concrete term)."""
    tokens = {_canonical(stem(t)) for t in tokenize(text)}
    return max(
        (
            sum(_canonical(t) in tokens for t in terms) / len(terms)
            for terms in alternatives(requirement)
        ),
        default=0.0,
    )


@dataclass(frozen=True)
class Support:
    """The highest status a quote backs for its requirement, and why it is capped."""

    cap: str  # "met" or "partial"
    reason: str | None = None  # None | "thin" | "short" | "undated" | "irrelevant"
    years: float | None = None  # for a years requirement: the years the quote shows

    @property
    def relevant(self) -> bool:
        return self.reason != "irrelevant"


def capped(status: str, cap: str) -> str:
    """``status`` lowered to ``cap`` (met > partial > not_found)."""
    return min(status, cap, key=STATUS_ORDER.index)


def support(
    requirement: str,
    quote: str,
    present: int | None = None,
    context: str | None = None,
    threshold: float = RELEVANCE_THRESHOLD,
    others: Sequence[str] = (),
    claimed: str = "met",
) -> Support:
    """What ``quote`` backs for ``requirement`` (see the module docstring). ``context`` is the
    resume text around the quote (its lines), checked for address to the reader; ``present``
    reads "present" in its date ranges; ``others`` are the vacancy's other requirements;
    ``claimed`` the status the quote is given for (below "met", a quote sharing a key term is
    not compared by meaning: it could back no more)."""
    if addresses_reader(context if context is not None else quote):
        return Support("partial", "irrelevant")
    need = required_years(requirement)
    compare = claimed == "met" and need is None
    bears = _bears_on(*_compared(requirement, quote), threshold, others, compare)
    if bears is None:  # the requirement names nothing concrete: nothing to compare
        bears = "met"
    if bears == "irrelevant":
        return Support("partial", "irrelevant")
    if need is not None:  # the years are the claim: one key term of their line is enough
        dated, stated = quoted_years(quote, present)
        years = max(dated, stated)
        if dated == 0 and stated == 0:
            return Support("partial", "undated", 0.0)
        if years < need:
            return Support("partial", "short", years)
        return Support("met", None, years)
    return Support("met", None) if bears == "met" else Support("partial", "thin")


def _bears_on(
    requirement: str, quote: str, threshold: float, others: Sequence[str], compare: bool = True
) -> str | None:
    """ "met" (states the substance), "thin" (touches it), "irrelevant", or None when the
    requirement has no concrete terms to hold a quote to. Without ``compare`` a quote sharing
    a key term is "thin" without looking at its meaning."""
    if not alternatives(requirement):
        return None
    share = term_share(requirement, quote)
    if not _by_meaning(share, compare):
        return "met" if share >= MET_SHARE else "thin"
    from hltm.embeddings import similarities  # loads the model only when needed

    own, *rest = similarities(quote, [requirement, *(o for o in others if o != requirement)])
    if own >= threshold and own > max(rest, default=-1.0):
        return "met"
    return "thin" if share > 0 else "irrelevant"


def _by_meaning(share: float, compare: bool) -> bool:
    """Whether a quote stating `share` of the key terms is judged by its meaning: it states too
    few to back "met" by its words, and either none at all or ``compare`` is asked for."""
    return share < MET_SHARE and (share == 0 or compare)


def _compared(requirement: str, quote: str) -> tuple[str, str]:
    """What a quote's relevance is judged on: the requirement (a years requirement's substance)
    and the quote, both without their years phrases."""
    about = substance(requirement) if required_years(requirement) is not None else requirement
    return about, YEARS_RE.sub(" ", quote)


def prefetch(pairs: Iterable[tuple[str, str, str]], others: Sequence[str] = ()) -> None:
    """Embed in one batch what `support` will compare by meaning for these (requirement, quote,
    claimed status) triples (the model is much faster on a batch than one text at a time)."""
    from hltm.embeddings import prefetch_texts

    texts: list[str] = []
    for requirement, quote, claimed in pairs:
        about, said = _compared(requirement, quote)
        compare = claimed == "met" and required_years(requirement) is None
        if alternatives(about) and _by_meaning(term_share(about, said), compare):
            texts += [about, said]
    prefetch_texts([*texts, *others] if texts else [])


_CREDIT = {"met": 1.0, "partial": 0.5, "not_found": 0.0}


def surviving_share(
    answered: Sequence[Mapping[str, Any]], validated: Sequence[Mapping[str, Any]]
) -> float:
    """The share of the evidence a verdict claimed that survived validation (1.0 when it
    claimed none): each item weighs 2 when mandatory, a claim is worth its status (met 1,
    partial ½) when backed by a quote or when it says "met", and what survives is the
    validated status of the items whose quote still stands. A requirement the verdict left out
    counts as a claim of "met" that nothing backs."""
    claimed = proven = 0.0
    for before, after in zip(answered, validated, strict=True):
        weight = 2.0 if before.get("mandatory") else 1.0
        if before.get("omitted"):
            claimed += weight
            continue
        status = str(before.get("status"))
        if str(before.get("quote") or "").strip() or status == "met":
            claimed += weight * _CREDIT.get(status, 0.0)
        if after.get("quote"):
            proven += weight * _CREDIT.get(str(after.get("status")), 0.0)
    return min(1.0, proven / claimed) if claimed else 1.0

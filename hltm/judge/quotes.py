"""Deterministic validator of the judge's evidence quotes (no LLM involved).

Why: the judge must back every checklist status with a verbatim quote from the resume, and
LLMs quote from memory (synonyms, typos, merged bullets). One fake quote shown to a recruiter
costs the trust in all of them, so every quote is checked by plain code:

* ``exact``    — the quote occurs in the resume after normalisation; the *original* resume
  span is returned (so the UI shows the resume's own spelling, case and spacing);
* ``repaired`` — no exact occurrence, but a real span of the resume is at least ``threshold``
  similar (``rapidfuzz`` Indel ratio, 0–1); that real span replaces the quote;
* ``dropped``  — nothing close enough; the quote is removed and the item cannot stay ``met``;
* ``absent``   — the judge gave no quote (``None``/blank); the item cannot be ``met`` either.

Normalisation (for matching only, never for what is shown): Unicode NFKC, case folding,
whitespace runs → one space, typographic quotes/dashes → ASCII, ``ё`` → ``е``, soft hyphens
and zero-width characters removed. An offset map ties every normalised character to its
position in the original text.

Matches must sit on word boundaries: ``"Java"`` is not found inside ``"JavaScript"``. A
repaired span is chosen among word-aligned spans around ``rapidfuzz``'s best alignment, and its
similarity is the ratio between the quote and exactly the span that will be shown, so a long
quote with an invented tail cannot pass on a short real fragment.

Relevance: a verbatim quote can still prove nothing ("Strong hands-on experience with Kafka"
backed by a real line that never mentions Kafka). So a surviving quote must also *support its
requirement* (`quote_supports`): it shares one of the requirement's key terms (stemmed, filler
words removed), or its e5 similarity to the requirement reaches ``RELEVANCE_THRESHOLD`` — a
value measured on the golden sets (`hltm judge golden relevance` prints how). A quote that
fails is kept for audit but counted ``irrelevant``, and its item cannot stay ``met``, exactly
like a dropped quote.

Length: quotes are meant to be ≤ 200 characters. A longer quote is *validated whole* (an
invented tail counts against it) and the surviving real span is then cut at the last word
boundary within 200 characters — truncating real text keeps it verbatim, whereas dropping it
would throw away valid evidence for a formatting slip.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from rapidfuzz import fuzz

from hltm.judge.text import key_terms, stem, tokenize

__all__ = [
    "MAX_QUOTE_CHARS",
    "OUTCOMES",
    "QUOTE_SIMILARITY_THRESHOLD",
    "RELEVANCE_THRESHOLD",
    "NormalisedText",
    "QuoteCheck",
    "apply_validation",
    "empty_counts",
    "normalise",
    "quote_supports",
    "shared_terms",
    "sum_counts",
    "survival_rate",
    "validate_quote",
]

QUOTE_SIMILARITY_THRESHOLD = 0.85
# Raw e5 cosine (passage/passage) of a requirement and a quote without a shared key term above
# which the quote still supports it. Measured by `hltm judge golden relevance` on the sample
# set (2026-12-01): the judge's own supporting quotes p10 0.806 / median 0.836, quotes cited
# for another vacancy's requirement median 0.812 / p90 0.842; best balanced accuracy (68%) at
# 0.806, rounded to 0.81.
RELEVANCE_THRESHOLD = 0.81
MAX_QUOTE_CHARS = 200
OUTCOMES = ("exact", "repaired", "dropped", "absent")

Outcome = Literal["exact", "repaired", "dropped", "absent"]

_FOLD = str.maketrans(
    {
        **dict.fromkeys("“”„‟«»″〝〞＂", '"'),
        **dict.fromkeys("‘’‚‛′`", "'"),
        **dict.fromkeys("‐‑‒–—―−", "-"),
        "ё": "е",
    }
)
_INVISIBLE = frozenset("\u00ad\u200b\u200c\u200d\u2060\ufeff")
# How far (in normalised characters) a repaired span may move from rapidfuzz's alignment.
_SLACK_MIN = 12
_MAX_CANDIDATES = 24
_WORD_RE = re.compile(r"(?=\S)[^\w\s]*(?P<core>(?:\S*\w)?)\S*")


@dataclass(frozen=True)
class NormalisedText:
    """Normalised text plus, for each of its characters, the index in the original text."""

    text: str
    offsets: tuple[int, ...]
    original: str

    def original_span(self, start: int, end: int) -> tuple[int, int]:
        """Original ``[start, end)`` covering normalised ``[start, end)`` (``end > start``)."""
        o_start = self.offsets[start]
        o_end = self.offsets[end - 1] + 1
        # A normalised char may come from a multi-char cluster (base + combining marks).
        while o_end < len(self.original) and unicodedata.combining(self.original[o_end]):
            o_end += 1
        return o_start, o_end


def normalise(text: str) -> NormalisedText:
    """Normalise ``text`` for matching and keep the offset map back to the original."""
    out: list[str] = []
    offsets: list[int] = []
    pending_space = False
    i, n = 0, len(text)
    while i < n:
        j = i + 1
        while j < n and unicodedata.combining(text[j]):  # keep base + marks together
            j += 1
        cluster = text[i:j]
        if cluster in _INVISIBLE:
            i = j
            continue
        if cluster.isspace():
            pending_space = bool(out)
            i = j
            continue
        folded = unicodedata.normalize("NFKC", cluster).casefold().translate(_FOLD)
        for ch in folded:
            if ch.isspace():
                pending_space = bool(out)
                continue
            if ch in _INVISIBLE:
                continue
            if pending_space:
                out.append(" ")
                offsets.append(i)
                pending_space = False
            out.append(ch)
            offsets.append(i)
        i = j
    return NormalisedText("".join(out), tuple(offsets), text)


@dataclass(frozen=True)
class QuoteCheck:
    """Outcome of validating one quote; ``quote`` is what may be shown (a real resume span)."""

    outcome: Outcome
    quote: str | None
    similarity: float
    span: tuple[int, int] | None = None  # [start, end) of ``quote`` in the original resume

    @property
    def survived(self) -> bool:
        return self.outcome in ("exact", "repaired")


def _is_word(ch: str) -> bool:
    return ch.isalnum()


def _on_boundaries(hay: str, start: int, end: int) -> bool:
    if start > 0 and _is_word(hay[start]) and _is_word(hay[start - 1]):
        return False
    return not (end < len(hay) and _is_word(hay[end - 1]) and _is_word(hay[end]))


def _find_exact(hay: str, needle: str) -> int:
    start = hay.find(needle)
    while start >= 0:
        if _on_boundaries(hay, start, start + len(needle)):
            return start
        start = hay.find(needle, start + 1)
    return -1


def _word_starts_ends(hay: str) -> tuple[list[int], list[int]]:
    """Candidate span starts/ends: each word with and without its outer punctuation."""
    starts: set[int] = set()
    ends: set[int] = set()
    for m in _WORD_RE.finditer(hay):
        starts.update((m.start(), m.start("core")))
        ends.update((m.end(), m.end("core")))
    return sorted(starts), sorted(ends)


def _nearest(points: list[int], centre: int, slack: int) -> list[int]:
    near = [p for p in points if abs(p - centre) <= slack]
    near.sort(key=lambda p: abs(p - centre))
    if not near and points:
        near = [min(points, key=lambda p: abs(p - centre))]
    return near[:_MAX_CANDIDATES]


def _best_span(nq: str, hay: str) -> tuple[float, int, int]:
    """Closest word-aligned span of ``hay`` to ``nq``: (similarity 0–1, start, end)."""
    align = fuzz.partial_ratio_alignment(nq, hay)
    if align is None or align.score <= 0:
        return 0.0, 0, 0
    starts, ends = _word_starts_ends(hay)
    slack = max(_SLACK_MIN, len(nq) // 4)
    best = (0.0, 0, 0)
    for s in _nearest(starts, align.dest_start, slack):
        for e in _nearest(ends, align.dest_end, slack):
            if e <= s:
                continue
            sim = fuzz.ratio(nq, hay[s:e]) / 100.0
            # Prefer higher similarity, then the span closest to rapidfuzz's alignment.
            key = (sim, -abs(s - align.dest_start) - abs(e - align.dest_end))
            best_key = (best[0], -abs(best[1] - align.dest_start) - abs(best[2] - align.dest_end))
            if key > best_key:
                best = (sim, s, e)
    return best


def _cap_length(resume: str, start: int, end: int, limit: int) -> tuple[int, int]:
    """Cut ``resume[start:end]`` to ≤ ``limit`` chars at a word boundary; strip spaces."""
    while start < end and resume[start].isspace():
        start += 1
    while end > start and resume[end - 1].isspace():
        end -= 1
    if end - start <= limit:
        return start, end
    cut = start + limit
    if resume[cut].isspace() or not _is_word(resume[cut]) or not _is_word(resume[cut - 1]):
        end = cut
    else:
        space = max(resume.rfind(" ", start, cut), resume.rfind("\n", start, cut))
        end = space if space > start else cut
    while end > start and resume[end - 1].isspace():
        end -= 1
    return start, end


def validate_quote(
    quote: str | None,
    resume_text: str | NormalisedText,
    threshold: float = QUOTE_SIMILARITY_THRESHOLD,
    max_chars: int = MAX_QUOTE_CHARS,
) -> QuoteCheck:
    """Check one quote against the resume (see module docstring for the rules).

    ``resume_text`` may be pre-normalised with :func:`normalise` when many quotes are checked
    against the same resume.
    """
    if not 0.0 < threshold <= 1.0:
        raise ValueError("threshold is a similarity on a 0–1 scale")
    resume = resume_text if isinstance(resume_text, NormalisedText) else normalise(resume_text)
    if quote is None or not str(quote).strip():
        return QuoteCheck("absent", None, 0.0)
    nq = normalise(str(quote)).text
    hay = resume.text
    if not hay or not any(ch.isalnum() for ch in nq):
        return QuoteCheck("dropped", None, 0.0)  # punctuation alone is no evidence

    pos = _find_exact(hay, nq)
    if pos >= 0:
        outcome: Outcome = "exact"
        similarity, n_start, n_end = 1.0, pos, pos + len(nq)
    else:
        similarity, n_start, n_end = _best_span(nq, hay)
        if similarity < threshold or n_end <= n_start:
            return QuoteCheck("dropped", None, similarity)
        outcome = "repaired"
    o_start, o_end = resume.original_span(n_start, n_end)
    o_start, o_end = _cap_length(resume.original, o_start, o_end, max_chars)
    return QuoteCheck(outcome, resume.original[o_start:o_end], similarity, (o_start, o_end))


@dataclass(frozen=True)
class Relevance:
    """Whether a quote supports its requirement, and why."""

    supports: bool
    shared_terms: int  # of the requirement's key terms found in the quote
    similarity: float  # raw e5 cosine of requirement and quote (0.0 when terms settled it)


def shared_terms(requirement: str, quote: str) -> int:
    """How many of the requirement's key terms the quote contains (stemmed alike)."""
    return len(set(key_terms(requirement)) & {stem(t) for t in tokenize(quote)})


def quote_supports(
    requirement: str | None, quote: str, threshold: float = RELEVANCE_THRESHOLD
) -> Relevance:
    """Does ``quote`` support ``requirement``? A shared key term, else e5 similarity ≥
    ``threshold``. A requirement with no concrete terms and no text is not checked."""
    from hltm.embeddings import similarities  # loads the model only when needed

    if not requirement or not requirement.strip():
        return Relevance(True, 0, 0.0)
    shared = shared_terms(requirement, quote)
    if shared:
        return Relevance(True, shared, 0.0)
    similarity = similarities(requirement, [quote])[0]
    return Relevance(similarity >= threshold, 0, similarity)


def _prefetch_relevance(
    checklist: Sequence[Mapping[str, Any]], checks: Sequence[QuoteCheck]
) -> None:
    """Embed, in one batch, the requirements and quotes that share no key term (the only ones
    the relevance check compares by meaning)."""
    from hltm.embeddings import prefetch_texts

    texts: list[str] = []
    for item, check in zip(checklist, checks, strict=True):
        requirement = item.get("requirement")
        if (
            check.survived
            and check.quote
            and requirement
            and not shared_terms(requirement, check.quote)
        ):
            texts += [requirement, check.quote]
    prefetch_texts(texts)


def empty_counts() -> dict[str, int]:
    """Zeroed counters, the shape returned by :func:`apply_validation`."""
    keys = [*OUTCOMES, "irrelevant", *(f"mandatory_{o}" for o in OUTCOMES), "mandatory_irrelevant"]
    keys += ["items", "mandatory_items", "downgraded", "mandatory_quotes", "mandatory_survived"]
    return dict.fromkeys(keys, 0)


def apply_validation(
    checklist: Sequence[Mapping[str, Any]],
    resume_text: str | NormalisedText,
    threshold: float = QUOTE_SIMILARITY_THRESHOLD,
    quote_key: str = "quote",
    relevance_threshold: float = RELEVANCE_THRESHOLD,
) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """Validate every checklist quote; cap unsupported ``met`` items at ``partial``.

    Each returned item is a copy with ``quote`` replaced by the validated real span (or None)
    plus ``quote_outcome``, ``quote_similarity``, ``quote_relevant`` (does the surviving quote
    support the item's ``requirement``, see :func:`quote_supports`) and ``llm_quote`` (what the
    judge wrote, kept for audit). Counts: per outcome overall (``exact`` …) and for mandatory
    items (``mandatory_exact`` …), ``irrelevant`` / ``mandatory_irrelevant`` (surviving quotes
    that do not support their requirement), ``downgraded`` (met → partial), ``mandatory_quotes``
    (mandatory items with a non-blank quote) and ``mandatory_survived`` (of those, exact +
    repaired).
    ``resume_text`` may be pre-normalised with :func:`normalise` (one resume, many checklists).
    """
    if isinstance(resume_text, NormalisedText):
        resume = resume_text
    else:
        resume = normalise(resume_text or "")
    counts = empty_counts()
    out: list[dict[str, Any]] = []
    checks = [
        validate_quote(item.get(quote_key), resume, threshold=threshold) for item in checklist
    ]
    _prefetch_relevance(checklist, checks)
    for item, check in zip(checklist, checks, strict=True):
        llm_quote = item.get(quote_key)
        new = dict(item)
        new[quote_key] = check.quote
        new["quote_outcome"] = check.outcome
        new["quote_similarity"] = round(check.similarity, 4)
        new["llm_quote"] = llm_quote
        mandatory = bool(item.get("mandatory"))
        relevant = True
        if check.survived and check.quote:
            relevant = quote_supports(
                item.get("requirement"), check.quote, relevance_threshold
            ).supports
            if not relevant:
                counts["irrelevant"] += 1
                counts["mandatory_irrelevant"] += int(mandatory)
        new["quote_relevant"] = relevant if check.survived else None
        if (not check.survived or not relevant) and new.get("status") == "met":
            new["status"] = "partial"
            counts["downgraded"] += 1
        counts["items"] += 1
        counts[check.outcome] += 1
        if mandatory:
            counts["mandatory_items"] += 1
            counts[f"mandatory_{check.outcome}"] += 1
            if check.outcome != "absent":
                counts["mandatory_quotes"] += 1
                counts["mandatory_survived"] += int(check.survived)
        out.append(new)
    return out, counts


def sum_counts(all_counts: Iterable[Mapping[str, int]]) -> dict[str, int]:
    """Add up per-pair counts, e.g. over a whole golden run, before applying the gate."""
    total = empty_counts()
    for counts in all_counts:
        for key, value in counts.items():
            total[key] = total.get(key, 0) + int(value)
    return total


def survival_rate(counts: Mapping[str, int]) -> float:
    """Share of quotes given on mandatory requirements that survived validation.

    ``mandatory_survived / mandatory_quotes``: quotes the judge *gave* (absent ones are not
    quotes and are not counted) that were kept as exact or repaired. 1.0 when no mandatory
    quote was given — nothing was invented; the gate treats that case separately.
    """
    given = int(counts.get("mandatory_quotes", 0))
    if given == 0:
        return 1.0
    return int(counts.get("mandatory_survived", 0)) / given

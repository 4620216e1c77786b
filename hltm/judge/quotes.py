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

Fragments: a quote may join several verbatim fragments with "…" (or "..."): the positions whose
dates add up to a years requirement, a title and the sentence under it. Each fragment is checked
as above; one dropped fragment drops the quote; the real spans are shown joined by " … ".

What the quote proves: a verbatim quote can still prove nothing ("Strong hands-on experience
with Kafka" backed by a real line that never mentions Kafka; "SENIOR ACCOUNTANT" for "5+ years of
general ledger accounting"). `apply_validation` holds every surviving quote to the evidence rules
of `hltm.judge.evidence` and caps the item's status at what the quote backs; an *irrelevant*
quote is not shown, and counts as not surviving in the gate's figures.

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

from hltm.judge import evidence
from hltm.judge.resume import present_month

__all__ = [
    "MAX_QUOTE_CHARS",
    "OUTCOMES",
    "QUOTE_SIMILARITY_THRESHOLD",
    "NormalisedText",
    "QuoteCheck",
    "apply_validation",
    "empty_counts",
    "normalise",
    "sum_counts",
    "survival_rate",
    "validate_quote",
]

QUOTE_SIMILARITY_THRESHOLD = 0.85
MAX_QUOTE_CHARS = 200
OUTCOMES = ("exact", "repaired", "dropped", "absent")
# What caps a surviving quote's item (see `hltm.judge.evidence.Support.reason`).
REASONS = ("irrelevant", "thin", "short", "undated")
# Fragments are joined by an ellipsis with a space on at least one side ("[…]" is text).
_FRAGMENTS_RE = re.compile(r"\s+(?:…|\.\.\.)\s*|\s*(?:…|\.\.\.)\s+")

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
    """Outcome of validating one quote; ``quote`` is what may be shown (real resume spans)."""

    outcome: Outcome
    quote: str | None
    similarity: float
    span: tuple[int, int] | None = None  # [start, end) in the original resume (first fragment's
    # start to the last one's end)
    spans: tuple[tuple[int, int], ...] = ()  # each fragment's [start, end)

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
    fragments = [f for f in _FRAGMENTS_RE.split(str(quote)) if f.strip()]
    checks = [_validate_fragment(f, resume, threshold) for f in fragments] or [
        QuoteCheck("dropped", None, 0.0)
    ]
    if len(checks) == 1:
        check = checks[0]
        if not check.survived or check.span is None:
            return check
        start, end = _cap_length(resume.original, *check.span, max_chars)
        return QuoteCheck(
            check.outcome, resume.original[start:end], check.similarity, (start, end),
            ((start, end),),
        )  # fmt: skip
    similarity = min(c.similarity for c in checks)
    if not all(c.survived for c in checks):
        return QuoteCheck("dropped", None, similarity)
    spans: list[tuple[int, int]] = []
    used = 0
    for check in checks:  # fragments in the judge's order, while they fit in max_chars
        assert check.span is not None
        start, end = _cap_length(resume.original, *check.span, max_chars - used)
        if end <= start or (spans and end - start < check.span[1] - check.span[0]):
            break
        spans.append((start, end))
        used += end - start + len(evidence.FRAGMENT_SEPARATOR)
    shown = evidence.FRAGMENT_SEPARATOR.join(resume.original[a:b] for a, b in spans)
    outcome: Outcome = "exact" if all(c.outcome == "exact" for c in checks) else "repaired"
    return QuoteCheck(outcome, shown, similarity, (spans[0][0], spans[-1][1]), tuple(spans))


def _validate_fragment(fragment: str, resume: NormalisedText, threshold: float) -> QuoteCheck:
    """One verbatim fragment: its normalised-text match and the original span it covers."""
    nq = normalise(fragment).text
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
    return QuoteCheck(outcome, None, similarity, (o_start, o_end))


def _context(text: str, spans: Sequence[tuple[int, int]]) -> str:
    """The resume lines a quote was cut from (what it says beside the quote)."""
    lines = []
    for start, end in spans:
        line_start = text.rfind("\n", 0, start) + 1
        line_end = text.find("\n", end)
        lines.append(text[line_start : line_end if line_end >= 0 else len(text)])
    return "\n".join(lines)


def empty_counts() -> dict[str, int]:
    """Zeroed counters, the shape returned by :func:`apply_validation`."""
    keys = [*OUTCOMES, *REASONS, *(f"mandatory_{o}" for o in OUTCOMES), "mandatory_irrelevant"]
    keys += ["items", "mandatory_items", "downgraded", "mandatory_quotes", "mandatory_survived"]
    return dict.fromkeys(keys, 0)


def apply_validation(
    checklist: Sequence[Mapping[str, Any]],
    resume_text: str | NormalisedText,
    threshold: float = QUOTE_SIMILARITY_THRESHOLD,
    quote_key: str = "quote",
    relevance_threshold: float = evidence.RELEVANCE_THRESHOLD,
    present: int | None = None,
) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """Validate every checklist quote, then cap each item's status at what its quote proves.

    Each returned item is a copy with ``quote`` replaced by the validated real span (None when
    dropped, absent or irrelevant) plus ``quote_outcome``, ``quote_similarity``,
    ``quote_relevant`` (does the surviving quote bear on its requirement), ``quote_reason``
    (what capped the item: ``hltm.judge.evidence.Support.reason``) and ``llm_quote`` (what the
    judge wrote, kept for audit). An item without a surviving, relevant quote cannot stay
    ``met``. Counts: per outcome overall (``exact`` …) and for mandatory items
    (``mandatory_exact`` …), per reason (``irrelevant``, ``thin``, ``short``, ``undated``),
    ``mandatory_irrelevant``, ``downgraded`` (items whose status was lowered),
    ``mandatory_quotes`` (mandatory items with a non-blank quote) and ``mandatory_survived``
    (of those, verbatim and relevant). ``present`` is the month "present" means in the resume's
    dates (default: the latest month it mentions). ``resume_text`` may be pre-normalised with
    :func:`normalise` (one resume, many checklists).
    """
    if isinstance(resume_text, NormalisedText):
        resume = resume_text
    else:
        resume = normalise(resume_text or "")
    if present is None:
        present = present_month(resume.original)
    counts = empty_counts()
    out: list[dict[str, Any]] = []
    checks = [
        validate_quote(item.get(quote_key), resume, threshold=threshold) for item in checklist
    ]
    requirements = [str(item.get("requirement") or "") for item in checklist]
    evidence.prefetch(
        (
            (requirement, check.quote, str(item.get("status")))
            for requirement, item, check in zip(requirements, checklist, checks, strict=True)
            if check.survived and check.quote
        ),
        requirements,
    )
    for item, check in zip(checklist, checks, strict=True):
        new = dict(item)
        new["quote_outcome"] = check.outcome
        new["quote_similarity"] = round(check.similarity, 4)
        new["llm_quote"] = item.get(quote_key)
        status = str(item.get("status"))
        reason: str | None = None
        if check.survived and check.quote:
            backed = evidence.support(
                str(item.get("requirement") or ""), check.quote, present,
                _context(resume.original, check.spans), relevance_threshold, requirements, status,
            )  # fmt: skip
            reason = backed.reason
            status = evidence.capped(status, backed.cap)
            new["quote_relevant"] = backed.relevant
            new[quote_key] = check.quote if backed.relevant else None
        else:
            status = evidence.capped(status, "partial")
            new["quote_relevant"] = None
            new[quote_key] = None
        new["quote_reason"] = reason or (None if check.survived else check.outcome)
        if status != item.get("status"):
            counts["downgraded"] += 1
        new["status"] = status
        mandatory = bool(item.get("mandatory"))
        counts["items"] += 1
        counts[check.outcome] += 1
        if reason:
            counts[reason] += 1
        if mandatory:
            counts["mandatory_items"] += 1
            counts[f"mandatory_{check.outcome}"] += 1
            counts["mandatory_irrelevant"] += int(reason == "irrelevant")
            if check.outcome != "absent":
                counts["mandatory_quotes"] += 1
                counts["mandatory_survived"] += int(check.survived and reason != "irrelevant")
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
    quotes and are not counted) that were kept as exact or repaired and bear on their
    requirement. 1.0 when no mandatory
    quote was given — nothing was invented; the gate treats that case separately.
    """
    given = int(counts.get("mandatory_quotes", 0))
    if given == 0:
        return 1.0
    return int(counts.get("mandatory_survived", 0)) / given

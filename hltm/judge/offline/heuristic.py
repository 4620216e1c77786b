"""The offline judge: the rubric of `prompts/judge.toml` answered from general evidence, no model.

It answers the recruiter's question — would I show this candidate for this vacancy? — in the
rubric's order and in the JSON shape a model must return, from three kinds of evidence that
hold for any resume layout, each *standardised within the pool* (a z-score):

1. **Role**: how close the resume's own job titles — the first one it states
   (`resume.ParsedResume.titles`, in whatever layout: a headline, a first line, a title after
   an education block) and its latest dated position's — are to the vacancy's title by meaning
   (the bundled e5; the closer of the two). No fixed cosine band: e5 puts every
   "X Developer" within a few hundredths of each other, so only the candidate's standing in
   the pool says who is closest. A resume whose title cannot be read is *unknown*: the pool's
   mean (z = 0), never the floor.
2. **Level**: the years of the resume's dated positions against the years the vacancy asks
   for (``have / need``, capped at 1, mapped to −1…1); no dates or no stated years is unknown
   (0).
3. **Skills**: term evidence for the vacancy over the whole resume — BM25 over the pool, the
   mandatory requirements counted twice, ``log1p`` to tame its long tail.

**Overall** is the weighted sum of the three z-scores (``WEIGHTS``: role > level > skills, the rubric's
order, so where the role is read a candidate in the vacancy's trade outranks another trade's
richer stack; where it is unknown the order rests on the text evidence), shown on 0–100 through
the normal CDF. The checklist gives every requirement a status backed by a verbatim quote
(≤ 200 characters) from any line of the resume, the first included; "A or B" is met by either.

The pool: `prepare_pool` reads a vacancy's pool once (BM25 over the pool, title similarities in
one e5 batch) and keeps its statistics for `judge_offline`, which the LLM task interface calls
per pair. A pair judged without its pool is a pool of one: every standardised score is 0 (50
on the 0–100 scale); the checklist is the same either way. A score is relative to the pool it
was judged in, and the score cache keeps it until the vacancy or the resume changes.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hltm.embeddings import prefetch_texts, similarities
from hltm.judge.formal import is_formal
from hltm.judge.lexicon import CEFR, LANGUAGE_NAMES, NATIVE_WORDS
from hltm.judge.offline.resume import Line, ParsedResume, parse_as_of, parse_resume
from hltm.judge.pools import BM25Index
from hltm.judge.quotes import MAX_QUOTE_CHARS
from hltm.judge.text import key_terms, stem, tokenize

__all__ = ["WEIGHTS", "judge_offline", "key_terms", "prepare_pool"]

# The rubric's order of importance: role, then level, then skills (weights on z-scores).
WEIGHTS = {"role": 0.45, "level": 0.30, "skills": 0.25}

_YEARS_RE = re.compile(
    r"(?:(?:at least|minimum(?: of)?|min\.?|over|more than|не менее|минимум|от|более)\s+)?"
    r"(?P<n>\d{1,2})(?:[.,]\d)?\s*\+?\s*(?:-|–|to)?\s*(?:\d{1,2}\s*)?\+?\s*"
    r"(?:years?|yrs?|лет|года?|г\.)(?!\w)",
    re.IGNORECASE,
)
_CEFR_RE = re.compile(r"(?<![\w])([abcавс][12])(?![\w])", re.IGNORECASE)
_CYR_TO_LAT = str.maketrans({"а": "a", "в": "b", "с": "c", "А": "a", "В": "b", "С": "c"})
# "A or B", "A, B или C", "A/B": the items a requirement offers as alternatives
_OR_RE = re.compile(r"\s(?:or|или|либо)\s|/", re.IGNORECASE)
_ITEM_SPLIT_RE = re.compile(r"\s(?:or|или|либо)\s|/|,|;|\(|\)", re.IGNORECASE)


# ------------------------------------------------------------------------------ reading


@dataclass(frozen=True)
class _IndexedLine:
    line: Line
    tokens: frozenset[str]


@dataclass(frozen=True)
class _ResumeView:
    parsed: ParsedResume
    lines: list[_IndexedLine]  # every non-blank line, the first one included
    role_titles: list[str]  # the first title it states (headline) and its latest position's


_VIEW_CACHE: OrderedDict[str, _ResumeView] = OrderedDict()
_CACHE_SIZE = 512
_LOCK = threading.Lock()


def _digest(*parts: Any) -> str:
    return hashlib.sha1(json.dumps(parts, ensure_ascii=False, sort_keys=True).encode()).hexdigest()


def _view(resume: dict[str, Any]) -> _ResumeView:
    text = resume.get("text") or ""
    headline = (resume.get("headline") or "").strip()
    key = _digest(text, resume.get("as_of"), headline)
    with _LOCK:
        got = _VIEW_CACHE.get(key)
    if got is not None:
        return got
    parsed = parse_resume(text, parse_as_of(resume.get("as_of")))
    lines = [
        _IndexedLine(ln, frozenset(stem(t) for t in tokenize(ln.text)))
        for ln in parsed.lines
        if ln.text.strip() and ln.kind != "section"
    ]
    first = headline or (parsed.titles[0].text if parsed.titles else None)
    latest = parsed.positions[0].title if parsed.positions else None
    role_titles = list(dict.fromkeys(t for t in (first, latest) if t))
    view = _ResumeView(parsed, [li for li in lines if li.tokens], role_titles)
    with _LOCK:
        _VIEW_CACHE[key] = view
        if len(_VIEW_CACHE) > _CACHE_SIZE:
            _VIEW_CACHE.popitem(last=False)
    return view


def _requirements(vacancy: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in vacancy.get("requirements") or () if not is_formal(r.get("text"))]


def _vacancy_key(vacancy: dict[str, Any]) -> str:
    return _digest(vacancy.get("title"), vacancy.get("text"), vacancy.get("requirements"))


def _term_query(vacancy: dict[str, Any]) -> str:
    """What the term evidence looks for: the title and every requirement, the mandatory ones
    twice (a must weighs more than a nice-to-have)."""
    reqs = _requirements(vacancy)
    parts = [vacancy.get("title") or ""]
    parts += [r["text"] for r in reqs for _ in range(2 if r.get("mandatory") else 1)]
    if not reqs:
        parts.append(vacancy.get("text") or "")
    return "\n".join(parts)


# ------------------------------------------------------------------------------ the pool


@dataclass(frozen=True)
class _Standard:
    """Mean and spread of one kind of raw evidence over a pool."""

    mean: float
    std: float

    @classmethod
    def of(cls, values: Sequence[float]) -> _Standard:
        if not values:
            return cls(0.0, 1.0)
        mean = sum(values) / len(values)
        std = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
        return cls(mean, std or 1.0)

    def z(self, value: float) -> float:
        return (value - self.mean) / self.std


@dataclass(frozen=True)
class _PoolEvidence:
    """Raw evidence of every resume in a vacancy's pool (by resume text digest) and its spread."""

    term: dict[str, float]
    role: dict[str, float]  # only resumes whose title could be read

    @property
    def term_standard(self) -> _Standard:
        return _Standard.of(list(self.term.values()))

    @property
    def role_standard(self) -> _Standard:
        return _Standard.of(list(self.role.values()))


_POOLS: OrderedDict[str, _PoolEvidence] = OrderedDict()
_POOL_CACHE_SIZE = 64


def _role_similarity(vacancy_title: str, view: _ResumeView) -> float | None:
    if not vacancy_title.strip() or not view.role_titles:
        return None
    return max(similarities(vacancy_title, view.role_titles))


def prepare_pool(vacancy: dict[str, Any], resumes: Sequence[dict[str, Any]]) -> None:
    """Read a vacancy's pool once: the term evidence of every resume (BM25 over the pool) and
    the meaning of their titles (one e5 batch). `judge_offline` then places each candidate
    within this pool."""
    views = {_digest(r.get("text") or ""): _view(r) for r in resumes}
    keys = list(views)
    title = vacancy.get("title") or ""
    prefetch_texts([title, *(t for v in views.values() for t in v.role_titles)])
    index = BM25Index().build(keys, [v.parsed.text for v in views.values()])
    scores = index.scores(_term_query(vacancy)).tolist()
    term = {k: math.log1p(score) for k, score in zip(keys, scores, strict=True)}
    role = {k: sim for k, v in views.items() if (sim := _role_similarity(title, v)) is not None}
    with _LOCK:
        _POOLS[_vacancy_key(vacancy)] = _PoolEvidence(term, role)
        _POOLS.move_to_end(_vacancy_key(vacancy))
        if len(_POOLS) > _POOL_CACHE_SIZE:
            _POOLS.popitem(last=False)


def prepare_batch(payloads: list[dict[str, Any]]) -> None:
    """`Task.prepare` of the judge: a batch is one vacancy's pool."""
    if payloads:
        prepare_pool(payloads[0]["vacancy"], [p["resume"] for p in payloads])


def _scale(z: float) -> int:
    """A z-score on the 0–100 scale (its normal CDF): 0 → 50."""
    return _clamp(50 * (1 + math.erf(z / math.sqrt(2))))


# ------------------------------------------------------------------------------ quotes


def _quote(text: str, start: int, end: int, focus: tuple[int, int] | None = None) -> str:
    """A verbatim span ``text[start:end]`` of at most MAX_QUOTE_CHARS, cut at word boundaries
    around ``focus`` when the span is too long."""
    if end - start <= MAX_QUOTE_CHARS:
        return text[start:end]
    f_start, f_end = focus if focus else (start, start)
    lo = max(start, min(f_start, f_end - MAX_QUOTE_CHARS // 2) - 40)
    hi = min(end, lo + MAX_QUOTE_CHARS)
    lo = max(start, hi - MAX_QUOTE_CHARS)
    if lo > start:
        space = text.find(" ", lo, hi)
        lo = space + 1 if space != -1 else lo
    if hi < end:
        space = text.rfind(" ", lo, hi)
        hi = space if space > lo else hi
    return text[lo:hi].strip()


def _line_quote(view: _ResumeView, ln: Line, words: Sequence[str] = ()) -> str:
    text = view.parsed.text
    start, end = ln.content_span()
    focus = None
    low = text[start:end].lower()
    for word in words:
        i = low.find(word.lower())
        if i >= 0:
            focus = (start + i, start + i + len(word))
            break
    return _quote(text, start, end, focus)


# -------------------------------------------------------------------------- requirement checks


@dataclass
class Check:
    requirement_id: str
    requirement: str
    mandatory: bool
    kind: str  # years | language | skill
    status: str  # met | partial | not_found
    quote: str | None
    note: str


def _alternatives(requirement: str) -> list[list[str]]:
    """The key-term sets a requirement accepts: one set, or — when it offers alternatives
    ("Python or Java", "AWS, GCP или Azure") — one per item."""
    whole = key_terms(requirement)
    if not _OR_RE.search(requirement):
        return [whole] if whole else []
    items = [key_terms(part) for part in _ITEM_SPLIT_RE.split(requirement)]
    return [item for item in items if item] or ([whole] if whole else [])


def _best_line(view: _ResumeView, terms: list[str]) -> tuple[float, float, _IndexedLine | None]:
    """(coverage of ``terms`` over the whole resume, over its best line, that line)."""
    wanted = set(terms)
    found: set[str] = set()
    best: tuple[float, int, _IndexedLine | None] = (0.0, 0, None)
    for li in view.lines:
        hit = wanted & li.tokens
        if not hit:
            continue
        found |= hit
        key = (len(hit) / len(wanted), -len(li.line.text))
        if best[2] is None or key > best[:2]:
            best = (key[0], key[1], li)
    return len(found) / len(wanted), best[0], best[2]


def _check_skill(view: _ResumeView, req: dict[str, Any]) -> Check:
    rid, text, mandatory = str(req.get("id") or ""), req["text"], bool(req.get("mandatory"))
    options = _alternatives(text)
    if not options:
        return Check(rid, text, mandatory, "skill", "partial", None, "no concrete terms")
    scored = [(_best_line(view, terms), terms) for terms in options]
    (whole, line_cov, li), terms = max(scored, key=lambda s: (s[0][0], s[0][1]))
    if li is None:
        return Check(rid, text, mandatory, "skill", "not_found", None, "not mentioned")
    # met: one line states at least half of what is asked (the quote shows it); partial: the
    # resume states a third of it somewhere
    if line_cov >= 0.5:
        status = "met"
    elif whole >= 1 / 3:
        status = "partial"
    else:
        status = "not_found"
    quote = _line_quote(view, li.line, _surface(li.line.text, terms))
    note = f"{round(whole * len(terms))}/{len(terms)} terms"
    return Check(rid, text, mandatory, "skill", status, quote, note)


def _surface(line: str, terms: list[str]) -> list[str]:
    """The words of ``line`` whose stems are ``terms`` (to centre a long quote on them)."""
    return [w for w in tokenize(line) if stem(w) in terms]


def _years(view: _ResumeView) -> float | None:
    months = view.parsed.total_months()
    return months / 12.0 if view.parsed.positions else None


def _check_years(view: _ResumeView, req: dict[str, Any], need: float) -> Check:
    rid, text, mandatory = str(req.get("id") or ""), req["text"], bool(req.get("mandatory"))
    have = _years(view)
    if have is None:
        return Check(rid, text, mandatory, "years", "not_found", None, "no dated positions")
    pos = view.parsed.positions[0]
    quote = _quote(view.parsed.text, *pos.line.content_span(), pos.title_span)
    if have >= need:
        status = "met"
    elif have >= need / 2:
        status = "partial"
    else:
        status = "not_found"
    return Check(
        rid, text, mandatory, "years", status, quote if status != "not_found" else None,
        f"{have:.1f} of {need:g} years in dated positions",
    )  # fmt: skip


def _cefr(text: str) -> int | None:
    m = _CEFR_RE.search(text)
    return CEFR.index(m.group(1).translate(_CYR_TO_LAT).lower()) if m else None


def _check_language(view: _ResumeView, req: dict[str, Any], names: tuple[str, ...]) -> Check:
    rid, text, mandatory = str(req.get("id") or ""), req["text"], bool(req.get("mandatory"))
    wanted = _cefr(text)
    best: tuple[int, Line, int | None] | None = None
    for li in view.lines:
        low = li.line.text.lower()
        for name in names:
            i = low.find(name)
            if i < 0:
                continue
            window = low[i : i + 40]
            level = len(CEFR) if any(w in window for w in NATIVE_WORDS) else _cefr(window)
            rank = level if level is not None else -1
            if best is None or rank > (best[2] if best[2] is not None else -1):
                best = (rank, li.line, level)
    if best is None:
        return Check(rid, text, mandatory, "language", "not_found", None, "not mentioned")
    _, line, level = best
    enough = wanted is None or (level is not None and level >= wanted)
    shown = "native" if level == len(CEFR) else (CEFR[level].upper() if level is not None else "?")
    return Check(
        rid, text, mandatory, "language", "met" if enough else "partial",
        _line_quote(view, line, names), f"level {shown}",
    )  # fmt: skip


def _language_of(requirement: str) -> tuple[str, ...] | None:
    low = requirement.lower()
    return next((n for n in LANGUAGE_NAMES.values() if any(x in low for x in n)), None)


def check_requirement(view: _ResumeView, req: dict[str, Any]) -> Check:
    text = req["text"]
    years = _YEARS_RE.search(text)
    if years:
        return _check_years(view, req, float(years.group("n")))
    names = _language_of(text)
    if names and (_cefr(text) is not None or len(key_terms(text)) <= 2):
        return _check_language(view, req, names)
    return _check_skill(view, req)


# ---------------------------------------------------------------------------------- the verdict


def _required_years(vacancy: dict[str, Any]) -> float | None:
    for text in [r["text"] for r in _requirements(vacancy)] + [vacancy.get("text") or ""]:
        m = _YEARS_RE.search(text)
        if m:
            return float(m.group("n"))
    return None


def _clamp(x: float) -> int:
    return int(max(0, min(100, round(x))))


def judge_offline(payload: dict[str, Any]) -> dict[str, Any]:
    """The judge task's offline handler: payload → a verdict in the JudgeVerdict shape."""
    vacancy, resume = payload["vacancy"], payload["resume"]
    view = _view(resume)
    title = vacancy.get("title") or ""
    key = _digest(resume.get("text") or "")
    with _LOCK:
        pool = _POOLS.get(_vacancy_key(vacancy))
    if pool is None or key not in pool.term:  # judged alone: a pool of one
        pool = _PoolEvidence({key: 0.0}, {})

    # 1) role: the resume's own title against the vacancy's, standardised within the pool
    own_role = pool.role.get(key)
    if own_role is None:
        z_role = 0.0
        role_line = "no job title could be read: the role is unknown (no evidence either way)"
    else:
        z_role = pool.role_standard.z(own_role)
        role_line = (
            f"'{' / '.join(view.role_titles)}' reads {abs(z_role):.1f} standard deviations"
            f" {'closer to' if z_role >= 0 else 'further from'} '{title}' than the pool's"
            " average title"
        )
    actual = view.role_titles[0] if view.role_titles else "unclear (no job title found)"

    # 2) requirements, for the record and the skills line
    checks = [check_requirement(view, r) for r in _requirements(vacancy)]

    # 3) level: dated experience against the years asked for
    need, have = _required_years(vacancy), _years(view)
    if need is None or have is None:
        z_level = 0.0
        level_line = (
            "the vacancy states no years" if need is None else "no dated positions to count"
        ) + ": level unknown"
    else:
        z_level = 2 * (min(1.0, have / need) if need > 0 else 1.0) - 1
        level_line = f"{have:.1f} years in dated positions; the vacancy asks for {need:g}"

    # 4) skills: term evidence standardised within the pool
    z_skills = pool.term_standard.z(pool.term[key])
    mand = [c for c in checks if c.mandatory]
    met = sum(1 for c in mand if c.status == "met")
    skills_line = (
        f"term evidence {z_skills:+.1f} standard deviations from the pool's mean;"
        f" {met}/{len(mand)} mandatory requirements met"
    )
    experience_line = f"{have:.1f} years in dated positions" if have is not None else "no dates"

    z = {"role": z_role, "level": z_level, "skills": z_skills}
    # a weighted sum of standardised scores, itself standardised (unit spread if independent)
    norm = math.sqrt(sum(w * w for w in WEIGHTS.values()))
    overall = sum(WEIGHTS[name] * value for name, value in z.items()) / norm
    overall_line = ", ".join(f"{name} {value:+.2f}" for name, value in z.items()) + " (z-scores)"
    return {
        "actual_role": actual,
        "role": {"score": _scale(z_role), "explanation": role_line},
        "level": {"score": _scale(z_level), "explanation": level_line},
        "skills": {"score": _scale(z_skills), "explanation": skills_line},
        "experience": {"score": _scale(z_level), "explanation": experience_line},
        "checklist": [
            {
                "requirement_id": c.requirement_id,
                "requirement": c.requirement,
                "mandatory": c.mandatory,
                "status": c.status,
                "quote": c.quote,
            }
            for c in checks
        ],
        "overall": {"score": _scale(overall), "explanation": overall_line},
    }

"""The offline judge: the rubric of `hltm/llm/prompts/judge.toml` answered from general evidence, no model.

It answers the recruiter's question — would I show this candidate for this vacancy? — in the
rubric's order and in the JSON shape a model must return, from three kinds of evidence that
hold for any resume layout:

1. **Role**: how close the resume's own job titles — the first one it states
   (`resume.ParsedResume.titles`, in whatever layout: a headline, a first line, a title after
   an education block) and its latest dated position's — are to the vacancy's title by meaning
   (the bundled e5; the closer of the two), *standardised within the pool* (a z-score): e5 puts
   every "X Developer" within a few hundredths of each other, so only the candidate's standing
   in the pool says who is closest. No title, or a title with no dated work under it, is
   doubt, not a middle: ``DOUBT`` standard deviations below the pool's mean at best.
2. **Level**: the years of the resume's dated positions against the years the vacancy asks for
   (``have / need``, capped at 1, mapped to −1…1). No dated work is doubt (−1).
3. **Skills**: the share of the vacancy's requirements the resume states (0…1, mapped to −1…1):
   for each requirement the best of its alternatives ("Python or Java"), each key term weighted
   by its rarity in the pool (idf), each requirement by its mandatory flag and the rarity of its
   terms (a requirement every resume meets tells nobody apart). A term counts once however often
   it is written, in full when a sentence of dated work states it and half when only a list,
   a headline or a summary does; a line that speaks to the reader ("you") counts for nothing.
   The share is absolute, not standardised: a pool where nobody states the requirements does
   not make anyone's thin evidence look strong.

**Overall** is the weighted sum (``WEIGHTS``), shown on 0–100 as ``50 + 50·tanh(x/2)``: the
scale keeps the top of a pool apart instead of piling it up at 99–100. The checklist gives every
requirement a status backed by a verbatim quote held to `hltm.judge.evidence`: a years
requirement is met by the dated positions in its line of work (each quoted as its title with its
date range) whose months add up to the years; another requirement by a line that states at least
half of its key terms ("A or B" by either).

The pool: `prepare_pool` reads a vacancy's pool once (term rarity over the pool, title
similarities in one e5 batch) and keeps its statistics for `judge_offline`, which the LLM task
interface calls per pair. A pair judged without its pool is a pool of one: its role reads 0
standard deviations; the checklist is the same either way. A score is relative to the pool it
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
from hltm.judge.evidence import (
    FRAGMENT_SEPARATOR,
    MET_SHARE,
    addresses_reader,
    alternatives,
    required_years,
    substance,
    term_share,
)
from hltm.judge.formal import is_formal
from hltm.judge.lexicon import CEFR, LANGUAGE_NAMES, NATIVE_WORDS
from hltm.judge.quotes import MAX_QUOTE_CHARS
from hltm.judge.resume import Line, ParsedResume, Position, merged_months, parse_as_of, parse_resume
from hltm.judge.text import STOPWORDS, key_terms, stem, tokenize

__all__ = ["DOUBT", "WEIGHTS", "judge_offline", "key_terms", "prepare_pool"]

# Role in pool standard deviations; level and skills on −1…1 (skills spread over a few tenths of
# that scale, so its weight is the larger number).
WEIGHTS = {"role": 0.45, "level": 0.30, "skills": 0.75}
DOUBT = -1.0  # where there is no evidence: no title, no dated work
# Where a term is stated: a sentence of dated work, a list in dated work, anything else.
IN_WORK, LISTED_IN_WORK, ELSEWHERE = 1.0, 0.75, 0.5
_LIST_ITEM_WORDS = 3  # a list: short items between separators
_SENTENCE_WORDS = 5
_SEPARATORS_RE = re.compile(r"[,;|•·+]")
_CEFR_RE = re.compile(r"(?<![\w])([abcавс][12])(?![\w])", re.IGNORECASE)
_CYR_TO_LAT = str.maketrans({"а": "a", "в": "b", "с": "c", "А": "a", "В": "b", "С": "c"})
_HEADER_FRAGMENT_CHARS = 120  # a title and its dates quoted as one fragment up to this length
_WORK_CHARS = 70  # a line of work quoted beside a position's title and dates
_PARTIAL_SHARE = 1 / 3  # of a requirement's key terms the resume must state to be partial


# ------------------------------------------------------------------------------ reading


@dataclass(frozen=True)
class _IndexedLine:
    line: Line
    tokens: frozenset[str]
    weight: float  # IN_WORK, LISTED_IN_WORK or ELSEWHERE


@dataclass(frozen=True)
class _ResumeView:
    parsed: ParsedResume
    lines: list[_IndexedLine]  # every line that may be evidence, the first one included
    role_titles: list[str]  # the first title it states (headline) and its latest position's
    terms: dict[str, float]  # stemmed term → the weight of the best line stating it
    works: bool  # dated positions, or at least a sentence of what the person did


_VIEW_CACHE: OrderedDict[str, _ResumeView] = OrderedDict()
_CACHE_SIZE = 512
_LOCK = threading.Lock()


def _digest(*parts: Any) -> str:
    return hashlib.sha1(json.dumps(parts, ensure_ascii=False, sort_keys=True).encode()).hexdigest()


_NOT_WORK = frozenset({"education", "skills", "languages"})


def _is_sentence(text: str) -> bool:
    return len(text.split()) >= _SENTENCE_WORDS and not _lists_terms(text)


def _lists_terms(text: str) -> bool:
    """A line that only lists terms: short items between separators, or words with no function
    word among them ("Senior Accountant general ledger CPA …")."""
    words = text.split()
    items = len(_SEPARATORS_RE.findall(text)) + 1
    if items > 2 and len(words) / items <= _LIST_ITEM_WORDS:
        return True
    return len(words) > _LIST_ITEM_WORDS and not any(
        w.lower().strip(".,;:()") in STOPWORDS for w in words
    )


def _view(resume: dict[str, Any]) -> _ResumeView:
    text = resume.get("text") or ""
    headline = (resume.get("headline") or "").strip()
    key = _digest(text, resume.get("as_of"), headline)
    with _LOCK:
        got = _VIEW_CACHE.get(key)
    if got is not None:
        return got
    parsed = parse_resume(text, parse_as_of(resume.get("as_of")))
    lines = []
    for ln in parsed.lines:
        if not ln.text.strip() or ln.kind == "section" or addresses_reader(ln.text):
            continue
        tokens = frozenset(stem(t) for t in tokenize(ln.text))
        if tokens:
            weight = ELSEWHERE
            if ln.kind == "body":
                weight = LISTED_IN_WORK if _lists_terms(ln.text) else IN_WORK
            lines.append(_IndexedLine(ln, tokens, weight))
    terms: dict[str, float] = {}
    for li in lines:
        for t in li.tokens:
            terms[t] = max(terms.get(t, 0.0), li.weight)
    first = headline or (parsed.titles[0].text if parsed.titles else None)
    latest = parsed.positions[0].title if parsed.positions else None
    role_titles = list(dict.fromkeys(t for t in (first, latest) if t))
    works = bool(parsed.positions) or any(
        li.line.section not in _NOT_WORK and _is_sentence(li.line.text) for li in lines
    )
    view = _ResumeView(parsed, lines, role_titles, terms, works)
    with _LOCK:
        _VIEW_CACHE[key] = view
        if len(_VIEW_CACHE) > _CACHE_SIZE:
            _VIEW_CACHE.popitem(last=False)
    return view


def _requirements(vacancy: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in vacancy.get("requirements") or () if not is_formal(r.get("text"))]


def _vacancy_key(vacancy: dict[str, Any]) -> str:
    return _digest(vacancy.get("title"), vacancy.get("text"), vacancy.get("requirements"))


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
    """What the pool says about each resume (by resume text digest): its title's similarity to
    the vacancy's (only resumes whose title could be read), and the rarity of each term."""

    role: dict[str, float]
    idf: dict[str, float]  # stemmed term → log(1 + pool / (1 + resumes stating it))
    size: int
    script: dict[str, str]  # the alphabet each resume's titles are written in

    def role_z(self, key: str) -> float:
        """A title's similarity in standard deviations from the pool's mean — among the titles
        written in the same alphabet when there are enough of them: e5 scores a title in
        another language than the vacancy's a few hundredths lower across the board."""
        same = [s for k, s in self.role.items() if self.script.get(k) == self.script.get(key)]
        values = same if SPLIT_SCRIPTS and len(same) >= _MIN_GROUP else list(self.role.values())
        return _Standard.of(values).z(self.role[key])

    def rarity(self, term: str) -> float:
        return self.idf.get(term, math.log(1 + self.size))


SPLIT_SCRIPTS = True
_MIN_GROUP = 5
_CYRILLIC_RE = re.compile("[а-яё]", re.IGNORECASE)


def _script(text: str) -> str:
    return "cyrillic" if _CYRILLIC_RE.search(text) else "latin"


_POOLS: OrderedDict[str, _PoolEvidence] = OrderedDict()
_POOL_CACHE_SIZE = 64


def _role_similarity(vacancy_title: str, view: _ResumeView) -> float | None:
    if not vacancy_title.strip() or not view.role_titles:
        return None
    return max(similarities(vacancy_title, view.role_titles))


def prepare_pool(vacancy: dict[str, Any], resumes: Sequence[dict[str, Any]]) -> None:
    """Read a vacancy's pool once: the rarity of every term over the pool and the meaning of
    the resumes' titles (one e5 batch). `judge_offline` then places each candidate within this
    pool."""
    views = {_digest(r.get("text") or ""): _view(r) for r in resumes}
    title = vacancy.get("title") or ""
    prefetch_texts([title, *(t for v in views.values() for t in v.role_titles)])
    stated: dict[str, int] = {}
    for view in views.values():
        for term in view.terms:
            stated[term] = stated.get(term, 0) + 1
    size = len(views)
    idf = {t: math.log(1 + size / (1 + n)) for t, n in stated.items()}
    role = {k: sim for k, v in views.items() if (sim := _role_similarity(title, v)) is not None}
    script = {k: _script(" ".join(v.role_titles)) for k, v in views.items()}
    with _LOCK:
        _POOLS[_vacancy_key(vacancy)] = _PoolEvidence(role, idf, size, script)
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


def _clamp(x: float) -> int:
    return int(max(0, min(100, round(x))))


# ------------------------------------------------------------------------------ quotes


def _quote(
    text: str,
    start: int,
    end: int,
    focus: tuple[int, int] | None = None,
    limit: int = MAX_QUOTE_CHARS,
) -> str:
    """A verbatim span ``text[start:end]`` of at most ``limit`` characters, cut at word
    boundaries around ``focus`` when the span is too long."""
    if end - start <= limit:
        return text[start:end]
    f_start, f_end = focus if focus else (start, start)
    lo = max(start, min(f_start, f_end - limit // 2) - limit // 5)
    hi = min(end, lo + limit)
    lo = max(start, hi - limit)
    if lo > start:
        space = text.find(" ", lo, hi)
        lo = space + 1 if space != -1 else lo
    if hi < end:
        space = text.rfind(" ", lo, hi)
        hi = space if space > lo else hi
    return text[lo:hi].strip()


def _line_quote(
    view: _ResumeView, ln: Line, words: Sequence[str] = (), limit: int = MAX_QUOTE_CHARS
) -> str:
    text = view.parsed.text
    start, end = ln.content_span()
    focus = None
    low = text[start:end].lower()
    for word in words:
        i = low.find(word.lower())
        if i >= 0:
            focus = (start + i, start + i + len(word))
            break
    return _quote(text, start, end, focus, limit)


def _position_quote(text: str, pos: Position) -> str:
    """A position as evidence of dated work: its title with its date range."""
    (t0, t1), (d0, d1) = pos.title_span, pos.dates_span
    start, end = min(t0, d0), max(t1, d1)
    if end - start <= _HEADER_FRAGMENT_CHARS:
        return text[start:end].strip()
    first, second = sorted(((t0, t1), (d0, d1)))
    return text[first[0] : first[1]].strip() + FRAGMENT_SEPARATOR + text[second[0] : second[1]]


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


def _best_line(view: _ResumeView, terms: list[str]) -> tuple[float, _IndexedLine | None]:
    """(share of ``terms`` stated by the best line, that line): most terms, then a sentence of
    work over a list, then the shorter line."""
    wanted = set(terms)
    best: tuple[tuple[float, float, int], _IndexedLine | None] = ((0.0, 0.0, 0), None)
    for li in view.lines:
        hit = wanted & li.tokens
        if hit:
            key = (len(hit) / len(wanted), li.weight, -len(li.line.text))
            if best[1] is None or key > best[0]:
                best = (key, li)
    return best[0][0], best[1]


def _check_skill(view: _ResumeView, req: dict[str, Any]) -> Check:
    rid, text, mandatory = str(req.get("id") or ""), req["text"], bool(req.get("mandatory"))
    options = alternatives(text)
    if not options:
        return Check(rid, text, mandatory, "skill", "not_found", None, "no concrete terms")
    (share, li), terms = max(((_best_line(view, t), t) for t in options), key=lambda s: s[0][0])
    if li is None:
        return Check(rid, text, mandatory, "skill", "not_found", None, "not mentioned")
    # met: one line states at least half of what is asked (the quote shows it); partial: the
    # resume states a third of it, the quote the line stating most
    stated = sum(t in view.terms for t in terms) / len(terms)
    if share >= MET_SHARE:
        status = "met"
    elif stated >= _PARTIAL_SHARE:
        status = "partial"
    else:
        return Check(rid, text, mandatory, "skill", "not_found", None, "barely mentioned")
    quote = _line_quote(view, li.line, _surface(li.line.text, terms))
    note = f"{round(share * len(terms))}/{len(terms)} terms in one line"
    return Check(rid, text, mandatory, "skill", status, quote, note)


def _surface(line: str, terms: list[str]) -> list[str]:
    """The words of ``line`` whose stems are ``terms`` (to centre a long quote on them)."""
    return [w for w in tokenize(line) if stem(w) in terms]


def _years(view: _ResumeView) -> float | None:
    months = view.parsed.total_months()
    return months / 12.0 if view.parsed.positions else None


def _evidence_of(view: _ResumeView, pos: Position, about: str) -> str | None:
    """The quote that shows a position as dated work in the line ``about`` names: its title with
    its date range, and the line of its work that names the line when the title does not;
    None when neither names it."""
    header = _position_quote(view.parsed.text, pos)
    if not alternatives(about) or term_share(about, pos.title):
        return header
    for ln in pos.body:
        if term_share(about, ln.text) and not addresses_reader(ln.text):
            terms = [t for ts in alternatives(about) for t in ts]
            said = _line_quote(view, ln, _surface(ln.text, terms), _WORK_CHARS)
            return header + FRAGMENT_SEPARATOR + said
    return None


def _check_years(view: _ResumeView, req: dict[str, Any], need: float) -> Check:
    rid, text, mandatory = str(req.get("id") or ""), req["text"], bool(req.get("mandatory"))
    about = substance(text)
    relevant = [(p, q) for p in view.parsed.positions if (q := _evidence_of(view, p, about))]
    if not relevant:
        note = "no dated positions" if not view.parsed.positions else "no dated work in this line"
        return Check(rid, text, mandatory, "years", "not_found", None, note)
    have = merged_months([(p.start, p.end) for p, _ in relevant]) / 12.0
    # the quote: the positions, latest first, until their months reach the years asked
    shown: list[Position] = []
    fragments: list[str] = []
    for pos, fragment in relevant:
        if len(FRAGMENT_SEPARATOR.join([*fragments, fragment])) > MAX_QUOTE_CHARS:
            break
        shown.append(pos)
        fragments.append(fragment)
        if merged_months([(p.start, p.end) for p in shown]) / 12.0 >= need:
            break
    if not fragments:
        return Check(rid, text, mandatory, "years", "not_found", None, "no quotable position")
    quoted = merged_months([(p.start, p.end) for p in shown]) / 12.0
    status = "met" if quoted >= need else "partial"
    return Check(
        rid, text, mandatory, "years", status, FRAGMENT_SEPARATOR.join(fragments),
        f"{have:.1f} of {need:g} years in dated positions in this line of work",
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
    need = required_years(text)
    if need is not None:
        return _check_years(view, req, need)
    names = _language_of(text)
    if names and (_cefr(text) is not None or len(key_terms(text)) <= 2):
        return _check_language(view, req, names)
    return _check_skill(view, req)


# ---------------------------------------------------------------------------------- the verdict


def _vacancy_years(vacancy: dict[str, Any]) -> float | None:
    for text in [r["text"] for r in _requirements(vacancy)] + [vacancy.get("text") or ""]:
        need = required_years(text)
        if need is not None:
            return need
    return None


def _coverage(view: _ResumeView, vacancy: dict[str, Any], pool: _PoolEvidence) -> float:
    """The share (0…1) of the vacancy's requirements the resume states, see the module
    docstring; years are the level's evidence, not counted here."""
    total = covered = 0.0
    for req in _requirements(vacancy):
        if required_years(req["text"]) is not None:
            continue
        options = alternatives(req["text"])
        if not options:
            continue
        best = 0.0
        for terms in options:
            weights = [pool.rarity(t) for t in terms]
            stated = sum(w * view.terms.get(t, 0.0) for t, w in zip(terms, weights, strict=True))
            best = max(best, stated / sum(weights))
        rarity = sum(pool.rarity(t) for terms in options for t in terms)
        weight = (2.0 if req.get("mandatory") else 1.0) * rarity / sum(map(len, options))
        total += weight
        covered += weight * best
    return covered / total if total else 0.0


def judge_offline(payload: dict[str, Any]) -> dict[str, Any]:
    """The judge task's offline handler: payload → a verdict in the JudgeVerdict shape."""
    vacancy, resume = payload["vacancy"], payload["resume"]
    view = _view(resume)
    title = vacancy.get("title") or ""
    key = _digest(resume.get("text") or "")
    with _LOCK:
        pool = _POOLS.get(_vacancy_key(vacancy))
    if pool is None or (key not in pool.role and view.role_titles):  # judged alone: its own
        # title is the pool's mean (z = 0), whatever its similarity
        pool = _PoolEvidence({key: 0.0} if view.role_titles else {}, {}, 1, {})

    # 1) role: the resume's own title against the vacancy's, standardised within the pool
    own_role = pool.role.get(key)
    actual = view.role_titles[0] if view.role_titles else "unclear (no job title found)"
    if own_role is None:
        z_role = DOUBT
        role_line = "no job title could be read: no evidence of the role (doubt)"
    else:
        z_role = pool.role_z(key)
        role_line = (
            f"'{' / '.join(view.role_titles)}' reads {abs(z_role):.1f} standard deviations"
            f" {'closer to' if z_role >= 0 else 'further from'} '{title}' than the pool's"
            " average title"
        )
        if not view.works:
            z_role = min(z_role, 0.0) + DOUBT
            role_line += "; nothing under the title: no dated work, no sentence of work (doubt)"

    # 2) requirements, for the record and the skills line
    checks = [check_requirement(view, r) for r in _requirements(vacancy)]

    # 3) level: dated experience against the years asked for
    need, have = _vacancy_years(vacancy), _years(view)
    if have is None:
        level = DOUBT
        level_line = "no dated positions: no evidence of the level (doubt)"
    elif need is None:
        level = 0.0
        level_line = f"{have:.1f} years in dated positions; the vacancy states no years"
    else:
        level = 2 * (min(1.0, have / need) if need > 0 else 1.0) - 1
        level_line = f"{have:.1f} years in dated positions; the vacancy asks for {need:g}"

    # 4) skills: the share of the requirements the resume states
    share = _coverage(view, vacancy, pool)
    mand = [c for c in checks if c.mandatory]
    met = sum(1 for c in mand if c.status == "met")
    skills_line = (
        f"states {share:.0%} of what the requirements ask (rare terms and sentences of dated"
        f" work weigh more); {met}/{len(mand)} mandatory requirements met"
    )
    experience_line = f"{have:.1f} years in dated positions" if have is not None else "no dates"

    evidence = {"role": z_role, "level": level, "skills": 2 * share - 1}
    x = sum(WEIGHTS[name] * value for name, value in evidence.items())
    overall_line = (
        f"role {z_role:+.2f} (pool standard deviations), level {level:+.2f}, skills"
        f" {2 * share - 1:+.2f} (−1…1); weighted sum {x:+.2f}"
    )
    return {
        "actual_role": actual,
        "role": {"score": _scale(z_role), "explanation": role_line},
        "level": {"score": _clamp(50 + 50 * level), "explanation": level_line},
        "skills": {"score": _clamp(100 * share), "explanation": skills_line},
        "experience": {"score": _clamp(50 + 50 * level), "explanation": experience_line},
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
        "overall": {"score": _clamp(50 + 50 * math.tanh(x / 2)), "explanation": overall_line},
    }

"""The offline judge: the rubric of `prompts/judge.toml` applied by rules, no model.

It answers the recruiter's question — would I show this candidate for this vacancy? — in the
rubric's order, and in the same JSON shape a model must return:

1. **Role** from the last two or three positions (titles first, described work second; the
   headline is ignored). A different job caps the overall score low however many keywords
   match: *role outweighs stack*.
2. **Level** from the seniority written in the most recent title and from the years the
   positions span (dates, "present" = when the resume was last updated).
3. **Skills** only then: every requirement of the vacancy gets a status backed by a quote cut
   verbatim from the resume (≤ 200 characters) — the line where the requirement's own terms
   occur, preferring described work over a bare skills list. No support → no quote, and the
   status is at most ``partial``. Years-of-experience lines are checked against the dated
   positions in the required role; language lines against CEFR levels.
4. **Overall** = what a recruiter would do with those answers: the same role at the same level
   with every mandatory requirement met is a clear yes; one level off or one mandatory
   requirement short is a maybe; further off, or another role, is a no.

Formal items ("ready to sign an NDA") are ignored, as the prompt instructs a model to. It is
general: nothing here knows how the sample world writes its resumes.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections import Counter, OrderedDict
from dataclasses import dataclass
from typing import Any

from hltm.embeddings import prefetch_texts
from hltm.judge.formal import is_formal
from hltm.judge.lexicon import (
    CEFR,
    FAMILY_BY_NAME,
    LANGUAGE_NAMES,
    LEVELS,
    NATIVE_WORDS,
)
from hltm.judge.quotes import MAX_QUOTE_CHARS
from hltm.judge.resume import Line, ParsedResume, parse_as_of, parse_resume
from hltm.judge.roles import (
    CandidateRole,
    VacancyRole,
    candidate_role,
    headline_of,
    level_from_required_years,
    level_from_title,
    level_from_years,
    position_role,
    role_phrases,
    semantic_role_match,
    title_evidence,
    trade_presence,
    vacancy_role,
    word_counts,
    work_evidence,
)
from hltm.judge.text import key_terms, stem, tokenize

__all__ = ["judge_offline", "key_terms", "prepare_pool"]

# How much a mandatory requirement that is not met costs, by kind: a language level is
# usually settled at the screening call, a missing skill is not.
KIND_WEIGHT = {"skill": 1.0, "language": 0.4, "years": 1.0}
SAME_ROLE = 0.55  # share of the recent positions' evidence that must be the vacancy's role
TRADE_WORDS_WEIGHT = 0.15  # the role match's share read from the trade's words in the text
# Role first: the requirements' evidence moves a candidate within what the role allows (at
# most 45% of it), so a same-role candidate short on skills stays above another trade's.
ROLE_FIRST = 0.55
RELATED_ROLE = 0.3  # below this, another job

_YEARS_RE = re.compile(
    r"(?:(?:at least|minimum(?: of)?|min\.?|over|more than|не менее|минимум|от|более)\s+)?"
    r"(?P<n>\d{1,2})(?:[.,]\d)?\s*\+?\s*(?:-|–|to)?\s*(?:\d{1,2}\s*)?\+?\s*"
    r"(?:years?|yrs?|лет|года?|г\.)(?!\w)",
    re.IGNORECASE,
)
_CEFR_RE = re.compile(r"(?<![\w])([abcавс][12])(?![\w])", re.IGNORECASE)
_CYR_TO_LAT = str.maketrans({"а": "a", "в": "b", "с": "c", "А": "a", "В": "b", "С": "c"})


# ------------------------------------------------------------------------------ text matching


@dataclass
class _LineIndex:
    line: Line
    tokens: tuple[str, ...]
    priority: int  # higher = better evidence (described work > summary > skills list)


_PRIORITY = {"body": 3, "header": 2, "anchor": 2, "summary": 1, "skills": 1, "other": 1}


@dataclass
class _ResumeView:
    parsed: ParsedResume
    lines: list[_LineIndex]
    role: CandidateRole
    position_roles: list[dict[str, float]]
    phrases: list[tuple[str, float]]  # role phrases: recent titles and the headline
    term_counts: Counter[str]  # stemmed words of the whole text, for the trade's own words


_VIEW_CACHE: OrderedDict[tuple[str, int | None, str | None], _ResumeView] = OrderedDict()
_VIEW_CACHE_SIZE = 512


def _view(text: str, as_of: int | None, headline: str | None = None) -> _ResumeView:
    key = (hashlib.sha1(text.encode("utf-8")).hexdigest(), as_of, headline)
    got = _VIEW_CACHE.get(key)
    if got is not None:
        _VIEW_CACHE.move_to_end(key)
        return got
    parsed = parse_resume(text, as_of)
    given = headline_of(parsed, headline)
    indexed = []
    for n, ln in enumerate(parsed.lines):
        if not ln.text.strip() or ln.kind == "section" or n == 0:
            continue  # the first line of a resume is the person's name
        toks = tuple(stem(t) for t in tokenize(ln.text))
        if toks:
            indexed.append(_LineIndex(ln, toks, _PRIORITY.get(ln.kind, 1)))
    view = _ResumeView(
        parsed, indexed, candidate_role(parsed), [position_role(p) for p in parsed.positions],
        role_phrases(parsed, given), word_counts(text),
    )  # fmt: skip
    _VIEW_CACHE[key] = view
    if len(_VIEW_CACHE) > _VIEW_CACHE_SIZE:
        _VIEW_CACHE.popitem(last=False)
    return view


_VACANCY_CACHE: OrderedDict[str, tuple[list[dict[str, Any]], VacancyRole]] = OrderedDict()


def _vacancy_view(vacancy: dict[str, Any]) -> tuple[list[dict[str, Any]], VacancyRole]:
    """(non-formal requirements, the role it hires for), computed once per vacancy version."""
    key = hashlib.sha1(
        json.dumps(
            [vacancy.get("title"), vacancy.get("text"), vacancy.get("requirements")],
            sort_keys=True,
            ensure_ascii=False,
        ).encode("utf-8")
    ).hexdigest()
    got = _VACANCY_CACHE.get(key)
    if got is not None:
        return got
    reqs = [r for r in vacancy.get("requirements") or () if not is_formal(r.get("text"))]
    title = vacancy.get("title") or ""
    role = vacancy_role(title, [r["text"] for r in reqs], vacancy.get("text") or "")
    if role.family is not None and not title_evidence(title):
        # the lexicon guessed the family from the requirements' tools alone ("Excel", "reports"
        # in an accountant's posting): not a role to hold resumes to; read the title instead
        role = VacancyRole(None, 0.0, title)
    _VACANCY_CACHE[key] = (reqs, role)
    if len(_VACANCY_CACHE) > 256:
        _VACANCY_CACHE.popitem(last=False)
    return reqs, role


def _quote(text: str, start: int, end: int, focus: tuple[int, int] | None = None) -> str:
    """A verbatim span ``text[start:end]`` of at most MAX_QUOTE_CHARS, cut at word boundaries
    around ``focus`` when the span is too long."""
    if end - start <= MAX_QUOTE_CHARS:
        return text[start:end]
    f_start, f_end = focus if focus else (start, start)
    lo = max(start, min(f_start, f_end - MAX_QUOTE_CHARS // 2) - 40)
    hi = min(end, lo + MAX_QUOTE_CHARS)
    lo = max(start, hi - MAX_QUOTE_CHARS)
    # snap to word boundaries inside the window
    if lo > start:
        space = text.find(" ", lo, hi)
        lo = space + 1 if space != -1 else lo
    if hi < end:
        space = text.rfind(" ", lo, hi)
        hi = space if space > lo else hi
    return text[lo:hi].strip()


def _line_quote(view: _ResumeView, ln: Line, terms: list[str] | None = None) -> str:
    text = view.parsed.text
    start, end = ln.content_span()
    focus = None
    if terms:
        low = text[start:end].lower()
        for term in terms:
            i = low.find(term.lower())
            if i >= 0:
                focus = (start + i, start + i + len(term))
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
    strength: float = 0.0  # 0–1: how strongly the quoted evidence supports the requirement

    @property
    def value(self) -> float:
        return {"met": 1.0, "partial": 0.5}.get(self.status, 0.0)


def _find_terms(
    view: _ResumeView, terms: list[str]
) -> tuple[float, list[tuple[float, _LineIndex]]]:
    """(coverage over the whole resume, the best lines with their own coverage, best first)."""
    if not terms:
        return 0.0, []
    found_any: set[str] = set()
    scored: list[tuple[tuple[float, int, int], _LineIndex]] = []
    wanted = set(terms)
    for li in view.lines:
        hit = wanted.intersection(li.tokens)
        if not hit:
            continue
        found_any |= hit
        cov = len(hit) / len(terms)
        scored.append(((cov, li.priority, -len(li.line.text)), li))
    scored.sort(key=lambda x: x[0], reverse=True)
    best = [(key[0], li) for key, li in scored[:1]]
    return len(found_any) / len(terms), best


def _check_skill(view: _ResumeView, req: dict[str, Any]) -> Check:
    terms = key_terms(req["text"])
    coverage, lines = _find_terms(view, terms)
    strength = 0.0
    if not terms:
        status, quote, note = "partial", None, "no concrete terms to look for"
    elif not lines:
        status, quote, note = "not_found", None, "not mentioned"
    else:
        line_cov, best = lines[0]
        quote = _line_quote(view, best.line, terms)
        if coverage >= 0.999 and line_cov >= 0.5:
            status = "met"
        elif coverage >= 0.5:
            status = "partial"
        else:
            status = "not_found" if line_cov < 0.34 else "partial"
        note = f"{round(coverage * len(terms))}/{len(terms)} terms"
        strength = 0.5 * coverage + 0.5 * line_cov
    return Check(
        str(req.get("id") or ""), req["text"], bool(req.get("mandatory")), "skill",
        status, quote, note, strength,
    )  # fmt: skip


def _relevant_positions(view: _ResumeView, family: str | None, role: str = "") -> list[int]:
    """Positions in the required role: by the lexicon's family, else by the title's meaning."""
    positions = view.parsed.positions
    if family is None:
        if not role.strip():
            return list(range(len(positions)))
        return [
            i for i, p in enumerate(positions)
            if semantic_role_match(role, [(p.title, 1.0)]).score >= SAME_ROLE
        ]  # fmt: skip
    out = []
    for i, dist in enumerate(view.position_roles):
        if dist and (dist.get(family, 0.0) >= 0.4 or max(dist, key=dist.__getitem__) == family):
            out.append(i)
    return out


def _position_quote(view: _ResumeView, index: int) -> str:
    """Title line (and the date line under it, when separate) of a position, verbatim."""
    pos = view.parsed.positions[index]
    text = view.parsed.text
    start, end = pos.line.content_span()
    # the dates may sit on the next line ("Senior X — Acme\n2021-03 – present")
    rest = text[end:]
    nxt = re.match(r"[ \t]*\n([^\n]*\S)", rest)
    if nxt and pos.line.kind == "header":
        end = end + nxt.end(1)
    return _quote(text, start, end, pos.title_span)


def _check_years(
    view: _ResumeView, req: dict[str, Any], years: float, family: str | None, role: str
) -> Check:
    fam_hint = title_evidence(req["text"]) or work_evidence(req["text"])
    role_family = family
    if fam_hint and family not in fam_hint:
        role_family = max(fam_hint, key=fam_hint.__getitem__)
    relevant = _relevant_positions(view, role_family, role)
    months = view.parsed.months_where([i in relevant for i in range(len(view.parsed.positions))])
    have = months / 12.0
    total = view.parsed.total_months() / 12.0
    label = FAMILY_BY_NAME[role_family].label if role_family else "the role"
    if relevant:
        quote = _position_quote(view, relevant[0])
    elif view.parsed.positions:
        quote = _position_quote(view, 0)
    else:
        quote = None
    if relevant and have >= years - 0.25:
        status = "met"
    elif relevant and (have >= 0.6 * years or total >= years):
        status = "partial"
    else:
        status = "not_found"
    note = f"{have:.1f} of {years:g} years as {label} ({total:.1f} in total)"
    strength = min(1.0, have / years) if years > 0 else float(bool(relevant))
    return Check(
        str(req.get("id") or ""), req["text"], bool(req.get("mandatory")), "years",
        status, quote if status != "not_found" else None, note, strength,
    )  # fmt: skip


def _cefr(text: str) -> int | None:
    m = _CEFR_RE.search(text)
    if not m:
        return None
    return CEFR.index(m.group(1).translate(_CYR_TO_LAT).lower())


def _check_language(view: _ResumeView, req: dict[str, Any], names: tuple[str, ...]) -> Check:
    wanted = _cefr(req["text"])
    best: tuple[int, Line, int | None] | None = None
    for li in view.lines:
        low = li.line.text.lower()
        for name in names:
            i = low.find(name)
            if i < 0:
                continue
            window = low[i : i + 40]
            level = _cefr(window)
            if any(w in window for w in NATIVE_WORDS):
                level = len(CEFR)
            rank = (level if level is not None else -1) + 10
            if best is None or rank > best[0]:
                best = (rank, li.line, level)
    rid, text, mandatory = str(req.get("id") or ""), req["text"], bool(req.get("mandatory"))
    if best is None:
        if _written_in(view.parsed.text, names):
            return Check(rid, text, mandatory, "language", "partial", None,
                         "level not stated; the resume itself is written in it")  # fmt: skip
        return Check(rid, text, mandatory, "language", "not_found", None, "not mentioned")
    _, line, level = best
    quote = _line_quote(view, line, list(names))
    enough = wanted is None or (level is not None and level >= wanted)
    status = "met" if enough else "partial"
    shown = "native" if level == len(CEFR) else (CEFR[level].upper() if level is not None else "?")
    return Check(
        rid, text, mandatory, "language", status, quote, f"level {shown}",
        1.0 if enough else 0.5,
    )  # fmt: skip


def _written_in(text: str, names: tuple[str, ...]) -> bool:
    letters = [ch for ch in text if ch.isalpha()]
    if not letters:
        return False
    cyrillic = sum(1 for ch in letters if "а" <= ch.lower() <= "я" or ch in "ёЁ") / len(letters)
    if names[0] == "english":
        return cyrillic < 0.2
    if names[0] == "russian":
        return cyrillic > 0.5
    return False


def _language_of(requirement: str) -> tuple[str, ...] | None:
    low = requirement.lower()
    for names in LANGUAGE_NAMES.values():
        if any(n in low for n in names):
            return names
    return None


def check_requirement(
    view: _ResumeView, req: dict[str, Any], vac: VacancyRole, role: str = ""
) -> Check:
    text = req["text"]
    years = _YEARS_RE.search(text)
    if years:
        return _check_years(view, req, float(years.group("n")), vac.family, role)
    names = _language_of(text)
    if names and (_cefr(text) is not None or len(key_terms(text)) <= 2):
        return _check_language(view, req, names)
    return _check_skill(view, req)


# ---------------------------------------------------------------------------------- the verdict


def _candidate_level(view: _ResumeView) -> tuple[float, str]:
    years = view.parsed.total_months() / 12.0
    by_years = level_from_years(years)
    if not view.parsed.positions:
        return float(by_years), f"{years:.1f} years in dated positions"
    written, strong = level_from_title(view.parsed.positions[0].title)
    if written is not None and strong:
        idx = float(LEVELS.index(written))
        if abs(idx - by_years) >= 2:
            idx = (idx + by_years) / 2
        return idx, f"'{view.parsed.positions[0].title}', {years:.1f} years"
    if written is not None:
        return (LEVELS.index(written) + by_years) / 2, f"{years:.1f} years"
    return float(by_years), f"{years:.1f} years, no seniority in the title"


def _vacancy_level(title: str, checks: list[Check], reqs: list[dict[str, Any]]) -> float | None:
    written, strong = level_from_title(title)
    if written is not None and (strong or written == "lead"):
        return float(LEVELS.index(written))
    for req in reqs:
        m = _YEARS_RE.search(req["text"])
        if m:
            return float(level_from_required_years(float(m.group("n"))))
    if written is not None:
        return float(LEVELS.index(written))
    return None


def _clamp(x: float) -> int:
    return int(max(0, min(100, round(x))))


def _lexicon_decides(vac: VacancyRole, role: CandidateRole) -> bool:
    """Both the vacancy's and the resume's titles are in the lexicon: it alone reads the role,
    and the meaning of the role phrases is not needed (embedding them is most of the cost of
    an offline verdict)."""
    return vac.family is not None and bool(role.families) and role.source == "titles"


def prepare_pool(vacancy: dict[str, Any], resumes: list[dict[str, Any]]) -> None:
    """Read a pool's resumes and embed, in one batch, the role phrases `judge_offline` will
    compare by meaning (those the lexicon does not settle): the bundled model is cheaper per
    text on a batch, and the verdicts then only look the vectors up. Optional — the verdicts
    are the same without it."""
    _, vac = _vacancy_view(vacancy)
    texts = [vacancy.get("title") or ""]
    for resume in resumes:
        view = _view(
            resume.get("text") or "", parse_as_of(resume.get("as_of")), resume.get("headline")
        )
        if vac.family is None:  # years are counted in positions whose titles mean the role
            texts += [p.title for p in view.parsed.positions]
        if not _lexicon_decides(vac, view.role):
            texts += [phrase for phrase, _ in view.phrases]
    if len(texts) > 1:
        prefetch_texts(texts)


def judge_offline(payload: dict[str, Any]) -> dict[str, Any]:
    """The judge task's offline handler: payload → a verdict in the JudgeVerdict shape."""
    vacancy = payload["vacancy"]
    resume = payload["resume"]
    view = _view(resume.get("text") or "", parse_as_of(resume.get("as_of")), resume.get("headline"))
    reqs, vac = _vacancy_view(vacancy)
    role = view.role
    title = vacancy.get("title") or ""

    # 1) role: the lexicon's families where both sides are in it, else the meaning of the
    # resume's role phrases (recent titles, headline) against the vacancy's title
    if _lexicon_decides(vac, role):
        semantic = None
        match = role.match(vac.family)
    else:
        semantic = semantic_role_match(title, view.phrases)
        if vac.family is None or not role.families:
            match = semantic.score
        else:  # the lexicon only guessed the resume's family from tools it mentions
            match = max(role.match(vac.family), semantic.score)
    # titles are often garbled or worded apart; a resume of the trade still uses its words
    match = (1 - TRADE_WORDS_WEIGHT) * match + TRADE_WORDS_WEIGHT * trade_presence(
        title, view.term_counts
    )
    if role.top and vac.family is not None:
        actual = FAMILY_BY_NAME[role.top].label
    else:  # a job outside the lexicon: say what the resume calls it (read by meaning above)
        best = semantic.best if semantic is not None else None
        actual = best or (role.recent_titles[0] if role.recent_titles else "unclear")
    titles = "; ".join(role.recent_titles[:3]) or "no dated positions"
    role_score = _clamp(100 * match)
    if match >= SAME_ROLE:
        role_line = f"recent positions ({titles}) are {actual} work, as the vacancy needs"
    elif match >= RELATED_ROLE:
        role_line = (
            f"recent positions ({titles}) are {actual} work: related to {vac.label}, not the same"
        )
    else:
        role_line = f"recent positions ({titles}) are {actual} work, not {vac.label}"

    # 2) requirements (skills come after the role; they are checked either way for the record)
    checks = [check_requirement(view, r, vac, title) for r in reqs]

    # 3) level
    cand_level, level_basis = _candidate_level(view)
    vac_level = _vacancy_level(vacancy.get("title") or "", checks, reqs)
    if vac_level is None:
        gap = 0.0
        level_line = f"vacancy states no level; candidate reads as {LEVELS[round(cand_level)]}"
    else:
        gap = abs(cand_level - vac_level)
        level_line = (
            f"candidate reads as {LEVELS[round(cand_level)]} ({level_basis}); "
            f"vacancy is {LEVELS[round(vac_level)]}"
        )
    level_score = _clamp(100 - 35 * gap)

    # 4) skills and experience
    mand = [c for c in checks if c.mandatory and c.kind != "years"]
    nice = [c for c in checks if not c.mandatory and c.kind != "years"]
    years_checks = [c for c in checks if c.kind == "years"]
    mand_frac = sum(c.value for c in mand) / len(mand) if mand else 1.0
    nice_frac = sum(c.value for c in nice) / len(nice) if nice else 0.0
    skills_score = _clamp(100 * (0.85 * mand_frac + 0.15 * nice_frac) if mand else 100 * nice_frac)
    missing = [c for c in mand if c.status != "met"]
    skills_line = (
        f"{sum(1 for c in mand if c.status == 'met')}/{len(mand)} mandatory requirements met"
        + (
            f"; short on: {', '.join(_short(c.requirement) for c in missing[:3])}"
            if missing
            else ""
        )
        + (
            f"; {sum(1 for c in nice if c.status == 'met')}/{len(nice)} nice-to-haves"
            if nice
            else ""
        )
    )
    if years_checks:
        yc = years_checks[0]
        experience_score = _clamp(100 * yc.value)
        experience_line = yc.note
    else:
        total = view.parsed.total_months() / 12.0
        experience_score = _clamp(min(100, 40 + 10 * total))
        experience_line = f"{total:.1f} years in dated positions"

    # 5) overall: role gates everything; then level and mandatory requirements; the
    # strength of the evidence separates candidates the coarse statuses leave level
    quality = 0.97 - 0.27 * gap
    quality -= 0.24 * sum(KIND_WEIGHT[c.kind] * (1.0 - c.value) for c in mand)
    quality -= 0.08 * sum(1.0 - c.value for c in years_checks if c.mandatory)
    quality += 0.03 * nice_frac
    evidence = sum(c.strength for c in checks) / len(checks) if checks else 0.0
    quality += 0.06 * (evidence - 0.5)
    overall = 100.0 * _role_factor(match) * (ROLE_FIRST + (1 - ROLE_FIRST) * _soft_floor(quality))
    if match >= SAME_ROLE:
        verdict = "same role"
    elif match >= RELATED_ROLE:
        verdict = "related role only"
    else:
        verdict = "different role — stack match does not make up for it"
    overall_line = f"{verdict}; level gap {gap:.1f}; {skills_line.split(';')[0]}"

    return {
        "actual_role": f"{actual} (from: {titles})",
        "role": {"score": role_score, "explanation": role_line},
        "level": {"score": level_score, "explanation": level_line},
        "skills": {"score": skills_score, "explanation": skills_line},
        "experience": {"score": experience_score, "explanation": experience_line},
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
        "overall": {"score": _clamp(overall), "explanation": overall_line},
    }


def _short(text: str, limit: int = 40) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _role_factor(match: float) -> float:
    """How much of the quality score a role match lets through: nearly all of it for the same
    role, under half for a related one, under a third for another job. Increasing in the match
    (never flat), so that with the same evidence a closer role always ranks higher."""
    match = max(0.0, min(1.0, match))
    if match >= SAME_ROLE:
        return 0.85 + 0.15 * match
    if match >= RELATED_ROLE:
        return 0.30 + 0.15 * (match - RELATED_ROLE) / (SAME_ROLE - RELATED_ROLE)
    return 0.10 + 0.20 * match / RELATED_ROLE


def _soft_floor(quality: float) -> float:
    """``quality`` in 0–1, kept above 0 (and still increasing) below 0.1, so that candidates
    short on several requirements are still ordered by what they have."""
    quality = min(1.0, quality)
    return quality if quality >= 0.1 else 0.1 * math.exp(quality - 0.1)

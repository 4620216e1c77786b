"""Which job a text describes, and at what level: evidence from titles first, work second.

The rubric's first question is the *actual* role — read from the last two or three positions,
never from the headline (people title themselves after the job they want). A position's role is
read from its title (strong evidence) and from what its lines describe (weak evidence, capped so
that a QA engineer who lists the backend's whole stack stays a QA engineer). When a title is
generic ("Software Engineer", "Инженер-программист", "Engineer II") the described work decides.
Recent positions weigh more than older ones.

Outside the lexicon (an accountant, a chef, a teacher…) and beside it, the role is read by
*meaning*: the resume's role phrases — the titles of its recent positions and its own headline
line — are compared with the vacancy's role by shared title words and by the bundled e5 model
(`hltm.embeddings.similarities`), so "Finance Manager" reads as close to "Director of Finance", and an
English "IT Specialist" to a Russian "IT-специалист".
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from hltm.embeddings import similarities
from hltm.judge.lexicon import (
    FAMILIES,
    FAMILY_BY_NAME,
    LEVEL_MARKERS_RE,
    LEVELS,
    family_similarity,
)
from hltm.judge.resume import MAX_TITLE_CHARS, ROLE_NOUNS, ParsedResume, Position, title_score
from hltm.judge.text import stem, tokenize

__all__ = [
    "CandidateRole",
    "RoleMatch",
    "ROLE_CEIL",
    "ROLE_FLOOR",
    "VacancyRole",
    "calibrate",
    "candidate_role",
    "headline_of",
    "role_phrases",
    "semantic_role_match",
    "title_calibration",
    "level_from_title",
    "level_from_required_years",
    "level_from_years",
    "title_evidence",
    "trade_presence",
    "trade_terms",
    "vacancy_role",
    "word_counts",
    "work_evidence",
]

RECENCY_WEIGHTS = (0.5, 0.3, 0.2)  # the last three positions
WORK_CAP = 2.5  # described work can add at most this much to a family per position
_YO = str.maketrans({"ё": "е", "Ё": "Е"})


def _fold(text: str) -> str:
    return text.translate(_YO)


def title_evidence(title: str) -> dict[str, float]:
    """Family → weight of the title patterns that match (several may: "Senior Java Developer")."""
    folded = _fold(title)
    out: dict[str, float] = {}
    for fam in FAMILIES:
        best = 0.0
        for pattern, weight in fam.compiled_titles():
            if weight > best and pattern.search(folded):
                best = weight
        if best:
            out[fam.name] = best
    return out


def work_evidence(text: str, cap: float = WORK_CAP) -> dict[str, float]:
    """Family → sum of distinct work patterns found in ``text`` (capped per family)."""
    folded = _fold(text)
    out: dict[str, float] = {}
    for fam in FAMILIES:
        total = 0.0
        for pattern, weight in fam.compiled_work():
            if pattern.search(folded):
                total += weight
        if total:
            out[fam.name] = min(cap, total)
    return out


def _normalise(scores: dict[str, float]) -> dict[str, float]:
    total = sum(scores.values())
    return {k: v / total for k, v in scores.items()} if total > 0 else {}


def position_role(pos: Position) -> dict[str, float]:
    """Distribution over families for one position (empty when nothing is recognisable)."""
    titles = title_evidence(pos.title)
    work = work_evidence("\n".join(ln.text for ln in pos.body))
    scores: dict[str, float] = {}
    for fam, w in titles.items():
        scores[fam] = scores.get(fam, 0.0) + 2.0 * w
    for fam, w in work.items():
        scores[fam] = scores.get(fam, 0.0) + w
    # Sharpen: the leading family should dominate a position, not share it evenly — more so
    # when only the described work speaks (a generic title such as "Software Engineer").
    power = 2 if titles else 3
    return _normalise({k: v**power for k, v in scores.items()})


@dataclass(frozen=True)
class CandidateRole:
    families: dict[str, float]  # distribution over families, recent positions weighted
    recent_titles: tuple[str, ...]
    source: str  # "titles" | "work" | "skills" | "none": what the role was read from

    @property
    def top(self) -> str | None:
        return max(self.families, key=self.families.__getitem__) if self.families else None

    def match(self, family: str | None) -> float:
        if family is None or not self.families:
            return 0.0
        return sum(p * family_similarity(f, family) for f, p in self.families.items())


def candidate_role(resume: ParsedResume, n_recent: int = 3) -> CandidateRole:
    recent = resume.recent(n_recent)
    combined: dict[str, float] = {}
    any_title = False
    for weight, pos in zip(RECENCY_WEIGHTS, recent, strict=False):
        dist = position_role(pos)
        any_title = any_title or bool(title_evidence(pos.title))
        for fam, p in dist.items():
            combined[fam] = combined.get(fam, 0.0) + weight * p
    source = "titles" if any_title else ("work" if combined else "none")
    if not combined:
        # No readable positions: fall back on the skills list and the summary (weak).
        text = "\n".join(ln.text for ln in (*resume.skills_lines, *resume.summary_lines))
        combined = work_evidence(text)
        source = "skills" if combined else "none"
    return CandidateRole(_normalise(combined), tuple(p.title for p in recent), source)


@dataclass(frozen=True)
class VacancyRole:
    family: str | None
    confidence: float
    label: str


def vacancy_role(title: str, requirement_texts: Iterable[str], text: str = "") -> VacancyRole:
    """The family a vacancy hires for: its title, then its requirements, then its text."""
    scores: dict[str, float] = {}
    for fam, w in title_evidence(title).items():
        scores[fam] = scores.get(fam, 0.0) + 3.0 * w
    for req in requirement_texts:
        for fam, w in title_evidence(req).items():
            scores[fam] = scores.get(fam, 0.0) + 0.5 * w
        for fam, w in work_evidence(req, cap=1.0).items():
            scores[fam] = scores.get(fam, 0.0) + 0.5 * w
    if text:
        for fam, w in work_evidence(text, cap=2.0).items():
            scores[fam] = scores.get(fam, 0.0) + 0.5 * w
    if not scores:
        return VacancyRole(None, 0.0, title)
    dist = _normalise(scores)
    best = max(dist, key=dist.__getitem__)
    return VacancyRole(best, dist[best], FAMILY_BY_NAME[best].label)


# --------------------------------------------------------------------------- role by meaning

# e5's cosines are compressed (on short job titles: unrelated jobs 0.80–0.87, the same job
# 0.90–0.98), so a raw cosine is calibrated to 0–1 between a floor and a ceiling. Measured on 10
# real vacancy titles × 13 real resume titles of different trades (e5-small-q4): a different job
# scores ≤ 0.87 (median 0.83), the same job ≥ 0.89. `title_calibration` raises the floor for
# titles e5 puts near every job.
ROLE_FLOOR = 0.84
ROLE_CEIL = 0.93


def calibrate(cosine: float, floor: float = ROLE_FLOOR, ceil: float = ROLE_CEIL) -> float:
    """A raw e5 cosine mapped to 0–1 between ``floor`` (unrelated) and ``ceil`` (the same)."""
    return float(min(1.0, max(0.0, (cosine - floor) / (ceil - floor))))


HEADLINE_WEIGHT = 0.4  # the headline is a claim; the positions (0.6 together) are the evidence
# A "position title" that neither reads as a job title nor names the trade ("Financial
# Statements.", "Design") is usually a line the parser took for one; it counts at this share.
UNTITLED_PHRASE_WEIGHT = 0.2
_ROLE_FILLER = frozenset({"of", "and", "the", "for", "in", "at", "to", "&", "i", "ii", "iii", "iv"})


def headline_of(resume: ParsedResume, given: str | None = None) -> str | None:
    """The resume's own headline: the given one, else the first short title-like line among
    its first three (a resume often opens with the person's name, then the title)."""
    if given and given.strip() and len(given.strip()) <= MAX_TITLE_CHARS:
        return given.strip()
    seen = 0
    for ln in resume.lines:
        text = ln.text.strip()
        if not text:
            continue
        seen += 1
        if seen > 3 or ln.kind == "section":
            break
        if len(text) <= MAX_TITLE_CHARS and ROLE_NOUNS.search(text) and title_score(text) > 0:
            return text
    return None


def role_phrases(resume: ParsedResume, headline: str | None) -> list[tuple[str, float]]:
    """(phrase, weight): the recent positions' titles, most recent first, and the headline."""
    recent = resume.recent(len(RECENCY_WEIGHTS))
    if not recent:
        if headline:
            return [(headline, 1.0)]
        first = next((ln.text.strip() for ln in resume.summary_lines if ln.text.strip()), "")
        return [(first[: 2 * MAX_TITLE_CHARS], 1.0)] if first else []
    weights = RECENCY_WEIGHTS[: len(recent)]
    scale = (1.0 - HEADLINE_WEIGHT) if headline else 1.0
    out = [(p.title, scale * w / sum(weights)) for p, w in zip(recent, weights, strict=True)]
    if headline:
        out.append((headline, HEADLINE_WEIGHT))
    return out


def role_words(title: str) -> set[str]:
    """The words of a title that name the job: seniority and filler removed, stemmed."""
    words = set()
    for tok in tokenize(_fold(title)):
        if tok in _ROLE_FILLER or any(p.fullmatch(tok) for p, _ in LEVEL_MARKERS_RE):
            continue
        words.add(stem(tok))
    return words


# Job words that name a generic function, not a trade: "Sales *Representative*", "Human
# Resources *Manager*" (`role_words` has already dropped the levels: senior, lead, staff …).
# A resume of the trade uses the trade's own words throughout.
GENERIC_ROLE_WORDS = frozenset(
    stem(w)
    for w in [
        "manager", "specialist", "associate", "representative", "rep", "assistant",
        "coordinator", "officer", "director", "head", "executive", "consultant", "worker",
        "member", "clerk", "agent", "advisor", "administrator", "supervisor", "technician",
        "professional", "engineer", "analyst", "менеджер", "специалист", "ассистент",
        "помощник", "руководитель", "директор", "консультант", "сотрудник", "инженер", "аналитик",
    ]
)  # fmt: skip
TERM_SATURATION = 4  # mentions of a trade word that count as "writes about this trade"


def trade_terms(vacancy_title: str) -> list[str]:
    """The vacancy title's trade words (stemmed); all its job words when none is a trade word."""
    want = role_words(vacancy_title)
    return sorted(w for w in want if w not in GENERIC_ROLE_WORDS) or sorted(want)


def word_counts(text: str) -> Counter[str]:
    """Stemmed words of ``text``, folded as `role_words` folds a title."""
    return Counter(stem(tok) for tok in tokenize(_fold(text)))


def trade_presence(vacancy_title: str, term_counts: Mapping[str, int]) -> float:
    """0–1: how much the resume's own text uses the vacancy title's trade words ("account…",
    "sales", "учител…"), each saturating at ``TERM_SATURATION`` mentions. The resume's
    strongest evidence of its trade where titles are missing, garbled or worded apart."""
    terms = trade_terms(vacancy_title)
    if not terms:
        return 0.0
    return sum(min(1.0, term_counts.get(t, 0) / TERM_SATURATION) for t in terms) / len(terms)


@dataclass(frozen=True)
class RoleMatch:
    score: float  # 0–1, the weighted match of the resume's role phrases to the vacancy's role
    best: str | None  # the phrase that matched best


# Jobs of many trades, in both languages: what "another job" looks like to the model. e5 puts
# some titles closer to everything than others ("Staff Accountant" is 0.88 from a random job,
# "Business Development Manager" 0.83), so a fixed floor reads unrelated jobs as related for
# the first kind. Each vacancy title gets its own floor from these instead.
OTHER_TRADES = (
    "Cashier", "Software Developer", "Registered Nurse", "Accountant", "Sales Representative",
    "Chef", "Truck Driver", "Teacher", "Consultant", "Administrative Assistant",
    "Customer Service Representative", "Mechanical Engineer", "Graphic Designer",
    "Project Manager", "Store Manager", "Warehouse Worker", "Marketing Manager", "HR Manager",
    "Financial Analyst", "Electrician", "Receptionist", "Lawyer", "Security Guard",
    "Data Analyst", "Intern", "Bank Teller", "Pharmacist", "Carpenter", "Waiter",
    "Office Manager", "Менеджер по продажам", "Бухгалтер", "Водитель", "Программист",
    "Учитель", "Продавец-кассир",
)  # fmt: skip
OTHER_TRADES_QUANTILE = 0.75  # the floor: closer than three in four jobs of other trades
SAME_JOB_MARGIN = 0.06  # the ceiling sits at least this far above the floor


@functools.lru_cache(maxsize=4096)
def title_calibration(vacancy_title: str) -> tuple[float, float]:
    """(floor, ceiling) of e5 cosines for ``vacancy_title``: the floor is where the title's
    similarity to jobs of other trades (those sharing none of its job words) ends, never
    below the global ``ROLE_FLOOR``."""
    want = role_words(vacancy_title)
    others = [t for t in OTHER_TRADES if not role_words(t) & want]
    if not others:
        return ROLE_FLOOR, ROLE_CEIL
    sims = similarities(vacancy_title, others)
    floor = max(ROLE_FLOOR, float(np.quantile(sims, OTHER_TRADES_QUANTILE)))
    return floor, max(ROLE_CEIL, floor + SAME_JOB_MARGIN)


def semantic_role_match(vacancy_title: str, phrases: list[tuple[str, float]]) -> RoleMatch:
    """How close the resume's role phrases are to the vacancy's role, by words and meaning.

    Each phrase scores the larger of (a) the share of the vacancy title's trade words it
    contains ("Customer Care Representative" shares no trade with "Sales Representative") and
    (b) the e5 similarity of the two titles, calibrated for this vacancy title
    (`title_calibration`). A phrase that neither reads as a job title nor names the trade
    weighs less."""
    if not phrases or not vacancy_title.strip():
        return RoleMatch(0.0, None)
    want = set(trade_terms(vacancy_title))
    floor, ceil = title_calibration(vacancy_title)
    sims = similarities(vacancy_title, [p for p, _ in phrases])
    total = weight = 0.0
    best: tuple[float, str] | None = None
    for (phrase, w), sim in zip(phrases, sims, strict=True):
        overlap = len(want & role_words(phrase)) / len(want) if want else 0.0
        if not overlap and title_score(phrase) <= 0:
            w *= UNTITLED_PHRASE_WEIGHT
        score = max(overlap, calibrate(sim, floor, ceil))
        total += w * score
        weight += w
        if best is None or score > best[0]:
            best = (score, phrase)
    return RoleMatch(total / weight if weight else 0.0, best[1] if best else None)


# ------------------------------------------------------------------------------------- level

# "Team Lead" / "Tech Lead" name a level; "Delivery Lead" or "Product Lead" name a job.
_LEAD_SUFFIX = re.compile(
    r"(?<!\w)(?:team|tech|technical|engineering|dev|qa|тим|тех)[\s-]?(?:lead|лид)\W*$",
    re.IGNORECASE,
)


def level_from_title(title: str) -> tuple[str | None, bool]:
    """(level written in the title, whether it is a strong prefix marker)."""
    folded = _fold(title).strip()
    found: list[tuple[int, str]] = []
    for pattern, level in LEVEL_MARKERS_RE:
        for m in pattern.finditer(folded):
            found.append((m.start(), level))
    if not found:
        return None, False
    found.sort()
    pos, level = found[0]
    strong = pos <= 2 or folded[:pos].strip().endswith(("|", ",", "—", "-"))
    if level == "lead" and not strong:
        return ("lead", False) if _LEAD_SUFFIX.search(folded) else (None, False)
    return level, strong


# Years of experience typical of each level, and years a vacancy asks for at each level
# (general rules of thumb: "5+ years" is a senior opening, a 5-year career is a strong middle).
_CAREER_YEARS = (3.0, 6.0, 10.0)  # below 3 junior, below 6 middle, below 10 senior, else lead
_REQUIRED_YEARS = (3.0, 5.0, 8.0)  # asks < 3 junior, < 5 middle, < 8 senior, else lead


def level_from_years(years: float) -> int:
    """Level index (0 junior … 3 lead) typical of a career of ``years``."""
    return sum(1 for limit in _CAREER_YEARS if years >= limit)


def level_from_required_years(years: float) -> int:
    """Level index a vacancy asking for ``years`` of experience hires at."""
    return sum(1 for limit in _REQUIRED_YEARS if years >= limit)


def level_index(level: str) -> int:
    return LEVELS.index(level)

"""Which IT role family a vacancy hires for, and the level its title states, by the lexicon.

Used by the requirement calibration (which proposes requirements from a recruiter's past
projects of the same family). The offline judge does not use it: it reads roles by meaning,
relative to the pool (`hltm.judge.offline.heuristic`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from hltm.judge.lexicon import (
    FAMILIES,
    FAMILY_BY_NAME,
    LEVEL_MARKERS_RE,
)

__all__ = ["VacancyRole", "level_from_title", "title_evidence", "vacancy_role", "work_evidence"]

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

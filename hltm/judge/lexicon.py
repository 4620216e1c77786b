"""Recruiting vocabulary the offline judge reads resumes and vacancies with (English and Russian).

Nothing here knows about the sample generator: it is a general map of IT job titles, the
activities and tools typical of each role, seniority markers and the filler words requirement
lines are made of. The offline judge uses it to answer the rubric's questions the way a recruiter
would: *what role does this person actually do* (titles of the recent positions first, the work
they describe second, never the headline), *at what level*, and *which requirements are backed
by the resume's own words*.

Role families are deliberately coarse (backend, frontend, data engineer, QA, project manager…):
a recruiter asks "is this the same job?", not "is this the same job title?". Closely related
families (data scientist ↔ ML engineer, backend ↔ full-stack) get partial credit through
``RELATED``; everything else is a different job however many keywords it shares.

The patterns are data (`lexicon.toml` beside this module); extend by adding some there. Every
pattern is a case-insensitive regular expression matched on text whose ``ё`` was folded to ``е``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from hltm.vocabulary import expand, load

__all__ = [
    "FAMILIES",
    "GENERIC_REQUIREMENT_WORDS",
    "LEVELS",
    "RoleFamily",
]

LEVELS = ("junior", "middle", "senior", "lead")

# Word boundaries that keep C#, C++, .NET and Node.js whole and work for Cyrillic.
_B = r"(?<![\w#+.])"
_E = r"(?![\w#+])"


@dataclass(frozen=True)
class RoleFamily:
    """One kind of job: how its titles read, and what its people write about their work."""

    name: str
    label: str  # human-readable, used in explanations
    titles: tuple[tuple[str, float], ...]  # (pattern on a position title, weight)
    work: tuple[tuple[str, float], ...]  # (pattern on what the position describes, weight)

    def compiled_titles(self) -> tuple[tuple[re.Pattern[str], float], ...]:
        return _compile(self.titles)

    def compiled_work(self) -> tuple[tuple[re.Pattern[str], float], ...]:
        return _compile(self.work)


_CACHE: dict[tuple[tuple[str, float], ...], tuple[tuple[re.Pattern[str], float], ...]] = {}


def _compile(
    items: tuple[tuple[str, float], ...],
) -> tuple[tuple[re.Pattern[str], float], ...]:
    got = _CACHE.get(items)
    if got is None:
        got = tuple((re.compile(f"{_B}(?:{p}){_E}", re.IGNORECASE), w) for p, w in items)
        _CACHE[items] = got
    return got


_DATA = load(__package__, "lexicon")  # the vocabulary itself: lexicon.toml beside this file


def _patterns(rows: list[list]) -> tuple[tuple[str, float], ...]:
    return tuple((expand(pattern, _DATA["fragments"]), weight) for pattern, weight in rows)


FAMILIES: tuple[RoleFamily, ...] = tuple(
    RoleFamily(f["name"], f["label"], _patterns(f["titles"]), _patterns(f["work"]))
    for f in _DATA["families"]
)

FAMILY_BY_NAME = {f.name: f for f in FAMILIES}

# Seniority written in a title. Prefix markers ("Senior Java Developer", "Ведущий аналитик") are
# strong; "… Lead" at the end of a title ("Delivery Lead", "Tech Lead") is a weaker hint.
LEVEL_MARKERS: tuple[tuple[str, str], ...] = tuple(
    (pattern, level) for pattern, level in _DATA["level_markers"]
)
LEVEL_MARKERS_RE = tuple(
    (re.compile(f"{_B}(?:{p}){_E}", re.IGNORECASE), level) for p, level in LEVEL_MARKERS
)


# Filler in requirement lines: what is left after removing these is what must be evidenced.
# Russian entries are stems (a word matches when it starts with one).
def _words(block: str) -> tuple[str, ...]:
    return tuple(block.split())


GENERIC_REQUIREMENT_WORDS: frozenset[str] = frozenset(_words(_DATA["generic_requirement_words"]))
GENERIC_REQUIREMENT_STEMS_RU: tuple[str, ...] = _words(_DATA["generic_requirement_stems_ru"])

# CEFR levels for language requirements ("English B2+", "английский не ниже B1").
CEFR = tuple(_DATA["cefr"])
LANGUAGE_NAMES: dict[str, tuple[str, ...]] = {
    name: tuple(forms) for name, forms in _DATA["language_names"].items()
}
NATIVE_WORDS = tuple(_DATA["native_words"])

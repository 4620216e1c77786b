"""Filter for formal checklist items ("ready to sign an NDA", "готовность к собеседованию").

Why: with less reasoning effort the judge pads its checklist with formalities the prompt tells
it to ignore (+64% items, 3.4× more formal "mandatory, not found"). Such items are not
evidence about the candidate — nobody's resume says "ready for an interview" — yet as
"mandatory, not found" they drag scores and quote statistics. The filter runs at any
reasoning depth, before quote validation.

The patterns target *readiness / consent / formality* phrasing, not topics: "conduct
technical interviews of candidates" or "проведение собеседований" is a real requirement and
must stay. Patterns are plain regular expressions (case-insensitive) so the list can be
extended from configuration.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = ["DEFAULT_FORMAL_PATTERNS", "drop_formal", "is_formal", "split_formal"]

_READY_EN = (
    r"\b(?:ready|readiness|prepared|willing|willingness|agree|agrees|agreement|consent|consents"
    r"|available|availability)\b"
)
_READY_RU = r"\b(?:готов\w*|соглас(?:ие|ия|ен|на|ны)\b)"
_WORDS = r"(?:[\w-]+\s+){0,%d}?"  # a few intervening words, never across punctuation

DEFAULT_FORMAL_PATTERNS: tuple[str, ...] = (
    # NDA / confidentiality undertakings
    rf"{_READY_EN}\s+{_WORDS % 3}(?:an?\s+)?(?:nda|non-disclosure)s?\b",
    rf"\b(?:sign|signing|signed|under)\s+{_WORDS % 1}(?:nda|non-disclosure)s?\b",
    r"^\W*(?:an?\s+)?(?:nda|non-disclosure agreement)s?\W*$",
    rf"{_READY_RU}\s+{_WORDS % 3}(?:nda|соглашени\w* о неразглашении|неразглашени\w*)",
    rf"\b(?:подпис\w*|работ\w*\s+(?:по|под))\s+{_WORDS % 1}(?:nda|соглашени\w* о неразглашении)",
    r"^\W*(?:соглашение о неразглашении|неразглашение)\W*$",
    # Interview readiness (the candidate's side only; conducting interviews is a real skill)
    rf"{_READY_EN}\s+(?:for|to\s+(?:attend|pass|take|have|go\s+through|participate\s+in))\s+"
    rf"{_WORDS % 3}interviews?\b",
    rf"\b(?:attend|pass|passing|undergo|undergoing)\s+{_WORDS % 2}interviews?\b",
    r"^\W*(?:an?\s+)?(?:job\s+|technical\s+)?interviews?(?:\s+stages?|\s+process)?\W*$",
    rf"{_READY_RU}\s+(?:к|на|пройти|прийти|посетить)\s+{_WORDS % 3}(?:собеседовани\w*|интервью)",
    rf"\b(?:пройти|прохождение|прохождению)\s+{_WORDS % 3}(?:собеседовани\w*|интервью)",
    r"^\W*(?:собеседование|интервью)\W*$",
    # Background / security checks (not "security clearance", which can be a real requirement)
    rf"{_READY_EN}\s+{_WORDS % 4}(?:background|security|criminal\s+record|reference)\s+"
    r"(?:check|screening|verification)s?\b",
    rf"\b(?:pass|passing|undergo|undergoing)\s+{_WORDS % 2}(?:background|security)\s+"
    r"(?:check|screening|verification)s?\b",
    r"^\W*(?:background|security)\s+(?:check|screening)s?\W*$",
    rf"{_READY_RU}\s+{_WORDS % 3}проверк\w*",
    rf"\b(?:пройти|прохождение)\s+{_WORDS % 2}проверк\w*\s+"
    r"(?:сб|служб\w* безопасности|безопасност\w*)",
    r"^\W*проверка\s+(?:сб|службой безопасности|службы безопасности)\W*$",
    # Personal-data consent, references, test tasks
    rf"\bconsent\s+{_WORDS % 3}(?:personal\s+data|data\s+processing)",
    r"\bсоглас\w*\s+на\s+обработк\w*\s+(?:[\w-]+\s+)?персональн\w*",
    rf"{_READY_EN}\s+(?:to\s+)?(?:provide|give|share)\s+{_WORDS % 2}references?\b",
    rf"{_READY_RU}\s+{_WORDS % 2}предостав\w*\s+{_WORDS % 2}рекомендаци\w*",
    rf"{_READY_EN}\s+(?:to\s+)?(?:complete|do|take|perform|pass)\s+(?:an?\s+|the\s+)?"
    r"(?:test|home|take-home)[\s-](?:task|assignment)s?\b",
    rf"{_READY_RU}\s+{_WORDS % 2}(?:выполн\w*|сделать|пройти)\s+{_WORDS % 1}тестов\w*\s+задани\w*",
)

_DEFAULT_COMPILED: tuple[re.Pattern[str], ...] | None = None


def _compiled(patterns: Sequence[str | re.Pattern[str]]) -> tuple[re.Pattern[str], ...]:
    global _DEFAULT_COMPILED
    if patterns is DEFAULT_FORMAL_PATTERNS:
        if _DEFAULT_COMPILED is None:
            _DEFAULT_COMPILED = tuple(re.compile(p, re.IGNORECASE) for p in patterns)
        return _DEFAULT_COMPILED
    return tuple(p if isinstance(p, re.Pattern) else re.compile(p, re.IGNORECASE) for p in patterns)


def is_formal(
    requirement_text: str | None,
    patterns: Sequence[str | re.Pattern[str]] = DEFAULT_FORMAL_PATTERNS,
) -> bool:
    """True if the requirement is a formality (NDA, interview readiness, checks, consents)."""
    if not requirement_text:
        return False
    text = " ".join(requirement_text.replace("ё", "е").replace("Ё", "Е").split())
    return any(p.search(text) for p in _compiled(patterns))


def split_formal(
    items: Iterable[Mapping[str, Any]],
    key: str = "requirement",
    patterns: Sequence[str | re.Pattern[str]] = DEFAULT_FORMAL_PATTERNS,
) -> tuple[list[Mapping[str, Any]], list[Mapping[str, Any]]]:
    """Partition checklist items into (kept, formal), preserving order."""
    kept: list[Mapping[str, Any]] = []
    formal: list[Mapping[str, Any]] = []
    for item in items:
        (formal if is_formal(item.get(key), patterns) else kept).append(item)
    return kept, formal


def drop_formal(
    items: Iterable[Mapping[str, Any]],
    key: str = "requirement",
    patterns: Sequence[str | re.Pattern[str]] = DEFAULT_FORMAL_PATTERNS,
) -> list[Mapping[str, Any]]:
    """Checklist items without the formal ones (see :func:`split_formal` to keep both)."""
    return split_formal(items, key=key, patterns=patterns)[0]

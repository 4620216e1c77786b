"""The grounding check: an answer may state only values its cited context states.

A valid citation is not yet a supported answer: a model can cite the right project and state the
salary of the one beside it, or answer a salary question with the project's employment type. So,
after any backend answers, the values the answer states are looked up in the items of the nodes
it cites (facets, prepared answers, summaries, passages and the nodes' labels):

* **numbers** of three or more digits and amounts (`85,000`, `4250`), compared without their
  separators; a four-digit year also counts when the cited items name a year one away from it
  (a "last year" said in a session of 2023 is 2022), and a count when the cited facets count
  that many projects for one value of a field together (`value_counts`: a listing's
  "Berlin (152 projects)" over seats of 80 and 72);
* **places** the shared gazetteer knows, by their canonical name;
* **names**: capitalised words that are neither stop words nor month or day names, and that the
  question itself does not contain (an answer may repeat the asker's words);
* **the asked field**: an answer to "what salary…?" that states a value of another field of the
  cited nodes (an employment type, a place) and no value of the asked one is answering a
  neighbouring field.

Anything left over is `ungrounded`; the engine then flags the answer `unsupported`.
"""

from __future__ import annotations

import calendar
import functools
import re
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from hltm.memory import lexicon as lx
from hltm.memory.salience import terms
from hltm.query.parse import CUES

_NUMBER = re.compile(r"\d{1,3}(?:[,. ]\d{3})+(?!\d)|\d+(?:[.,]\d+)?")  # 85,000 · 85 000 · 4250
_NAME = re.compile(r"\b[A-ZА-ЯЁ][\w'’-]+")
_CALENDAR = {n.casefold() for n in (*calendar.month_name, *calendar.day_name) if n}


def value_counts(facets: Iterable[dict[str, Any]]) -> dict[str, int]:
    """Normalised value → the projects these facets (of one field) count for it: each node once
    per value, a seat's or contract's value by the projects that support it."""
    counts: dict[str, int] = defaultdict(int)
    seen: set[tuple[str, str]] = set()
    for facet in facets:
        key = lx.normalise_value(str(facet.get("value", "")))
        if (key, facet["node_id"]) not in seen:
            seen.add((key, facet["node_id"]))
            counts[key] += facet.get("support") or 1
    return counts


def _counted(items: Iterable[dict[str, Any]]) -> set[str]:
    """The project counts the cited facets add up to, per field and value."""
    by_field: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for item in items:
        if "field" in item:
            by_field[item["field"]].append(item)
    return {str(n) for facets in by_field.values() for n in value_counts(facets).values()}


def _numbers(text: str) -> set[str]:
    out = set()
    for match in _NUMBER.finditer(text):
        digits = re.sub(r"\D", "", match.group(0))
        if len(digits) >= 3:
            out.add(digits.lstrip("0") or "0")
    return out


@functools.lru_cache(maxsize=512)  # a question asked again cites the same text
def place_names(text: str) -> frozenset[str]:
    """The places of the shared gazetteer `text` names, by their canonical name."""
    return frozenset(name for name, _ in lx.find_terms(lx.LOCATIONS, text))


def item_text(item: dict[str, Any]) -> str:
    """Everything a context item says, as one string (its label included)."""
    parts = [item.get("label", "")]
    if "field" in item:
        parts.append(f"{item['field']}: {item.get('value', '')}")
    parts += [item.get(key, "") for key in ("question", "answer", "summary", "text")]
    return "\n".join(str(p) for p in parts if p)


def _field_values(items: Iterable[dict[str, Any]]) -> dict[str, set[str]]:
    """field → the values the items state for it (facets, and prepared answers to questions
    that name the field)."""
    out: dict[str, set[str]] = {}
    for item in items:
        if "field" in item:
            out.setdefault(item["field"], set()).add(str(item.get("value", "")))
        elif item.get("question") and item.get("answer"):
            for field in _fields_named(item["question"]):
                out.setdefault(field, set()).add(str(item["answer"]))
    return out


@functools.lru_cache(maxsize=8192)  # the prepared questions of the cited nodes recur
def _fields_named(question: str) -> tuple[str, ...]:
    return tuple(field for field, cue in CUES.items() if cue.search(question))


def _states(answer: str, value: str) -> bool:
    if not value.strip():
        return False
    if lx.normalise_value(value) in lx.normalise_value(answer):
        return True
    wanted = _numbers(value)
    return bool(wanted) and wanted <= _numbers(answer)


# Characters outside ASCII that case-insensitive matching equates with an ASCII letter.
_ASCII_LOOKALIKES = frozenset("\u017f\u0130\u0131\u212a")
_WORD = re.compile(r"\w+")


class _Words:
    """A text searched for whole words in any case: its case-folded form, so a word it lacks
    (the usual case) costs no regex, and its words, collected on the first lookup, so a long
    cited text is scanned once for an answer's many names, not once per name."""

    def __init__(self, text: str) -> None:
        self.text, self.folded = text, text.casefold()
        self._lowered: set[str] | None = None

    def has(self, word: str) -> bool:
        if word.casefold() not in self.folded:
            return False
        if word.isascii() and _WORD.fullmatch(word):
            if self._lowered is None:
                plain = _ASCII_LOOKALIKES.isdisjoint(self.text)
                self._lowered = {w.lower() for w in _WORD.findall(self.text)} if plain else set()
            if self._lowered:
                return word.lower() in self._lowered
        return re.search(rf"(?<!\w){re.escape(word)}(?!\w)", self.text, re.IGNORECASE) is not None


def ungrounded(
    answer: str,
    question: str,
    cited_items: list[dict[str, Any]],
    asked_fields: Iterable[str] = (),
) -> list[str]:
    """The values `answer` states that its cited items do not (empty: grounded)."""
    cited = "\n".join(item_text(item) for item in cited_items)
    out: list[str] = []
    # The cited text is long and the answer short: it is searched only for what the answer states.
    stated = _numbers(answer)
    if stated:
        held = _numbers(cited) | _counted(cited_items)
        years = {int(n) for n in held if len(n) == 4}
        for number in sorted(stated - held):
            year = int(number) if len(number) == 4 else None
            if year is None or not years & {year - 1, year + 1}:
                out.append(number)
    places = place_names(answer)
    if places:
        out += sorted(places - place_names(cited) - place_names(question))
    in_cited, in_question = _Words(cited), _Words(question)
    for match in _NAME.finditer(answer):
        name = match.group(0)
        if not terms(name) or name.casefold() in _CALENDAR or name in out:
            continue
        if not in_cited.has(name) and not in_question.has(name):
            out.append(name)
    values = _field_values(cited_items)
    for field in asked_fields:
        if any(_states(answer, v) for v in values.get(field, ())):
            continue
        other = sorted(
            v for f, vs in values.items() if f != field for v in vs if _states(answer, v)
        )
        if other:
            out.append(f"{other[0]} (not a {field.replace('_', ' ')})")
    return out

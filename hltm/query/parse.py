"""Query parsing by rules: the offline answer to the `parse_query` task.

A question becomes an intent and `field: value` pairs, e.g. "Which projects hire senior backend
engineers in Berlin?" → find_projects, `title: backend engineer`, `seniority: senior`,
`location: Berlin`. Values come from the same general vocabularies the memory's facet extractor
uses (`hltm.memory.lexicon`: gazetteer, work modes, employment types, seniority, skills), so a
value in a question and a value in memory meet in one canonical spelling; role phrases are found
by their head noun (engineer, developer, analyst, …, разработчик, инженер, …). A field named
without a value ("where do I usually hire?") becomes `location: ""`. English and Russian.

The same module checks an LLM's parse (`ground_pairs`): a model may return values the question
never states (a small one echoed the prompt's own examples), and such a value would steer
retrieval towards memory nobody asked about.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from rapidfuzz import fuzz

from hltm.memory import lexicon as lx
from hltm.vocabulary import load

log = logging.getLogger(__name__)

# The fields the memory uses, with what they mean (sent to the LLM parser too).
FIELDS: dict[str, str] = {
    "title": "job title / role",
    "location": "city, region or remote zone",
    "work_mode": "remote, hybrid or onsite",
    "employment_type": "full-time, part-time, contract, internship, freelance",
    "seniority": "intern, junior, middle, senior, lead, principal, head",
    "skill": "a required skill or technology",
    "salary": "salary or rate",
    "years_experience": "years of experience required",
    "language": "a spoken language required",
    "rejection_reason": "why candidates were rejected",
    "status": "open, paused or closed",
}

# Words that name a field without stating a value.
FIELD_CUES: dict[str, str] = {
    "location": (
        r"\bwhere\b|\blocat\w*|\bcit(?:y|ies)\b|\bbased\b|\bplaces?\b|\bgeograph\w*|\bregions?\b"
        r"|\bгде\b|\bгород\w*|\bлокаци\w*|\bрегион\w*|\bгеограф\w*"
    ),
    "work_mode": (
        r"\bwork[- ]?modes?\b|\bwork(?:ing)? format\b|\bremote\b|\bhybrid\b|\bon[- ]?site\b"
        r"|\bin[- ]office\b|\bформат\w*|\bудал[её]н\w*|\bгибрид\w*"
    ),
    "employment_type": (
        r"\bemployment\b|\bfull[- ]time\b|\bpart[- ]time\b|\bcontract(?:or)? (?:work|roles?|basis)"
        r"|\bfreelance\b|\bзанятост\w*"
    ),
    "seniority": r"\bseniority\b|\blevels?\b|\bgrades?\b|\bуровн?\w*|\bгрейд\w*",
    "title": (
        r"\broles?\b|\btitles?\b|\bpositions?\b|\bhire for\b|\bhiring for\b|\bkinds? of (?:jobs|"
        r"people)\b|\bдолжност\w*|\bрол[ьие]\w*|\bпозици\w*"
    ),
    "skill": r"\bskills?\b|\bstacks?\b|\btechnolog\w*|\bнавык\w*|\bстек\w*|\bтехнолог\w*",
    "salary": (
        r"\bsalar\w*|\bpay\b|\bcompensation\b|\bbudget\w*|\brates?\b|\bзарплат\w*|\bоклад\w*"
        r"|\bвилк\w*|\bбюджет\w*"
    ),
    "years_experience": r"\byears of experience\b|\bexperience\b|\bопыт\w*",
    "language": r"\blanguages?\b|\bязык\w*",
    "rejection_reason": r"\breject\w*|\bturned down\b|\bотказ\w*|\bотклон\w*",
    "status": r"\bstatus\b|\bстатус\w*",
}
CUES = {field: re.compile(pattern, re.IGNORECASE) for field, pattern in FIELD_CUES.items()}

_ROLE_HEADS = (
    r"engineers?|developers?|programmers?|architects?|managers?|analysts?|scientists?|designers?"
    r"|testers?|administrators?|consultants?|specialists?"
    r"|owners?|researchers?|writers?|marketers?|accountants?"
    r"|разработчик\w*|программист\w*|инженер\w*|архитектор\w*|аналитик\w*|менеджер\w*"
    r"|тестировщик\w*|дизайнер\w*|администратор\w*"
)
_ROLE = re.compile(
    rf"((?:[\w+#./-]+[ -]){{0,3}}?)({_ROLE_HEADS})(?![\w])", re.IGNORECASE | re.UNICODE
)
_ROLE_STOP = set(load(__package__, "parse")["role_stop"])  # parse.toml
_SENIORITY_WORDS = re.compile(
    r"^(?:senior|junior|middle|mid-level|lead|principal|staff|head|intern|sr\.?|jr\.?|"
    r"старш\w*|младш\w*|ведущ\w*|сеньор\w*|джун\w*|мидл\w*)$",
    re.IGNORECASE,
)

_FIND_PROJECTS = re.compile(
    r"\bwhich (?:of (?:my|our) )?(?:hiring )?(?:projects|searches|vacancies|openings|jobs)\b"
    r"|\b(?:find|list|show)\b.{0,40}\b(?:projects?|searches|vacancies|openings)\b"
    r"|\bprojects? (?:that|which|with|for|in|where|hiring|looking)\b"
    r"|\bкакие (?:из )?(?:мои\w* |наши\w* )?(?:проект\w*|ваканси\w*)|\bнайд\w*.{0,40}проект\w*"
    r"|\bпроект\w* (?:где|с|для|в)\b",
    re.IGNORECASE,
)
_PREFERENCES = re.compile(
    r"\busual\w*|\btypical\w*|\bprefer\w*|\bhabit\w*|\bmost(?:ly| often| common\w*)\b"
    r"|\bgeneral\w*|\bcommon\w*|\btend\w* to\b|\boften\b|\bобычно\b|\bкак правило\b|\bчаще\w*"
    r"|\bпредпочит\w*|\bпривыч\w*",
    re.IGNORECASE,
)

# Employment phrasings the shared vocabulary misses in questions ("contract roles").
_EXTRA_EMPLOYMENT = re.compile(
    r"\bcontract (?:roles?|positions?|jobs?|work|hires?)\b|\bon contract\b", re.IGNORECASE
)

_VALUE_TERMS = (
    ("location", lx.LOCATIONS, False),
    ("work_mode", lx.WORK_MODES, True),
    ("employment_type", lx.EMPLOYMENT_TYPES, True),
    ("seniority", lx.SENIORITY, False),
    ("skill", lx.SKILLS_ALL, True),
    ("language", lx.LANGUAGES, False),
)


def _is_value(word: str) -> bool:
    """A word that states another field's value (remote, contract, Berlin), not a role."""
    for terms in (lx.WORK_MODES, lx.EMPLOYMENT_TYPES, lx.LOCATIONS):
        if lx.find_terms(terms, word):
            return True
    return False


def role_phrases(text: str) -> list[str]:
    """Role phrases by head noun: "senior backend engineers" → "backend engineer"."""
    out: list[str] = []
    for match in _ROLE.finditer(text):
        # Words before the head noun, each with the separator that followed it.
        parts = re.findall(r"([\w+#./-]+?)([ -])", match.group(1))
        kept: list[str] = []
        for word, sep in reversed(parts):
            if word.lower() in _ROLE_STOP or _SENIORITY_WORDS.match(word) or _is_value(word):
                break
            kept.insert(0, word + sep)
        head = match.group(2)
        if head.lower().endswith("s") and head.isascii():
            head = head[:-1]
        phrase = ("".join(kept) + head).strip(" -")
        if phrase and phrase.lower() not in (p.lower() for p in out):
            out.append(phrase)
    return out


def parse_question(question: str) -> dict[str, Any]:
    """`{"intent": ..., "pairs": [{"field", "value"}, ...]}` for a question, by rules."""
    text = re.sub(r"\s+", " ", question).strip()
    pairs: list[dict[str, str]] = []
    seen: set[tuple[str, str]] = set()

    def add(field: str, value: str) -> None:
        key = (field, lx.normalise_value(value))
        if key not in seen:
            seen.add(key)
            pairs.append({"field": field, "value": value})

    titles = role_phrases(text)
    title_spans = [m.span() for m in _ROLE.finditer(text)]
    for field, terms, negatable in _VALUE_TERMS:
        for name, start in lx.find_terms(terms, text, negatable=negatable):
            # A skill inside a role phrase ("Java developer") is part of the title.
            if field == "skill" and any(a <= start < b for a, b in title_spans):
                continue
            add(field, name)
    if _EXTRA_EMPLOYMENT.search(text):
        add("employment_type", "contract")
    for title in titles:
        add("title", title)
    valued = {p["field"] for p in pairs}
    for field, cue in CUES.items():
        if field in valued:
            continue
        if field == "title" and titles:
            continue
        if cue.search(text):
            add(field, "")

    if _FIND_PROJECTS.search(text):
        intent = "find_projects"
    elif _PREFERENCES.search(text):
        intent = "preferences"
    else:
        intent = "lookup"
    order = {name: i for i, name in enumerate(FIELDS)}
    pairs.sort(key=lambda p: (order.get(p["field"], len(order)), p["value"] == ""))
    return {"intent": intent, "pairs": pairs}


# ---- grounding an LLM's parse in the question ---------------------------------------------------

_WORD = re.compile(r"[\w+#]+(?:[.'][\w+#]+)*", re.UNICODE)
# Words a value may add without stating anything (a model's "in the Berlin area").
_FILLER = {"the", "a", "an", "of", "in", "and", "or", "area", "region", "city", "level", "role"}
# Two spellings of one word: inflection (engineer/engineers, разработчик/разработчиков).
_SAME_WORD_RATIO = 85.0


def _words(text: str) -> list[str]:
    return [w.casefold() for w in _WORD.findall(text)]


def _word_in(word: str, question_words: list[str]) -> bool:
    if word in question_words:
        return True
    if len(word) < 4 or not word.isalpha():  # short words and numbers must match exactly
        return False
    return any(
        len(q) >= 4 and q[:3] == word[:3] and fuzz.ratio(word, q) >= _SAME_WORD_RATIO
        for q in question_words
    )


def is_grounded(field: str, value: str, question: str) -> bool:
    """Whether the question itself states `value`.

    Stated means: the value is a vocabulary term (a place, work mode, employment type, seniority,
    skill, language) that the question names in any of its spellings ("SF" → "San Francisco Bay
    Area", "удалённо" → "remote"), or the value's words are in the question (inflections and
    "back-end" / "backend" allowed). A field asked without a value ("") is always grounded: field
    names come from the list the parser was given (the memory's fields), values only from the
    question.
    """
    if not value.strip():
        return True
    # The field's own vocabulary first, then the others (a model may file "remote" as a location).
    named = lx.normalise_field(field)
    vocabularies = sorted(lx.CANONICAL_TERMS.items(), key=lambda item: item[0] != named)
    for _, vocabulary in vocabularies:
        name = lx.term_named(vocabulary, value)
        if name is not None:
            if name in {found for found, _ in lx.find_terms(vocabulary, question)}:
                return True
            break  # not in any spelling the vocabulary knows: the question's words decide
    question_words = _words(question)
    # "back-end" / "front end" in the question state the value "backend" / "frontend" too.
    question_words += [a + b for a, b in zip(question_words, question_words[1:], strict=False)]
    words = [w for w in _words(value) if w not in _FILLER]
    return bool(words) and all(_word_in(w, question_words) for w in words)


def ground_pairs(
    question: str, pairs: list[dict[str, str]]
) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """(pairs to use, dropped pairs) for an LLM's parse of `question`.

    Pairs whose value the question does not state are dropped; when any was, the rule-based
    parse's pairs (grounded by construction) are added, so the question's real conditions still
    reach retrieval.
    """
    kept = [p for p in pairs if is_grounded(p["field"], p["value"], question)]
    dropped = [p for p in pairs if p not in kept]
    if not dropped:
        return pairs, []
    log.warning("query parse: dropped values the question does not state: %s", dropped)
    seen = {(lx.normalise_field(p["field"]), lx.normalise_value(p["value"])) for p in kept}
    for pair in parse_question(question)["pairs"]:
        key = (pair["field"], lx.normalise_value(pair["value"]))
        if key not in seen:
            seen.add(key)
            kept.append(pair)
    return kept, dropped

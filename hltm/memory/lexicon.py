"""Vocabularies the offline extractor recognises, in English and Russian.

Nothing here knows about the sample generator: these are general recruiting vocabularies
(a gazetteer of hiring locations, work-mode / employment-type / seniority keywords, a tech and
business skills list, salary and experience patterns), each mapped to one canonical English value
so that facets from different projects, languages and spellings aggregate together. The terms
are data (`lexicon.toml` beside this module); the patterns that read sentences stay here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from hltm.memory.salary import find_salaries as read_salaries
from hltm.vocabulary import load

_DATA = load(__package__, "lexicon")

# The facet fields the extractors produce, in the order their questions come first, and how a
# sentence names each (any other field follows alphabetically).
FIELD_PHRASES: dict[str, str] = _DATA["field_phrases"]

# A "word" boundary that also treats + # . as part of a term (C++, C#, .NET, Node.js).
_L = r"(?<![\w+#])"
_R = r"(?![\w+#])"
_NEG = re.compile(  # "no remote", "non-remote", "not a remote position"
    r"(?:\bno|\bnot|\bnon|\bwithout|\bбез|\bне|\bнет)(?:\s(?:a|an))?[\s-]*$", re.IGNORECASE
)


@dataclass(frozen=True)
class Vocabulary:
    """Canonical terms and one combined pattern finding any of them in a single scan."""

    canonical: tuple[str, ...]
    patterns: tuple[re.Pattern[str], ...]  # one per term, bounded (exact matching of values)
    bodies: tuple[str, ...]  # the same without the word bounds, flags inlined
    combined: re.Pattern[str]

    def __add__(self, other: Vocabulary) -> Vocabulary:
        return _combine(
            self.canonical + other.canonical, self.patterns + other.patterns,
            self.bodies + other.bodies,
        )  # fmt: skip


def _combine(
    canonical: tuple[str, ...], patterns: tuple[re.Pattern[str], ...], bodies: tuple[str, ...]
) -> Vocabulary:
    # The word bounds stand outside the alternation, so the ~100 branches are tried only where a
    # term can start (not at every character inside a word).
    branches = "|".join(f"(?P<t{i}>{body})" for i, body in enumerate(bodies))
    return Vocabulary(canonical, patterns, bodies, re.compile(f"{_L}(?:{branches}){_R}"))


def _terms(table: dict[str, list[str]], flags: int = re.IGNORECASE) -> Vocabulary:
    canonical, patterns, bodies = [], [], []
    for name, alternatives in table.items():
        body = "|".join(alternatives)
        canonical.append(name)
        patterns.append(re.compile(f"{_L}(?:{body}){_R}", flags))
        bodies.append(f"(?i:{body})" if flags & re.IGNORECASE else f"(?:{body})")
    return _combine(tuple(canonical), tuple(patterns), tuple(bodies))


LOCATIONS = _terms(_DATA["locations"])
# Wide areas: a posting's place only when it names no city (else they are where the company
# sells or has offices: "brands sold in North America and Europe").
REGIONS = frozenset(_DATA["regions"])

WORK_MODES = _terms(_DATA["work_modes"])

EMPLOYMENT_TYPES = _terms(_DATA["employment_types"])

SENIORITY = _terms(_DATA["seniority"])

# Case-insensitive skills. Short or ambiguous words are in _SKILLS_CASED below.
SKILLS = _terms(_DATA["skills"])

_SKILLS_CASED = _terms(_DATA["skills_cased"], flags=0)
SKILLS_ALL = SKILLS + _SKILLS_CASED

LANGUAGES = _terms(_DATA["languages"])
_NOT_NEEDED = re.compile(
    r"^\w*\s+(?:is\s+)?(?:not\s+(?:required|needed|necessary)|не\s+(?:нужен|требуется|обязателен))",
    re.IGNORECASE,
)
LANGUAGE_LEVEL = re.compile(
    r"\b(A1|A2|B1|B2|C1|C2|upper[- ]intermediate|intermediate|advanced|fluent|native)\b",
    re.IGNORECASE,
)

# "5+ years", "3-5 years", "опыт от 3 лет", "не менее 2 лет".
EXPERIENCE_EN = re.compile(
    r"(\d{1,2})\s?(?:\+|(?:-|–|to)\s?(\d{1,2}))?\s?\+?\s?(?:years?|yrs)\b", re.IGNORECASE
)
EXPERIENCE_RU = re.compile(
    r"(?:опыт\w*|стаж\w*)[^.\n]{0,80}?(?:от|не менее|более|больше)?\s?(\d{1,2})"
    r"(?:\s?[-–]\s?(\d{1,2}))?\s?\+?\s?(?:лет|года|год)",
    re.IGNORECASE,
)

# Explicit "Field: value" lines, common in intake notes and structured job posts.
EXPLICIT_LINE = re.compile(
    r"^[ \t]*[-*•]?[ \t]*([A-Za-zА-Яа-яЁё][A-Za-zА-Яа-яЁё /()_-]{1,30}?)[ \t]*:[ \t]*(\S[^\n]{0,79}?)"
    r"[ \t]*$",
    re.MULTILINE,
)
_EXPLICIT_SKIP = set(_DATA["explicit_skip"])

# Field-name synonyms (EN and RU) → canonical facet field.
FIELD_SYNONYMS = _DATA["field_synonyms"]

CANONICAL_TERMS = {
    "location": LOCATIONS,
    "work_mode": WORK_MODES,
    "employment_type": EMPLOYMENT_TYPES,
    "seniority": SENIORITY,
    "skill": SKILLS_ALL,
    "language": LANGUAGES,
}


def normalise_field(name: str) -> str:
    """`Work Mode` / `work-mode` / `work mode` → `work_mode`, then EN/RU synonyms."""
    text = re.sub(r"[\s/\-.]+", "_", name.strip().lower()).strip("_()")
    text = re.sub(r"_+", "_", text)
    return FIELD_SYNONYMS.get(text, text)


def normalise_value(value: str) -> str:
    """Key for merging duplicates: case, whitespace and trailing punctuation do not count."""
    text = re.sub(r"\s+", " ", value.strip().casefold())
    return text.strip(" .,;:!?\"'«»")


# A work type the job may lead to, not the one it is: "with potential for full time",
# "grow into a full-time position", "up to full time after 3 months".
_PROSPECT = re.compile(
    r"(?:potential|opportunit\w*|option|possibilit\w*|chance|path|grow|turn|transition\w*|"
    r"convert\w*|lead|move)\s(?:\w+\s){0,2}?(?:for|to|into)\s(?:an?\s|the\s)?$|\bup to\s$",
    re.IGNORECASE,
)


def not_negated(text: str, start: int) -> bool:
    return not _NEG.search(text[max(0, start - 16) : start])


def not_prospect(text: str, start: int) -> bool:
    return not _PROSPECT.search(text[max(0, start - 40) : start])


def find_terms(
    vocabulary: Vocabulary, text: str, negatable: bool = False, prospects: bool = True
) -> list[tuple[str, int]]:
    """Canonical values found in `text`, each once, with the offset of its first occurrence
    (with `negatable`, not a negated mention; without `prospects`, not a prospect)."""
    first: dict[str, int] = {}
    for match in vocabulary.combined.finditer(text):
        name = vocabulary.canonical[int(str(match.lastgroup)[1:])]
        if name in first or (negatable and not not_negated(text, match.start())):
            continue
        if not prospects and not not_prospect(text, match.start()):
            continue
        first[name] = match.start()
    return sorted(first.items(), key=lambda kv: (kv[1], kv[0]))


def term_named(vocabulary: Vocabulary, text: str) -> str | None:
    """The canonical term `text` is exactly a spelling of, if any."""
    stripped = text.strip()
    for name, pattern in zip(vocabulary.canonical, vocabulary.patterns, strict=True):
        if pattern.fullmatch(stripped) or pattern.fullmatch(stripped.lower()):
            return name
    return None


def canonical(field: str, value: str) -> str:
    """A facet value mapped onto the vocabulary when it names a known term exactly."""
    vocabulary = CANONICAL_TERMS.get(field)
    if not vocabulary:
        return value.strip()
    return term_named(vocabulary, value) or value.strip()


def find_salaries(text: str) -> list[tuple[str, int]]:
    """Pay amounts or ranges stated in `text`, each in its canonical spelling (`hltm.memory.salary`)."""
    return [(salary.value, offset) for salary, offset in read_salaries(text)]


def find_experience(text: str) -> list[tuple[str, int]]:
    out = []
    for match in EXPERIENCE_EN.finditer(text):
        low, high = match.group(1), match.group(2)
        out.append((f"{low}-{high} years" if high else f"{low}+ years", match.start()))
    for match in EXPERIENCE_RU.finditer(text):
        low, high = match.group(1), match.group(2)
        out.append((f"{low}-{high} years" if high else f"{low}+ years", match.start()))
    return out


def find_languages(text: str) -> list[tuple[str, int]]:
    out = []
    for canonical_name, start in find_terms(LANGUAGES, text, negatable=True):
        window = text[start : start + 40]
        if _NOT_NEEDED.search(window):
            continue
        level = LANGUAGE_LEVEL.search(window)
        if canonical_name == "Russian" and not re.search(
            r"russian[- ]speaking|русск\w+ язык", text[start : start + 30], re.IGNORECASE
        ):
            # "Russian" alone usually names a market or a citizenship, not a requirement.
            continue
        value = f"{canonical_name} {level.group(1).upper()}" if level else canonical_name
        out.append((value, start))
    return out


_PERSON = re.compile(r"^[A-ZА-ЯЁ][a-zа-яё'-]+(?: [A-ZА-ЯЁ][a-zа-яё'-]+){1,2}$")
# What makes a `Label: value` line a speaker's turn rather than a field: the value talks
# (first or second person, an exclamation, a question, a quotation).
_SPEECH = re.compile(
    r"[!?\"“”«»]|(?<![\w'])I(?![\w'])|(?<![\w'])I['’](?:m|ve|d|ll)\b|"
    r"(?i:\b(?:me|my|mine|we|we're|our|you|you're|your|yours|я|мы|ты|вы|мне|меня|нам|мой|моя|"
    r"наш|ваш|твой)\b)"
)


def _is_field(raw_field: str) -> bool:
    return normalise_field(raw_field) in FIELD_SYNONYMS.values()


def speaker_labels(texts: list[str]) -> frozenset[str]:
    """Labels that open two or more `Label: value` lines with different values across `texts`
    and are not facet fields: the speakers of a transcript or chat (`Caroline: …`)."""
    values: dict[str, set[str]] = {}
    for text in texts:
        for match in EXPLICIT_LINE.finditer(text):
            label = match.group(1).strip()
            if not _is_field(label):
                values.setdefault(label.casefold(), set()).add(match.group(2).strip())
    return frozenset(label for label, seen in values.items() if len(seen) >= 2)


def find_explicit(text: str, speakers: frozenset[str] = frozenset()) -> list[tuple[str, str, int]]:
    """`Field: value` lines: (normalised field, value, offset).

    A field naming a skill (`dbt: confident`) becomes a `skill` facet. Skipped: a speaker's turn
    (a label in `speakers`, or a value that talks: `Caroline: I went to a support group!`), a
    field that is a person's name (`Maria Lopez: rejected after ...`), and a value that is prose.
    """
    out = []
    for match in EXPLICIT_LINE.finditer(text):
        raw_field, value = match.group(1).strip(), match.group(2).strip()
        known = _is_field(raw_field)
        if not known and (raw_field.casefold() in speakers or _SPEECH.search(value)):
            continue
        value = re.split(r"(?<=[.!?])\s", value)[0].rstrip(" .;")
        field = normalise_field(raw_field)
        skill = term_named(SKILLS_ALL, raw_field)
        if skill and not known:
            out.append(("skill", skill, match.start()))
            continue
        if field in _EXPLICIT_SKIP or len(raw_field.split()) > 4 or len(value.split()) > 10:
            continue
        if not known and _PERSON.match(raw_field):
            continue
        if not value or value.startswith("//"):
            continue
        out.append((field, value, match.start()))
    return out


_GLUED = re.compile(r"(?<=[a-z])(?=[A-Z][a-z])|(?<=[a-z]{3})(?=\d)")


def unglued(text: str) -> str:
    """`text` with the words a flattened table glued together set apart again ("Job Type:
    Full-timePay:" → "Full-time Pay:", "Remote6 months contract"), same length but for the
    added spaces."""
    return _GLUED.sub(" ", text)


def sentences(text: str) -> list[tuple[str, int]]:
    """Sentences and list lines of `text` with their offsets, whitespace-normalised."""
    out = []
    for match in re.finditer(r"[^\n.!?]+(?:[.!?]+(?=\s|$))?", text):
        sentence = re.sub(r"\s+", " ", match.group(0)).strip(" -*•\t")
        if sentence:
            out.append((sentence, match.start()))
    return out


QUOTE_TAG = re.compile(r"^\[[^\]]+\]\s*")  # "[doc-1] ": whose sentence a summary quotes next
STATEMENT_WORDS = 3  # the fewest words of a sentence an answer may rest on


def statements(text: str) -> list[str]:
    """The sentences of `text` an answer may rest on: a quote's `[id]` tag left out, and at
    least `STATEMENT_WORDS` words long."""
    out = []
    for sentence, _ in sentences(text):
        sentence = QUOTE_TAG.sub("", sentence)
        if len(sentence.split()) >= STATEMENT_WORDS:
            out.append(sentence)
    return out


def sentence_at(text: str, offset: int, limit: int = 200) -> str:
    """The sentence (or line) of `text` containing `offset`, cut to `limit` characters."""
    start = max(
        text.rfind("\n", 0, offset), *(text.rfind(p, 0, offset) for p in (". ", "! ", "? "))
    )
    start = start + 1 if start >= 0 else 0
    ends = [i for i in (text.find(p, offset) for p in ("\n", ". ", "! ", "? ")) if i >= 0]
    end = min(ends) + 1 if ends else len(text)
    sentence = re.sub(r"\s+", " ", text[start:end]).strip()
    return sentence if len(sentence) <= limit else sentence[: limit - 1].rstrip() + "…"


def first_sentence(text: str, limit: int = 220) -> str:
    match = re.search(r"\S", text)
    if not match:
        return ""
    return sentence_at(text, match.start(), limit)

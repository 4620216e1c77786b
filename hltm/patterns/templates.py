"""Turns one question into its template and asked fields; ``mining`` groups the results."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hltm.memory import lexicon as lx

__all__ = [
    "ENTITY_FIELDS",
    "NUMBER_SLOT",
    "MiningConfig",
    "Templated",
    "known_patterns",
    "template_key",
    "templatize",
]

# Fields the QA generator fills from a node's own facets (plus `node`, the node's label).
ENTITY_FIELDS = (
    "title",
    "location",
    "work_mode",
    "employment_type",
    "seniority",
    "skill",
    "language",
    "salary",
    "years_experience",
)
NUMBER_SLOT = "number"
_SLOT = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


@dataclass(frozen=True)
class MiningConfig:
    """A mining run's settings; here, not in ``mining``, because templating reads the limits."""

    min_support: int = 3  # distinct identities a pattern needs
    max_examples: int = 5  # original questions kept per pattern, for the person approving it
    merge_cosine: float = 0.98  # near-identical templates merged (only with an embedder)
    # Which known facet values may become slots: long enough to be an entity, not a number.
    min_known_value_chars: int = 3
    max_known_value_chars: int = 80


@dataclass(frozen=True)
class Templated:
    question: str
    template: str  # surface form with `{slot}` placeholders
    key: str  # normalised template: what recurring means
    slots: tuple[str, ...]
    values: tuple[tuple[str, str], ...]  # (slot, surface text replaced)
    asked: tuple[str, ...]  # asked field names, in order of appearance

    @property
    def answer_field(self) -> str | None:
        return self.asked[0] if self.asked else None


# ---- entities --------------------------------------------------------------------------------

_TERM_FIELDS: tuple[tuple[str, Any], ...] = (
    ("location", lx.LOCATIONS),
    ("work_mode", lx.WORK_MODES),
    ("employment_type", lx.EMPLOYMENT_TYPES),
    ("seniority", lx.SENIORITY),
    ("skill", lx.SKILLS_ALL),
    ("language", lx.LANGUAGES),
)

_ROLE_HEADS = (
    r"engineers?|developers?|programmers?|architects?|managers?|analysts?|scientists?|designers?"
    r"|testers?|administrators?|admins?|consultants?|specialists?|owners?|researchers?|writers?"
    r"|marketers?|accountants?|recruiters?|leads?|officers?|directors?|technicians?|operators?"
    r"|разработчик\w*|программист\w*|инженер\w*|архитектор\w*|аналитик\w*|менеджер\w*"
    r"|тестировщик\w*|дизайнер\w*|администратор\w*|специалист\w*|руководител\w*|рекрутер\w*"
)
_ROLE_HEAD = re.compile(rf"(?<!\w)(?:{_ROLE_HEADS})(?!\w)", re.IGNORECASE)
# People around a search, not the role searched for.
_NOT_ROLE = re.compile(r"\bhiring\s+$", re.IGNORECASE)


def _words(*parts: str) -> frozenset[str]:
    return frozenset(" ".join(parts).split())


# Words that may qualify a role ("backend", "data", "Java-", "ML") but never these.
_NOT_MODIFIER = _words(
    "a an the for of in on at to and or with by from as is are was were be do does did i we you"
    " my our your their his her its this that these those which what who whom whose how where"
    " when why usually typically mostly often hire hires hiring hired find show list need needs"
    " want wants prefer prefers looking search searching any all some most many much me us them"
    " it not no offer offers offered pay pays paid open opened opens have has had get got recruit"
    " recruiting staff staffing source sourcing seek seeking hired employ employing projects"
    " role roles position positions vacancy vacancies opening openings searches",
    "какие какой какая какое каких кого кто что для в на и или с по из у мы я вы наши мои ваши"
    " их обычно чаще нанимаем нанимаю ищем ищу нужен нужна нужны нужно предпочитаем как где"
    " когда нанять нанимать искать найти ищут нанимают платим предлагаем вакансия вакансии"
    " вакансий вакансию проект проекта проекты проектов позиция позиции позиций роль роли"
    " ролей",
)
# Entities that never qualify a role: "remote Go developers" is {work_mode} {title}.
_NOT_IN_TITLE = ("location", "work_mode", "employment_type", "language")
_WORD_BEFORE = re.compile(r"([\w+#./]+)([ -]+)$", re.UNICODE)

_NUMBER = re.compile(r"(?<![\w{])\d+(?:[.,]\d+)?(?![\w}])")
_CONTRACTIONS = (
    (r"\bwhat's\b", "what is"),
    (r"\bwhere's\b", "where is"),
    (r"\bwho's\b", "who is"),
    (r"\bhow's\b", "how is"),
    (r"\bwhich's\b", "which is"),
    (r"\bdon't\b", "do not"),
    (r"\bdoesn't\b", "does not"),
    (r"\bisn't\b", "is not"),
    (r"\baren't\b", "are not"),
    (r"\bi'm\b", "i am"),
    (r"\bwe're\b", "we are"),
)


@dataclass(frozen=True)
class _Span:
    start: int
    end: int
    field: str
    priority: int  # lower wins among equal lengths


def _term_patterns(vocabulary: Any) -> list[re.Pattern[str]]:
    """One regex per canonical term of a lexicon vocabulary (a `Vocabulary` or a term list)."""
    patterns = getattr(vocabulary, "patterns", None)
    if patterns is not None:
        return list(patterns)
    return [term.pattern for term in vocabulary]


def _role_spans(text: str, barriers: Sequence[_Span] = ()) -> list[_Span]:
    spans = []
    for match in _ROLE_HEAD.finditer(text):
        start = match.start()
        if match.group(0).lower().startswith("manager") and _NOT_ROLE.search(text[:start]):
            continue
        # Extend left over up to three modifier words ("senior backend", "Java-", "ML platform").
        for _ in range(3):
            before = _WORD_BEFORE.search(text[:start])
            if not before or before.group(1).lower() in _NOT_MODIFIER:
                break
            if any(b.start < before.end(1) and before.start() < b.end for b in barriers):
                break
            start = before.start()
        spans.append(_Span(start, match.end(), "title", 0))
    return spans


def known_patterns(
    known_values: Mapping[str, Iterable[str]], config: MiningConfig
) -> list[tuple[str, re.Pattern[str]]]:
    """One regex per field over its known values, longest first: compiled once per mining run."""
    out = []
    for fld in sorted(known_values):
        values = sorted(
            {
                v.strip()
                for v in known_values[fld]
                if v
                and config.min_known_value_chars <= len(v.strip()) <= config.max_known_value_chars
                and re.search(r"[^\W\d_]", v)
            },
            key=lambda v: (-len(v), v),
        )
        if not values:
            continue
        body = "|".join(re.escape(v).replace(r"\ ", r"\s+") for v in values)
        out.append((lx.normalise_field(fld), re.compile(rf"(?<![\w]){body}(?![\w])", re.I)))
    return out


def _entity_spans(
    text: str, known: Sequence[tuple[str, re.Pattern[str]]] = ()
) -> list[tuple[int, int, str]]:
    spans: list[_Span] = []
    for fld, pattern in known:
        spans += [_Span(m.start(), m.end(), fld, 1) for m in pattern.finditer(text)]
    terms: list[_Span] = []
    for rank, (fld, vocabulary) in enumerate(_TERM_FIELDS):
        for pattern in _term_patterns(vocabulary):
            terms += [_Span(m.start(), m.end(), fld, 2 + rank) for m in pattern.finditer(text)]
    spans += terms
    spans += _role_spans(text, [s for s in terms if s.field in _NOT_IN_TITLE])
    for regex in (lx.EXPERIENCE_EN, lx.EXPERIENCE_RU):
        spans += [_Span(m.start(), m.end(), "years_experience", 10) for m in regex.finditer(text)]
    for value, start in lx.find_salaries(text):
        end = start + len(value)
        if text[start:end] == value:
            spans.append(_Span(start, end, "salary", 11))
    # Longest first, then priority; drop anything overlapping an accepted span.
    accepted: list[_Span] = []
    for span in sorted(spans, key=lambda s: (-(s.end - s.start), s.priority, s.start)):
        if span.end <= span.start:
            continue
        if all(span.end <= a.start or span.start >= a.end for a in accepted):
            accepted.append(span)
    accepted.sort(key=lambda s: s.start)
    # "senior" / "Java" right before a title is part of the title.
    merged: list[_Span] = []
    for span in accepted:
        prev = merged[-1] if merged else None
        if (
            prev is not None
            and span.field == "title"
            and prev.field in ("seniority", "skill", "title")
            and re.fullmatch(r"[ \-]*", text[prev.end : span.start])
        ):
            merged[-1] = _Span(prev.start, span.end, "title", 0)
            continue
        merged.append(span)
    out = [(s.start, s.end, s.field) for s in merged]
    # Leftover numbers (counts, dates) → {number}.
    taken = [(s, e) for s, e, _ in out]
    for m in _NUMBER.finditer(text):
        if all(m.end() <= s or m.start() >= e for s, e in taken):
            out.append((m.start(), m.end(), NUMBER_SLOT))
    return sorted(out)


# ---- asked fields ----------------------------------------------------------------------------

# Words that name a field without stating a value (EN + RU), → canonical field.
_CUES: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (fld, re.compile(pattern, re.IGNORECASE))
    for fld, pattern in (
        ("location", r"\bwhere\b|\blocations?\b|\bcit(?:y|ies)\b|\bregions?\b|\bгде\b"
         r"|\bгород\w*|\bлокаци\w*|\bрегион\w*"),
        ("work_mode", r"\bwork(?:ing)?[- ]?(?:modes?|formats?|arrangements?|setups?)\b"
         r"|\bremote[- ]work polic\w*|\bформат\w* работы\b|\bрежим\w* работы\b"),
        ("employment_type", r"\bemployment(?: type)?s?\b|\bjob types?\b|\bтип\w* занятост\w*"
         r"|\bзанятост\w*"),
        ("seniority", r"\bseniority\b|\bgrades?\b|\bseniority levels?\b|\bуровн\w*|\bгрейд\w*"),
        ("skill", r"\bskills?\b|\b(?:tech )?stacks?\b|\btechnolog\w*|\bнавык\w*|\bстек\w*"
         r"|\bтехнолог\w*"),
        ("salary", r"\bsalar\w*|\bpay\b|\bcompensation\b|\bbudgets?\b|\bзарплат\w*|\bоклад\w*"
         r"|\bвилк\w*|\bбюджет\w*"),
        ("years_experience", r"\byears of experience\b|\bhow much experience\b|\bопыт\w*"),
        ("language", r"\blanguages?\b|\bязык\w*"),
        ("title", r"\broles?\b|\btitles?\b|\bpositions?\b|\bдолжност\w*|\bрол[ьиейя]\w*"
         r"|\bпозици\w*"),
        ("rejection_reason", r"\breject\w*|\bturned down\b|\bотказ\w*|\bотклон\w*"),
        ("status", r"\bstatus\b|\bстатус\w*"),
    )
)  # fmt: skip

# "what is the <attr> for …", "which <attr> do …", "how many <attr> …", "какой <attr> …".
_ATTR_EN = re.compile(
    r"\b(?:what|which)(?:\s+(?:is|are|was|were))?\s+(?:(?:the|my|our|your|their|its|a|an)\s+)?"
    r"(?P<attr>[a-z][a-z-]*(?:\s+[a-z][a-z-]*){0,2}?)\s+"
    r"(?=(?:of|for|in|on|at|does|do|did|is|are|was|were|should|would|will|can|has|have|had"
    r"|we|i|you|they|looks?|to|with|used|offered|required|needed|usually|typically)\b)",
    re.IGNORECASE,
)
_ATTR_DOES = re.compile(
    r"\bwhat (?:does|do|did|will|would) (?:(?:the|my|our|your|their|a|an)\s+)?"
    r"(?P<attr>[a-z][a-z-]*(?:\s+[a-z][a-z-]*){0,2}?)\s+"
    r"(?=(?:look|looks|include|includes|involve|involves|consist|cover|covers|require|requires"
    r"|mean|entail)\b)",
    re.IGNORECASE,
)
_ATTR_HOW = re.compile(
    r"\bhow (?:many|much|long)\s+(?P<attr>[a-z][a-z-]*(?:\s+[a-z][a-z-]*){0,1}?)\s+"
    r"(?=(?:do|does|did|is|are|was|were|should|would|will|can|for|in|on|we|i|you|they)\b)",
    re.IGNORECASE,
)
_ATTR_RU = re.compile(
    r"(?<!\w)(?:какой|какая|какое|какие|какую|каков\w*|сколько)\s+"
    r"(?P<attr>[а-яё-]+(?:\s+[а-яё-]+)?)",
    re.IGNORECASE,
)
_ATTR_STOP = _words(
    "kind kinds type types sort sorts one ones thing things way ways people person candidates"
    " candidate projects project searches search vacancies vacancy jobs job hires hire hiring"
    " time times else other others do does did is are was were to",
    "из у в на мы я вы нам мне нужно нужен нужна нужны обычно чаще всего",
)
_ATTR_LEAD = {"usual", "typical", "preferred", "main", "common", "обычный", "обычная"}


def _attribute_name(phrase: str) -> str | None:
    words = [w for w in re.split(r"\s+", phrase.strip().lower()) if w]
    while words and words[0] in _ATTR_LEAD:
        words = words[1:]
    # Prefer the longest prefix that is a known field name (EN/RU synonyms), else the phrase.
    known = set(lx.FIELD_SYNONYMS.values())
    for n in range(len(words), 0, -1):
        phrase_n = " ".join(words[:n])
        for candidate in (phrase_n, re.sub(r"(?<=[a-z])s$", "", phrase_n)):
            name = lx.normalise_field(candidate)
            if name in known:
                return name
    words = [w for w in words if w not in _ATTR_STOP]
    if not words or "{" in phrase or any(ch.isdigit() for ch in phrase):
        return None
    joined = " ".join(words)
    for fld, cue in _CUES:  # "work arrangement", "формат работы": a known field's cue words
        if cue.search(joined):
            return fld
    return lx.normalise_field(joined)


def _asked_fields(template: str, slots: Iterable[str]) -> tuple[str, ...]:
    """Fields the (slotted) question asks for, in order of appearance; slotted fields excluded."""
    slotted = set(slots)
    lowered = _SLOT.sub(" ", template).lower().replace("’", "'")
    for pattern, repl in _CONTRACTIONS:
        lowered = re.sub(pattern, repl, lowered)
    found: list[tuple[int, str]] = []
    for fld, cue in _CUES:
        m = cue.search(lowered)
        if m:
            found.append((m.start(), fld))
    for regex in (_ATTR_EN, _ATTR_DOES, _ATTR_HOW, _ATTR_RU):
        for m in regex.finditer(lowered):
            name = _attribute_name(m.group("attr"))
            if name:
                found.append((m.start("attr"), name))
    out: list[str] = []
    for _, name in sorted(found):
        if name not in slotted and name not in out:
            out.append(name)
    return tuple(out)


# ---- templates -------------------------------------------------------------------------------


def template_key(template: str) -> str:
    """What makes two templates "the same": case, punctuation, spacing, ё/е, contractions."""
    text = template.casefold().replace("ё", "е").replace("’", "'").replace("`", "'")
    for pattern, repl in _CONTRACTIONS:
        text = re.sub(pattern, repl, text)
    text = re.sub(r"[^\w{}'+#\s-]", " ", text)
    text = re.sub(r"(?<!\w)['-]|['-](?!\w)", " ", text)
    return re.sub(r"\s+", " ", text).strip()


def templatize(
    question: str,
    known_values: Mapping[str, Iterable[str]] | None = None,
    config: MiningConfig | None = None,
    *,
    known: Sequence[tuple[str, re.Pattern[str]]] | None = None,
) -> Templated:
    """One question → its template (entities replaced by `{field}` slots) and asked fields.

    `known`: `known_patterns(known_values, config)` compiled once for many questions (then
    `known_values` is not read).
    """
    config = config or MiningConfig()
    text = re.sub(r"\s+", " ", question).strip()
    known = known if known is not None else known_patterns(known_values or {}, config)
    spans = _entity_spans(text, known)
    choices = _choice_spans(text, spans)
    parts: list[str] = []
    values: list[tuple[str, str]] = []
    pos = 0
    for start, end, fld in spans:
        if (start, end) in choices:
            continue  # "remote, hybrid or on-site?" asks for the field: keep the words
        parts.append(text[pos:start])
        parts.append("{" + fld + "}")
        values.append((fld, text[start:end]))
        pos = end
    parts.append(text[pos:])
    template = "".join(parts)
    slots = tuple(dict.fromkeys(f for f, _ in values))
    asked = _asked_fields(template, slots)
    chosen = [fld for _, fld in sorted(choices.items())]
    return Templated(
        question=text,
        template=template,
        key=template_key(template),
        slots=slots,
        values=tuple(values),
        asked=tuple(dict.fromkeys([*chosen, *asked])) if chosen else asked,
    )


_CHOICE_GAP = re.compile(r"\s*(?:,|/|\bor\b|\bили\b|,\s*or\b|,\s*или\b)\s*", re.IGNORECASE)


def _choice_spans(text: str, spans: Sequence[tuple[int, int, str]]) -> dict[tuple[int, int], str]:
    """Spans listing alternatives of one field ("remote, hybrid or on-site", "Java или Go"):
    such a question asks which one applies, so the values are the question, not slots."""
    out: dict[tuple[int, int], str] = {}
    run: list[tuple[int, int, str]] = []

    def flush() -> None:
        if len(run) >= 2 and len({text[s:e].casefold() for s, e, _ in run}) >= 2:
            out.update({(s, e): f for s, e, f in run})

    for span in spans:
        if run and span[2] == run[-1][2] and _CHOICE_GAP.fullmatch(text[run[-1][1] : span[0]]):
            run.append(span)
            continue
        flush()
        run = [span]
    flush()
    return out

"""Query-pattern mining: recurring question templates and frequently asked attribute names.

Input: `(identity, question)` records from the query log. Output: patterns with their support,
the number of *distinct identities* that used them (one recruiter asking the same thing fifty
times is one use, not fifty). Only patterns with at least `min_support` survive.

**Templates.** Every question is turned into a template by replacing the entities it names with
slots named after the facet fields the memory uses, so "Which work mode do I prefer for senior
backend engineers in Berlin?" and "which work mode do I prefer for data analysts in London" are
one template, `Which work mode do I prefer for {title} in {location}?`. Entities are found with the
same general vocabularies the memory's facet extractor uses (`hltm.memory.lexicon`: gazetteer,
work modes, employment types, seniority, skills, languages, experience and salary patterns), role
phrases by their head noun (engineer, developer, analyst, …, разработчик, инженер, …), and —
when given — any value the memory already holds as a facet (`known_values`, e.g. project titles
or a customer's own vocabulary). English and Russian. A seniority or skill word right before a
role phrase belongs to the title ("senior backend engineer" is one `{title}`), because titles in
memory carry their seniority. Numbers left over become `{number}`.

**Answer field.** A template is useful to the QA generator only if it asks for a facet field the
node's data can answer: the field the question *names without a value* ("which work mode…",
"where…", "какой формат работы…", "what is the notice period for…"). Names are normalised to the
memory's field names (`lexicon.normalise_field`, EN/RU synonyms): "work format" / "формат работы"
become `work_mode`, an unknown attribute keeps its own name ("notice period" → `notice_period`).
A question listing alternatives of one field ("remote, hybrid or on-site?", "Java или Go?") asks
for that field: the alternatives stay words of the template instead of becoming slots.

**Attributes.** The asked field names themselves, counted over distinct identities, become hints
for the facet extractor and the summariser.

Optionally (`embedder` given) templates with the same slots and answer field whose embeddings
are nearly identical (cosine ≥ `merge_cosine`) are merged, so small rewordings by different
users add up to one pattern's support.

Pure Python; no Dagster, no storage (see `hltm.patterns.store`).
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from hltm.memory import lexicon as lx

__all__ = [
    "ENTITY_FIELDS",
    "MiningConfig",
    "Pattern",
    "QueryRecord",
    "Templated",
    "mine",
    "pattern_id",
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
    min_support: int = 3  # distinct identities a pattern needs
    max_examples: int = 5  # original questions kept per pattern, for the person approving it
    merge_cosine: float = 0.98  # near-identical templates merged (only with an embedder)
    # Which known facet values may become slots: long enough to be an entity, not a number.
    min_known_value_chars: int = 3
    max_known_value_chars: int = 80


@dataclass(frozen=True)
class QueryRecord:
    identity: str  # e.g. "seat:c01-s02"
    question: str
    asked_at: Any = None
    # Fields the query parser named without a value (e.g. from the log's `pairs`), if known.
    asked_fields: tuple[str, ...] = ()


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


@dataclass
class Pattern:
    kind: str  # "template" | "attribute"
    key: str  # normalised template, or the attribute name
    text: str  # the template's most common surface form, or the attribute name
    answer_field: str | None
    slots: tuple[str, ...]
    support: int  # distinct identities
    occurrences: int
    identities: tuple[str, ...]
    examples: tuple[str, ...]
    first_seen: Any = None
    last_seen: Any = None
    variants: tuple[str, ...] = field(default_factory=tuple)  # merged template keys

    @property
    def pattern_id(self) -> str:
        return pattern_id(self.kind, self.key)

    @property
    def releasable(self) -> bool:
        """Can the memory build use it? Attributes always; templates need an answer field and
        only slots the QA generator can fill from a node's facets."""
        if self.kind == "attribute":
            return True
        return bool(self.answer_field) and NUMBER_SLOT not in self.slots

    def as_dict(self) -> dict[str, Any]:
        return {
            "pattern_id": self.pattern_id,
            "kind": self.kind,
            "key": self.key,
            "text": self.text,
            "answer_field": self.answer_field,
            "slots": list(self.slots),
            "support": self.support,
            "occurrences": self.occurrences,
            "identities": list(self.identities),
            "examples": list(self.examples),
            "variants": list(self.variants),
            "releasable": self.releasable,
        }


def pattern_id(kind: str, key: str) -> str:
    return f"{kind[0]}-" + hashlib.sha1(f"{kind}\x00{key}".encode()).hexdigest()[:12]


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


def _known_patterns(
    known_values: Mapping[str, Iterable[str]], config: MiningConfig
) -> list[tuple[str, re.Pattern[str]]]:
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
    _known: Sequence[tuple[str, re.Pattern[str]]] | None = None,
) -> Templated:
    """One question → its template (entities replaced by `{field}` slots) and asked fields."""
    config = config or MiningConfig()
    text = re.sub(r"\s+", " ", question).strip()
    known = _known if _known is not None else _known_patterns(known_values or {}, config)
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


# ---- mining ----------------------------------------------------------------------------------


class _Embed(Protocol):
    def query(self, text: str) -> np.ndarray: ...


def _vectors(embedder: Any, texts: list[str]) -> np.ndarray:
    """Template vectors: one batched, cached `passages` call when the embedder has one (the
    project's `CachedEmbedder` caches by text hash, so re-mining costs nothing), else queries."""
    if hasattr(embedder, "passages"):
        vectors = np.asarray(embedder.passages(texts), dtype=np.float32)
    else:
        vectors = np.stack([np.asarray(embedder.query(t), dtype=np.float32) for t in texts])
    return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)


def _surface(forms: Counter[str]) -> str:
    return sorted(forms.items(), key=lambda kv: (-kv[1], kv[0]))[0][0]


@dataclass
class _Group:
    key: str
    forms: Counter[str] = field(default_factory=Counter)
    identities: set[str] = field(default_factory=set)
    occurrences: int = 0
    examples: list[str] = field(default_factory=list)
    slots: tuple[str, ...] = ()
    asked: tuple[str, ...] = ()
    first_seen: Any = None
    last_seen: Any = None
    variants: list[str] = field(default_factory=list)

    def add(self, rec: QueryRecord, t: Templated, max_examples: int) -> None:
        self.forms[t.template] += 1
        self.identities.add(rec.identity)
        self.occurrences += 1
        if t.question not in self.examples and len(self.examples) < max_examples:
            self.examples.append(t.question)
        self.slots = self.slots or t.slots
        self.asked = self.asked or t.asked
        _seen(self, rec.asked_at)

    def absorb(self, other: _Group, max_examples: int) -> None:
        self.forms.update(other.forms)
        self.identities |= other.identities
        self.occurrences += other.occurrences
        for ex in other.examples:
            if ex not in self.examples and len(self.examples) < max_examples:
                self.examples.append(ex)
        self.variants.append(other.key)
        _seen(self, other.first_seen)
        _seen(self, other.last_seen)


def _seen(group: Any, when: Any) -> None:
    if when is None:
        return
    if group.first_seen is None or when < group.first_seen:
        group.first_seen = when
    if group.last_seen is None or when > group.last_seen:
        group.last_seen = when


def _shape(group: _Group) -> tuple[tuple[str, ...], tuple[str, ...]]:
    return tuple(sorted(group.slots)), group.asked[:1]


def _merge_similar(groups: list[_Group], embedder: _Embed, config: MiningConfig) -> list[_Group]:
    """Greedy: the best-supported group absorbs near-identical ones of the same shape (slots and
    answer field). Only groups sharing a shape with another group are embedded at all."""
    ordered = sorted(groups, key=lambda g: (-len(g.identities), -g.occurrences, g.key))
    by_shape: dict[tuple[Any, ...], list[_Group]] = defaultdict(list)
    for g in ordered:
        by_shape[_shape(g)].append(g)
    candidates = [g for g in ordered if len(by_shape[_shape(g)]) > 1]
    if not candidates:
        return ordered
    index = {id(g): i for i, g in enumerate(candidates)}
    vectors = _vectors(embedder, [g.key for g in candidates])
    absorbed: set[int] = set()
    out: list[_Group] = []
    for group in ordered:
        if id(group) in absorbed:
            continue
        out.append(group)
        if id(group) not in index:
            continue
        i = index[id(group)]
        for other in by_shape[_shape(group)]:
            if other is group or id(other) in absorbed or index[id(other)] <= i:
                continue
            if float(vectors[i] @ vectors[index[id(other)]]) >= config.merge_cosine:
                group.absorb(other, config.max_examples)
                absorbed.add(id(other))
    return out


def mine(
    records: Iterable[QueryRecord | Mapping[str, Any]],
    config: MiningConfig | None = None,
    known_values: Mapping[str, Iterable[str]] | None = None,
    embedder: _Embed | None = None,
) -> list[Pattern]:
    """Templates and attribute names used by at least `config.min_support` distinct identities.

    `records`: `QueryRecord`s or query-log rows (`identity_level`, `identity_id`, `question`,
    `asked_at`, `pairs`). Patterns come back sorted by support, then occurrences, then key.
    """
    config = config or MiningConfig()
    known = _known_patterns(known_values or {}, config)
    groups: dict[str, _Group] = {}
    attr_ids: dict[str, set[str]] = defaultdict(set)
    attr_count: Counter[str] = Counter()
    attr_examples: dict[str, list[str]] = defaultdict(list)
    attr_seen: dict[str, _Group] = {}
    for raw in records:
        rec = as_record(raw)
        if not rec.question.strip():
            continue
        t = templatize(rec.question, config=config, _known=known)
        group = groups.setdefault(t.key, _Group(t.key))
        group.add(rec, t, config.max_examples)
        asked = list(t.asked)
        for name in rec.asked_fields:
            name = lx.normalise_field(name)
            if name and name not in asked and name not in t.slots:
                asked.append(name)
        for name in asked:
            attr_ids[name].add(rec.identity)
            attr_count[name] += 1
            if t.question not in attr_examples[name] and len(attr_examples[name]) < 5:
                attr_examples[name].append(t.question)
            _seen(attr_seen.setdefault(name, _Group(name)), rec.asked_at)

    merged = list(groups.values())
    if embedder is not None and len(merged) > 1:
        merged = _merge_similar(merged, embedder, config)

    patterns: list[Pattern] = []
    for g in merged:
        if len(g.identities) < config.min_support:
            continue
        patterns.append(
            Pattern(
                kind="template",
                key=g.key,
                text=_surface(g.forms),
                answer_field=g.asked[0] if g.asked else None,
                slots=g.slots,
                support=len(g.identities),
                occurrences=g.occurrences,
                identities=tuple(sorted(g.identities)),
                examples=tuple(g.examples),
                first_seen=g.first_seen,
                last_seen=g.last_seen,
                variants=tuple(sorted(g.variants)),
            )
        )
    for name, ids in attr_ids.items():
        if len(ids) < config.min_support:
            continue
        seen = attr_seen[name]
        patterns.append(
            Pattern(
                kind="attribute",
                key=name,
                text=name,
                answer_field=name,
                slots=(),
                support=len(ids),
                occurrences=attr_count[name],
                identities=tuple(sorted(ids)),
                examples=tuple(attr_examples[name]),
                first_seen=seen.first_seen,
                last_seen=seen.last_seen,
            )
        )
    patterns.sort(key=lambda p: (-p.support, -p.occurrences, p.kind, p.key))
    return patterns


def as_record(raw: QueryRecord | Mapping[str, Any]) -> QueryRecord:
    if isinstance(raw, QueryRecord):
        return raw
    identity = raw.get("identity")
    if not identity:
        identity = f"{raw.get('identity_level', '')}:{raw.get('identity_id', '')}"
    asked = tuple(
        str(p.get("field", ""))
        for p in (raw.get("pairs") or [])
        if isinstance(p, Mapping) and p.get("field") and not str(p.get("value", "")).strip()
    )
    return QueryRecord(
        identity=str(identity),
        question=str(raw.get("question") or ""),
        asked_at=raw.get("asked_at"),
        asked_fields=asked,
    )

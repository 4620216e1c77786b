"""Query-pattern mining: recurring question templates and frequently asked attribute names.

Input: `(identity, question)` records from the query log. Output: patterns with their support,
the number of *distinct identities* that used them (one recruiter asking the same thing fifty
times is one use, not fifty). Only patterns with at least `min_support` survive.

**Templates** (`hltm.patterns.templates`). Every question is turned into a template by
replacing the entities it names with slots named after the facet fields the memory uses, so
"Which work mode do I prefer for senior backend engineers in Berlin?" and "which work mode do I
prefer for data analysts in London" are one template, `Which work mode do I prefer for {title} in
{location}?`. Entities are found with the same general vocabularies the memory's facet extractor
uses (`hltm.memory.lexicon`: gazetteer, work modes, employment types, seniority, skills,
languages, experience and salary patterns), role phrases by their head noun (engineer,
developer, analyst, …, разработчик, инженер, …), and — when given — any value the memory already
holds as a facet (`known_values`, e.g. project titles or a customer's own vocabulary). English
and Russian. A seniority or skill word right before a role phrase belongs to the title ("senior
backend engineer" is one `{title}`), because titles in memory carry their seniority. Numbers left
over become `{number}`.

**Answer field.** A template is useful to the QA generator only if it asks for a facet field the
node's data can answer: the field the question *names without a value* ("which work mode…",
"where…", "какой формат работы…", "what is the notice period for…"). Names are normalised to the
memory's field names (`lexicon.normalise_field`, EN/RU synonyms): "work format" / "формат работы"
become `work_mode`, an unknown attribute keeps its own name ("notice period" → `notice_period`).
A question listing alternatives of one field ("remote, hybrid or on-site?", "Java или Go?") asks
for that field: the alternatives stay words of the template instead of becoming slots.

**Attributes.** The asked field names themselves, counted over distinct identities, become hints
for the facet extractor and the summariser.

**Unanswered.** Each record carries its query's status; a pattern counts its occurrences whose
answer was that the memory does not say (`not_in_memory`, `no_memory`): what recruiters ask and
the memory cannot yet answer is what its hints should make it hold.

Optionally (`embedder` given) templates with the same slots and answer field whose embeddings
are nearly identical (cosine ≥ `merge_cosine`) are merged, so small rewordings by different
users add up to one pattern's support.

Pure Python; no Dagster, no storage (see `hltm.patterns.store`).
"""

from __future__ import annotations

import hashlib
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from hltm.memory import lexicon as lx
from hltm.patterns.templates import (
    NUMBER_SLOT,
    MiningConfig,
    Templated,
    known_patterns,
    templatize,
)

__all__ = [
    "Pattern",
    "QueryRecord",
    "mine",
    "pattern_id",
]

UNANSWERED = ("not_in_memory", "no_memory")  # statuses of an answer that says the memory does not


@dataclass(frozen=True)
class QueryRecord:
    identity: str  # e.g. "seat:c01-s02"
    question: str
    asked_at: Any = None
    # Fields the query parser named without a value (e.g. from the log's `pairs`), if known.
    asked_fields: tuple[str, ...] = ()
    status: str = ""  # the query log's status of the answer, if known

    @property
    def unanswered(self) -> bool:
        return self.status in UNANSWERED


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
    unanswered: int = 0  # occurrences the memory could not answer

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
            "unanswered": self.unanswered,
            "releasable": self.releasable,
        }


def pattern_id(kind: str, key: str) -> str:
    return f"{kind[0]}-" + hashlib.sha1(f"{kind}\x00{key}".encode()).hexdigest()[:12]


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
    unanswered: int = 0
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
        self.unanswered += rec.unanswered
        if t.question not in self.examples and len(self.examples) < max_examples:
            self.examples.append(t.question)
        self.slots = self.slots or t.slots
        self.asked = self.asked or t.asked
        _seen(self, rec.asked_at)

    def absorb(self, other: _Group, max_examples: int) -> None:
        self.forms.update(other.forms)
        self.identities |= other.identities
        self.occurrences += other.occurrences
        self.unanswered += other.unanswered
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
    known = known_patterns(known_values or {}, config)
    groups: dict[str, _Group] = {}
    attr_ids: dict[str, set[str]] = defaultdict(set)
    attr_count: Counter[str] = Counter()
    attr_unanswered: Counter[str] = Counter()
    attr_examples: dict[str, list[str]] = defaultdict(list)
    attr_seen: dict[str, _Group] = {}
    for raw in records:
        rec = as_record(raw)
        if not rec.question.strip():
            continue
        t = templatize(rec.question, config=config, known=known)
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
            attr_unanswered[name] += rec.unanswered
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
                unanswered=g.unanswered,
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
                unanswered=attr_unanswered[name],
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
        status=str(raw.get("status") or ""),
    )

"""A node's facets, QA pairs and summaries from the LLM, its answers' ids checked and cleaned."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Executor, wait
from functools import partial
from typing import Any

from hltm.llm import LLM, Task
from hltm.memory import lexicon as lx
from hltm.memory import tasks
from hltm.memory.hints import Hints
from hltm.memory.models import (
    CHILD_LEVEL,
    MAX_PARENT_QA,
    MAX_PROJECT_QA,
    QA,
    AggregateOutput,
    Facet,
    FacetsOutput,
    MemoryNode,
    Placement,
    QAOutput,
    SummaryOutput,
    required_support,
)
from hltm.memory.passages import passage_pairs
from hltm.memory.store import Drops


def _known_project_ids(inputs: dict[str, Any]) -> set[str]:
    ids = {inputs["project"]["project_id"]}
    ids |= {d["document_id"] for d in inputs.get("documents", [])}
    ids |= {v["vacancy_id"] for v in inputs.get("vacancies", [])}
    ids |= {a["action_id"] for a in inputs.get("actions", {}).get("with_reasons", [])}
    return ids


class _Tally:
    """Items kept and dropped (by reason) while cleaning one node's answer."""

    def __init__(self) -> None:
        self.kept = 0
        self.reasons: Counter[str] = Counter()

    def drop(self, kind: str, reason: str) -> None:
        self.reasons[f"{kind}:{reason}"] += 1

    def result(self) -> Drops:
        return Drops(self.kept, tuple(sorted(self.reasons.items())))


def _clean_facets(
    items: list[tuple[str, str, list[str], list[str]]],
    known_support: set[str],
    known: set[str],
    tally: _Tally,
    is_echo: Callable[[str, str], bool] = lambda field, value: False,
    supported: Callable[[str, set[str]], set[str]] | None = None,
    required: int = 1,
) -> tuple[Facet, ...]:
    """Normalised fields, merged duplicates, invented ids, echoed prompt examples and values
    below `required` support dropped (and counted), canonical order. `supported(field, ids)`:
    the ids among `ids` whose node really states that field (parents check their children)."""
    merged: dict[tuple[str, str], tuple[str, set[str], set[str]]] = {}
    for field_name, value, support, sources in items:
        name = lx.normalise_field(field_name)
        text = " ".join(value.split())
        if not name or not text:
            tally.drop("facet", "empty")
            continue
        good_sources = {s for s in sources if s in known}
        good_support = {s for s in support if s in known_support}
        if not good_sources:
            tally.drop("facet", "unknown_source")
            continue
        if not good_support:
            tally.drop("facet", "unknown_support")
            continue
        if is_echo(name, text):
            tally.drop("facet", "echoed_prompt_example")
            continue
        key = (name, lx.normalise_value(text))
        spelling, sup, src = merged.get(key, (text, set(), set()))
        merged[key] = (min(spelling, text), sup | good_support, src | good_sources)
    facets = []
    for (name, _), (spelling, sup, src) in sorted(merged.items()):
        if supported is not None:
            sup = supported(name, sup)
        if len(sup) < required:
            tally.drop("facet", "below_min_support")
            continue
        facets.append(Facet(name, spelling, tuple(sorted(sup)), tuple(sorted(src))))
    tally.kept += len(facets)
    return tuple(facets)


def _echo_check(task: Task[Any], payload: dict[str, Any]) -> Callable[[str, str], bool]:
    """A value is an echo of the prompt when it is one of the prompt's own example phrases
    (two or more words, or with a digit) and the input never states it, in any spelling the
    field's vocabulary knows (so "San Francisco Bay Area" from "Сан-Франциско" is no echo)."""
    instructions = " ".join(f"{task.system} {task.user}".casefold().split())
    raw = json.dumps(payload, ensure_ascii=False)
    given = " ".join(raw.casefold().split())

    def is_echo(field: str, value: str) -> bool:
        folded = " ".join(value.casefold().split())
        distinctive = len(folded.split()) >= 2 or any(ch.isdigit() for ch in folded)
        if not distinctive or folded not in instructions or folded in given:
            return False
        vocabulary = lx.CANONICAL_TERMS.get(field)
        named = {t for t, _ in lx.find_terms(vocabulary, raw)} if vocabulary else set()
        return lx.canonical(field, value) not in named

    return is_echo


def _clean_qa(
    pairs: list[tuple[str, str, str, str, list[str]]],
    known_sources: set[str],
    known_support: set[str],
    tally: _Tally,
    limit: int | None,
    source_required: bool,
) -> tuple[QA, ...]:
    """Unique questions whose source (and support) ids are known, at most `limit` (None: all);
    the rest dropped, counted."""
    kept: list[QA] = []
    seen: set[str] = set()
    for question, answer, rationale, source, support in pairs:
        text = " ".join(question.split())
        if not text or text in seen:
            continue  # a blank or repeated question is no loss
        if (source or source_required) and source not in known_sources:
            tally.drop("qa", "unknown_source")
            continue
        good_support = tuple(sorted({s for s in support if s in known_support}))
        if not good_support:
            tally.drop("qa", "unknown_support")
            continue
        seen.add(text)
        kept.append(QA(text, answer.strip(), rationale.strip(), source, good_support))
    kept = kept[:limit]
    tally.kept += len(kept)
    return tuple(kept)


def build_project(
    llm: LLM,
    placement: Placement,
    version: str,
    inputs: dict[str, Any],
    hints: Hints,
    side: Executor | None = None,
) -> tuple[MemoryNode, Drops]:
    """A leaf's F/Q/S from its own source data: three LLM calls (facets, then QA and summary,
    which need only the facets: the summary runs on `side` meanwhile, when one is given)."""
    nid = placement.node_id
    hint_payload = hints.as_payload()
    known = _known_project_ids(inputs)
    ids = {"sources": sorted(known), "source": sorted(known)}
    tally = _Tally()
    payload = {**inputs, "hints": {"attributes": hint_payload["attributes"]}}
    extracted: FacetsOutput = llm.run(tasks.FACETS, payload, context=nid, choices=ids)
    facets = _clean_facets(
        [(f.field, f.value, f.sources, f.sources) for f in extracted.facets],
        known,
        known,
        tally,
        is_echo=_echo_check(tasks.FACETS, payload),
    )
    facet_payload = [
        {"field": f.field, "value": f.value, "sources": list(f.sources)} for f in facets
    ]
    summary_payload = {
        **inputs,
        "facets": facet_payload,
        "hints": {"attributes": hint_payload["attributes"]},
    }
    summary_call = partial(llm.run, tasks.SUMMARY, summary_payload, context=nid)
    summary_later = side.submit(summary_call) if side is not None else None
    try:
        qa_out: QAOutput = llm.run(
            tasks.QA,
            {**inputs, "facets": facet_payload, "hints": hint_payload},
            context=nid,
            choices=ids,
        )
    finally:
        if summary_later is not None:
            wait([summary_later])  # its requests are this node's, whatever QA's fate
    summary_out: SummaryOutput = (
        summary_later.result() if summary_later is not None else summary_call()
    )
    pairs = _clean_qa(
        [(q.question, q.answer, q.rationale, q.source, [q.source]) for q in qa_out.pairs],
        known,
        known,
        tally,
        MAX_PROJECT_QA,
        source_required=True,
    )
    # The leaf's own passages, each a pair citing its document, for every backend and uncapped:
    # the QA retriever finds the session of any fact said in it. They are not the model's items,
    # so they are not counted in its drops (a node whose answers were all dropped stays flagged).
    pairs += _clean_qa(
        [(p["question"], p["answer"], p["rationale"], p["source"], [p["source"]])
         for p in passage_pairs(inputs)],
        known, known, _Tally(), None, source_required=True,
    )  # fmt: skip
    node = MemoryNode(
        placement,
        version,
        facets,
        pairs,
        summary_out.summary_long.strip(),
        " ".join(summary_out.summary_short.split()),
    )
    return node, tally.result()


def build_parent(
    llm: LLM,
    placement: Placement,
    version: str,
    children: list[MemoryNode],
    hints: Hints,
    support_threshold: float,
    min_support: int = 2,
) -> tuple[MemoryNode, Drops]:
    """A seat's or contract's F/Q/S from its children's F/Q/S only: one aggregate call.

    Minimum support is enforced here, not only asked for: a kept value needs `min_support`
    supporting children that really state its field."""
    nid = placement.node_id
    children = sorted(children, key=lambda c: c.node_id)
    required = required_support(support_threshold, len(children), min_support)
    payload = {
        "node_id": nid,
        "level": placement.level,
        "label": placement.label,
        "child_level": CHILD_LEVEL[placement.level],
        "support_threshold": support_threshold,
        "min_support": required,
        "children": [c.as_child_payload() for c in children],
        "hints": hints.as_payload(),
    }
    child_ids = {c.node_id for c in children}
    known_sources = {s for c in children for f in c.facets for s in f.sources}
    known_sources |= {q.source for c in children for q in c.qa}
    ids = {
        "support": sorted(child_ids),
        "sources": sorted(known_sources),
        "source": ["", *sorted(known_sources)],
    }
    out: AggregateOutput = llm.run(tasks.AGGREGATE, payload, context=nid, choices=ids)
    fields_of = {c.node_id: {f.field for f in c.facets} for c in children}
    tally = _Tally()
    facets = _clean_facets(
        [(f.field, f.value, f.support, f.sources) for f in out.facets],
        child_ids,
        known_sources,
        tally,
        supported=lambda field, ids: {c for c in ids if field in fields_of[c]},
        required=required,
    )
    pairs = _clean_qa(
        [(q.question, q.answer, q.rationale, q.source, q.support) for q in out.qa],
        known_sources,
        child_ids,
        tally,
        MAX_PARENT_QA,
        source_required=False,
    )
    node = MemoryNode(
        placement,
        version,
        facets,
        pairs,
        out.summary_long.strip(),
        " ".join(out.summary_short.split()),
        tuple((c.node_id, c.version) for c in children),
    )
    return node, tally.result()

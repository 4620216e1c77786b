"""What a memory node holds, and the schemas the LLM must answer in.

The output models are OpenAI-strict compatible: every field required, no free-form dicts, no
defaults, so `chat.completions.parse(response_format=Model)` sends a strict JSON schema. Facets are
therefore a *list* of `{field, value}` rather than a dict; a field may repeat when it has several
values (`skill: Python`, `skill: Kafka`), each value embedded on its own as `"field: value"`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from hltm.memory import lexicon as lx

Level = Literal["project", "seat", "contract"]
LEVELS: tuple[Level, ...] = ("project", "seat", "contract")
CHILD_LEVEL: dict[str, str] = {"seat": "project", "contract": "seat"}
# QA pairs a node keeps from the model (the prompt asks a project for 5–10): the validator cuts a
# longer answer. A project's passage pairs (one per fact-bearing passage of its texts) come on top.
MAX_PROJECT_QA = 10
MAX_PARENT_QA = 10


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


# ---- LLM answers -------------------------------------------------------------------------------


class FacetItem(_Strict):
    field: str
    value: str
    sources: list[str]


class FacetsOutput(_Strict):
    facets: list[FacetItem]


class QAItem(_Strict):
    question: str
    answer: str
    rationale: str
    source: str


class QAOutput(_Strict):
    pairs: list[QAItem]


class SummaryOutput(_Strict):
    summary_long: str
    summary_short: str


class AggregateFacet(_Strict):
    field: str
    value: str
    support: list[str]
    sources: list[str]


class AggregateQA(_Strict):
    question: str
    answer: str
    rationale: str
    source: str
    support: list[str]


class AggregateOutput(_Strict):
    facets: list[AggregateFacet]
    qa: list[AggregateQA]
    summary_long: str
    summary_short: str


# ---- stored nodes ------------------------------------------------------------------------------


def canonical_json(value: Any) -> str:
    """The one serialisation of stored JSON: byte-identical for identical content."""
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class Facet:
    field: str
    value: str
    support: tuple[str, ...]  # child node ids (seats, contracts) or document ids (projects)
    sources: tuple[str, ...]  # source document ids

    @property
    def text(self) -> str:
        """The string embedded for facet search."""
        return f"{self.field}: {self.value}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "field": self.field,
            "value": self.value,
            "support": list(self.support),
            "sources": list(self.sources),
        }


@dataclass(frozen=True)
class QA:
    question: str
    answer: str
    rationale: str
    source: str  # a source document id
    support: tuple[str, ...]  # child node ids (seats, contracts) or document ids (projects)

    def as_dict(self) -> dict[str, Any]:
        return {
            "question": self.question,
            "answer": self.answer,
            "rationale": self.rationale,
            "source": self.source,
            "support": list(self.support),
        }


@dataclass(frozen=True)
class Placement:
    """Where a node sits in the ownership tree (ids are raw source ids, node ids are prefixed)."""

    node_id: str
    level: Level
    contract_id: str
    seat_id: str | None
    project_id: str | None
    parent_id: str | None
    label: str


@dataclass(frozen=True)
class MemoryNode:
    placement: Placement
    version: str
    facets: tuple[Facet, ...]
    qa: tuple[QA, ...]
    summary_long: str
    summary_short: str
    children: tuple[tuple[str, str], ...] = field(default_factory=tuple)  # (child id, version)

    @property
    def node_id(self) -> str:
        return self.placement.node_id

    @property
    def level(self) -> Level:
        return self.placement.level

    def facets_json(self) -> str:
        return canonical_json([f.as_dict() for f in self.facets])

    def qa_json(self) -> str:
        return canonical_json([q.as_dict() for q in self.qa])

    def children_json(self) -> str:
        return canonical_json([list(c) for c in self.children])

    def as_child_payload(self) -> dict[str, Any]:
        """What a parent's aggregation sees of this node: its F/Q/S, never raw documents."""
        return {
            "node_id": self.node_id,
            "label": self.placement.label,
            "facets": [f.as_dict() for f in self.facets],
            "qa": [
                {"question": q.question, "answer": q.answer, "source": q.source} for q in self.qa
            ],
            "summary_long": self.summary_long,
            "summary_short": self.summary_short,
        }

    def statements(self) -> list[str]:
        """The sentences of its prepared answers and summary an answer may quote, each once:
        what the offline answer compares with a question (`lexicon.statements`)."""
        texts = [q.answer for q in self.qa] + [self.summary_long or self.summary_short]
        return list(dict.fromkeys(s for text in texts for s in lx.statements(text)))

    def search_items(self) -> list[tuple[str, int, str, str]]:
        """(kind, index, text, field) of every string that goes into the vector index."""
        items = [("facet", i, f.text, f.field) for i, f in enumerate(self.facets)]
        items += [("qa", i, q.question, "") for i, q in enumerate(self.qa)]
        if self.summary_short:
            items.append(("summary", 0, self.summary_short, ""))
        return items


def node_id_for(level: str, source_id: str) -> str:
    return f"{level}:{source_id}"


def split_node_id(node_id: str) -> tuple[str, str]:
    level, _, source_id = node_id.partition(":")
    if level not in LEVELS or not source_id:
        raise ValueError(f"not a memory node id: {node_id!r} (expected '<level>:<source id>')")
    return level, source_id


def required_support(threshold: float, children: int, minimum: int = 2) -> int:
    """Children that must share a value for the parent to keep it: the larger of `minimum`
    and the `threshold` share of the children, but never more than there are children."""
    if children <= 0:
        return 1
    return max(1, min(children, max(minimum, math.ceil(threshold * children - 1e-9))))

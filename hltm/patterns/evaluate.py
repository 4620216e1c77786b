"""Does a released template pay off? The QA retriever's hit rate on held-back questions.

A *probe* is a question a user could ask, the identity asking it, the memory node whose data
answers it, and the value the answer must contain (the node's facet value of the template's
answer field). A probe is a **hit** when the QA retriever alone — inside the asker's permitted
subtree, exactly as the query path runs it — ranks that node first and the prepared QA pair it
brings first carries the expected value. That is the "think-fast" path: a hit returns the
prepared answer without the answering LLM having to dig for it.

Held-back paraphrases (worded differently from every logged question) measure generalisation,
not memorisation of the mined wording.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from hltm.embeddings import CachedEmbedder
from hltm.query.boundary import ScopedMemory
from hltm.query.retrieve import QueryEmbeddings, RetrievalConfig, retrieve
from hltm.query.scope import Identity, resolve_scope
from hltm.settings import Settings
from hltm.vectors import VectorStore
from hltm.warehouse import connect


@dataclass(frozen=True)
class Probe:
    identity: str  # e.g. "seat:c01-s01"
    question: str
    target: str  # node id expected first
    expected: str  # text the prepared answer must contain (case-insensitive)


@dataclass
class ProbeResult:
    probe: Probe
    hit: bool
    top_node: str | None
    top_question: str | None
    top_answer: str | None
    score: float


@dataclass
class HitRate:
    results: list[ProbeResult] = field(default_factory=list)

    @property
    def hits(self) -> int:
        return sum(r.hit for r in self.results)

    @property
    def total(self) -> int:
        return len(self.results)

    @property
    def rate(self) -> float:
        return self.hits / self.total if self.total else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"hits": self.hits, "total": self.total, "rate": round(self.rate, 4)}


def qa_hit_rate(
    settings: Settings,
    probes: Sequence[Probe],
    embedder: CachedEmbedder,
    config: RetrievalConfig | None = None,
    embed: QueryEmbeddings | None = None,
) -> HitRate:
    """Run every probe through the QA retriever (only) and count the hits.

    Pass the same `embed` to repeated calls (before / after) to embed each question once.
    """
    config = config or RetrievalConfig(retrievers=("qa",))
    embed = embed or QueryEmbeddings(embedder)
    # One batched call embeds every question (e5 does a batch about as fast as one query).
    embed([p.question for p in probes])
    vectors = VectorStore(settings, embedder)
    out = HitRate()
    with connect(settings.derived_db) as con:
        for probe in probes:
            scope = resolve_scope(con, Identity.parse(probe.identity))
            memory = ScopedMemory(scope, con, vectors)
            got = retrieve(memory, embed, probe.question, [], config)
            top = got.qa[0] if got.qa else None
            question = answer = None
            if top is not None and top.items:
                item = got.nodes[top.node_id].qa[top.items[0]]
                question, answer = item["question"], item["answer"]
            hit = (
                top is not None
                and top.node_id == probe.target
                and answer is not None
                and probe.expected.casefold() in answer.casefold()
            )
            out.results.append(
                ProbeResult(
                    probe, hit, top.node_id if top else None, question, answer,
                    top.score if top else 0.0,
                )
            )  # fmt: skip
    return out

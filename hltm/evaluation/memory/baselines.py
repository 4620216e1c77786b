"""Baselines the evaluation runs beside HLTM, all over the raw sources (not the memory tree):

* **full context** — every document and vacancy of every project in the asker's scope, whole;
* **RAG (fixed chunks)** — documents and vacancies cut into fixed 200-token chunks (o200k_base),
  embedded with the same model, top-k chunks by cosine inside the asker's scope;
* **schema filter** — the structured table fields (project title and status, vacancy titles)
  of the projects in scope, filtered by the parsed `field: value` pairs the tables can express;
* **unfiltered RAG** — the same chunk index with no ownership filter at all; the asker's identity
  is only stated in the question, in natural language (as the paper's RAPTOR/GraphRAG baselines
  were). It exists to show that the leakage test can fail.

Each baseline answers through the same two LLM calls (parse, answer) and the same answer task as
HLTM — raw text goes in as `passages` — so quality and cost compare like for like. Ownership for
the scoped baselines comes from the source tables.
"""

from __future__ import annotations

import re
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from hltm.embeddings import CachedEmbedder
from hltm.llm import LLM
from hltm.query import tasks
from hltm.query.engine import QueryCost, QueryEngine, validate_citations
from hltm.query.scope import Identity
from hltm.tokens import encoding
from hltm.warehouse import connect

CHUNK_TOKENS = 200


@dataclass(frozen=True)
class Owner:
    contract_id: str
    seat_id: str
    project_id: str


@dataclass
class Chunk:
    project_id: str
    source_id: str
    text: str


@dataclass
class RawCorpus:
    """The raw project texts and the ownership tree, read from the sources."""

    owners: dict[str, Owner]  # project id → ownership path
    titles: dict[str, str]
    statuses: dict[str, str]
    texts: dict[str, list[tuple[str, str]]]  # project id → [(source id, text)]
    vacancy_titles: dict[str, list[str]]
    seat_contract: dict[str, str]
    chunks: list[Chunk] = field(default_factory=list)
    vectors: np.ndarray | None = None

    @classmethod
    def load(cls, sources_db: Path | str) -> RawCorpus:
        with connect(sources_db) as con:
            seat_contract = dict(con.execute("SELECT seat_id, contract_id FROM seats").fetchall())
            owners, titles, statuses = {}, {}, {}
            for pid, sid, title, status in con.execute(
                "SELECT project_id, seat_id, title, status FROM projects ORDER BY project_id"
            ).fetchall():
                if sid in seat_contract:
                    owners[pid] = Owner(seat_contract[sid], sid, pid)
                    titles[pid] = title or pid
                    statuses[pid] = status or ""
            texts: dict[str, list[tuple[str, str]]] = defaultdict(list)
            for did, pid, text in con.execute(
                "SELECT document_id, project_id, text FROM project_documents ORDER BY document_id"
            ).fetchall():
                texts[pid].append((did, text or ""))
            vacancy_titles: dict[str, list[str]] = defaultdict(list)
            for vid, pid, title, text in con.execute(
                "SELECT vacancy_id, project_id, title, text FROM vacancies ORDER BY vacancy_id"
            ).fetchall():
                texts[pid].append((vid, f"{title}\n{text or ''}"))
                vacancy_titles[pid].append(title or "")
        return cls(owners, titles, statuses, dict(texts), dict(vacancy_titles), seat_contract)

    # ---- ownership (independent of the memory tree; also the leakage test's oracle) --------

    def in_scope(self, identity: Identity, project_id: str) -> bool:
        owner = self.owners.get(project_id)
        if owner is None:
            return False
        value = {"contract": owner.contract_id, "seat": owner.seat_id, "project": project_id}
        return value[identity.level] == identity.id

    def node_in_scope(self, identity: Identity, node_id: str) -> bool:
        """Whether memory node `node_id` lies in `identity`'s subtree, by the source tables."""
        level, _, ident = node_id.partition(":")
        if level == "project":
            return self.in_scope(identity, ident)
        if level == "seat":
            contract = self.seat_contract.get(ident)
            if identity.level == "contract":
                return contract == identity.id
            return identity.level == "seat" and ident == identity.id
        if level == "contract":
            return identity.level == "contract" and ident == identity.id
        return False

    def projects_in(self, identity: Identity) -> list[str]:
        return [pid for pid in self.owners if self.in_scope(identity, pid)]

    # ---- the chunk index -------------------------------------------------------------------

    def build_chunks(self, embedder: CachedEmbedder, tokens: int = CHUNK_TOKENS) -> None:
        enc = encoding()
        chunks: list[Chunk] = []
        for pid in sorted(self.texts):
            if pid not in self.owners:
                continue
            for source_id, text in self.texts[pid]:
                ids = enc.encode(text, disallowed_special=())
                for start in range(0, len(ids), tokens):
                    piece = enc.decode(ids[start : start + tokens]).strip()
                    if piece:
                        chunks.append(Chunk(pid, source_id, piece))
        self.chunks = chunks
        self.vectors = embedder.passages([c.text for c in chunks]) if chunks else None


@dataclass
class SystemAnswer:
    answer: str
    citations: list[str]
    entities: list[str]  # node ids of everything retrieved or cited (for leakage)
    cost: QueryCost
    dropped: list[str] = field(default_factory=list)
    status: str = "answered"  # `QueryResult.status` (`not_in_memory`: no citations, a hint)


class Baselines:
    """The raw-source baselines, answering through the engine's parse and the answer task."""

    def __init__(
        self, engine: QueryEngine, corpus: RawCorpus, rag_k: int = 8, build_chunks: bool = True
    ) -> None:
        self.engine = engine
        self.corpus = corpus
        self.rag_k = rag_k
        self.llm: LLM = engine.llm
        if corpus.vectors is None and build_chunks:
            corpus.build_chunks(engine.embedder)

    def _passage(self, pid: str, text: str) -> dict[str, str]:
        return {
            "node_id": f"project:{pid}",
            "level": "project",
            "label": self.corpus.titles.get(pid, pid),
            "text": text,
        }

    def _run(
        self,
        identity: Identity,
        question: str,
        passages_for: object,
        shown_question: str | None = None,
    ) -> SystemAnswer:
        started = time.perf_counter()
        before = self.llm.snapshot()
        cost = QueryCost()
        t0 = time.perf_counter()
        intent, pairs = self.engine.parse(shown_question or question)
        cost.parse_ms = (time.perf_counter() - t0) * 1000
        passages, embed_s, retrieval_s = passages_for(question, pairs)  # type: ignore[operator]
        cost.embed_ms, cost.retrieval_ms = embed_s * 1000, retrieval_s * 1000
        ids = list(dict.fromkeys(p["node_id"] for p in passages))
        if passages:
            t0 = time.perf_counter()
            payload = {
                "question": shown_question or question,
                "intent": intent,
                "pairs": pairs,
                "scope": {"level": identity.level, "node_id": identity.node_id},
                "facets": [],
                "qa": [],
                "summaries": [],
                "passages": passages,
            }
            out = self.llm.run(tasks.ANSWER, payload, context=f"baseline for {identity}")
            cost.answer_ms = (time.perf_counter() - t0) * 1000
            cited = validate_citations(list(out.citation), set(ids))
            kept, dropped, answer = cited.kept, cited.dropped, out.answer
            status = "answered" if out.in_memory else "not_in_memory"
            if not out.in_memory:  # the nodes it names are a hint, not support
                kept = []
        else:
            kept, dropped, answer, status = [], [], "No data for this scope.", "no_memory"
        used = self.llm.snapshot() - before
        cost.llm_calls, cost.prompt_tokens = used.calls, used.prompt_tokens
        cost.completion_tokens, cost.llm_ms = used.completion_tokens, used.seconds * 1000
        cost.total_ms = (time.perf_counter() - started) * 1000
        return SystemAnswer(answer, kept, list(dict.fromkeys(ids + kept)), cost, dropped, status)

    # ---- full context ----------------------------------------------------------------------

    def full_context(self, identity: Identity, question: str) -> SystemAnswer:
        def passages_for(_q: str, _pairs: list) -> tuple[list[dict], float, float]:
            t0 = time.perf_counter()
            out = [
                self._passage(pid, text)
                for pid in self.corpus.projects_in(identity)
                for _sid, text in self.corpus.texts.get(pid, [])
            ]
            return out, 0.0, time.perf_counter() - t0

        return self._run(identity, question, passages_for)

    # ---- chunk RAG -------------------------------------------------------------------------

    def _rag(self, identity: Identity | None, question: str) -> tuple[list[dict], float, float]:
        t0 = time.perf_counter()
        vector = self.engine.embed([question])[0]
        embed_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        chunks = self.corpus.chunks
        if self.corpus.vectors is None or not chunks:
            return [], embed_s, time.perf_counter() - t0
        scores = self.corpus.vectors @ vector
        if identity is not None:
            mask = np.array([self.corpus.in_scope(identity, c.project_id) for c in chunks])
            scores = np.where(mask, scores, -np.inf)
        order = [i for i in np.argsort(-scores)[: self.rag_k] if np.isfinite(scores[i])]
        passages = [self._passage(chunks[i].project_id, chunks[i].text) for i in order]
        return passages, embed_s, time.perf_counter() - t0

    def rag(self, identity: Identity, question: str) -> SystemAnswer:
        return self._run(identity, question, lambda q, _p: self._rag(identity, q))

    def unfiltered_rag(self, identity: Identity, question: str) -> SystemAnswer:
        """No ownership filter: the identity is only named in the question's text."""
        shown = f"{question} (Answer only from the data of {identity.level} {identity.id}.)"
        return self._run(identity, question, lambda _q, _p: self._rag(None, shown), shown)

    # ---- schema filter ---------------------------------------------------------------------

    def schema_filter(self, identity: Identity, question: str) -> SystemAnswer:
        def passages_for(_q: str, pairs: list[dict[str, str]]) -> tuple[list[dict], float, float]:
            t0 = time.perf_counter()
            rows = self.corpus.projects_in(identity)
            for pair in pairs:
                value = pair.get("value", "")
                if not value or pair["field"] not in ("title", "status"):
                    continue  # the tables have no column for this field
                words = re.findall(r"\w+", value.casefold())
                if pair["field"] == "status":
                    rows = [p for p in rows if self.corpus.statuses.get(p) == value.casefold()]
                    continue

                def has(pid: str, words: list[str] = words) -> bool:
                    text = " ".join(
                        [self.corpus.titles.get(pid, "")] + self.corpus.vacancy_titles.get(pid, [])
                    ).casefold()
                    return all(w.rstrip("s") in text for w in words)

                rows = [p for p in rows if has(p)]
            out = []
            for pid in rows:
                vacancies = "; ".join(self.corpus.vacancy_titles.get(pid, [])) or "none"
                row = (
                    f"project_id: {pid}; title: {self.corpus.titles.get(pid, '')}; "
                    f"status: {self.corpus.statuses.get(pid, '')}; vacancies: {vacancies}"
                )
                out.append(self._passage(pid, row))
            return out, 0.0, time.perf_counter() - t0

        return self._run(identity, question, passages_for)

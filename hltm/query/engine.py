"""The one query entry point: identity + question → cited answer, logged with its cost.

    identity ──resolve──▶ permitted subtree T_v ──▶ ScopedMemory (the only reader)
    question ──LLM call 1: parse──▶ field: value pairs
             ──embed──▶ facet / QA / summary retrievers inside T_v ──▶ context
             ──LLM call 2: answer──▶ {rationale, answer, citation}
             ──validate citations against the context──▶ log (query_log) ──▶ QueryResult

At most two LLM calls per query; none when the scope holds no memory (then the answer says so
explicitly instead of inventing one). The status says what the answer is worth:

* `answered` — cited, and every value it states appears in what it cites;
* `not_in_memory` — the scope has memory and was searched, but what was retrieved does not state
  what was asked about the subject the question names; the answer says so, and the nodes it
  names are a hint (`nearest`), not citations;
* `no_memory` — the permitted subtree holds nothing;
* `unsupported` — no valid citation, or a value the cited context does not state
  (`hltm.query.grounding`): callers must not pass it on as fact.

The answer schema enumerates the context's node ids as the only citations; a document id the
model cites anyway counts for the context node whose memory holds it, a node id run into more
text (`project:p1-notes`) for the one context node it can be (both recorded as mapped), and
anything else is dropped and counted, never passed on. An ask that fails (the model's answer
never fits its schema, a store is down) is still logged, with its cost and status `failed`.
Isolation is structural: the subtree filter is applied in the stores, the prompt is never relied
on for it.

Concurrency: queries run in parallel (no engine-wide lock; each has its own LLM usage counters).
The derived DuckDB file has one writer process at a time, so a query never holds a connection
while it waits on the LLM or on Chroma: it reads the tree through `TreeIndex` (re-read, for
milliseconds, only when the file changed) and hands its log row to `QueryLogWriter`, which
inserts it off the answer's path; a file another process keeps locked longer than `db_wait_s` is
`DatabaseBusy`.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from hltm.embeddings import SHORT_MEMO_LIMIT, CachedEmbedder, make_embedder, recall_short_texts
from hltm.llm import LLM, LLMError, LLMUsage, make_llm
from hltm.memory import lexicon as lx
from hltm.query import tasks
from hltm.query.boundary import ScopedMemory
from hltm.query.chroma_subtree import Collections
from hltm.query.grounding import ungrounded
from hltm.query.log import QueryLogWriter
from hltm.query.parse import FIELDS, ground_pairs, parse_question
from hltm.query.retrieve import (
    ListingIndex,
    QueryEmbeddings,
    RetrievalConfig,
    build_context,
    covering,
    open_fields,
    retrieve,
)
from hltm.query.scope import (
    LEVELS,
    Identity,
    Scope,
    narrow,
    narrow_to,
    resolve_scope,
    scope_from_paths,
)
from hltm.query.snapshot import NodeRow, TreeIndex, TreeSnapshot
from hltm.query.subtree_vectors import SubtreeVectors
from hltm.settings import OFFLINE_BACKEND, Settings
from hltm.vectors import VectorStore

logger = logging.getLogger(__name__)

NO_MEMORY_ANSWER = "No memory for this scope: there is nothing stored for {scope} to answer from."


@dataclass
class QueryCost:
    llm_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    embed_ms: float = 0.0
    retrieval_ms: float = 0.0
    parse_ms: float = 0.0
    answer_ms: float = 0.0
    llm_ms: float = 0.0
    total_ms: float = 0.0

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    @property
    def non_llm_ms(self) -> float:
        """Latency excluding the time spent inside LLM calls."""
        return max(0.0, self.total_ms - self.llm_ms)

    def as_dict(self) -> dict[str, Any]:
        out = {k: round(v, 3) if isinstance(v, float) else v for k, v in asdict(self).items()}
        out["tokens"] = self.tokens
        out["non_llm_ms"] = round(self.non_llm_ms, 3)
        return out


@dataclass
class QueryResult:
    query_id: str
    asked_at: datetime
    channel: str
    identity: str  # e.g. "seat:c01-s02"
    scope_root: str  # the node id the permitted subtree is rooted at
    question: str
    intent: str
    pairs: list[dict[str, str]]
    retrieved: dict[str, list[str]]
    context_ids: list[str]
    answer: str
    rationale: str
    citations: list[str]
    dropped_citations: list[str]
    sources: list[str]  # source document ids behind the cited QA pairs
    no_memory: bool
    cost: QueryCost = field(default_factory=QueryCost)
    context: dict[str, list[dict]] = field(default_factory=dict)
    mapped_citations: dict[str, list[str]] = field(default_factory=dict)  # document id → nodes
    # Nodes of the scope the last memory build left incomplete (a failed build, or a child's):
    # the answer may miss what they should hold.
    incomplete: list[str] = field(default_factory=list)
    # What was retrieved does not state what was asked; `nearest` are the hint's nodes.
    not_in_memory: bool = False
    nearest: list[str] = field(default_factory=list)
    ungrounded: list[str] = field(default_factory=list)  # stated values the citations lack
    # An open field listed in part: {"nodes": listed, "of": how many of the scope state it}.
    listing: dict[str, int] = field(default_factory=dict)
    error: str = ""  # why the ask failed (only ever logged: a failed ask raises)

    @property
    def unsupported(self) -> bool:
        """An answer from a non-empty context with no valid citation (none given, or every one
        named something outside the context), or stating a value its citations do not: nothing
        backs it, so callers must not pass it on as fact."""
        if self.no_memory or self.not_in_memory:
            return False
        return not self.citations or bool(self.ungrounded)

    @property
    def status(self) -> str:
        """`answered`, `not_in_memory`, `no_memory` or `unsupported` (module docstring); a
        logged failure is `failed`."""
        if self.error:
            return "failed"
        if self.no_memory:
            return "no_memory"
        if self.not_in_memory:
            return "not_in_memory"
        return "unsupported" if self.unsupported else "answered"

    @property
    def warning(self) -> str:
        warnings = []
        if self.incomplete:
            warnings.append(incomplete_memory(self.incomplete))
        if self.unsupported and self.citations:
            shown = ", ".join(self.ungrounded[:5])
            warnings.append(f"unsupported answer: its citations do not state {shown}")
        elif self.unsupported and not self.dropped_citations:
            warnings.append("unsupported answer: it cites nothing from the retrieved context")
        elif self.unsupported:
            warnings.append(
                f"unsupported answer: all {len(self.dropped_citations)} citation(s) named nodes"
                " outside the retrieved context and were dropped"
            )
        return "; ".join(warnings)

    def as_dict(self, with_context: bool = False) -> dict[str, Any]:
        out = {
            "query_id": self.query_id,
            "asked_at": self.asked_at.isoformat(),
            "identity": self.identity,
            "scope_root": self.scope_root,
            "question": self.question,
            "intent": self.intent,
            "pairs": self.pairs,
            "answer": self.answer,
            "rationale": self.rationale,
            "citations": self.citations,
            "dropped_citations": self.dropped_citations,
            "mapped_citations": self.mapped_citations,
            "sources": self.sources,
            "no_memory": self.no_memory,
            "not_in_memory": self.not_in_memory,
            "nearest": self.nearest,
            "status": self.status,
            "unsupported": self.unsupported,
            "ungrounded": self.ungrounded,
            "warning": self.warning,
            "incomplete": self.incomplete,
            "listing": self.listing,
            "retrieved": self.retrieved,
            "cost": self.cost.as_dict(),
        }
        if with_context:
            out["context"] = self.context
        return out


@dataclass
class Citations:
    kept: list[str] = field(default_factory=list)  # context node ids, in the answer's order
    dropped: list[str] = field(default_factory=list)  # ids outside the context
    mapped: dict[str, list[str]] = field(default_factory=dict)  # cited id → the nodes it meant


def near_miss(cited_id: str, context_ids: set[str]) -> list[str]:
    """The one context node a citation names with more text run into it (`project:p1-notes`:
    a node id and a document suffix), else nothing: an id two context nodes could be, or
    none, is not guessed at."""
    found = [
        node_id
        for node_id in context_ids
        if len(cited_id) > len(node_id)
        and cited_id.startswith(node_id)
        and not cited_id[len(node_id)].isalnum()
    ]
    return found if len(found) == 1 else []


def validate_citations(
    cited: list[str], context_ids: set[str], documents: dict[str, list[str]] | None = None
) -> Citations:
    """A citation must name a node present in the answer's context, a document that one of
    them holds (`documents`: document id → context nodes), which counts for those nodes, or
    one context node with more text run into its id (`near_miss`)."""
    out = Citations()
    kept: set[str] = set()
    for cited_id in cited:
        nodes = [cited_id] if cited_id in context_ids else (documents or {}).get(cited_id, [])
        if not nodes:
            nodes = near_miss(cited_id, context_ids)
        if not nodes:
            if cited_id not in out.dropped:
                out.dropped.append(cited_id)
            continue
        if cited_id not in context_ids:
            out.mapped[cited_id] = nodes
        for node_id in nodes:
            if node_id not in kept:
                kept.add(node_id)
                out.kept.append(node_id)
    return out


def context_documents(nodes: dict[str, Any], context_ids: list[str]) -> dict[str, list[str]]:
    """document id → the most specific context nodes whose stored memory cites it (a project's
    document is also in its seat's facets; citing it means the project)."""
    by_level: dict[str, dict[str, list[str]]] = {}
    in_context = set(context_ids)
    for node_id in context_ids:
        node = nodes[node_id]
        held = {s for f in node.facets for s in f.get("sources", ())}
        held |= {q["source"] for q in node.qa if q.get("source")}
        for doc in held - in_context:
            level = by_level.setdefault(doc, {})
            level.setdefault(node.level, []).append(node_id)
    order = ("project", "seat", "contract")
    return {
        doc: next(levels[lvl] for lvl in order if lvl in levels) for doc, levels in by_level.items()
    }


def partial_listing(listing: dict[str, int]) -> str:
    """What an answer listing an open field in part adds: the rest of the scope states it too."""
    return (
        f" (This lists {listing['nodes']} of the {listing['of']} seats and projects of this"
        " scope that state a value for it; the others did not fit the answer's context.)"
    )


def incomplete_memory(node_ids: list[str]) -> str:
    shown = ", ".join(node_ids[:5]) + (" …" if len(node_ids) > 5 else "")
    return (
        f"the memory is incomplete: the last build of {len(node_ids)} node(s) in this scope"
        f" failed ({shown}); their last good versions, if any, are answered from until a"
        " refresh succeeds"
    )


def context_node_ids(context: dict[str, list[dict]]) -> list[str]:
    return list(dict.fromkeys(item["node_id"] for items in context.values() for item in items))


@functools.lru_cache(maxsize=1 << 14)  # an answer's context texts recur across questions
def _statements(text: str) -> tuple[str, ...]:
    return tuple(lx.statements(text))


class QueryEngine:
    """Shared by the Python API, the CLI and the HTTP endpoint; safe to call from many threads
    at once (the embedded stores are shared by the process, the LLM usage is counted per query)."""

    def __init__(
        self,
        settings: Settings,
        *,
        llm: LLM | None = None,
        embedder: CachedEmbedder | None = None,
        vectors: VectorStore | None = None,
        config: RetrievalConfig | None = None,
        log_queries: bool = True,
        llm_parser: bool = True,
        db_wait_s: float | None = None,
    ) -> None:
        """`db_wait_s`: how long a query waits for a DuckDB file another process holds before
        `DatabaseBusy` (None: the warehouse's default, about 50 s)."""
        self.settings = settings
        self.llm = llm or make_llm(settings)
        self.embedder = embedder or make_embedder(settings)
        self.vectors = vectors or VectorStore(settings, self.embedder)
        self.config = config or RetrievalConfig()
        self.log_queries = log_queries
        self.llm_parser = llm_parser
        self.db_wait_s = db_wait_s
        self.embed = QueryEmbeddings(self.embedder)
        self.query_log = QueryLogWriter(settings.derived_db)
        self.tree = TreeIndex(settings.derived_db)
        self.collections = Collections(self.vectors)
        self.subtree_vectors = SubtreeVectors()
        self.listings = ListingIndex()

    def warm_up(self) -> None:
        """Load the embedding model, the token encoding, the tree's contents, which fields
        each node states (`ListingIndex`) and each field's listing over every contract, every
        contract's vector index and (as the budget allows) the vectors exact search reads, now,
        not on the first request."""
        from hltm.tokens import encoding

        probe = self.embed(["query warm-up"])
        encoding()
        self.tree.prefetch(self.db_wait_s)
        self.listings.prepare(self.tree, self.db_wait_s)
        rows = list(self.tree.snapshot(self.db_wait_s).rows.values())
        self._recall_statements(self._stored_texts(rows), self.db_wait_s)
        contracts = sorted({row.contract_id for row in rows})
        self.collections.load(contracts, probe[0])
        for contract_id in contracts:
            scope = Scope(Identity("contract", contract_id), contract_id)
            memory = self._memory(scope)
            memory.prefetch_vectors(probe.shape[1])
            for field_name in FIELDS:  # each field's listing over the contract (`covering`)
                covering(memory, [field_name], self.config.listed_projects, self.listings)

    def _recall_statements(self, texts: Iterable[str], wait_s: float | None) -> None:
        """The offline answer compares the statements of its context's answers and summaries
        with the question: their vectors, embedded by the memory build, are put in the memo
        it reads (`hltm.embeddings.recall_short_texts`), so it embeds none of them again."""
        if self.llm.backend_name == OFFLINE_BACKEND:
            said = list(dict.fromkeys(s for text in texts for s in _statements(text)))
            recall_short_texts(self.settings.derived_db, said, wait_s)

    def _stored_texts(self, rows: list[NodeRow]) -> Iterator[str]:
        """These nodes' answers and summaries, read a thousand nodes at a time, until there are
        enough to fill half the statement memo (an answer holds a few statements)."""
        given = 0
        for start in range(0, len(rows), 1000):
            if given >= SHORT_MEMO_LIMIT // 8:
                return
            for view in self.tree.contents(rows[start : start + 1000], self.db_wait_s).values():
                texts = [q["answer"] for q in view.qa] + [view.summary_long or view.summary_short]
                given += len(texts)
                yield from texts

    def _memory(
        self,
        scope: Scope,
        levels: tuple[str, ...] | None = None,
        tree: TreeSnapshot | None = None,
    ) -> ScopedMemory:
        """The boundary for one query, over the engine's shared indexes and caches."""
        return ScopedMemory(
            scope,
            self.tree,
            self.vectors,
            levels,
            self.db_wait_s,
            self.collections,
            self.subtree_vectors,
            tree,
        )

    # ---- scope -----------------------------------------------------------------------------

    def scope_for(
        self,
        identity: Identity,
        within: Identity | None = None,
        con: Any = None,
        tree: TreeSnapshot | None = None,
    ) -> Scope:
        """The scope of `identity`; with `within`, `identity` must lie inside `within`'s subtree
        (a caller authenticated as `within` may narrow, never widen: `ScopeError` otherwise).
        Without `con`, resolved on a snapshot of the tree (`tree`, else the latest)."""
        if con is not None:
            if within is None:
                return resolve_scope(con, identity)
            return narrow(con, resolve_scope(con, within), identity)
        paths = (tree or self.tree.snapshot(self.db_wait_s)).paths

        def resolve(who: Identity) -> Scope:
            return scope_from_paths(who, paths.get((f"{who.level}_id", who.id), ()))

        if within is None:
            return resolve(identity)
        return narrow_to(resolve(within), resolve(identity))

    # ---- the query -------------------------------------------------------------------------

    def ask(
        self,
        identity: Identity,
        question: str,
        *,
        within: Identity | None = None,
        config: RetrievalConfig | None = None,
        channel: str = "python",
        log: bool | None = None,
    ) -> QueryResult:
        question = " ".join(question.split())
        if not question:
            raise ValueError("empty question")
        config = config or self.config
        started = time.perf_counter()
        llm = replace(self.llm, usage=LLMUsage())  # this query's own counters, same backend
        result = self._new_result(identity, question, channel)
        # Reads go through the in-memory tree index: a connection is opened only when the file
        # changed, for milliseconds, and never held across the LLM calls.
        tree = self.tree.snapshot(self.db_wait_s)  # one state of the tree for the request
        scope = self.scope_for(identity, within, tree=tree)
        result.incomplete = self._incomplete(scope, tree)
        memory = self._memory(scope, config.levels, tree)
        # A resolved scope holds nodes by construction; only a depth filter can empty it.
        empty = scope.empty or (config.levels is not None and memory.node_count() == 0)
        scoped_s = time.perf_counter() - started
        failure: Exception | None = None
        if empty:
            self._no_memory(result, memory.scope)
        else:
            try:
                self._answer(result, memory, question, config, llm)
            except Exception as err:  # logged with its cost as `failed`, then raised
                failure = err
                result.error = result.rationale = f"failed: {err}"
        cost = result.cost
        cost.retrieval_ms += scoped_s * 1000
        used = llm.snapshot()
        cost.llm_calls = used.calls
        cost.prompt_tokens = used.prompt_tokens
        cost.completion_tokens = used.completion_tokens
        cost.llm_ms = used.seconds * 1000
        cost.total_ms = (time.perf_counter() - started) * 1000
        if self.log_queries if log is None else log:
            extra = {
                "prompt_versions": tasks.prompt_versions(),
                "retrieval_config": config.as_dict(),
            }
            self.query_log.write(result, llm.backend_name, llm.model, extra, wait_s=self.db_wait_s)
        if failure is not None:
            failure.add_note(f"query {result.query_id} was logged with status failed")
            raise failure
        if result.warning:  # the caller shows the warning; the log keeps it for servers
            logger.info("%s: %s", result.query_id, result.warning)
        return result

    def _incomplete(self, scope: Scope, tree: TreeSnapshot) -> list[str]:
        """The scope's nodes the last build left incomplete; for a scope with no stored node
        (its first build failed), the marks carrying the identity's own id."""
        marks = tree.incomplete
        if scope.empty:
            column = LEVELS.index(scope.level)  # marks hold (contract, seat, project, reason)
            return sorted(n for n, mark in marks.items() if mark[column] == scope.identity.id)
        return sorted(n for n, (c, s, p, _) in marks.items() if scope.admits(c, s, p))

    def _new_result(self, identity: Identity, question: str, channel: str) -> QueryResult:
        return QueryResult(
            query_id=uuid.uuid4().hex,
            asked_at=datetime.now(UTC).replace(tzinfo=None),
            channel=channel,
            identity=identity.node_id,
            scope_root=identity.node_id,
            question=question,
            intent="",
            pairs=[],
            retrieved={"facet": [], "qa": [], "summary": []},
            context_ids=[],
            answer="",
            rationale="",
            citations=[],
            dropped_citations=[],
            sources=[],
            no_memory=False,
        )

    def _no_memory(self, result: QueryResult, scope: Scope) -> None:
        result.no_memory = True
        result.answer = NO_MEMORY_ANSWER.format(scope=scope.identity)
        if result.incomplete:  # a failed build is not an empty memory
            result.answer = f"No answer: {incomplete_memory(result.incomplete)}."
        result.rationale = "The permitted subtree holds no memory nodes; nothing was retrieved."

    def parse(self, question: str, llm: LLM | None = None) -> tuple[str, list[dict[str, str]]]:
        """LLM call 1: intent and `field: value` pairs (rules if the LLM parser is off/failed;
        a value the question does not state is dropped for the rules' pairs)."""
        if self.llm_parser:
            try:
                parsed = (llm or self.llm).run(
                    tasks.PARSE, {"question": question, "fields": FIELDS}, context="query parse"
                )
                pairs = [
                    {"field": p.field.strip(), "value": p.value.strip()}
                    for p in parsed.pairs
                    if p.field.strip()
                ]
                return parsed.intent, ground_pairs(question, pairs)[0]
            except LLMError:
                pass  # counted as a failed call; the rules still give a usable parse
        rules = parse_question(question)
        return rules["intent"], rules["pairs"]

    def _answer(
        self,
        result: QueryResult,
        memory: ScopedMemory,
        question: str,
        config: RetrievalConfig,
        llm: LLM,
    ) -> None:
        cost = result.cost
        t0 = time.perf_counter()
        result.intent, result.pairs = self.parse(question, llm)
        cost.parse_ms = (time.perf_counter() - t0) * 1000

        retrieved = retrieve(memory, self.embed, question, result.pairs, config, self.listings)
        cost.embed_ms = retrieved.embed_s * 1000
        cost.retrieval_ms = retrieved.search_s * 1000
        result.retrieved = retrieved.ids()
        context = build_context(retrieved, config)
        result.context = context
        result.context_ids = context_node_ids(context)
        if not result.context_ids:
            self._no_memory(result, memory.scope)
            return

        t0 = time.perf_counter()
        texts = [q["answer"] for q in context["qa"]] + [s["summary"] for s in context["summaries"]]
        self._recall_statements(texts, wait_s=0)  # a busy file is not waited for
        payload = {
            "question": question,
            "intent": result.intent,
            "pairs": result.pairs,
            "scope": {"level": memory.scope.level, "node_id": memory.scope.root_node_id},
            **context,
        }
        answer = llm.run(
            tasks.ANSWER,
            payload,
            context=f"answer for {result.identity}",
            choices={"citation": result.context_ids},
        )
        cost.answer_ms = (time.perf_counter() - t0) * 1000
        in_context = set(result.context_ids)
        # Which context node holds a cited document is asked only when a citation is no node's.
        documents = (
            context_documents(retrieved.nodes, result.context_ids)
            if not in_context.issuperset(answer.citation)
            else {}
        )
        cited = validate_citations(list(answer.citation), in_context, documents)
        result.answer = answer.answer
        result.rationale = answer.rationale
        result.dropped_citations = cited.dropped
        result.mapped_citations = cited.mapped
        if not answer.in_memory:  # the nodes it names are a hint, not support
            result.not_in_memory = True
            result.nearest = cited.kept
            return
        result.citations = cited.kept
        result.sources = sorted(
            {q["source"] for q in context["qa"] if q["node_id"] in cited.kept and q.get("source")}
            | {doc for doc in cited.mapped if doc in documents}
        )
        cited_items = [i for items in context.values() for i in items if i["node_id"] in cited.kept]
        result.ungrounded = ungrounded(
            answer.answer, question, cited_items, open_fields(result.pairs)
        )
        if len(retrieved.listed) < retrieved.listed_of:
            result.listing = {"nodes": len(retrieved.listed), "of": retrieved.listed_of}
            result.answer += partial_listing(result.listing)


_ENGINES: dict[tuple[Any, ...], QueryEngine] = {}
_ENGINES_LOCK = threading.Lock()


def ask(settings: Settings, identity: Identity | str, question: str, **kwargs: Any) -> QueryResult:
    """Python entry point: `ask(settings, "seat:c01-s02", "Where do I usually hire?")`."""
    if isinstance(identity, str):
        identity = Identity.parse(identity)
    key = (settings,)
    with _ENGINES_LOCK:
        engine = _ENGINES.get(key)
        if engine is None:
            engine = _ENGINES[key] = QueryEngine(settings)
    return engine.ask(identity, question, **kwargs)

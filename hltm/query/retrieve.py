"""The three retrievers (facet, QA, summary) and the answer context they assemble.

All three search one space holding nodes of every depth of the permitted subtree (collapsed-tree
retrieval), through `ScopedMemory` only, and each returns its own top-k nodes:

* **facet** — each parsed `field: value` pair is a small query (`"field: value"`, the same form
  the facets are embedded in); per node the `facet_per_node` nearest facets are averaged, then
  the node's score is averaged over the query's pairs (a node no pair reaches scores 0 for it);
  the top `k_facet` nodes contribute their facets of the asked fields. A question with no parsed
  field gives it no query: it then reads the question only when it is the one retriever on.
  A field asked without a value ("which roles…?") has no nearest facets: its facets are listed
  over the whole scope instead (`covering`): every project that states it, before any valued
  pair's hits, as many whole nodes as fit the context budget (`listed_within`); a listing that
  does not fit whole fills the context, and nothing is searched.
* **qa** — the question against the nodes' prepared questions (a leaf's include one per
  fact-bearing passage of its own texts, citing the document); the top `k_qa` nodes contribute
  their best-matching question–answer pairs.
* **summary** — the question against the one-sentence summaries; the top `k_summary` nodes
  contribute their long summary paragraphs.

QA and summary items are ranked in one pool (the question's nearest items of both kinds) by
reciprocal-rank fusion of their cosine rank and their BM25 rank within the pool, so a rare name
the question shares word for word counts beside meaning, and a node's score is its best item's.
The context takes whole nodes in that fused order (plus the facet retriever's own rank) while
their items fit `context_tokens` (o200k_base): the cut is by rank, never by a retriever's list
position. Ablations switch retrievers off (`retrievers`) or restrict depths
(`levels=("project",)`: leaf-only, no aggregation).

Cost: the question and every pair are embedded in one batch and searched in ONE Chroma call
filtered by the subtree only; hits are split by kind afterwards (exact: the m items of a kind
among the n nearest of all kinds are that kind's m nearest). A kind crowded out of those n (the
one-per-node summaries in a large contract, typically) is re-asked with a kind filter.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections import OrderedDict, defaultdict
from dataclasses import dataclass, field
from typing import Any

import bm25s
import numpy as np

from hltm.embeddings import CachedEmbedder
from hltm.llm.registry import payload_json
from hltm.memory.salience import terms
from hltm.query.boundary import Hit, NodeView, ScopedMemory
from hltm.query.snapshot import NodeRow, TreeIndex
from hltm.tokens import count_tokens

RETRIEVERS = ("facet", "qa", "summary")
# bm25s logs every index it builds at DEBUG; one is built per query.
logging.getLogger("bm25s").setLevel(logging.INFO)


@dataclass(frozen=True)
class RetrievalConfig:
    k_facet: int = 5
    k_qa: int = 8
    k_summary: int = 3
    context_tokens: int = 2400  # what the answer context may hold (o200k_base), cut by fused rank
    facet_per_node: int = 2  # nearest facets averaged per node and query pair
    qa_per_node: int = 2  # QA pairs a QA-hit node brings
    pool: int = 80  # nearest items (all kinds) fetched per query vector before grouping
    max_facets_per_node: int = 24  # facets a node brings when the question names no field
    # Projects an open field is listed over; a larger scope is answered by its seats' values.
    listed_projects: int = 100
    retrievers: tuple[str, ...] = RETRIEVERS
    levels: tuple[str, ...] | None = None  # None: every depth (collapsed tree)

    def __post_init__(self) -> None:
        unknown = set(self.retrievers) - set(RETRIEVERS)
        if unknown:
            raise ValueError(f"unknown retrievers {sorted(unknown)}; expected {RETRIEVERS}")

    def as_dict(self) -> dict[str, Any]:
        return {
            "k_facet": self.k_facet,
            "k_qa": self.k_qa,
            "k_summary": self.k_summary,
            "facet_per_node": self.facet_per_node,
            "context_tokens": self.context_tokens,
            "retrievers": list(self.retrievers),
            "levels": list(self.levels) if self.levels else "all",
        }


@dataclass
class Ranked:
    node_id: str
    level: str
    score: float
    items: list[int] = field(default_factory=list)  # indices of the node's matched items
    item_scores: list[float] = field(default_factory=list)


@dataclass
class Retrieved:
    facet: list[Ranked] = field(default_factory=list)
    qa: list[Ranked] = field(default_factory=list)
    summary: list[Ranked] = field(default_factory=list)
    nodes: dict[str, NodeView] = field(default_factory=dict)
    pairs: list[dict[str, str]] = field(default_factory=list)
    fused: dict[str, float] = field(default_factory=dict)  # node id → reciprocal-rank fusion
    listed: list[str] = field(default_factory=list)  # nodes listing the open fields' values
    listed_of: int = 0  # how many nodes of the scope state them (more than `listed`: in part)
    embed_s: float = 0.0
    search_s: float = 0.0

    def ids(self) -> dict[str, list[str]]:
        return {
            "facet": [r.node_id for r in self.facet],
            "qa": [r.node_id for r in self.qa],
            "summary": [r.node_id for r in self.summary],
        }

    @property
    def empty(self) -> bool:
        return not (self.facet or self.qa or self.summary)


class QueryEmbeddings:
    """Query vectors, with a least-recently-used memo by text (one embedder, so one model):
    serving sees the same questions and pairs (`location:`) again and again, and each embedding
    costs 8–60 ms."""

    def __init__(self, embedder: CachedEmbedder, memo_size: int = 4096) -> None:
        self.embedder = embedder
        self._memo: OrderedDict[str, np.ndarray] = OrderedDict()
        self._memo_size = memo_size
        self._lock = threading.Lock()

    @property
    def dim(self) -> int:
        return self.embedder.dim

    def clear(self) -> None:
        with self._lock:
            self._memo.clear()

    def _embed(self, texts: list[str]) -> list[np.ndarray]:
        return list(np.asarray(self.embedder.queries(texts), dtype=np.float32))

    def __call__(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        found: dict[str, np.ndarray] = {}
        with self._lock:
            for text in dict.fromkeys(texts):
                vector = self._memo.get(text)
                if vector is not None:
                    self._memo.move_to_end(text)
                    found[text] = vector
        missing = [t for t in dict.fromkeys(texts) if t not in found]
        if missing:
            fresh = dict(zip(missing, self._embed(missing), strict=True))
            found |= fresh
            with self._lock:
                for text, vector in fresh.items():
                    self._memo[text] = vector
                while len(self._memo) > self._memo_size:
                    self._memo.popitem(last=False)
        return np.stack([found[t] for t in texts])


def pair_text(pair: dict[str, str]) -> str:
    """A valued pair as the facets are embedded: `field: value`."""
    return f"{pair['field']}: {pair['value'].strip()}"


def _group_max(hits: list[Hit]) -> dict[str, list[Hit]]:
    by_node: dict[str, list[Hit]] = defaultdict(list)
    for hit in hits:
        by_node[hit.node_id].append(hit)
    for items in by_node.values():
        items.sort(key=lambda h: -h.score)
    return by_node


def _top(ranked: list[Ranked], k: int) -> list[Ranked]:
    return sorted(ranked, key=lambda r: (-r.score, r.node_id))[:k]


def _nodes(hits: list[Hit]) -> int:
    return len({h.node_id for h in hits})


RRF_K = 60  # reciprocal-rank fusion's damping constant (Cormack et al. 2009)


def _item_text(node: NodeView, hit: Hit) -> str | None:
    """The string a vector item embeds (None for an index the node version lacks)."""
    if hit.kind == "qa":
        return node.qa[hit.index]["question"] if hit.index < len(node.qa) else None
    if hit.kind == "facet":
        if hit.index >= len(node.facets):
            return None
        return f"{node.facets[hit.index]['field']}: {node.facets[hit.index]['value']}"
    return node.summary_short


@functools.lru_cache(maxsize=1 << 16)
def _item_terms(text: str) -> tuple[str, ...]:
    """An item's terms as BM25 reads them, split once per text (items recur across questions)."""
    return tuple(terms(text)) or ("",)


@functools.lru_cache(maxsize=4096)  # a question asked again of the same scope has the same pool
def _lexical_ranks(wanted: tuple[str, ...], texts: tuple[str, ...]) -> tuple[tuple[int, int], ...]:
    """(BM25 rank, item) of the items that share a term with the question, best first, BM25's
    term statistics taken over these items alone."""
    index = bm25s.BM25()
    index.index([list(_item_terms(text)) for text in texts], show_progress=False)
    order, scores = index.retrieve([list(wanted)], k=len(texts), show_progress=False)
    ranked = enumerate(zip(order[0], scores[0], strict=True))
    return tuple((rank, int(i)) for rank, (i, score) in ranked if score > 0)


def _fuse_lexical(question: str, hits: list[Hit], nodes: dict[str, NodeView]) -> list[Hit]:
    """The question's pool of items of every kind (the collapsed tree), re-scored by
    reciprocal-rank fusion of their cosine rank and their BM25 rank among the pool, best first:
    e5 misses a rare name or number a question shares word for word with a passage. Only the
    scope's own hits are read, so the lexical side adds no reach beyond the subtree."""
    texts = [
        (h, t) for h in sorted(hits, key=lambda h: -h.score)
        if h.node_id in nodes and (t := _item_text(nodes[h.node_id], h)) is not None
    ]  # fmt: skip
    if not texts:
        return []
    fused = [1.0 / (RRF_K + rank) for rank in range(len(texts))]
    wanted = tuple(terms(question))
    if wanted:
        for rank, i in _lexical_ranks(wanted, tuple(text for _, text in texts)):
            fused[i] += 1.0 / (RRF_K + rank)
    ranked = sorted(range(len(texts)), key=lambda i: (-fused[i], i))
    # Built directly: `dataclasses.replace` costs several times more, on 80 hits a question.
    return [
        Hit(h.node_id, h.level, h.kind, h.index, fused[i]) for i in ranked for h in (texts[i][0],)
    ]


def _fuse(collapsed: list[list[Ranked]], facet: list[Ranked]) -> dict[str, float]:
    """Each node's place in the context: its best item of the collapsed pool (already a fused
    rank), plus the reciprocal rank the facet retriever's own queries (the parsed pairs) give it."""
    fused: dict[str, float] = defaultdict(float)
    for ranking in collapsed:
        for ranked in ranking:
            fused[ranked.node_id] = max(fused[ranked.node_id], ranked.score)
    for rank, ranked in enumerate(_top(facet, len(facet))):
        fused[ranked.node_id] += 1.0 / (RRF_K + rank)
    return dict(fused)


def _search_all_kinds(
    memory: ScopedMemory, vectors: np.ndarray, wants: list[dict[str, int]], n: int
) -> list[dict[str, list[Hit]]]:
    """For each vector, its nearest items split by kind, from ONE subtree-filtered call; a kind
    left with fewer distinct nodes than `wants[i][kind]` is re-asked with a kind filter (one call
    per kind, for every vector it was crowded out of).

    The split is exact: among the n nearest items of all kinds, the m items of one kind are that
    kind's m nearest. Only when a kind is crowded out (and the subtree holds more than n items)
    does a second, kind-filtered call run.
    """
    mixed = memory.search(None, vectors, n)
    exhausted = memory.last_exhausted
    out = [
        {kind: [h for h in hits if h.kind == kind] for kind in wants[i]}
        for i, hits in enumerate(mixed)
    ]
    crowded: dict[str, list[int]] = defaultdict(list)  # kind → the vectors it was crowded out of
    for i, want in enumerate(wants):
        for kind, need in want.items():
            if not exhausted[i] and _nodes(out[i][kind]) < need:
                crowded[kind].append(i)
    for kind, rows in sorted(crowded.items()):  # one kind-filtered call for all its vectors
        for i, hits in zip(rows, memory.search(kind, vectors[rows], n), strict=True):
            out[i][kind] = hits
    return out


def open_fields(pairs: list[dict[str, str]]) -> list[str]:
    """The fields a question asks for without a value ("which roles…?": `title: ""`)."""
    fields = [p["field"] for p in pairs if p.get("field") and not p.get("value", "").strip()]
    return list(dict.fromkeys(fields))


def _path(node: NodeView) -> tuple[str, ...]:
    """A node's place below its contract: () for the contract, (seat,) or (seat, project)."""
    return tuple(part for part in (node.seat_id, node.project_id) if part)


def _stated_fields(
    level: str, project_id: str | None, facets: list[dict[str, Any]]
) -> dict[str, tuple[int, ...]]:
    """field → indices of the facets that state it (see `stating`)."""
    out: dict[str, list[int]] = defaultdict(list)
    for i, facet in enumerate(facets):
        record_only = set(facet.get("sources") or ()) <= {project_id}
        if not (facet.get("field") == "title" and level == "project" and record_only):
            out[facet.get("field") or ""].append(i)
    return {f: tuple(indices) for f, indices in out.items()}


def _of_fields(stated: dict[str, tuple[int, ...]], fields: list[str]) -> list[int]:
    """The facet indices of `_stated_fields` that state one of `fields`, in facet order."""
    return sorted(i for f in fields for i in stated.get(f, ()))


def stating(node: NodeView, fields: list[str]) -> list[int]:
    """Indices of the node's facets that state one of `fields`. A project's title counts only
    where a document or vacancy of it names it: the title its record gives ("Catering kitchen
    expansion") names the project, not a role."""
    return _of_fields(_stated_fields(node.level, node.project_id, node.facets), fields)


class ListingIndex:
    """Which facets of each node version state which field (`stating`), by (node id, version):
    a version is a content hash, so an entry never goes stale, and a node that changed is
    looked up under its new version. An open field over a contract of 10k projects is listed
    from these entries instead of decoding every node of it; `prepare` fills them for a whole
    tree (a server's warm-up), so only nodes built since are read on a question's path. One
    per query engine (one derived file); an entry holds facet indices only, and is read only
    for a request's permitted rows."""

    def __init__(self, max_entries: int = 250_000) -> None:
        self.max_entries = max_entries
        self._entries: OrderedDict[tuple[str, str], dict[str, tuple[int, ...]]] = OrderedDict()
        self._lock = threading.Lock()

    def _keep(self, found: dict[tuple[str, str], dict[str, tuple[int, ...]]]) -> None:
        with self._lock:
            self._entries.update(found)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)

    def prepare(self, tree: TreeIndex, wait_s: float | None = None, chunk: int = 2000) -> None:
        """Every stored node's entry (up to `max_entries`), read a chunk at a time."""
        rows = list(tree.snapshot(wait_s).rows.values())[: self.max_entries]
        for start in range(0, len(rows), chunk):
            part = rows[start : start + chunk]
            facets = tree.json_column(part, "facets", wait_s)
            self._keep(
                {
                    (r.node_id, r.version): _stated_fields(r.level, r.project_id, facets[r.node_id])
                    for r in part
                    if r.node_id in facets
                }
            )

    def stated(
        self, memory: ScopedMemory, rows: list[NodeRow], fields: list[str]
    ) -> dict[str, tuple[int, ...]]:
        """node id → indices of its facets stating one of `fields`, for these permitted rows
        that state any (a node the boundary reads as absent is left out)."""
        with self._lock:
            known = {r.node_id: self._entries.get((r.node_id, r.version)) for r in rows}
        missing = [n for n, entry in known.items() if entry is None]
        if missing:
            read = {
                (n, node.version): _stated_fields(node.level, node.project_id, node.facets)
                for n, node in memory.nodes(missing).items()
            }
            self._keep(read)
            known |= {n: entry for (n, _), entry in read.items()}
        out = {}
        for node_id, entry in known.items():
            if found := _of_fields(entry or {}, fields):
                out[node_id] = tuple(found)
        return out


@dataclass
class Listing:
    """The nodes answering the open fields over the scope (`covering`), and how many there are:
    more than the context holds is listed in part, and the answer says so."""

    nodes: list[Ranked] = field(default_factory=list)
    total: int = 0

    @property
    def partial(self) -> bool:
        return len(self.nodes) < self.total


def covering(
    memory: ScopedMemory, fields: list[str], limit: int, listings: ListingIndex | None = None
) -> list[Ranked]:
    """The nodes that answer open `fields` over the whole permitted subtree (no similarity, so
    nothing is missed): every project that states one of them. A scope of more than `limit`
    projects is answered instead by the shallowest node of each path that states them (a seat
    stating it speaks for its projects, a seat that does not is answered by its projects); the
    root answers only when nothing below it states the fields (a project's own scope).

    Only the nodes that can answer are looked up, by their `ListingIndex` entries (a node
    without one is read): the projects of a scope within `limit`, else the seats first and only
    the projects of a seat that states none of the fields. The list is kept with the tree's
    snapshot (like the permitted set), so a scope's listing is derived once per state of the
    tree, not per question: at 100k projects a contract's takes tens of milliseconds."""
    permitted = memory.permitted
    if permitted.snapshot is None:
        return _covering(memory, fields, limit, listings or ListingIndex())
    key = ("covering", permitted.scope, permitted.levels, tuple(fields), limit)
    found = permitted.snapshot.derived.get(key)
    if found is None:
        found = _covering(memory, fields, limit, listings or ListingIndex())
        permitted.snapshot.derived[key] = found
    return list(found)


def _covering(
    memory: ScopedMemory, fields: list[str], limit: int, listings: ListingIndex
) -> tuple[Ranked, ...]:
    rows = memory.permitted.rows
    root = memory.scope.root_node_id
    projects = [r for r in rows if r.level == "project"]
    states: dict[str, tuple[int, ...]] = {}

    def read(chosen: list[NodeRow]) -> None:
        states.update(listings.stated(memory, chosen, fields))

    if len(projects) <= limit:
        read(projects)
        if states:
            return tuple(Ranked(n, "project", 1.0, list(states[n])) for n in sorted(states))
    read([r for r in rows if r.level != "project"])
    by_id = memory.permitted.by_id
    # A seat below the root that states a field speaks for its projects, which are not read.
    speaking = {by_id[n].seat_id for n in states if n != root and by_id[n].level == "seat"}
    if len(projects) > limit:
        read([r for r in projects if r.seat_id not in speaking])
    below = [n for n in states if n != root] or list(states)
    chosen = [
        n for n in below if not (by_id[n].level == "project" and by_id[n].seat_id in speaking)
    ]
    chosen.sort(key=lambda n: (len(_path(by_id[n])), n))
    return tuple(Ranked(n, by_id[n].level, 1.0, list(states[n])) for n in chosen)


def _tokens(item: dict[str, Any]) -> int:
    """An item's tokens as the prompt serialises it (o200k_base)."""
    return _counted(tuple(item.items()))


@functools.lru_cache(maxsize=1 << 16)  # the same nodes' items recur across questions
def _counted(item: tuple[tuple[str, Any], ...]) -> int:
    return count_tokens(payload_json(dict(item)))


def listed_within(
    memory: ScopedMemory,
    whole: list[Ranked],
    fields: set[str],
    unvalued: list[str],
    budget: int,
    chunk: int = 16,
) -> Listing:
    """The head of a scope's listing (`covering`, in its order) whose facet items fit `budget`
    tokens (the first node always): a listing is the answer's own size, so only the nodes that
    can enter the context are read, a chunk at a time, and the rest are counted, not read."""
    out = Listing(total=len(whole))
    spent = 0
    for start in range(0, len(whole), chunk):
        part = whole[start : start + chunk]
        nodes = memory.nodes(r.node_id for r in part)
        for ranked in part:
            node = nodes.get(ranked.node_id)
            if node is None:  # removed since it was listed
                out.total -= 1
                continue
            cost = sum(map(_tokens, node_facets(node, ranked.items, fields, unvalued)))
            if out.nodes and spent + cost > budget:
                return out
            spent += cost
            out.nodes.append(ranked)
    return out


def retrieve(
    memory: ScopedMemory,
    embed: QueryEmbeddings,
    question: str,
    pairs: list[dict[str, str]],
    config: RetrievalConfig,
    listings: ListingIndex | None = None,
) -> Retrieved:
    """`listings`: the engine's `ListingIndex` (None: entries read for this call only)."""
    out = Retrieved(pairs=pairs)
    use = set(config.retrievers)
    # A field asked without a value is read from the whole scope (`covering`), not searched.
    valued = [p for p in pairs if p.get("field") and p.get("value", "").strip()]
    pair_queries = [pair_text(p) for p in valued] if "facet" in use else []
    unvalued = open_fields(pairs) if "facet" in use else []
    started = time.perf_counter()
    listing = Listing()
    if unvalued:
        fields = {p["field"] for p in pairs if p.get("field")}
        listing = listed_within(
            memory,
            covering(memory, unvalued, config.listed_projects, listings),
            fields,
            unvalued,
            config.context_tokens,
        )
        out.listed_of = listing.total
        if listing.partial:
            # The listing goes first and fills the budget: nothing a search finds could enter
            # the context, so the scope is not searched.
            out.facet = list(listing.nodes)
            return _fetched(out, memory, listing, started)
    listed_s = time.perf_counter() - started
    started = time.perf_counter()
    # Without a parsed field the facet retriever has no query of its own; it reads the question
    # only when no other retriever does (the question against "field: value" strings finds
    # nodes by their generic fields, and would crowd the fused ranking).
    facet_on_question = not pair_queries and not unvalued and not use & {"qa", "summary"}
    need_question = bool(use & {"qa", "summary"}) or facet_on_question
    ahead = memory.read_ahead(embed.dim)
    vectors = embed(([question] if need_question else []) + pair_queries)
    out.embed_s = time.perf_counter() - started

    started = time.perf_counter()
    if ahead is not None:
        ahead.result()
    k = {"facet": config.k_facet, "qa": config.k_qa, "summary": config.k_summary}
    wants: list[dict[str, int]] = []
    if need_question:
        kinds = use & {"qa", "summary"} | ({"facet"} if facet_on_question else set())
        wants.append({kind: k[kind] for kind in kinds & use})
    wants += [{"facet": config.k_facet} for _ in pair_queries]
    found = _search_all_kinds(memory, vectors, wants, config.pool)
    question_hits = found[0] if need_question else {}
    pair_hits = [f["facet"] for f in found[1 if need_question else 0 :]]

    facet_ranking: list[Ranked] = []
    collapsed: list[list[Ranked]] = []
    if "facet" in use:
        per_query = pair_hits or [question_hits.get("facet", [])]
        totals: dict[str, float] = defaultdict(float)
        matched: dict[str, list[Hit]] = defaultdict(list)
        levels: dict[str, str] = {}
        for hits in per_query:
            for node_id, items in _group_max(hits).items():
                chosen = items[: config.facet_per_node]
                totals[node_id] += sum(h.score for h in chosen) / len(chosen)
                matched[node_id] += chosen
                levels[node_id] = chosen[0].level
        n = max(1, len(per_query))
        ranked = [
            Ranked(nid, levels[nid], totals[nid] / n, [h.index for h in matched[nid]])
            for nid in totals
        ]
        if unvalued:
            # the nodes answering the open fields, one per branch of the scope, first
            whole = listing.nodes
            taken = {r.node_id for r in whole}
            ranked = whole + [r for r in ranked if r.node_id not in taken]
            out.facet = whole + _top(ranked[len(whole) :], config.k_facet)
        else:
            out.facet = _top(ranked, config.k_facet)
        facet_ranking = ranked
    pool = [h for kind in ("qa", "summary") for h in question_hits.get(kind, [])]
    by_kind: dict[str, list[Hit]] = defaultdict(list)
    for hit in _fuse_lexical(question, pool, memory.nodes({h.node_id for h in pool})):
        by_kind[hit.kind].append(hit)
    if "qa" in use:
        ranked = [
            Ranked(
                nid,
                items[0].level,
                items[0].score,
                [h.index for h in items[: config.qa_per_node]],
                [h.score for h in items[: config.qa_per_node]],
            )
            for nid, items in _group_max(by_kind["qa"]).items()
        ]
        collapsed.append(ranked)
        out.qa = _top(ranked, config.k_qa)
    if "summary" in use:
        ranked = [
            Ranked(nid, items[0].level, items[0].score, [items[0].index])
            for nid, items in _group_max(by_kind["summary"]).items()
        ]
        collapsed.append(ranked)
        out.summary = _top(ranked, config.k_summary)
    out.fused = _fuse(collapsed, facet_ranking)
    return _fetched(out, memory, listing, started, listed_s)


def _fetched(
    out: Retrieved, memory: ScopedMemory, listing: Listing, started: float, spent_s: float = 0.0
) -> Retrieved:
    """`out` with its nodes' contents, timed from `started` (plus `spent_s` before it)."""
    # The scope-wide listing answers the open fields: the part of it that fits the budget
    # (`listed_within`) is kept whole (`within_budget`).
    out.listed = [r.node_id for r in listing.nodes]
    wanted = {r.node_id for group in (out.facet, out.qa, out.summary) for r in group}
    out.nodes = memory.nodes(wanted)
    # A node removed between search and fetch is dropped from every list.
    out.facet = [r for r in out.facet if r.node_id in out.nodes]
    out.qa = [r for r in out.qa if r.node_id in out.nodes]
    out.summary = [r for r in out.summary if r.node_id in out.nodes]
    out.search_s = time.perf_counter() - started + spent_s
    return out


def _support(node: NodeView, facet: dict[str, Any]) -> int:
    """How many children state a parent's value (0 on projects, whose support is documents)."""
    return len(facet.get("support") or []) if node.level != "project" else 0


def within_budget(
    context: dict[str, list[dict]],
    fused: dict[str, float],
    budget: int,
    listed: frozenset[str] = frozenset(),
) -> dict[str, list[dict]]:
    """The context cut to whole nodes, best fused rank first, while their items fit in `budget`
    tokens (o200k_base, as the prompt serialises them); the best node always stays. The facets
    of `listed` nodes (an open field's values over the scope) are the answer itself: they are
    kept whole and paid for first."""

    def reserved(kind: str, item: dict) -> bool:
        return kind == "facets" and item["node_id"] in listed

    # Items are counted only while the count can still decide something: once the listing
    # alone is over the budget no other node is added, so the rest of it is not counted (a
    # contract's listing holds thousands of items).
    spent = 0
    by_node: dict[str, list[dict]] = defaultdict(list)
    for kind, items in context.items():
        for item in items:
            if not reserved(kind, item):
                by_node[item["node_id"]].append(item)
            elif spent <= budget:
                spent += _tokens(item)
    kept: set[str] = set()
    for node_id in sorted(by_node, key=lambda n: (-fused.get(n, 0.0), n)):
        if (kept or listed) and spent > budget:
            break
        cost = sum(map(_tokens, by_node[node_id]))
        if (kept or listed) and spent + cost > budget:
            break
        kept.add(node_id)
        spent += cost
    return {
        kind: [i for i in items if i["node_id"] in kept or reserved(kind, i)]
        for kind, items in context.items()
    }


def facet_item(node: NodeView, facet: dict[str, Any]) -> dict[str, Any]:
    """A facet as the answer's context holds it."""
    return {
        "node_id": node.node_id,
        "level": node.level,
        "label": node.label,
        "field": facet["field"],
        "value": facet["value"],
        "support": _support(node, facet),
    }


def node_facets(
    node: NodeView, stated: list[int] | None, fields: set[str], unvalued: list[str]
) -> list[dict[str, Any]]:
    """A node's context facets of the asked `fields`; of a field asked without a value
    (`unvalued`), only those stating it: `stated` (a listed node's, from `covering`), or found
    here when None."""
    own = set(stating(node, unvalued) if stated is None else stated)
    return [
        facet_item(node, f)
        for i, f in enumerate(node.facets)
        if f.get("field") in fields and (f["field"] not in unvalued or i in own)
    ]


def build_context(retrieved: Retrieved, config: RetrievalConfig) -> dict[str, list[dict]]:
    """The three result sets F_k(q), Q_k(q), S_k(q) as the answer step sees them, cut to the
    context budget by fused rank."""
    fields = {p["field"] for p in retrieved.pairs if p.get("field")}
    unvalued = open_fields(retrieved.pairs)
    listed = frozenset(retrieved.listed)
    facets: list[dict[str, Any]] = []
    for ranked in retrieved.facet:
        node = retrieved.nodes[ranked.node_id]
        if fields:
            # The listing alone answers the open fields: another node would count twice there.
            own = ranked.items if node.node_id in listed else [] if listed else None
            facets += node_facets(node, own, fields, unvalued)
        else:
            order = list(dict.fromkeys(ranked.items)) + list(range(len(node.facets)))
            idx = [i for i in dict.fromkeys(order) if i < len(node.facets)]
            facets += [facet_item(node, node.facets[i]) for i in idx[: config.max_facets_per_node]]
    qa: list[dict[str, Any]] = []
    for ranked in retrieved.qa:
        node = retrieved.nodes[ranked.node_id]
        for index, score in zip(ranked.items, ranked.item_scores, strict=True):
            if index >= len(node.qa):
                continue
            item = node.qa[index]
            qa.append(
                {
                    "node_id": node.node_id,
                    "level": node.level,
                    "label": node.label,
                    "question": item["question"],
                    "answer": item["answer"],
                    "source": item.get("source", ""),
                    "score": round(score, 4),
                }
            )
    summaries = []
    for ranked in retrieved.summary:
        node = retrieved.nodes[ranked.node_id]
        summaries.append(
            {
                "node_id": node.node_id,
                "level": node.level,
                "label": node.label,
                "summary": node.summary_long or node.summary_short,
            }
        )
    context = {"facets": facets, "qa": qa, "summaries": summaries}
    return within_budget(context, retrieved.fused, config.context_tokens, listed)

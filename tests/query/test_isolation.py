"""Identity-scoped retrieval on a really built memory tree: the subtree is a hard filter at every
level, foreign citations are dropped, the leakage test passes for HLTM and fails for unfiltered
RAG, stale node versions are never read, and every query is logged with its cost."""

from __future__ import annotations

import json
from typing import Any

import pytest

from hltm.evaluation.memory.baselines import Baselines, RawCorpus
from hltm.evaluation.memory.leakage import leakage_questions, run_leakage
from hltm.llm import LLM, DeterministicBackend, Task
from hltm.memory.store import memory_collection_name
from hltm.query.boundary import ScopedMemory
from hltm.query.chroma_subtree import ContractCollection
from hltm.query.engine import QueryEngine
from hltm.query.log import read_query_log
from hltm.query.scope import Identity, ScopeError, resolve_scope
from hltm.query.subtree_vectors import SubtreeVectors
from hltm.warehouse import connect
from tests.support.query import BuiltWorld, built_world, engine  # noqa: F401

QUESTIONS = (
    "Where do I usually hire?",
    "Which projects are for a solution architect?",
    "What salary is offered for the Senior Solutions Architect (Mobile App) role?",
    "Which roles does our organisation usually hire for?",
)


@pytest.fixture(scope="module")
def corpus(built_world: BuiltWorld) -> RawCorpus:  # noqa: F811
    return RawCorpus.load(built_world.settings.sources_db)


def _entities(result: Any) -> set[str]:
    ids = set(result.citations) | set(result.context_ids)
    for group in result.retrieved.values():
        ids |= set(group)
    return ids


def test_every_identity_reads_only_its_own_subtree(
    built_world: BuiltWorld,  # noqa: F811
    engine: QueryEngine,  # noqa: F811
    corpus: RawCorpus,
) -> None:
    for identity in built_world.identities():
        for question in QUESTIONS[:2] if identity.level == "project" else QUESTIONS:
            result = engine.ask(identity, question, log=False)
            seen = _entities(result)
            assert seen, f"{identity} got nothing for {question!r}"
            foreign = [n for n in seen if not corpus.node_in_scope(identity, n)]
            assert not foreign, f"{identity} saw {foreign} for {question!r}"
            assert result.cost.llm_calls <= 2


def test_a_project_identity_never_sees_a_sibling_project(
    built_world: BuiltWorld,  # noqa: F811
    engine: QueryEngine,  # noqa: F811
) -> None:
    pid = built_world.projects()[0]
    seat = built_world.project(pid)["seat_id"]
    siblings = [
        p for p in built_world.projects() if p != pid and built_world.project(p)["seat_id"] == seat
    ]
    assert siblings
    for sibling in siblings:
        title = built_world.project(sibling)["title"]
        for question in (
            f"Which projects are hiring a {title}?",
            f"What salary is offered for the {title} role?",
        ):
            result = engine.ask(Identity("project", pid), question, log=False)
            assert _entities(result) == {f"project:{pid}"}, question


def test_the_boundary_reads_nothing_outside_the_scope(
    built_world: BuiltWorld,  # noqa: F811
    engine: QueryEngine,  # noqa: F811
    corpus: RawCorpus,
) -> None:
    settings = built_world.settings
    seat = built_world.seats()[0]
    others = [
        f"project:{p}" for p in built_world.projects() if built_world.project(p)["seat_id"] != seat
    ]
    with connect(settings.derived_db) as con:
        scope = resolve_scope(con, Identity("seat", seat))
        memory = ScopedMemory(scope, con, engine.vectors)
        # Fetch by id: foreign ids (a planted citation, a guessed id) read as absent.
        assert memory.nodes(others + [f"contract:{scope.contract_id}"]) == {}
        assert memory.versions(others) == {}
        own = memory.nodes([f"seat:{seat}"])
        assert list(own) == [f"seat:{seat}"]
        # Search: every hit of every kind lies in the subtree (the check raises otherwise).
        vector = engine.embed(["location: Berlin"])
        for kind in ("facet", "qa", "summary"):
            (hits,) = memory.search(kind, vector, 500)
            assert hits and all(
                corpus.node_in_scope(Identity("seat", seat), h.node_id) for h in hits
            )
        # The second wall: only the seat's own contract collection is ever opened.
        assert memory.collection is not None
        assert memory.collection.name == memory_collection_name(str(scope.contract_id))


class PlantingBackend(DeterministicBackend):
    """The offline backend, except that answers cite extra ids the context never held."""

    def __init__(self, planted: list[str]) -> None:
        self.planted = planted

    def complete(self, task: Task[Any], messages: list[dict[str, str]], model: str) -> str:
        raw = super().complete(task, messages, model)
        if task.name != "answer":
            return raw
        data = json.loads(raw)
        data["citation"] = data["citation"] + self.planted
        return json.dumps(data)


def test_a_planted_foreign_citation_is_dropped_and_counted(
    built_world: BuiltWorld,  # noqa: F811
    engine: QueryEngine,  # noqa: F811
) -> None:
    seat = built_world.seats()[0]
    foreign_seat = built_world.seats()[-1]
    foreign_project = next(
        p for p in built_world.projects() if built_world.project(p)["seat_id"] != seat
    )
    planted = [f"project:{foreign_project}", f"seat:{foreign_seat}", "project:does-not-exist"]
    planting = QueryEngine(
        built_world.settings,
        llm=LLM(backend=PlantingBackend(planted), model="planting"),
        embedder=engine.embedder,
        vectors=engine.vectors,
    )
    result = planting.ask(Identity("seat", seat), "Where do I usually hire?")
    assert result.dropped_citations == planted
    assert result.citations and not set(planted) & set(result.citations)
    assert all(c in result.context_ids for c in result.citations)
    logged = next(
        r
        for r in read_query_log(built_world.settings.derived_db)
        if r["query_id"] == result.query_id
    )
    assert logged["dropped_citations"] == planted
    assert logged["citations"] == result.citations


def test_leakage_is_zero_at_every_level_while_unfiltered_rag_leaks(
    built_world: BuiltWorld,  # noqa: F811
    engine: QueryEngine,  # noqa: F811
    corpus: RawCorpus,
) -> None:
    questions = leakage_questions(built_world.ground_truth, corpus, per_identity=2)
    assert {q.identity.level for q in questions} == {"contract", "seat", "project"}
    # Every question names another owner's project or recruiter.
    assert all(not corpus.node_in_scope(q.identity, q.names) for q in questions)
    report = run_leakage(engine, Baselines(engine, corpus), corpus, questions)
    for level in ("contract", "seat", "project", "all"):
        ours = report.get("HLTM (subtree filter)", level)
        assert ours.queries > 0
        assert (ours.query_wise, ours.entity_wise) == (0.0, 0.0), level
    theirs = report.get("RAG, unfiltered", "all")
    assert theirs.query_wise > 0.5 and theirs.entity_wise > 0.2
    print("\n" + report.table())


def test_no_memory_for_an_unknown_or_empty_scope_and_no_widening(
    engine: QueryEngine,  # noqa: F811
    built_world: BuiltWorld,  # noqa: F811
) -> None:
    result = engine.ask(Identity("seat", "no-such-seat"), "Where do I usually hire?", log=False)
    assert result.no_memory and result.citations == [] and result.cost.llm_calls == 0
    assert "No memory for this scope" in result.answer
    seat, other = built_world.seats()[0], built_world.seats()[1]
    own_project = next(
        p for p in built_world.projects() if built_world.project(p)["seat_id"] == seat
    )
    narrowed = engine.ask(
        Identity("project", own_project),
        "What work mode?",
        within=Identity("seat", seat),
        log=False,
    )
    assert narrowed.scope_root == f"project:{own_project}" and narrowed.citations
    for target in (
        Identity("seat", other),
        Identity("contract", built_world.contracts()[0]),
        Identity("project", "no-such-project"),
    ):
        with pytest.raises(ScopeError):
            engine.ask(target, "Where do I usually hire?", within=Identity("seat", seat))


def test_stale_node_versions_are_never_read(
    built_world: BuiltWorld,  # noqa: F811
    engine: QueryEngine,  # noqa: F811
) -> None:
    """Mid-replacement a node's items may be of another version than its row: they are skipped."""
    seat = built_world.seats()[0]
    pid = next(p for p in built_world.projects() if built_world.project(p)["seat_id"] == seat)
    node = f"project:{pid}"
    db = built_world.settings.derived_db
    with connect(db) as con:
        (version,) = con.execute(
            "SELECT version FROM memory_nodes WHERE node_id = ?", [node]
        ).fetchone()
        con.execute("UPDATE memory_nodes SET version = 'next' WHERE node_id = ?", [node])
    try:
        title = built_world.project(pid)["title"]
        result = engine.ask(
            Identity("seat", seat), f"Which projects are hiring a {title}?", log=False
        )
        assert node not in _entities(result)
    finally:
        with connect(db) as con:
            con.execute("UPDATE memory_nodes SET version = ? WHERE node_id = ?", [version, node])
    result = engine.ask(Identity("seat", seat), f"Which projects are hiring a {title}?", log=False)
    assert node in _entities(result)


def test_an_item_missing_from_the_index_falls_back_to_the_subtree_filter(
    built_world: BuiltWorld,  # noqa: F811
    engine: QueryEngine,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A seat is searched exactly over its items' vectors, read from Chroma by id, or (past the
    exact search's size) by Chroma over those ids. One id the index lacks (lost, or being
    rewritten) makes both refuse, and the same search runs by the subtree `where` instead."""
    seat = built_world.seats()[0]
    question = "Where do I usually hire?"
    refused: list[bool] = []
    by_ids = ContractCollection.nearest_of

    def spy(self: ContractCollection, *args: Any) -> Any:
        result = by_ids(self, *args)
        refused.append(result is None)
        return result

    monkeypatch.setattr(ContractCollection, "nearest_of", spy)
    monkeypatch.setattr(engine, "subtree_vectors", SubtreeVectors(max_scope_items=0))
    assert engine.ask(Identity("seat", seat), question, log=False).citations
    assert refused and not any(refused)  # searched by ids while the index is whole
    scope = engine.scope_for(Identity("seat", seat))
    exact = SubtreeVectors()
    vector = engine.embed([question])

    def search() -> tuple[list[Any], ScopedMemory]:
        memory = ScopedMemory(scope, engine.tree, engine.vectors, exact=exact)
        (hits,) = memory.search(None, vector, 80)
        return hits, memory

    whole, memory = search()
    assert memory.stats.exact_searches == 1 and memory.stats.chroma_queries == 0 and len(exact)
    collection = engine.vectors.existing(memory_collection_name(str(scope.contract_id)))
    assert collection is not None
    (victim,) = collection.get(where={"seat_id": seat}, limit=1, include=[])["ids"]
    kept = collection.get(ids=[victim], include=["embeddings", "metadatas", "documents"])
    collection.delete(ids=[victim])
    try:
        refused.clear()
        after = engine.ask(Identity("seat", seat), question, log=False)
        assert refused[0] and after.status == "answered" and after.citations
        assert all(c.startswith(("seat:", "project:")) for c in after.citations)
        exact.clear()
        hits, memory = search()  # the exact read is refused too: Chroma searches
        assert memory.stats.exact_searches == 0 and memory.stats.chroma_queries == 2
        assert hits and not len(exact)
    finally:
        collection.add(
            ids=kept["ids"],
            embeddings=kept["embeddings"],
            metadatas=kept["metadatas"],
            documents=kept["documents"],
        )


def test_exact_search_holds_only_the_scope_and_matches_chroma(
    built_world: BuiltWorld,  # noqa: F811
    engine: QueryEngine,  # noqa: F811
    corpus: RawCorpus,
) -> None:
    """The exact search's cached matrix holds the permitted subtree's items and nothing else (a
    sibling seat asked next gets its own), and ranks them as Chroma does."""
    exact = SubtreeVectors()
    vector = engine.embed(["location: Berlin", "Which roles do I usually hire for?"])
    seats = built_world.seats()[:2]
    pid = next(p for p in built_world.projects() if built_world.project(p)["seat_id"] == seats[1])
    for identity in [Identity("seat", s) for s in seats] + [Identity("project", pid)]:
        scope = engine.scope_for(identity)
        memory = ScopedMemory(scope, engine.tree, engine.vectors, exact=exact)
        found = memory.search(None, vector, 500)
        assert memory.stats.exact_searches == 1 and memory.stats.chroma_queries == 0
        chroma = ScopedMemory(scope, engine.tree, engine.vectors).search(None, vector, 500)
        for mine, theirs in zip(found, chroma, strict=True):
            assert mine and all(corpus.node_in_scope(identity, h.node_id) for h in mine)
            assert {(h.node_id, h.kind, h.index) for h in mine} == {
                (h.node_id, h.kind, h.index) for h in theirs
            }
            # Chroma computes its float32 distances its own way: equal to a few ulps, not bits.
            assert [h.score for h in mine] == pytest.approx([h.score for h in theirs], abs=1e-5)
    cached = {node for node, _ in exact.node_versions()}
    assert (
        all(any(corpus.node_in_scope(Identity("seat", s), n) for s in seats) for n in cached)
        and f"seat:{seats[0]}" in cached
        and f"seat:{seats[1]}" in cached
    )


def test_a_scope_read_ahead_holds_its_own_nodes_and_the_search_reads_nothing_more(
    built_world: BuiltWorld,  # noqa: F811
    engine: QueryEngine,  # noqa: F811
    corpus: RawCorpus,
) -> None:
    """What a question reads beside its embedding is its own scope's vectors, all of them, and
    its search then reads nothing from Chroma; a scope too large for the exact search, or one
    already cached, reads nothing ahead."""
    exact = SubtreeVectors()
    identity = Identity("seat", built_world.seats()[0])
    scope = engine.scope_for(identity)
    memory = ScopedMemory(scope, engine.tree, engine.vectors, exact=exact)
    ahead = memory.read_ahead(engine.embed.dim)
    assert ahead is not None
    ahead.result()
    cached = {node for node, _ in exact.node_versions()}
    assert cached == set(memory.node_ids())
    assert all(corpus.node_in_scope(identity, n) for n in cached)

    again = ScopedMemory(scope, engine.tree, engine.vectors, exact=exact)
    assert again.read_ahead(engine.embed.dim) is None
    assert again.collection is not None

    def no_read(*_args: object) -> None:
        raise AssertionError("the search read from Chroma after the read ahead")

    again.collection.embeddings = no_read  # type: ignore[method-assign]
    (hits,) = again.search(None, engine.embed(["Where do I usually hire?"]), 50)
    assert hits and again.stats.exact_searches == 1 and again.stats.chroma_queries == 0

    contract = engine.scope_for(Identity("contract", built_world.contracts()[0]))
    small = SubtreeVectors(max_scope_items=1)
    large = ScopedMemory(contract, engine.tree, engine.vectors, exact=small)
    assert large.read_ahead(engine.embed.dim) is None and len(small) == 0


def test_a_large_contract_searches_its_summaries_exactly(
    built_world: BuiltWorld,  # noqa: F811
    engine: QueryEngine,  # noqa: F811
    corpus: RawCorpus,
) -> None:
    """A contract too large for the exact search of every item still has its summaries (one a
    node) searched exactly, with Chroma's kind-filtered ranking, and keeps only those."""
    identity = Identity("contract", built_world.contracts()[0])
    scope = engine.scope_for(identity)
    vector = engine.embed(["Which roles do I usually hire for?"])
    tree = engine.tree.snapshot().rows.values()
    nodes = {r.node_id for r in tree if r.contract_id == identity.id}
    assert all(corpus.node_in_scope(identity, n) for n in nodes)
    exact = SubtreeVectors(max_scope_items=len(nodes))  # below the contract's items
    for _ in range(2):  # the second search reuses the stacked summaries
        memory = ScopedMemory(scope, engine.tree, engine.vectors, exact=exact)
        (mine,) = memory.search("summary", vector, 20)
        assert memory.stats.exact_searches == 1 and memory.stats.chroma_queries == 0
    chroma = ScopedMemory(scope, engine.tree, engine.vectors)
    (theirs,) = chroma.search("summary", vector, 20)
    assert chroma.stats.chroma_queries == 1
    assert [(h.node_id, h.kind) for h in mine] == [(h.node_id, h.kind) for h in theirs]
    assert [h.score for h in mine] == pytest.approx([h.score for h in theirs], abs=1e-5)
    assert {node for node, _ in exact.node_versions()} == nodes
    assert exact.total_items() == len(nodes)  # the summaries, not every item


def test_a_deleted_node_leaves_the_exact_search_cache(
    built_world: BuiltWorld,  # noqa: F811
    engine: QueryEngine,  # noqa: F811
) -> None:
    """Deleting a node from the tree drops its vectors from the cache on the next query, and
    nothing of it is found; put back, it is found again."""
    seat = built_world.seats()[2]
    pid = next(p for p in built_world.projects() if built_world.project(p)["seat_id"] == seat)
    node = f"project:{pid}"
    title = built_world.project(pid)["title"]
    question = f"Which projects are hiring a {title}?"
    assert node in _entities(engine.ask(Identity("seat", seat), question, log=False))
    assert node in {n for n, _ in engine.subtree_vectors.node_versions()}
    db = built_world.settings.derived_db
    with connect(db) as con:
        row = con.execute("SELECT * FROM memory_nodes WHERE node_id = ?", [node]).fetchone()
        con.execute("DELETE FROM memory_nodes WHERE node_id = ?", [node])
    try:
        result = engine.ask(Identity("seat", seat), question, log=False)
        assert node not in _entities(result)
        assert node not in {n for n, _ in engine.subtree_vectors.node_versions()}
    finally:
        with connect(db) as con:
            con.execute("INSERT INTO memory_nodes VALUES (" + ", ".join("?" * len(row)) + ")", row)
    assert node in _entities(engine.ask(Identity("seat", seat), question, log=False))


def test_queries_are_logged_with_their_cost(
    built_world: BuiltWorld,  # noqa: F811
    engine: QueryEngine,  # noqa: F811
) -> None:
    seat = built_world.seats()[1]
    result = engine.ask(
        Identity("seat", seat), "Which seniority level do I usually hire?", channel="cli"
    )
    cost = result.cost
    assert cost.llm_calls == 2 and cost.prompt_tokens > 500 and cost.completion_tokens > 5
    assert cost.total_ms >= cost.embed_ms + cost.retrieval_ms
    row = next(
        r
        for r in read_query_log(built_world.settings.derived_db)
        if r["query_id"] == result.query_id
    )
    assert (row["identity_level"], row["identity_id"], row["channel"]) == ("seat", seat, "cli")
    assert row["question"] == "Which seniority level do I usually hire?"
    assert row["pairs"] == [{"field": "seniority", "value": ""}]
    assert set(row["retrieved"]) == {"facet", "qa", "summary"} and row["retrieved"]["qa"]
    assert row["answer"] == result.answer and row["citations"] == result.citations
    assert row["llm_calls"] == 2 and row["prompt_tokens"] == cost.prompt_tokens
    assert row["prompt_versions"]["answer"] == "answer-3"


def test_a_request_reads_the_tree_once_and_derives_its_permitted_set_once(
    built_world: BuiltWorld,  # noqa: F811
    engine: QueryEngine,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The scope, the build's incomplete marks and the permitted set of one request come from
    one state of the tree, and the permitted set is derived once: the depth check, the searches
    of every kind and the fetches by id all read that set, none derives it again."""
    from hltm.query.permitted import Permitted
    from hltm.query.retrieve import RetrievalConfig

    tree, derived = type(engine.tree), []
    snapshots: list[int] = []
    read_tree, derive = tree.snapshot, Permitted.of

    def counted_snapshot(self: Any, *args: Any, **kwargs: Any) -> Any:
        snapshots.append(1)
        return read_tree(self, *args, **kwargs)

    def counted_derive(*args: Any, **kwargs: Any) -> Any:
        derived.append(1)
        return derive(*args, **kwargs)

    monkeypatch.setattr(tree, "snapshot", counted_snapshot)
    monkeypatch.setattr(Permitted, "of", counted_derive)
    config = RetrievalConfig(levels=("seat", "project"))
    seat = Identity("seat", built_world.seats()[0])
    result = engine.ask(seat, "Where do I usually hire?", config=config, log=False)
    assert result.citations and len(snapshots) == 1 and len(derived) == 1

"""A field asked without a value ("which roles do we usually hire for?") is answered from every
branch of the caller's scope, on a really built memory tree: no seat's roles are missed, and
nothing outside the scope is read or cited."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from hltm.evaluation.memory.baselines import RawCorpus
from hltm.query.boundary import ScopedMemory
from hltm.query.engine import QueryEngine
from hltm.query.retrieve import ListingIndex, RetrievalConfig, covering, stating
from hltm.query.scope import Identity, resolve_scope
from hltm.query.snapshot import NODE_COLUMNS, NodeView, node_view
from hltm.warehouse import connect
from tests.support.query import BuiltWorld, built_world, engine  # noqa: F401


def _stored_roles(world: BuiltWorld, contract_id: str) -> dict[str, dict[str, set[str]]]:
    """seat id → {node id → title values} of the seat and its projects, as stored."""
    with connect(world.settings.derived_db) as con:
        rows = con.execute(
            f"SELECT {NODE_COLUMNS} FROM memory_nodes WHERE contract_id = ?", [contract_id]
        ).fetchall()
    roles: dict[str, dict[str, set[str]]] = defaultdict(dict)
    for node in map(node_view, rows):
        titles = {f["value"] for f in node.facets if f["field"] == "title"}
        if node.seat_id and titles:
            roles[node.seat_id][node.node_id] = titles
    return roles


def _names_any(answer: str, values: set[str]) -> bool:
    return any(value.casefold() in answer.casefold() for value in values)


def _count_reads(memory: ScopedMemory) -> list[str]:
    """The node ids `memory.nodes` is asked for from now on, in order."""
    read: list[str] = []
    fetch = memory.nodes

    def counted(node_ids: Iterable[str]) -> dict[str, NodeView]:
        read.extend(node_ids := list(node_ids))
        return fetch(node_ids)

    memory.nodes = counted  # type: ignore[method-assign]
    return read


def test_a_contract_asking_which_roles_hears_every_seat(
    built_world: BuiltWorld,  # noqa: F811
    engine: QueryEngine,  # noqa: F811
) -> None:
    contract = built_world.contracts()[0]
    roles = _stored_roles(built_world, contract)
    assert len(roles) >= 2, "the sample contract should hire for several seats"
    result = engine.ask(
        Identity("contract", contract), "Which roles do we usually hire for?", log=False
    )
    assert result.pairs == [{"field": "title", "value": ""}]
    corpus = RawCorpus.load(built_world.settings.sources_db)
    assert all(corpus.node_in_scope(Identity("contract", contract), n) for n in result.citations)
    for seat, nodes in sorted(roles.items()):
        assert _names_any(result.answer, set().union(*nodes.values())), (seat, result.answer)
        assert set(result.citations) & set(nodes), (seat, result.citations)


def test_a_seat_asking_which_roles_hears_only_its_own_projects(
    built_world: BuiltWorld,  # noqa: F811
    engine: QueryEngine,  # noqa: F811
) -> None:
    seat = built_world.seats()[0]
    identity = Identity("seat", seat)
    own = _stored_roles(built_world, built_world.ground_truth["seats"][seat]["contract_id"])[seat]
    result = engine.ask(identity, "Which roles do I usually hire for?", log=False)
    corpus = RawCorpus.load(built_world.settings.sources_db)
    seen = set(result.citations) | set(result.context_ids)
    seen |= {n for group in result.retrieved.values() for n in group}
    assert seen and all(corpus.node_in_scope(identity, n) for n in seen), seen
    assert result.citations and set(result.citations) <= set(own), result.citations
    assert _names_any(result.answer, set().union(*own.values())), result.answer
    # The whole-scope read is the permitted set, the same through a connection as the index.
    with connect(built_world.settings.derived_db) as con:
        through_sql = ScopedMemory(resolve_scope(con, identity), con, None).node_ids()
    assert through_sql == engine._memory(engine.scope_for(identity)).node_ids()
    assert through_sql and all(corpus.node_in_scope(identity, n) for n in through_sql)


def test_a_scope_over_the_listing_limit_is_listed_by_its_seats_without_reading_their_projects(
    built_world: BuiltWorld,  # noqa: F811
    engine: QueryEngine,  # noqa: F811
) -> None:
    memory = engine._memory(engine.scope_for(Identity("contract", built_world.contracts()[0])))
    every = memory.nodes(memory.node_ids())
    read = _count_reads(memory)
    listed = covering(memory, ["title"], limit=1)
    # By definition: the shallowest stating node of each path below the contract.
    states = {n: stating(node, ["title"]) for n, node in every.items() if stating(node, ["title"])}
    speaking = {every[n].seat_id for n in states if every[n].level == "seat"}
    expected = [
        n
        for n in states
        if every[n].level != "contract"
        and not (every[n].level == "project" and every[n].seat_id in speaking)
    ]
    assert speaking and [r.node_id for r in listed] == sorted(
        expected, key=lambda n: (every[n].level != "seat", n)
    )
    assert [r.items for r in listed] == [states[r.node_id] for r in listed]
    # The projects of a seat that states the field are never read.
    assert not [n for n in read if every[n].level == "project" and every[n].seat_id in speaking]


def test_a_listing_over_the_context_budget_lists_what_fits_reads_no_more_and_says_so(
    built_world: BuiltWorld,  # noqa: F811
    engine: QueryEngine,  # noqa: F811
) -> None:
    identity = Identity("contract", built_world.contracts()[0])
    question = "Which roles do we usually hire for?"
    whole = engine.ask(identity, question, log=False)
    assert not whole.listing and "This lists" not in whole.answer  # it fits: listed whole
    memory = engine._memory(engine.scope_for(identity))
    stating_nodes = covering(memory, ["title"], RetrievalConfig().listed_projects)
    search = memory.search
    read = _count_reads(memory)
    memory.search = None  # type: ignore[assignment,method-assign]  # a search would fail
    engine._memory = lambda *_args: memory  # type: ignore[method-assign]
    try:
        result = engine.ask(identity, question, config=RetrievalConfig(context_tokens=60))
    finally:
        del engine._memory
        memory.search = search  # type: ignore[method-assign]
    listed = result.context_ids
    assert result.listing == {"nodes": len(listed), "of": len(stating_nodes)}
    assert 1 <= len(listed) < len(stating_nodes)
    assert listed == [r.node_id for r in stating_nodes[: len(listed)]]  # in the listing's order
    assert f"This lists {len(listed)} of the {len(stating_nodes)} seats and projects" in (
        result.answer
    )
    # Only the head of the listing was read, one chunk of it at most.
    assert set(read) <= {r.node_id for r in stating_nodes[:16]}, read


def test_the_listing_index_reads_a_node_version_once(
    built_world: BuiltWorld,  # noqa: F811
    engine: QueryEngine,  # noqa: F811
) -> None:
    memory = engine._memory(engine.scope_for(Identity("contract", built_world.contracts()[0])))
    fetch = memory.nodes
    read = _count_reads(memory)
    rows = memory.permitted.rows
    every = fetch(r.node_id for r in rows)
    expected = {n: tuple(stating(v, ["title"])) for n, v in every.items() if stating(v, ["title"])}
    listings = ListingIndex()
    assert listings.stated(memory, rows, ["title"]) == expected
    assert sorted(read) == sorted(every)
    read.clear()
    assert listings.stated(memory, rows, ["title"]) == expected and not read
    prepared = ListingIndex()
    prepared.prepare(engine.tree)  # a server's warm-up: no question reads a node for it
    assert prepared.stated(memory, rows, ["title"]) == expected and not read

"""Query path pieces that need no memory: identities and scope filters, parsing, the offline
composer, citation validation and the metrics."""

from __future__ import annotations

import pytest

from hltm.evaluation.memory.metrics import bleu1, set_prf, token_f1
from hltm.query.engine import validate_citations
from hltm.query.offline.compose import answer as compose
from hltm.query.parse import parse_question
from hltm.query.scope import Identity, Scope, ScopeError


def test_identity_parsing_and_node_ids():
    assert Identity.parse("seat:c01-s02") == Identity("seat", "c01-s02")
    assert Identity.parse("seat_urn: c01-s02").node_id == "seat:c01-s02"
    assert Identity.parse("project=p1") == Identity("project", "p1")
    for bad in ("c01-s02", "team:x", "seat:"):
        with pytest.raises(ScopeError):
            Identity.parse(bad)


def test_scope_filters_are_the_subtree_and_nothing_wider():
    seat = Scope(Identity("seat", "s1"), "c1", "s1")
    # Inside the contract's own collection the narrowest id is the filter.
    assert seat.chroma_where(kind="qa") == {"$and": [{"seat_id": "s1"}, {"kind": "qa"}]}
    assert seat.chroma_where() == {"seat_id": "s1"}
    assert seat.sql_predicate("m") == ("(m.contract_id = ? AND m.seat_id = ?)", ["c1", "s1"])
    assert seat.admits("c1", "s1", "p1") and seat.admits("c1", "s1", None)
    assert not seat.admits("c1", "", None)  # its contract node is above it
    assert not seat.admits("c1", "s2", "p9") and not seat.admits("c2", "s1", "p1")

    project = Scope(Identity("project", "p1"), "c1", "s1", "p1")
    assert project.admits("c1", "s1", "p1")
    assert not project.admits("c1", "s1", None)  # its seat
    assert not project.admits("c1", "s1", "p2")  # a sibling project
    assert project.chroma_where(kind="facet", level=["project"]) == {
        "$and": [{"project_id": "p1"}, {"kind": "facet"}, {"level": "project"}]
    }

    contract = Scope(Identity("contract", "c1"), "c1")
    # A contract's subtree is its own collection: no clause (one matching every item is slow).
    assert contract.chroma_where() is None
    assert contract.chroma_where(kind="qa") == {"kind": "qa"}
    assert contract.contains(seat) and contract.contains(project) and seat.contains(project)
    assert not seat.contains(contract) and not project.contains(seat)
    assert not seat.contains(Scope(Identity("seat", "s2"), "c1", "s2"))

    empty = Scope(Identity("seat", "nobody"), None)
    assert empty.empty and not empty.admits("c1", "s1", "p1")
    with pytest.raises(ScopeError):
        empty.chroma_where()


def test_citation_validation_drops_and_counts_ids_outside_the_context():
    context = {"seat:s1", "project:p1"}
    cited = validate_citations(
        ["project:p1", "project:p9", "seat:s1", "contract:c2", "project:p1", "invented"], context
    )
    assert cited.kept == ["project:p1", "seat:s1"]
    assert cited.dropped == ["project:p9", "contract:c2", "invented"]


def test_query_parsing_into_field_value_pairs():
    parsed = parse_question("Which projects hire senior backend engineers in San Francisco?")
    assert parsed["intent"] == "find_projects"
    assert {"field": "title", "value": "backend engineer"} in parsed["pairs"]
    assert {"field": "seniority", "value": "senior"} in parsed["pairs"]
    assert {"field": "location", "value": "San Francisco Bay Area"} in parsed["pairs"]

    parsed = parse_question("Where do I usually hire?")
    assert parsed == {"intent": "preferences", "pairs": [{"field": "location", "value": ""}]}

    parsed = parse_question("Which projects are hybrid ML engineer roles on contract?")
    assert {"field": "title", "value": "ML engineer"} in parsed["pairs"]
    assert {"field": "work_mode", "value": "hybrid"} in parsed["pairs"]
    assert {"field": "employment_type", "value": "contract"} in parsed["pairs"]

    parsed = parse_question("Какие проекты ищут Java-разработчиков в Москве?")
    assert parsed["intent"] == "find_projects"
    assert {"field": "location", "value": "Moscow"} in parsed["pairs"]


def _payload(**kw):  # type: ignore[no-untyped-def]
    base = {
        "question": "",
        "intent": "lookup",
        "pairs": [],
        "facets": [],
        "qa": [],
        "summaries": [],
        "passages": [],
    }
    return base | kw


def test_composer_prefers_aggregated_facets_and_cites_only_the_context():
    payload = _payload(
        question="Where do I usually hire?",
        intent="preferences",
        pairs=[{"field": "location", "value": ""}],
        facets=[
            {
                "node_id": "seat:s1",
                "level": "seat",
                "label": "r",
                "field": "location",
                "value": "Berlin",
                "support": 4,
            },
            {
                "node_id": "seat:s1",
                "level": "seat",
                "label": "r",
                "field": "location",
                "value": "Munich",
                "support": 3,
            },
            {
                "node_id": "seat:s1",
                "level": "seat",
                "label": "r",
                "field": "location",
                "value": "Oslo",
                "support": 1,
            },
            {
                "node_id": "project:p1",
                "level": "project",
                "label": "x",
                "field": "location",
                "value": "Paris",
                "support": 0,
            },
        ],
    )
    out = compose(payload)
    assert out["answer"] == "location: Berlin, Munich."
    assert out["citation"] == ["seat:s1"]


def test_a_listing_counts_a_speaking_seat_by_its_projects_beside_lone_projects():
    # The listing holds the shallowest stating node of each branch: a seat speaking for its
    # three projects, and a project of a seat that states no role.
    def facet(node: str, level: str, value: str, support: int) -> dict[str, object]:
        return {"node_id": node, "level": level, "label": node, "field": "title",
                "value": value, "support": support}  # fmt: skip

    out = compose(
        _payload(
            question="Which roles do we usually hire for?",
            intent="preferences",
            pairs=[{"field": "title", "value": ""}],
            scope={"level": "contract", "node_id": "contract:c1"},
            facets=[
                facet("seat:s1", "seat", "Data Engineer", 3),
                facet("project:p9", "project", "Data Engineer", 0),
            ],  # fmt: skip
        )
    )
    assert out["answer"] == "roles: Data Engineer (4 projects)."
    assert out["citation"] == ["seat:s1", "project:p9"]


def test_composer_finds_projects_by_their_own_facets():
    facets = []
    for pid, city, level in (
        ("p1", "Berlin", "senior"),
        ("p2", "Berlin", "junior"),
        ("p3", "Munich", "senior"),
    ):
        facets += [
            {
                "node_id": f"project:{pid}",
                "level": "project",
                "label": f"Data Engineer {pid}",
                "field": "location",
                "value": city,
                "support": 0,
            },
            {
                "node_id": f"project:{pid}",
                "level": "project",
                "label": f"Data Engineer {pid}",
                "field": "seniority",
                "value": level,
                "support": 0,
            },
        ]
    out = compose(
        _payload(
            intent="find_projects",
            pairs=[
                {"field": "location", "value": "Berlin"},
                {"field": "seniority", "value": "senior"},
            ],
            facets=facets,
        )
    )
    assert out["citation"] == ["project:p1"]
    empty = compose(_payload(intent="lookup"))
    assert empty["citation"] == [] and not empty["in_memory"]
    assert empty["answer"].startswith("Not in memory")


def test_metrics_match_hand_computed_values():
    assert token_f1("location: Berlin, Munich", "location: Berlin") == pytest.approx(0.8)
    assert token_f1("", "") == 1.0 and token_f1("x", "") == 0.0
    # 2 of 3 predicted unigrams in the reference, prediction longer: no brevity penalty.
    assert bleu1("the remote hybrid job", "remote job") == pytest.approx(2 / 3)
    assert bleu1("remote", "remote hybrid") == pytest.approx(pytest.approx(0.3679, abs=1e-3))
    assert set_prf(["a", "b"], ["b", "c"]) == (0.5, 0.5, 0.5)
    assert set_prf([], []) == (1.0, 1.0, 1.0)


def test_only_the_boundary_reads_memory_content():
    """Structural guard: memory content (facets, QA, summaries, vectors) is read in exactly one
    module, `hltm.query.boundary`, and Chroma through its adapter `hltm.query.chroma_subtree`
    alone; elsewhere the query path may only read ownership ids."""
    import re
    from pathlib import Path

    import hltm.query

    package = Path(hltm.query.__file__).parent
    content = re.compile(r"\b(facets|qa|summary_long|summary_short)\b")
    for path in sorted(package.glob("*.py")):
        source = path.read_text(encoding="utf-8")
        if path.name == "boundary.py":
            assert "self.scope.chroma_where(" in source and "self.scope.sql_predicate()" in source
            continue
        if path.name == "chroma_subtree.py":  # the Chroma side: it reads no DuckDB row
            assert "memory_collection_name(" in source and "SELECT" not in source
            continue
        assert "memory_collection_name(" not in source, path.name  # only one opens a collection
        assert ".query(query_embeddings" not in source, path.name
        for match in re.finditer(r"SELECT(.*?)FROM \{MEMORY_TABLE\}", source, re.S):
            assert not content.search(match.group(1)), f"{path.name} reads memory content"


def test_tree_index_and_token_cache_follow_every_write_to_the_file(tmp_path):  # type: ignore[no-untyped-def]
    from hltm.query.access import TokenCache, create_token, revoke_token
    from hltm.query.snapshot import TreeIndex
    from hltm.warehouse import connect

    db = tmp_path / "derived.duckdb"
    index = TreeIndex(db)
    assert index.snapshot().rows == {}  # no file yet: an empty tree, nothing opened
    with connect(db) as con:
        con.execute(
            "CREATE TABLE memory_nodes (node_id VARCHAR PRIMARY KEY, level VARCHAR,"
            " contract_id VARCHAR, seat_id VARCHAR, project_id VARCHAR, label VARCHAR,"
            " version VARCHAR, facets VARCHAR, qa VARCHAR, summary_long VARCHAR,"
            " summary_short VARCHAR, item_count INTEGER)"
        )
        con.execute("INSERT INTO memory_nodes VALUES ('seat:s1', 'seat', 'c1', 's1', '',"
                    " 'S1', 'v1', '[]', '[]', 'long', 'short', 1)")  # fmt: skip
    first = index.snapshot()
    assert first.rows["seat:s1"].version == "v1" and first.paths[("seat_id", "s1")]
    assert index.snapshot() is first and index.reloads == 2  # unchanged file: not re-read
    (view,) = index.contents([first.rows["seat:s1"]]).values()
    assert view.version == "v1" and view.summary_long == "long"
    with connect(db) as con:
        con.execute("UPDATE memory_nodes SET version = 'v2', summary_long = 'new'")
    second = index.snapshot()
    assert second.rows["seat:s1"].version == "v2"
    # A version names one content: v1's stays v1's; the current snapshot names v2.
    assert index.contents([first.rows["seat:s1"]])["seat:s1"].summary_long == "long"
    assert index.contents([second.rows["seat:s1"]])["seat:s1"].summary_long == "new"
    with connect(db) as con:  # a write to another table (a server's query log): the tree stays
        con.execute("CREATE TABLE other AS SELECT 1 AS x")
    assert index.snapshot() is second and index.reloads == 3

    tokens = TokenCache(db)
    token_id, token = create_token(db, Identity("seat", "s1"))
    assert tokens.identity(token) == Identity("seat", "s1")
    assert tokens.identity(token) == Identity("seat", "s1")  # served from the cache
    revoke_token(db, token_id)  # a write to the file: the cache forgets
    assert tokens.identity(token) is None


def test_query_vectors_are_memoised_least_recently_used_first(tmp_path):  # type: ignore[no-untyped-def]
    """One embedding per text: a repeated question is not embedded again, and the memo drops
    the least recently used text first."""
    import numpy as np

    from hltm.embeddings import CachedEmbedder, OnnxE5Embedder
    from hltm.query.retrieve import QueryEmbeddings

    embedder = CachedEmbedder(OnnxE5Embedder(), tmp_path / "cache.duckdb")
    embed = QueryEmbeddings(embedder, memo_size=2)
    first = embed(["Where do I usually hire?", "location: Berlin"])
    assert embedder.stats.queries == 2
    again = embed(["Where do I usually hire?"])  # memoised: no new embedding
    assert embedder.stats.queries == 2 and np.array_equal(again[0], first[0])
    embed(["Which skills are required?"])  # full: the least recently used ("location:") goes
    assert embedder.stats.queries == 3
    embed(["Where do I usually hire?"])
    assert embedder.stats.queries == 3
    embed(["location: Berlin"])
    assert embedder.stats.queries == 4


def _view(node_id: str, questions: list[str], summary: str = "") -> object:
    from hltm.query.snapshot import NodeView

    qa = [
        {"question": q, "answer": q, "source": f"{node_id}-d{i}"} for i, q in enumerate(questions)
    ]
    return NodeView(node_id, "project", "c", "s", node_id, node_id, "v1", [], qa, summary, summary)


def test_the_pool_is_fused_by_cosine_and_word_rank_over_every_kind():
    """A passage sharing the question's rare name climbs above one e5 ranks a little higher;
    a summary and a QA pair compete in the one collapsed pool; hits of nodes the scope did not
    return (absent from `nodes`) are never scored."""
    from hltm.query.boundary import Hit
    from hltm.query.retrieve import _fuse_lexical

    nodes = {
        "project:a": _view("project:a", ["We talked about the weather and the kids."]),
        "project:b": _view(
            "project:b",
            ["Pixel the greyhound came home from the shelter."],
            "A session about adopting a dog.",
        ),  # fmt: skip
    }
    hits = [
        Hit("project:a", "project", "qa", 0, 0.84),
        Hit("project:b", "project", "summary", 0, 0.83),
        Hit("project:b", "project", "qa", 0, 0.82),
        Hit("project:zz", "project", "qa", 0, 0.99),  # not in the scope's nodes
    ]
    fused = _fuse_lexical("Where did Pixel the greyhound come from?", hits, nodes)
    assert [(h.node_id, h.kind) for h in fused][0] == ("project:b", "qa")
    assert {h.node_id for h in fused} == {"project:a", "project:b"}
    assert len(fused) == 3 and fused[0].score > fused[1].score


def test_the_context_keeps_whole_nodes_by_fused_rank_within_its_token_budget():
    import json

    from hltm.query.retrieve import within_budget
    from hltm.tokens import count_tokens

    def item(node: str, words: int) -> dict[str, str]:
        return {"node_id": node, "question": "word " * words, "answer": ""}

    context = {"qa": [item("n1", 100), item("n2", 100), item("n1", 100), item("n3", 10)],
               "summaries": [], "facets": []}  # fmt: skip
    fused = {"n1": 0.03, "n2": 0.02, "n3": 0.01}

    def cost(node: str, words: int) -> int:
        return count_tokens(json.dumps(item(node, words), ensure_ascii=False, indent=1))

    one, small = cost("n1", 100), cost("n3", 10)

    def kept(budget: int) -> list[str]:
        return [i["node_id"] for i in within_budget(context, fused, budget)["qa"]]

    assert kept(3 * one + small) == ["n1", "n2", "n1", "n3"]
    assert kept(2 * one + small) == ["n1", "n1"]  # n3 would fit, but the cut is by rank
    assert kept(1) == ["n1", "n1"]  # the best node always stays


def test_a_listing_over_the_budget_is_kept_whole_and_counted_only_as_far_as_it_decides(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from hltm.query import retrieve
    from hltm.tokens import count_tokens

    counted: list[str] = []

    def counting(text: str) -> int:
        counted.append(text)
        return count_tokens(text)

    monkeypatch.setattr(retrieve, "count_tokens", counting)
    listing = [
        {"node_id": f"seat:s{i:03d}", "level": "seat", "label": f"Seat {i}", "field": "title",
         "value": f"Role {i}", "support": 2}
        for i in range(200)
    ]  # fmt: skip
    other = {"node_id": "project:p1", "question": "Q?", "answer": "A.", "score": 0.9}
    context = {"facets": listing, "qa": [other], "summaries": []}
    listed = frozenset(i["node_id"] for i in listing)
    cut = retrieve.within_budget(context, {"project:p1": 1.0}, 300, listed)
    assert cut == {"facets": listing, "qa": [], "summaries": []}  # the listing is the answer
    assert 0 < len(counted) < 40, len(counted)  # not its 200 items

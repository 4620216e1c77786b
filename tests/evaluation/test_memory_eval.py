"""The evaluation harness (question sets from ground truth, every system, one table) and the query
path through the real `openai` client against the local OpenAI-protocol server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from hltm.evaluation.memory.baselines import RawCorpus
from hltm.evaluation.memory.questions import (
    ALL_SYSTEMS,
    evaluate,
    retrieval_questions,
    summary_questions,
)
from hltm.query.engine import QueryEngine
from hltm.query.scope import Identity
from hltm.settings import Settings
from hltm_devkit.openai_server import LocalOpenAIServer
from tests.support.query import BuiltWorld, built_world, engine  # noqa: F401


def test_question_sets_come_from_ground_truth(built_world: BuiltWorld) -> None:  # noqa: F811
    gt = built_world.ground_truth
    summary = summary_questions(gt)
    assert {q.identity.level for q in summary} == {"seat", "contract"}
    seat = built_world.seats()[0]
    where = next(q for q in summary if q.qid == f"sum-{seat}-location")
    assert where.reference == "location: " + ", ".join(gt["seats"][seat]["locations"])
    retrieval = retrieval_questions(gt)
    assert retrieval
    corpus = RawCorpus.load(built_world.settings.sources_db)
    for q in retrieval:
        assert q.reference_nodes
        assert all(corpus.node_in_scope(q.identity, n) for n in q.reference_nodes)


def test_evaluation_runs_every_system_and_prints_one_table(
    built_world: BuiltWorld,  # noqa: F811
    engine: QueryEngine,  # noqa: F811
) -> None:
    report = evaluate(
        built_world.settings, built_world.world_dir, limit=2, engine=engine, leakage=True
    )
    assert [r.name for r in report.rows] == list(ALL_SYSTEMS)
    table = report.table()
    for name in ALL_SYSTEMS:
        assert name in table
    hltm = report.row("HLTM")
    assert hltm.n_summary == 2 and hltm.n_retrieval == 2
    assert 0 < hltm.summary_f1 <= 1 and 0 < hltm.ret_f1 <= 1
    assert hltm.judge is None  # offline: no LLM judge
    assert all(r.llm_calls <= 2 for r in report.rows)
    assert report.row("baseline: full context").tokens > report.row("HLTM").tokens * 0.5
    assert report.leakage is not None
    ours = report.leakage.get("HLTM (subtree filter)")
    assert (ours.query_wise, ours.entity_wise) == (0.0, 0.0)
    assert report.leakage.get("RAG, unfiltered").query_wise > 0
    meta = report.metadata()
    assert meta["HLTM"]["ret_f1"] == round(hltm.ret_f1, 4)
    print("\n" + table)


@pytest.fixture(scope="module")
def local_llm_server() -> Iterator[LocalOpenAIServer]:
    import hltm.query.tasks  # noqa: F401  (registers parse_query / answer / answer_judge)

    with LocalOpenAIServer() as server:
        yield server


def test_query_and_judge_through_the_real_openai_client(
    built_world: BuiltWorld,  # noqa: F811
    engine: QueryEngine,  # noqa: F811
    local_llm_server: LocalOpenAIServer,
) -> None:
    from hltm.llm import make_llm

    settings = Settings.from_env(
        data_dir=built_world.settings.data_dir,
        llm_backend="openai",
        openai_base_url=local_llm_server.base_url,
        openai_api_key="test",
        llm_timeout_s=5,
        llm_max_retries=2,
    )
    llm = make_llm(settings)
    llm.backend.answer_backoff_s = 0.01  # type: ignore[attr-defined]
    online = QueryEngine(settings, llm=llm, embedder=engine.embedder, vectors=engine.vectors)
    seat = built_world.seats()[0]
    offline = engine.ask(Identity("seat", seat), "Where do I usually hire?", log=False)
    local_llm_server.inject("malformed_json", times=1, match="retrieved memory")
    local_llm_server.inject("http_500", times=1)
    result = online.ask(Identity("seat", seat), "Where do I usually hire?", log=False)
    assert (result.answer, result.citations) == (offline.answer, offline.citations)
    # Every request is counted: 2 tasks + one retry after the 500 + one re-ask after bad JSON.
    assert result.cost.llm_calls == 4 == local_llm_server.stats.chat_requests

    report = evaluate(
        settings, built_world.world_dir, systems=["HLTM"], limit=2, leakage=False, engine=online
    )
    hltm = report.row("HLTM")
    assert hltm.judge is not None and 0.0 <= hltm.judge <= 1.0
    assert "LLM-as-judge" in report.table()


def test_evaluation_asset_records_the_table_and_a_zero_leakage_check(
    built_world: BuiltWorld,  # noqa: F811
) -> None:
    import dagster as dg

    from hltm_dagster.defs.evaluation.assets import memory_evaluation
    from hltm_dagster.resources import build_resources

    result = dg.materialize(
        [memory_evaluation],
        resources=build_resources(built_world.settings),
        run_config={
            "ops": {
                "memory_evaluation": {
                    "config": {
                        "world_dir": str(built_world.world_dir),
                        "limit": 1,
                        "systems": ["HLTM", "baseline: full context"],
                    }
                }
            }
        },
    )
    assert result.success
    (materialization,) = result.asset_materializations_for_node("memory_evaluation")
    metadata = materialization.metadata
    assert "HLTM" in metadata["table"].value
    assert metadata["scope"].value.startswith("bounded subset (the first 1 questions of each kind")
    assert metadata["leakage/HLTM (subtree filter)/all/query_wise"].value == 0.0
    assert metadata["leakage/RAG, unfiltered/all/query_wise"].value > 0.0
    (check,) = result.get_asset_check_evaluations()
    assert check.check_name == "zero_leakage" and check.passed


def test_a_quick_evaluation_measures_hltm_leakage_without_the_chunk_index(
    built_world: BuiltWorld,  # noqa: F811
) -> None:
    """The demo's bounded run: HLTM's leakage alone, with no unfiltered RAG (nor chunk index)."""
    import dagster as dg

    from hltm_dagster.defs.evaluation.assets import memory_evaluation
    from hltm_dagster.resources import build_resources

    config = {
        "world_dir": str(built_world.world_dir),
        "limit": 1,
        "leakage_baseline": False,
        "systems": ["HLTM"],
    }
    result = dg.materialize(
        [memory_evaluation],
        resources=build_resources(built_world.settings),
        run_config={"ops": {"memory_evaluation": {"config": config}}},
    )
    (materialization,) = result.asset_materializations_for_node("memory_evaluation")
    metadata = materialization.metadata
    assert "leakage of HLTM only" in metadata["scope"].value
    assert metadata["leakage/HLTM (subtree filter)/all/query_wise"].value == 0.0
    assert not [k for k in metadata if k.startswith("leakage/RAG")]
    (check,) = result.get_asset_check_evaluations()
    assert check.passed and check.metadata["baseline_query_wise"].value == "not run"

"""The memory build through the real `openai` client against the local protocol server, which
answers from the offline rules and misbehaves on request: transient faults are retried and
leave no trace; a node whose output stays invalid fails with an error naming it, while every
other node is stored and its own previous good version survives."""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import replace

import dagster as dg
import pytest

from hltm.llm import make_llm
from hltm.memory import MemoryBuildError, builder_from_settings
from hltm.query.engine import ask
from hltm.settings import Settings
from hltm.sources.ingest import delete_project
from hltm_devkit.openai_server import LocalOpenAIServer
from hltm_devkit.scenarios import change_project, read_world
from tests.support import memory as _shared
from tests.support.memory import make_harness

# The shared fixtures: a copy of the small world's sources, ingested once per session.
ingested_sources = _shared.ingested_sources
memory_world = _shared.memory_world


@pytest.fixture(scope="module")
def server() -> Iterator[LocalOpenAIServer]:
    # Registers the memory tasks and runs their warm_up (the place tables), as the CLI server does:
    # built inside the first eight concurrent answers instead, the tables held each of them ~8 s
    # on a loaded machine, past the client's timeout, and the request count went astray.
    with LocalOpenAIServer(task_modules=["hltm.memory.tasks"]) as running:
        yield running


@pytest.fixture
def remote(memory_world: Settings, server: LocalOpenAIServer) -> Settings:
    server.clear_faults()
    server.reset_stats()
    return replace(
        memory_world,
        llm_backend="openai",
        openai_base_url=server.base_url,
        llm_timeout_s=3.0,  # a warm answer takes well under 1 s even on a loaded machine
        llm_max_retries=2,
    )


def remote_builder(settings: Settings):  # type: ignore[no-untyped-def]
    llm = make_llm(settings)
    llm.backend.limits = replace(llm.backend.limits, backoff_s=0.01)
    return builder_from_settings(settings, llm=llm)


def _content(builder) -> list[tuple]:  # type: ignore[no-untyped-def]
    """What a node says (facets, QA, summaries), without versions, which name the model."""
    nodes = builder.store.nodes(builder.store.built())
    return [
        (n.node_id, n.facets_json(), n.qa_json(), n.summary_long, n.summary_short)
        for n in sorted(nodes.values(), key=lambda n: n.node_id)
    ]


def test_transient_faults_are_retried(remote: Settings, server: LocalOpenAIServer) -> None:
    pids = sorted(read_world(remote.sources_db).projects)

    def about(i: int) -> str:
        return f'"project_id": "{pids[i]}"'

    # One call meets three transport faults in a row (we retry: 429, 500, a timeout)…
    server.inject("http_429", times=1, match=about(0), retry_after_s=0.01)
    server.inject("http_500", times=1, match=about(0), retry_after_s=0.01)
    server.inject("timeout", times=1, match=about(0), delay_s=4.0)
    # …and four others get one unusable answer each (we re-ask).
    for i, kind in enumerate(["malformed_json", "truncated_json", "finish_length"], 1):
        server.inject(kind, times=1, match=about(i))
    server.inject("schema_violation", times=1, match=about(4))
    builder = remote_builder(replace(remote, llm_max_retries=4))
    report = builder.full_build()
    report.raise_for_failures()
    stats = server.stats
    assert stats.faults_served == 7
    world = read_world(remote.sources_db)
    nodes = len(world.projects) + len(world.seats) + len(world.contracts)
    calls = 3 * len(world.projects) + len(world.seats) + len(world.contracts)
    assert len(report.rebuilt) == nodes
    # Every request is ours and in the ledger: the builder's and the nodes' own figures.
    assert stats.chat_requests == calls + 7
    assert builder.llm.usage.calls == calls + 7
    assert builder.llm.usage.retries == 7
    assert sum(r.llm_calls for r in report.nodes) == calls + 7
    first = next(r for r in report.nodes if r.node_id == f"project:{pids[0]}")
    assert first.llm_calls == 3 + 3  # facets (after 429, 500 and a timeout), QA, summary
    assert builder.plan().empty

    # The real client path yields the same memory as the offline backend, byte for byte.
    offline = builder_from_settings(replace(remote, data_dir=remote.data_dir / "offline-copy"))
    offline.sources_db = remote.sources_db
    offline.full_build().raise_for_failures()
    assert _content(builder) == _content(offline)


def test_invalid_output_fails_only_its_node(remote: Settings, server: LocalOpenAIServer) -> None:
    builder = remote_builder(remote)
    builder.full_build().raise_for_failures()
    world = read_world(remote.sources_db)
    bad, good = sorted(world.projects)[0], sorted(world.projects)[-1]
    before = builder.store.built()
    old_bad = builder.store.nodes([f"project:{bad}"])[f"project:{bad}"]
    for pid in (bad, good):
        change_project(remote.sources_db, random.Random(3), project_id=pid)

    # Every answer about the bad project stays unparsable, however often we ask.
    server.inject("malformed_json", times="always", match=f'"project_id": "{bad}"')
    report = builder.refresh()
    failures = report.failures
    assert [f.node_id for f in failures] == [f"project:{bad}"]
    assert f"project:{bad}" in (failures[0].error or "") and "facets" in (failures[0].error or "")
    with pytest.raises(MemoryBuildError, match=f"project:{bad}"):
        report.raise_for_failures()

    after = builder.store.built()
    assert after[f"project:{bad}"].version == before[f"project:{bad}"].version
    assert builder.store.nodes([f"project:{bad}"])[f"project:{bad}"] == old_bad
    assert after[f"project:{good}"].version != before[f"project:{good}"].version
    # Parents are built from the children that have a memory (the bad one's previous version):
    # the good change reached its seat; the bad project's chain stays pending until it succeeds.
    bad_seat, good_seat = f"seat:{world.projects[bad]}", f"seat:{world.projects[good]}"
    assert bad_seat != good_seat
    assert after[good_seat].version != before[good_seat].version
    assert after[bad_seat].version == before[bad_seat].version
    pending = builder.plan()
    assert (pending.projects, pending.seats) == ([f"project:{bad}"], [bad_seat])
    assert {n.node_id for n in report.rebuilt} >= {f"project:{good}"}
    items = builder.store.snapshot(with_embeddings=False).collections
    live = {(m.split("#")[0], m.split("#")[1]) for col in items.values() for m, *_ in col}
    assert (f"project:{bad}", before[f"project:{bad}"].version) in live

    server.clear_faults()
    builder.refresh().raise_for_failures()
    assert builder.plan().empty


def test_refresh_run_fails_naming_the_node(remote: Settings, server: LocalOpenAIServer) -> None:
    harness = make_harness(remote)
    harness.tick_and_run()
    world = read_world(remote.sources_db)
    bad, good = sorted(world.projects)[2], sorted(world.projects)[-2]
    for pid in (bad, good):
        change_project(remote.sources_db, random.Random(4), project_id=pid)
    server.inject("schema_violation", times="always", match=f'"project_id": "{bad}"')
    result, runs = harness.tick_and_run()
    assert isinstance(result, dg.SensorResult)
    (run,) = [r for r in runs if not r.success]  # the run of the bad node's contract
    failure = next(e for e in run.all_events if e.event_type_value == "STEP_FAILURE")
    assert f"project:{bad}" in str(failure.event_specific_data)
    assert not run.get_asset_materialization_events()  # not published as complete
    stored = builder_from_settings(remote).store.built()
    tree = builder_from_settings(remote).tree()
    assert stored[f"project:{good}"].version == tree.versions[f"project:{good}"]
    assert stored[f"project:{bad}"].version != tree.versions[f"project:{bad}"]
    server.clear_faults()


def _one_project_seats(settings: Settings) -> tuple[str, str, str]:
    """Two seats of different contracts keep one project each (a fast build); the first
    seat's only project, its seat and contract."""
    world = read_world(settings.sources_db)
    keep = {}
    for contract in sorted(set(world.seats.values()))[:2]:
        seat = min(s for s, c in world.seats.items() if c == contract)
        keep[seat] = min(p for p, s in world.projects.items() if s == seat)
    for project in sorted(set(world.projects) - set(keep.values())):
        delete_project(settings.sources_db, project)
    seat = min(keep)
    return keep[seat], seat, world.seats[seat]


def test_a_failed_child_never_reads_as_an_empty_one(
    memory_world: Settings, remote: Settings, server: LocalOpenAIServer
) -> None:
    """Every call about a seat's only project times out. The project fails, and its seat and
    contract are not built as if they had no project: they are not built at all the first
    time, and keep their last good version later; readers are told the memory is incomplete."""
    project, seat, contract = _one_project_seats(remote)
    chain = [f"project:{project}", f"seat:{seat}", f"contract:{contract}"]
    server.inject("timeout", times="always", match=f'"project_id": "{project}"', delay_s=4.0)
    builder = remote_builder(replace(remote, llm_max_retries=0))
    report = builder.full_build()
    assert [r.node_id for r in report.failures] == chain
    assert "not rebuilt, its child project:" in (report.failures[1].error or "")
    assert not set(chain) & set(builder.store.built())  # nothing published as empty
    assert builder.plan().rebuilds == chain

    asked = ask(memory_world, f"seat:{seat}", "What salary is offered?")
    assert asked.no_memory and asked.incomplete == chain[:2]
    assert "the memory is incomplete" in asked.answer and "no projects" not in asked.answer
    whole = ask(memory_world, f"contract:{contract}", "What salary is offered?")
    assert whole.incomplete == sorted(chain) and "incomplete" in whole.warning

    server.clear_faults()
    builder.refresh().raise_for_failures()
    good = builder.store.built()
    assert ask(memory_world, f"seat:{seat}", "What salary is offered?").incomplete == []

    change_project(remote.sources_db, random.Random(3), project_id=project, kind="title")
    server.inject("timeout", times="always", match=f'"project_id": "{project}"', delay_s=4.0)
    report = builder.refresh()
    assert [r.node_id for r in report.failures] == chain[:1]
    assert {n: builder.store.built()[n].version for n in chain} == {
        n: good[n].version for n in chain
    }  # the last good versions stay, marked incomplete
    asked = ask(memory_world, f"project:{project}", "What salary is offered?")
    assert not asked.no_memory and asked.incomplete == chain[:1]
    server.clear_faults()

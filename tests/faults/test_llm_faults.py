"""How the platform meets the ways self-hosted servers (llama.cpp, vLLM, Ollama with small
models) were seen to misbehave, through the real `openai` client and the local protocol server.

Each test shows the platform's behaviour and the ledger: every request the server received is
in `LLMUsage` (calls, retries, failed calls) with its tokens, retries and degraded requests
included. The memory tests build one project node of the small world, so they stay fast.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

import dagster as dg
import httpx
import pytest

import hltm.memory.tasks  # noqa: F401 - registers the memory tasks with the protocol server
from hltm.llm import LLMError, LLMUsage, make_llm
from hltm.llm.calls import Request
from hltm.memory import builder_from_settings
from hltm.memory.inputs import read_project_inputs
from hltm.memory.store import degraded_nodes
from hltm.settings import Settings
from hltm.warehouse import connect
from hltm_cli import dagster_runs
from hltm_dagster import instance as dagster_instance
from hltm_dagster.defs.memory.assets import MEMORY_CHECKS
from hltm_dagster.resources import build_resources
from hltm_devkit.openai_app import ServerStats
from hltm_devkit.openai_server import LocalOpenAIServer
from hltm_devkit.scenarios import read_world
from tests.support import memory as _shared
from tests.support.llm import WORD_TASK, quick, words
from tests.support.llm import _clean_server as _clean_server  # autouse: faults, stats, …
from tests.support.llm import server as server  # one local server for the module

ingested_sources = _shared.ingested_sources
memory_world = _shared.memory_world


def remote(server: LocalOpenAIServer, base: Settings | None = None, **overrides: Any) -> Settings:
    options: dict[str, Any] = {
        "llm_backend": "openai",
        "openai_base_url": server.base_url,
        "openai_api_key": "test",
        "llm_timeout_s": 1.0,
        "llm_max_retries": 2,
        **overrides,
    }
    return replace(base, **options) if base else Settings.from_env(**options)


def assert_ledger_matches(usage: LLMUsage, stats: ServerStats) -> None:
    """Every request the server saw is in the ledger, and every answer's tokens."""
    assert usage.calls == stats.chat_requests
    assert usage.completion_tokens == stats.completion_tokens


# --------------------------------------------------------------------------- response formats


def test_a_server_taking_the_schema_only_in_json_object_gets_it_there_and_remembered(
    server: LocalOpenAIServer,
) -> None:
    # llama-cpp-python's server: json_schema refused, json_object with a schema enforced, and
    # a small model without the schema on the wire echoes its input.
    server.inject("json_object_schema_only", times="always")
    llm = quick(make_llm(remote(server)))
    assert llm.run(WORD_TASK, words("one two three")).count == 3
    formats = [(r.status, r.response_format) for r in server.stats.history]
    assert formats == [(500, "json_schema"), (200, "json_object_schema")]
    body = server.last_request["body"]
    assert body["response_format"]["type"] == "json_object"
    assert set(body["response_format"]["schema"]["properties"]) == {"words", "count", "source_id"}
    # The model reads the schema too: where no grammar holds it, the prompt is all it has.
    system = body["messages"][0]["content"]
    assert '"source_id"' in system and "JSON schema" in system
    # Both requests are in the ledger; the refused one is not charged to the retry budget,
    # and costs no tokens: the server processed none of it.
    usage = llm.snapshot()
    assert (usage.calls, usage.failed_calls, usage.retries) == (2, 1, 1)
    assert_ledger_matches(usage, server.stats)
    assert usage.prompt_tokens == server.stats.prompt_tokens

    again = quick(make_llm(remote(server)))  # remembered: no refused request again
    assert again.run(WORD_TASK, words("four five")).count == 2
    assert [r.response_format for r in server.stats.history][-1] == "json_object_schema"
    assert (again.snapshot().calls, server.stats.chat_requests) == (1, 3)


def test_the_first_requests_to_a_new_endpoint_learn_its_format_one_at_a_time(
    server: LocalOpenAIServer,
) -> None:
    server.inject("reject_json_schema", times="always")
    llm = quick(make_llm(remote(server, llm_concurrency=4)))
    texts = ["a", "a b", "a b c", "a b c d"]
    with ThreadPoolExecutor(max_workers=4) as pool:
        counts = list(pool.map(lambda t: llm.run(WORD_TASK, words(t)).count, texts))
    assert counts == [1, 2, 3, 4]
    # One refused request taught the format; the other workers waited for it, not the server.
    statuses = [r.status for r in server.stats.history]
    assert (statuses.count(500), len(statuses)) == (1, 5)


def test_a_facets_node_is_built_from_the_schema_a_grammar_enforces(
    memory_world: Settings, server: LocalOpenAIServer
) -> None:
    settings, builder, nid, pid = _one_project(server, memory_world)
    backend = builder.llm.backend
    sent: list[dict[str, Any]] = []

    def arguments(request: Request, profile: Any) -> dict[str, Any]:
        kwargs = type(backend)._arguments(backend, request, profile)
        sent.append(kwargs)
        return kwargs

    backend._arguments = arguments  # type: ignore[method-assign]
    server.inject("json_object_schema_only", times="always")
    (report,) = builder.build([nid])
    assert report.status == "built" and report.facets > 0
    facets = [
        k["response_format"] for k in sent if "FacetsOutput" in json.dumps(k["response_format"])
    ]
    assert [f["type"] for f in facets] == ["json_schema", "json_object"]
    # The ids a node may cite go on the wire as enums, for the server's grammar to enforce.
    assert pid in json.dumps(facets[-1]["schema"]["$defs"]["FacetItem"]["properties"]["sources"])
    assert_ledger_matches(builder.llm.snapshot(), server.stats)


def test_fenced_json_from_a_server_ignoring_response_format_is_parsed(
    server: LocalOpenAIServer,
) -> None:
    server.inject("fenced_json", times="always")
    llm = quick(make_llm(remote(server)))
    for text in ("a b", "c d e", "f"):
        assert llm.run(WORD_TASK, words(text)).count == len(text.split())
    usage = llm.snapshot()
    assert (usage.calls, usage.failed_calls) == (3, 0)  # no json_invalid, no re-ask
    assert_ledger_matches(usage, server.stats)


# --------------------------------------------------------------------------- answer bounds


def test_a_repetition_loop_is_cut_at_max_tokens_counted_and_re_asked(
    server: LocalOpenAIServer,
) -> None:
    server.inject("repetition_loop", times=1)
    llm = quick(make_llm(remote(server)))
    assert llm.run(WORD_TASK, words("loop me")).count == 2
    first, retry = server.stats.history
    assert first.max_tokens == WORD_TASK.answer_budget  # bounded, never the server's default
    assert (first.fault, retry.fault) == ("repetition_loop", None)
    assert retry.max_tokens == 2 * first.max_tokens  # a cut-off answer gets more room
    body = server.last_request["body"]
    assert body["temperature"] == 0 and body["seed"] == 8  # low temperature; seed 7 + 1 retry
    assert "cut off" in body["messages"][-1]["content"]  # the re-ask says why: it differs
    usage = llm.snapshot()
    assert (usage.calls, usage.failed_calls, usage.retries) == (2, 1, 1)
    assert_ledger_matches(usage, server.stats)
    assert usage.completion_tokens >= 0.9 * first.max_tokens  # the loop's tokens are counted


# --------------------------------------------------------------------------- timeouts


def test_a_timed_out_request_is_not_re_sent_onto_a_busy_server(
    server: LocalOpenAIServer,
) -> None:
    with LocalOpenAIServer(serial=True) as one_slot:  # like llama.cpp with one slot
        # Unstreamed, like a server that cannot stream: an abandoned answer is still generated.
        one_slot.inject("timeout", times=1, delay_s=1.5)  # slower than the 1 s timeout
        llm = quick(make_llm(remote(one_slot, llm_stream=False)))  # waits as long as the timeout
        assert llm.run(WORD_TASK, words("slow server")).count == 2
        stats = one_slot.stats
        assert stats.stacked == 0  # the retry arrived after the abandoned answer was done
        usage = llm.snapshot()
        assert (usage.calls, usage.failed_calls, usage.retries) == (2, 1, 1)
        assert usage.calls == stats.chat_requests
        # The abandoned answer was generated but never received: its tokens are unknown here.
        assert usage.completion_tokens < stats.completion_tokens

        # Re-sending at once (what the SDK's own retries did) stacks it behind the busy slot.
        one_slot.reset_stats()
        one_slot.inject("timeout", times=1, delay_s=1.5)
        eager = make_llm(remote(one_slot, llm_timeout_backoff_s=0.0, llm_stream=False))
        assert eager.run(WORD_TASK, words("slow server")).count == 2
        assert one_slot.stats.stacked == 1


def test_timeouts_are_per_task_and_configurable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HLTM_LLM_TIMEOUT_S", "300")
    monkeypatch.setenv("HLTM_LLM_TASK_TIMEOUTS", "judge=900, aggregate=600")
    settings = Settings.from_env()
    assert settings.timeout_for("facets") == 300
    assert (settings.timeout_for("judge"), settings.timeout_for("aggregate")) == (900, 600)
    monkeypatch.setenv("HLTM_LLM_TASK_TIMEOUTS", "judge")
    with pytest.raises(ValueError, match="task=seconds"):
        Settings.from_env()


# --------------------------------------------------------------------------- memory content


def _one_project(server: LocalOpenAIServer, world: Settings) -> tuple[Settings, Any, str, str]:
    """(settings, builder, node id, project id): the world's first project, built remotely."""
    settings = remote(server, world)
    builder = builder_from_settings(settings, llm=quick(make_llm(settings)))
    pid = sorted(read_world(settings.sources_db).projects)[0]
    return settings, builder, f"project:{pid}", pid


def _degraded(settings: Settings) -> dg.AssetCheckResult:
    check = next(c for c in MEMORY_CHECKS if "project_memories_not_degraded" in str(c.check_keys))
    return check(platform=build_resources(settings)["platform"])  # type: ignore[call-arg]


def test_unknown_ids_are_enumerated_then_dropped_counted_and_flagged(
    memory_world: Settings, server: LocalOpenAIServer
) -> None:
    settings, builder, nid, pid = _one_project(server, memory_world)
    # A model that ignores the schema's enum: every id it cites for this project is unknown.
    server.inject("unknown_ids", times="always", match=f'"project_id": "{pid}"')
    (report,) = builder.build([nid])

    facets_request = server.stats.history[0]
    assert facets_request.schema == "FacetsOutput"
    # Nothing of the model's answer is kept (the node holds only its passage pairs, which the
    # build quotes from the sources).
    assert report.status == "built" and (report.facets, report.drops.kept) == (0, 0)
    assert report.drops.count("facet") > 0 and report.drops.count("qa") > 0
    meta = report.metadata()
    assert meta["facets_dropped"] == dict(report.drops.reasons)["facet:unknown_source"]
    assert meta["qa_dropped"] == dict(report.drops.reasons)["qa:unknown_source"]
    # Every request is in the ledger: one per task, plus the re-ask of an all-unknown summary.
    assert report.llm_calls == server.stats.chat_requests >= 3

    with connect(settings.derived_db) as con:
        (flagged,) = degraded_nodes(con, "project")
    assert flagged.node_id == nid and flagged.why.startswith("empty")
    result = _degraded(settings)
    assert not result.passed and nid in (result.description or "")


def test_the_schema_enumerates_the_ids_a_node_may_cite(
    memory_world: Settings, server: LocalOpenAIServer
) -> None:
    settings, builder, nid, pid = _one_project(server, memory_world)
    backend = builder.llm.backend
    sent: list[Request] = []

    def spy(request: Request) -> Any:
        sent.append(request)
        return type(backend).send(backend, request)

    backend.send = spy  # type: ignore[method-assign]
    (report,) = builder.build([nid])
    assert report.drops.dropped == 0 and report.facets > 0

    with connect(settings.sources_db, read_only=True) as con:
        documents = {r[0] for r in con.execute(
            "SELECT document_id FROM project_documents WHERE project_id = ?", [pid]
        ).fetchall()}  # fmt: skip
    by_task = {r.task.name: r.schema for r in sent}
    facet_ids = by_task["facets"]["$defs"]["FacetItem"]["properties"]["sources"]["items"]["enum"]
    assert pid in facet_ids and documents <= set(facet_ids)
    assert by_task["qa"]["$defs"]["QAItem"]["properties"]["source"]["enum"] == facet_ids
    assert "enum" not in str(by_task["summary"])  # no ids to cite, no enum
    assert _degraded(settings).passed  # an honest build is not flagged


def test_echoed_prompt_examples_are_dropped_and_counted(
    memory_world: Settings, server: LocalOpenAIServer
) -> None:
    settings, builder, nid, pid = _one_project(server, memory_world)
    with connect(settings.sources_db, read_only=True) as con:
        given = str(read_project_inputs(con, [pid])[pid]).casefold()
    assert "francisco" not in given and "bay area" not in given and "80k" not in given
    server.inject("echo_examples", times=1, match=f'"project_id": "{pid}"')  # the facets call
    (report,) = builder.build([nid])
    node = builder.store.nodes([nid])[nid]
    values = {(f.field, f.value) for f in node.facets}
    assert ("location", "San Francisco Bay Area") not in values
    assert ("salary", "€80k–95k") not in values
    echoed = dict(report.drops.reasons)["facet:echoed_prompt_example"]
    assert echoed >= 2
    # The prompt's one-word examples (`work_mode: hybrid`, `skill: Kubernetes`) are canonical
    # values a real input may well state, so they are not treated as echoes.
    assert report.facets >= 1
    assert_ledger_matches(builder.llm.snapshot(), server.stats)


# --------------------------------------------------------------------------- job failures


@dg.op
def gate() -> None:
    raise dg.Failure(description="blocked: 0/11 mandatory quotes survived (gate 90%)")


@dg.op
def locked() -> None:
    raise RuntimeError("Could not set lock on file derived.duckdb")


@dg.job(executor_def=dg.in_process_executor)
def judge_like() -> None:
    gate()
    locked()


def test_a_failed_job_prints_the_failing_steps_own_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`run_job` (behind `hltm judge run`, `hltm demo`, …) names why, not "Steps failed"."""
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))
    monkeypatch.setattr(
        dagster_instance, "located_job", lambda name: (dg.reconstructable(judge_like), None)
    )
    with pytest.raises(SystemExit):
        dagster_runs.run_job("judge_like")
    printed = capsys.readouterr().err
    printed = printed[printed.index("error: Dagster job 'judge_like' failed") :]
    assert "gate: blocked: 0/11 mandatory quotes survived (gate 90%)" in printed
    assert "locked: RuntimeError: Could not set lock on file derived.duckdb" in printed
    assert "Steps failed" not in printed


def test_a_fixed_latency_per_answer_for_benchmarks() -> None:
    with LocalOpenAIServer(latency_s=0.3) as slow:
        llm = make_llm(remote(slow, llm_timeout_s=30))
        started = time.perf_counter()
        assert llm.run(WORD_TASK, words("take your time")).count == 3
        assert time.perf_counter() - started >= 0.3
        assert llm.snapshot().calls == slow.stats.chat_requests == 1


# --------------------------------------------------------------------------- capabilities


_ONE_CALL_IN_A_NEW_PROCESS = """
    import json, sys
    from pathlib import Path
    from hltm.llm import make_llm
    from hltm.settings import Settings
    from tests.support.llm import WORD_TASK, words

    settings = Settings.from_env(
        llm_backend="openai", openai_base_url=sys.argv[1], openai_api_key="test",
        data_dir=Path(sys.argv[2]), llm_timeout_s=10, llm_max_retries=0,
    )
    llm = make_llm(settings)
    count = llm.run(WORD_TASK, words("one two")).count
    used = llm.snapshot()
    print(json.dumps([count, used.calls, used.prompt_tokens]))
"""


def _one_call_in_a_new_process(server: LocalOpenAIServer, data_dir: Path) -> list[int]:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_ONE_CALL_IN_A_NEW_PROCESS)]
        + [server.base_url, str(data_dir)],
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_what_a_server_rejects_is_remembered_across_processes_and_re_probed(
    server: LocalOpenAIServer, tmp_path: Path
) -> None:
    server.inject("reject_json_schema", times="always")  # llama.cpp's own server
    first = _one_call_in_a_new_process(server, tmp_path)
    assert [(r.status, r.response_format) for r in server.stats.history] == [
        (500, "json_schema"),
        (200, "json_object_schema"),
    ]
    # Two calls; the rejected one costs no tokens: the ledger's are the server's own.
    assert first == [2, 2, server.stats.prompt_tokens]

    server.reset_stats()
    second = _one_call_in_a_new_process(server, tmp_path)  # another process, same data dir
    history = server.stats.history
    assert [(r.status, r.response_format) for r in history] == [(200, "json_object_schema")]
    assert second == [2, 1, server.stats.prompt_tokens]

    # A remembered profile that fails is re-probed from the full feature set, then re-learnt.
    from hltm.llm.openai_backend import PROFILES_FILE

    stored = tmp_path / "cache" / PROFILES_FILE
    profiles = json.loads(stored.read_text())
    (key,) = profiles
    assert profiles[key]["response_format"] == "json_object_schema"
    stored.write_text(json.dumps({key: {**profiles[key], "refused_formats": []}}))
    server.reset_stats()
    assert _one_call_in_a_new_process(server, tmp_path)[:2] == [2, 3]
    formats = [(r.status, r.response_format) for r in server.stats.history]
    assert formats == [(500, "json_schema"), (500, "json_schema"), (200, "json_object_schema")]
    assert json.loads(stored.read_text())[key]["response_format"] == "json_object_schema"


# --------------------------------------------------------------------------- streaming


def test_a_long_answer_that_keeps_streaming_is_kept_past_the_timeout() -> None:
    # Generating takes 3 s, streamed in ~20 chunks: the 1.5 s timeout bounds the first token and
    # each pause between tokens, not the whole answer, which a total timeout would throw away.
    text = " ".join(f"word{i}" for i in range(40))
    with LocalOpenAIServer(latency_s=3.0, serial=True) as one_slot:
        llm = make_llm(
            remote(one_slot, llm_timeout_s=1.5, llm_idle_timeout_s=1.5, llm_max_retries=0)
        )
        started = time.perf_counter()
        assert llm.run(WORD_TASK, words(text)).count == 40
        assert time.perf_counter() - started >= 3.0
        assert one_slot.last_request["body"]["stream"] is True
        usage = llm.snapshot()
        assert (usage.calls, usage.failed_calls) == (1, 0)
        assert_ledger_matches(usage, one_slot.stats)


def test_a_slow_first_token_times_out_by_its_own_limit_and_is_retried(
    server: LocalOpenAIServer,
) -> None:
    # The server accepts at once (headers and the role chunk) but its first token is late.
    server.inject("slow_first_token", times=1, delay_s=4.0)
    once = make_llm(remote(server, llm_timeout_s=2.0, llm_max_retries=0))
    with pytest.raises(LLMError, match="no first token within 2 s"):
        once.run(WORD_TASK, words("late start"))
    server.wait_idle()
    server.reset_stats()
    server.inject("slow_first_token", times=1, delay_s=4.0)
    llm = quick(make_llm(remote(server, llm_timeout_s=2.0)))  # no wait: the slot was freed
    assert llm.run(WORD_TASK, words("late start")).count == 2
    usage = llm.snapshot()
    assert (usage.calls, usage.failed_calls, usage.retries) == (2, 1, 1)
    assert usage.calls == server.stats.chat_requests


def test_a_local_server_gets_one_request_at_a_time_by_default(memory_world: Settings) -> None:
    assert Settings.from_env(openai_base_url="http://127.0.0.1:8080/v1").concurrency == 1
    assert Settings.from_env(openai_base_url="http://192.168.1.20:8000/v1").concurrency == 1
    assert Settings.from_env(openai_base_url="https://api.openai.com/v1").concurrency == 8
    local = Settings.from_env(openai_base_url="http://localhost:8080/v1", llm_concurrency=4)
    assert local.concurrency == 4  # set: the server's slots
    with LocalOpenAIServer(serial=True) as one_slot:  # llama.cpp's default: one slot
        settings = remote(one_slot, memory_world, llm_timeout_s=10.0)
        builder = builder_from_settings(settings, llm=quick(make_llm(settings)))
        world = read_world(settings.sources_db)
        seat = sorted(world.seats)[0]
        projects = [f"project:{p}" for p, s in world.projects.items() if s == seat]
        reports = builder.build([*projects, f"seat:{seat}"])
        assert all(r.status == "built" for r in reports) and len(reports) >= 3
        # Nothing of ours waited in the server's queue, where a timeout would have counted it.
        assert (one_slot.stats.stacked, one_slot.stats.peak_in_flight) == (0, 1)


# --------------------------------------------------------------------------- interrupted streams


def test_an_interrupted_stream_is_re_sent_as_a_transport_failure_not_blamed_on_the_model(
    server: LocalOpenAIServer,
) -> None:
    payload = words("one two three four five six seven eight nine ten")
    server.inject("interrupted_stream", times=1)  # [DONE] halfway, no finish_reason
    llm = quick(make_llm(remote(server)))
    assert llm.run(WORD_TASK, payload).count == 10
    first, retry = server.stats.history
    assert (first.interrupted, retry.interrupted) == (True, False)
    # The same request again: no correction turn telling the model its JSON was broken.
    assert server.last_request["body"]["messages"] == WORD_TASK.messages(payload)
    usage = llm.snapshot()
    assert (usage.calls, usage.failed_calls, usage.retries, usage.interrupted) == (2, 1, 1, 1)
    assert_ledger_matches(usage, server.stats)  # the cut-off text's tokens are counted

    server.reset_stats()
    server.inject("interrupted_stream", times="always")
    with pytest.raises(LLMError, match="without a finish_reason") as caught:
        llm.run(WORD_TASK, payload, context="project p-3")
    assert "--interrupt_requests False" in str(caught.value)
    assert llm.snapshot().interrupted == 1 + server.stats.interrupted == 4


def test_an_interrupting_server_cuts_the_running_stream_when_another_request_arrives() -> None:
    body = {"model": "m", "messages": WORD_TASK.messages(words("a b c d e f g h i j"))}
    with (
        LocalOpenAIServer(interrupt_requests=True, latency_s=0.5) as llama,
        httpx.Client(base_url=llama.base_url, timeout=10) as http,
        ThreadPoolExecutor(max_workers=1) as pool,
        http.stream("POST", "/chat/completions", json={**body, "stream": True}) as first,
    ):
        events = (line for line in first.iter_lines() if line)
        assert '"role": "assistant"' in next(events)  # the first answer has started
        second = pool.submit(http.post, "/chat/completions", json=body)
        cut = list(events)
        assert cut[-1] == "data: [DONE]"
        finishes = [json.loads(e[6:])["choices"][0]["finish_reason"] for e in cut[:-1]]
        assert finishes == [None] * len(finishes)  # no finish_reason: cut off, not finished
        assert second.result().json()["choices"][0]["finish_reason"] == "stop"
    assert (llama.stats.interrupted, llama.stats.answered) == (1, 1)


def test_the_judge_keeps_to_the_servers_slots_so_it_never_interrupts_itself(
    tmp_path: Path,
) -> None:
    import hltm.judge.tasks  # noqa: F401 - registers the judge's task with the server
    from hltm.judge.pipeline import judge_pool
    from tests.support.judge import POOL, VACANCY

    # llama-cpp-python's server as shipped: one slot, a second request cuts the first off.
    with LocalOpenAIServer(interrupt_requests=True, latency_s=0.1) as llama:
        settings = remote(llama, llm_timeout_s=10.0)  # a loopback address: one slot
        report = judge_pool(tmp_path / "d.duckdb", make_llm(settings), VACANCY, POOL[:3])
        assert (report.evaluated, report.failed) == (3, 0)
        assert (llama.stats.interrupted, llama.stats.peak_in_flight) == (0, 1)
        assert llama.stats.chat_requests == 3


# --------------------------------------------------------------------------- the ledger


def _failed_and_built(result: dg.ExecuteInProcessResult) -> tuple[list[Any], list[Any]]:
    """The failed and the stored nodes' reports of a failed memory run, from its failure."""
    (failure,) = [e.step_failure_data.user_failure_data for e in result.get_step_failure_events()]
    assert failure is not None
    reports = failure.metadata["reports"].value  # type: ignore[attr-defined]
    return [m for m in reports if m["status"] == "failed"], [
        m for m in reports if m["status"] != "failed"
    ]


def test_the_memory_ledger_counts_the_requests_of_failed_nodes(
    memory_world: Settings, server: LocalOpenAIServer
) -> None:
    settings = remote(server, memory_world, llm_max_retries=1)
    pid = sorted(read_world(settings.sources_db).projects)[0]
    server.inject("schema_violation", times="always", match=f'"project_id": "{pid}"')
    server.inject("interrupted_stream", times=1)  # some node's stream, cut off by the server
    defs = _shared.memory_definitions(settings)
    instance = dg.DagsterInstance.ephemeral()
    result = _shared.refresh_all(defs, instance, settings, raise_on_error=False)
    assert not result.success
    assert not result.get_asset_materialization_events()  # no partition published half-built
    failed, built = _failed_and_built(result)
    (node,) = [m for m in failed if m["node_id"] == f"project:{pid}"]
    assert node["error"]
    # Its seat and contract are not built over a failed child: they fail too, and cost nothing.
    ancestors = [m for m in failed if m is not node]
    assert {m["node_id"].split(":")[0] for m in ancestors} <= {"seat", "contract"}
    assert node["llm_failed_calls"] >= 2  # a task's request and its one retry
    assert node["llm_calls"] >= node["llm_failed_calls"]
    assert node["prompt_tokens"] > 0
    # Every request the server received is in some node's report, failed or built.
    calls = sum(m["llm_calls"] for m in [*failed, *built])
    assert calls == server.stats.chat_requests
    completion = sum(m["completion_tokens"] for m in [*failed, *built])
    assert completion == server.stats.completion_tokens
    interrupted = sum(m["llm_interrupted"] for m in [*failed, *built])
    assert interrupted == server.stats.interrupted == 1


def test_a_run_stopped_halfway_keeps_what_it_stored_and_the_next_builds_only_the_rest(
    memory_world: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hltm.memory.store import MemoryStore

    write = MemoryStore.write
    writes: list[int] = []

    def write_then_stop(self: MemoryStore, *args: Any, **kwargs: Any) -> Any:
        writes.append(1)
        if len(writes) == 2:
            raise KeyboardInterrupt  # the run is stopped during its second contract's write
        return write(self, *args, **kwargs)

    monkeypatch.setattr(MemoryStore, "write", write_then_stop)
    defs = _shared.memory_definitions(memory_world)
    instance = dg.DagsterInstance.ephemeral()
    with pytest.raises(KeyboardInterrupt):
        _shared.refresh_all(defs, instance, memory_world)
    stored = builder_from_settings(memory_world).store.built()
    assert stored  # the first contract's write stays
    assert not instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=dg.AssetKey("contract_memory")), limit=10
    ).records  # …but no partition was published as materialized
    again = _shared.refresh_all(defs, instance, memory_world)
    assert again.success
    assert not set(_shared.rebuilt(again)) & set(stored)  # what it stored is current


# --------------------------------------------------------------------------- memory quality


def test_a_node_whose_facets_all_cite_every_allowed_source_is_flagged(
    memory_world: Settings, server: LocalOpenAIServer
) -> None:
    settings, builder, nid, pid = _one_project(server, memory_world)
    (honest,) = builder.build([nid])
    assert honest.status == "built" and _degraded(settings).passed
    with connect(settings.sources_db, read_only=True) as con:
        documents = con.execute(
            "SELECT count(*) FROM project_documents WHERE project_id = ?", [pid]
        ).fetchone()[0]
    assert documents >= 1
    server.inject("copies_all_sources", times="always", match=f'"project_id": "{pid}"')
    builder.store.clear()
    (report,) = builder.build([nid])
    assert report.status == "built" and report.drops.dropped == 0  # every id was allowed
    node = builder.store.nodes([nid])[nid]
    assert len({f.sources for f in node.facets}) == 1 and len(node.facets[0].sources) >= 2
    with connect(settings.derived_db) as con:
        (flagged,) = degraded_nodes(con, "project")
    assert flagged.node_id == nid and flagged.why.startswith("no evidence of provenance")
    result = _degraded(settings)
    assert not result.passed and "no evidence of provenance" in (result.description or "")

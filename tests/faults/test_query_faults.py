"""The query path under faults, each with a real second process or a real server:

* a query waiting on a slow LLM (the local OpenAI-protocol server, through the real `openai`
  client) holds no DuckDB connection: another process writes to the derived file meanwhile, and
  two tenants' slow queries overlap instead of queueing behind one lock;
* `/healthz` answers at once and `ask` answers 503 + Retry-After within a bounded time while
  another process holds the DuckDB file, and 200 once it lets go;
* an embedded Chroma client made stale by another process's writes is reopened: the next query
  answers, from the new version;
* bodies and questions are bounded before parsing and before any token lookup; `context` must be a
  JSON boolean;
* an answer whose every citation was invalid is flagged in the result, the HTTP body and the log;
* a Chroma server that is down is named, by the CLI (no traceback) and by the engine.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest

from hltm.llm import LLM, DeterministicBackend, Task, make_llm
from hltm.query import tasks
from hltm.query.access import create_token
from hltm.query.engine import QueryEngine, validate_citations
from hltm.query.log import read_query_log
from hltm.query.scope import Identity
from hltm.serving.api import MAX_QUESTION_CHARS
from hltm.serving.http import MAX_BODY_BYTES, ServeLimits, create_app, start_engine
from hltm.settings import Settings
from hltm.vectors import VectorIndexUnavailable
from hltm.warehouse import connect
from hltm_devkit.openai_server import LocalOpenAIServer
from tests.support.query import BuiltWorld, built_world, private_copy  # noqa: F401
from tests.support.serving import free_port

ROOT = Path(__file__).resolve().parents[2]
SLOW_S = 1.5
DB_WAIT_S = 2.0  # the test server's bound on waiting for a DuckDB file another process holds
UNBOUNDED_RETRIES_S = 50.0  # how long `ask` retried a held DuckDB file before it had a bound


def _other_process(code: str, *args: str) -> subprocess.Popen[str]:
    """A second Python process running `code`, talking over stdin / stdout lines."""
    process = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    return process


def _in_other_process(code: str, *args: str, timeout: float = 120) -> str:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


# Holds the DuckDB file read-write (as a memory rebuild does) until its stdin closes.
_HOLD_DB = """
    import sys, duckdb
    con = duckdb.connect(sys.argv[1])
    con.execute("CREATE TABLE IF NOT EXISTS rebuild_probe (n INTEGER)")
    print("holding", flush=True)
    sys.stdin.read()
"""

# On a line from stdin, writes to the DuckDB file at once, with no retry: it fails on "Could not
# set lock" if the file is held.
_WRITE_ON_CUE = """
    import sys, duckdb
    print("ready", flush=True)
    sys.stdin.readline()
    con = duckdb.connect(sys.argv[1])
    con.execute("CREATE TABLE IF NOT EXISTS rebuild_probe (n INTEGER)")
    con.execute("INSERT INTO rebuild_probe VALUES (1)")
    con.close()
    print("written", flush=True)
"""


@pytest.fixture
def slow_llm() -> Iterator[LocalOpenAIServer]:
    import hltm.query.tasks  # noqa: F401  (registers the query tasks with the server)

    with LocalOpenAIServer() as server:
        yield server


def _openai_engine(settings: Settings, server: LocalOpenAIServer) -> QueryEngine:
    online = replace(
        settings, llm_backend="openai", openai_base_url=server.base_url, llm_timeout_s=30
    )
    return QueryEngine(settings, llm=make_llm(online), db_wait_s=5)


def test_a_slow_llm_query_holds_no_db_lock_and_tenants_overlap(
    built_world: BuiltWorld,  # noqa: F811
    slow_llm: LocalOpenAIServer,
) -> None:
    engine = _openai_engine(built_world.settings, slow_llm)
    seat_a, seat_b = built_world.seats()[:2]
    slow_llm.inject("timeout", times=4, delay_s=SLOW_S)  # each query's parse and answer calls
    results: dict[str, Any] = {}

    def ask(seat: str) -> None:
        results[seat] = engine.ask(Identity("seat", seat), "Where do I usually hire?", log=True)

    writer = _other_process(_WRITE_ON_CUE, str(built_world.settings.derived_db))
    assert writer.stdout is not None and writer.stdin is not None
    assert writer.stdout.readline().strip() == "ready"
    threads = [threading.Thread(target=ask, args=(s,)) for s in (seat_a, seat_b)]
    for thread in threads:
        thread.start()
    time.sleep(SLOW_S / 2)  # both queries are now inside their first (slow) LLM call
    writer.stdin.write("go\n")
    writer.stdin.flush()
    assert writer.stdout.readline().strip() == "written"
    assert writer.wait(timeout=30) == 0
    for thread in threads:
        thread.join(timeout=60)
    for seat in (seat_a, seat_b):
        assert results[seat].citations and results[seat].cost.llm_calls == 2
        assert results[seat].cost.llm_ms >= 2 * SLOW_S * 1000 * 0.9
    # Two tenants, two slow calls each: the server held both tenants' calls at once (behind one
    # lock it would only ever see one), counted by the server, so a loaded machine cannot fake it.
    assert slow_llm.stats.peak_in_flight == 2
    logged = {r["query_id"] for r in read_query_log(built_world.settings.derived_db)}
    assert {results[s].query_id for s in (seat_a, seat_b)} <= logged


@pytest.fixture
def served(built_world: BuiltWorld, tmp_path: Path) -> Iterator[tuple[str, Settings]]:  # noqa: F811
    import uvicorn

    settings = private_copy(built_world, tmp_path)
    engine = QueryEngine(settings)
    limits = ServeLimits(concurrency=4, queue=8, db_wait_s=DB_WAIT_S)
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(create_app(engine, limits=limits), port=port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}", settings
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def seat_token(served: tuple[str, Settings], built_world: BuiltWorld) -> str:  # noqa: F811
    _, token = create_token(served[1].derived_db, Identity("seat", built_world.seats()[0]))
    return token


def test_healthz_and_ask_while_another_process_holds_the_db(
    served: tuple[str, Settings], seat_token: str
) -> None:
    base, settings = served
    token = seat_token
    body = {"question": "Where do I usually hire?"}
    holder = _other_process(_HOLD_DB, str(settings.derived_db))
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
        pending: dict[str, httpx.Response] = {}
        asking = threading.Thread(
            target=lambda: pending.update(
                r=httpx.post(f"{base}/v1/ask", json=body, headers=_auth(token), timeout=30)
            )
        )
        started = time.perf_counter()
        asking.start()
        health = httpx.get(f"{base}/healthz", timeout=5)
        assert health.json() == {"status": "ok"}
        assert asking.is_alive()  # answered while ask still waits: the loop is not blocked
        asking.join(timeout=30)
        busy = pending["r"]
        assert busy.status_code == 503 and busy.headers["retry-after"] == "1", busy.text
        assert "locked" in busy.json()["error"]
        # Bounded by the server's wait, not ~50 s of retries (half that: room for a loaded box).
        assert time.perf_counter() - started < UNBOUNDED_RETRIES_S / 2
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=30)
    ok = httpx.post(f"{base}/v1/ask", json=body, headers=_auth(token), timeout=30)
    assert ok.status_code == 200 and ok.json()["status"] == "answered"


def test_bodies_and_questions_are_bounded_and_typed(
    served: tuple[str, Settings], seat_token: str
) -> None:
    base, token = served[0], seat_token
    huge = b'{"question": "' + b"x" * (MAX_BODY_BYTES + 1) + b'"}'
    # Refused on size before the token is even looked up (an unknown token gets 413 too).
    for headers in (_auth(token), _auth("hltm_unknown")):
        assert httpx.post(f"{base}/v1/ask", content=huge, headers=headers).status_code == 413

    def chunks() -> Iterator[bytes]:  # no Content-Length: the stream itself is bounded
        for _ in range(MAX_BODY_BYTES // 1024 + 2):
            yield b" " * 1024

    streamed = httpx.post(f"{base}/v1/ask", content=chunks(), headers=_auth(token))
    assert streamed.status_code == 413
    long = {"question": "x" * (MAX_QUESTION_CHARS + 1)}
    assert httpx.post(f"{base}/v1/ask", json=long, headers=_auth(token)).status_code == 400
    for bad in ({"context": "no"}, {"context": 1}, {"seat": 7}, {"project": " "}):
        response = httpx.post(
            f"{base}/v1/ask", json={"question": "Where?", **bad}, headers=_auth(token)
        )
        assert response.status_code == 400, bad
    plain = httpx.post(
        f"{base}/v1/ask", json={"question": "Where?", "context": False}, headers=_auth(token)
    )
    assert plain.status_code == 200 and "context" not in plain.json()


def test_a_deeply_nested_body_is_refused_with_400(
    served: tuple[str, Settings], seat_token: str
) -> None:
    """Under the size bound, nesting deep enough to exhaust the parser's recursion is a client
    error, not a 500."""
    base, token = served[0], seat_token
    for depth in (5000, 900):  # past the JSON parser's limit; past the validator's
        for body in ("[" * depth + "]" * depth, '{"question": ' + "[" * depth + "]" * depth + "}"):
            assert len(body) < MAX_BODY_BYTES
            response = httpx.post(f"{base}/v1/ask", content=body, headers=_auth(token))
            assert response.status_code == 400, (depth, response.text[:200])
            assert "error" in response.json()


# Another process replaces one node with a new version (as a rebuild does): new items in Chroma,
# then the DuckDB row flips.
_REBUILD_NODE = """
    import sys
    from dataclasses import replace
    from pathlib import Path
    from hltm.embeddings import make_embedder
    from hltm.memory.store import MemoryStore
    from hltm.settings import Settings
    from hltm.vectors import VectorStore
    settings = Settings.from_env(
        data_dir=Path(sys.argv[1]), llm_backend="offline", chroma_host=None
    )
    embedder = make_embedder(settings)
    store = MemoryStore(settings.derived_db, VectorStore(settings, embedder))
    node = store.nodes([sys.argv[2]])[sys.argv[2]]
    new = replace(node, version=node.version + "-rebuilt", summary_short=sys.argv[3])
    store.write([(new, embedder.passages([t for _, _, t, _ in new.search_items()]))])
    print(new.version)
"""


def test_a_stale_embedded_chroma_client_is_reopened(
    built_world: BuiltWorld,  # noqa: F811
    tmp_path: Path,
) -> None:
    settings = private_copy(built_world, tmp_path)
    engine = QueryEngine(settings, log_queries=False)
    pid = built_world.projects()[0]
    before = engine.ask(Identity("project", pid), "What is this role about?")
    assert before.citations
    summary = "Rebuilt elsewhere: a lighthouse keeper role on a remote island."
    version = _in_other_process(_REBUILD_NODE, str(settings.data_dir), f"project:{pid}", summary)
    after = engine.ask(Identity("project", pid), "What is this role about?")
    assert after.retrieved["summary"] == [f"project:{pid}"]
    assert engine.vectors.generation > 0  # the stale view was detected and reopened
    with connect(settings.derived_db) as con:
        (stored,) = con.execute(
            "SELECT version FROM memory_nodes WHERE node_id = ?", [f"project:{pid}"]
        ).fetchone()
    assert stored == version.strip()
    again = engine.ask(Identity("project", pid), "What is this role about?")
    assert again.retrieved == after.retrieved  # and it stays answered: no lasting error


class _CitesOutsideContext(DeterministicBackend):
    """The offline backend whose answers cite only ids that are not in the context."""

    def complete(self, task: Task[Any], messages: list[dict[str, str]], model: str) -> str:
        raw = super().complete(task, messages, model)
        if task is not tasks.ANSWER:
            return raw
        answer = task.output_model.model_validate_json(raw)
        return answer.model_copy(update={"citation": ["project:invented-1"]}).model_dump_json()


def test_an_answer_with_only_invalid_citations_is_flagged(
    built_world: BuiltWorld,  # noqa: F811
    tmp_path: Path,
) -> None:
    from starlette.testclient import TestClient

    settings = private_copy(built_world, tmp_path)
    engine = QueryEngine(settings, llm=LLM(_CitesOutsideContext(), "offline-invalid-cites"))
    seat = built_world.seats()[0]
    result = engine.ask(Identity("seat", seat), "Where do I usually hire?")
    data = result.as_dict()
    assert data["status"] == "unsupported" and data["unsupported"] is True
    assert data["citations"] == [] and data["dropped_citations"] == ["project:invented-1"]
    assert "citation" in data["warning"]
    (row,) = [r for r in read_query_log(settings.derived_db) if r["query_id"] == result.query_id]
    assert row["status"] == "unsupported"
    _, token = create_token(settings.derived_db, Identity("seat", seat))
    with TestClient(create_app(engine)) as client:
        body = client.post(
            "/v1/ask", json={"question": "Where do I usually hire?"}, headers=_auth(token)
        ).json()
    assert body["status"] == "unsupported" and body["warning"]


def test_a_chroma_server_that_is_down_is_named(
    built_world: BuiltWorld,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from click.testing import CliRunner

    from hltm_cli import main

    port = free_port()  # nothing listens there
    down = replace(built_world.settings, chroma_host="127.0.0.1", chroma_port=port)
    with pytest.raises(VectorIndexUnavailable, match=f"Chroma server at 127.0.0.1:{port}"):
        QueryEngine(down)
    monkeypatch.setenv("HLTM_DATA_DIR", str(built_world.settings.data_dir))
    monkeypatch.setenv("CHROMA_HOST", "127.0.0.1")
    monkeypatch.setenv("CHROMA_PORT", str(port))
    out = CliRunner().invoke(main, ["ask", "--seat", built_world.seats()[0], "Where?"])
    assert out.exit_code == 1 and "not reachable" in out.output
    assert "Traceback" not in out.output


def test_a_server_starts_on_a_damaged_index_and_answers_503_naming_it(
    built_world: BuiltWorld,  # noqa: F811
    tmp_path: Path,
) -> None:
    """Before: a truncated `chroma.sqlite3` was a traceback, and `hltm serve` died at start."""
    from starlette.testclient import TestClient

    settings = private_copy(built_world, tmp_path)
    _, token = create_token(settings.derived_db, Identity("seat", built_world.seats()[0]))
    index = settings.chroma_path / "chroma.sqlite3"
    with index.open("r+b") as f:
        f.truncate(index.stat().st_size // 2)
    engine = start_engine(settings, ServeLimits())
    with TestClient(create_app(engine)) as client:
        assert client.get("/healthz").status_code == 200
        answer = client.post("/v1/ask", json={"question": "Where?"}, headers=_auth(token))
    assert answer.status_code == 503, answer.text
    assert f"the embedded Chroma index at {settings.chroma_path}: damaged" in answer.text
    assert "run `hltm refresh`" in answer.text


def test_readers_never_fail_while_the_embedded_client_is_reopened(
    built_world: BuiltWorld,  # noqa: F811
    tmp_path: Path,
) -> None:
    """A reopen (another process rebuilt the memory) closes the client every thread shares:
    queries in flight finish on the old one, later ones use the new one, none fails."""
    settings = private_copy(built_world, tmp_path)
    engine = QueryEngine(settings, log_queries=False)
    projects = built_world.projects()[:4]
    errors: list[str] = []
    answered: list[int] = []
    readers_done = threading.Event()

    def read(pid: str) -> None:
        for _ in range(15):
            try:
                result = engine.ask(Identity("project", pid), "What is this role about?")
                answered.append(len(result.retrieved.get("summary", [])))
            except Exception as err:  # every failure is the finding
                errors.append(f"{type(err).__name__}: {err}")

    def reopen() -> int:
        reopens = 0
        while not readers_done.is_set() and reopens < 200:
            engine.vectors.reopen(engine.vectors.generation)
            reopens += 1
        return reopens

    readers = [threading.Thread(target=read, args=(pid,)) for pid in projects]
    reopener_result: list[int] = []
    reopener = threading.Thread(target=lambda: reopener_result.append(reopen()))
    reopener.start()
    for t in readers:
        t.start()
    for t in readers:
        t.join(timeout=120)
    readers_done.set()
    reopener.join(timeout=60)
    assert errors == []
    assert len(answered) == 15 * len(projects) and all(answered)
    assert reopener_result and reopener_result[0] > 1  # the client was swapped under the reads


def _remote_engine(settings: Settings, server: LocalOpenAIServer) -> QueryEngine:
    online = replace(
        settings,
        llm_backend="openai",
        openai_base_url=server.base_url,
        openai_api_key="test",
        llm_timeout_s=30,
    )
    return QueryEngine(settings, llm=make_llm(online), db_wait_s=5)


def test_document_ids_cited_count_for_their_nodes_and_only_node_ids_are_offered(
    built_world: BuiltWorld,  # noqa: F811
    slow_llm: LocalOpenAIServer,
    tmp_path: Path,
) -> None:
    settings = private_copy(built_world, tmp_path)
    engine = _remote_engine(settings, slow_llm)
    pid = built_world.projects()[0]
    # A small model on a json_object server cites the documents its context names.
    slow_llm.inject("cites_document_ids", times="always")
    result = engine.ask(Identity("project", pid), "What is this role about?")
    body = slow_llm.last_request["body"]
    schema = body["response_format"]["json_schema"]["schema"]
    assert schema["properties"]["citation"]["items"]["enum"] == sorted(result.context_ids)
    assert result.mapped_citations, "the fault cited no document id"
    for document, nodes in result.mapped_citations.items():
        assert not document.startswith("project:") and set(nodes) <= set(result.context_ids)
    assert result.status == "answered" and result.citations and not result.dropped_citations
    assert set(result.mapped_citations) <= set(result.sources)
    (row,) = [r for r in read_query_log(settings.derived_db) if r["query_id"] == result.query_id]
    assert row["mapped_citations"] == result.mapped_citations and row["status"] == "answered"

    # An id outside the context (a document of another project) stays invalid.
    other = built_world.projects()[1]
    foreign = next(iter(engine.ask(Identity("project", other), "What is this role about?").sources))
    cited = validate_citations([foreign], set(result.context_ids), {})
    assert (cited.kept, cited.dropped) == ([], [foreign])


def test_an_answer_without_citations_is_unsupported_and_an_empty_scope_is_no_memory(
    built_world: BuiltWorld,  # noqa: F811
    slow_llm: LocalOpenAIServer,
) -> None:
    engine = _remote_engine(built_world.settings, slow_llm)
    slow_llm.inject("no_citations", times="always")
    seat = built_world.seats()[0]
    result = engine.ask(Identity("seat", seat), "Where do I usually hire?", log=False)
    assert result.answer and result.context_ids
    assert result.status == "unsupported" and result.citations == result.dropped_citations == []
    assert "cites nothing" in result.warning
    # Nothing stored for the scope: "no memory", with no LLM call at all.
    empty = engine.ask(Identity("seat", "no-such-seat"), "Where do I usually hire?", log=False)
    assert empty.status == "no_memory" and empty.cost.llm_calls == 0


def test_ask_prints_the_unsupported_warning_once(
    built_world: BuiltWorld,  # noqa: F811
    slow_llm: LocalOpenAIServer,
    tmp_path: Path,
) -> None:
    settings = private_copy(built_world, tmp_path)
    slow_llm.inject("unknown_ids", times="always")  # every citation outside the context
    env = {
        **os.environ,
        "HLTM_DATA_DIR": str(settings.data_dir),
        "HLTM_LLM_BACKEND": "openai",
        "OPENAI_BASE_URL": slow_llm.base_url,
        "OPENAI_API_KEY": "test",
        "DAGSTER_HOME": str(tmp_path / "dagster"),
    }
    env.pop("CHROMA_HOST", None)
    seat = built_world.seats()[0]
    done = subprocess.run(
        [str(Path(sys.executable).with_name("hltm")), "ask", "--seat", seat, "Where do I hire?"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 3, done.stderr[-2000:]
    assert done.stderr.count("unsupported answer") == 1, done.stderr

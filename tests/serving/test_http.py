"""The HTTP endpoint: identity from a bearer token only, 401 for missing/unknown/revoked tokens,
403 for any attempt to widen, narrowing inside the token's subtree allowed; and the same endpoint
on a real uvicorn over loopback."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from starlette.testclient import TestClient

from hltm.query.access import create_token, identity_for_token, list_tokens, revoke_token
from hltm.query.engine import QueryEngine
from hltm.query.scope import Identity
from hltm.serving.http import create_app, default_concurrency
from tests.support.query import BuiltWorld, built_world, engine  # noqa: F401
from tests.support.serving import free_port, wait_until_healthy


@pytest.fixture(scope="module")
def client(engine: QueryEngine) -> Iterator[TestClient]:  # noqa: F811
    with TestClient(create_app(engine)) as test_client:
        yield test_client


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_tokens_are_stored_hashed_and_can_be_revoked(built_world: BuiltWorld) -> None:  # noqa: F811
    db = built_world.settings.derived_db
    seat = built_world.seats()[0]
    token_id, token = create_token(db, Identity("seat", seat), "agent")
    assert identity_for_token(db, token) == Identity("seat", seat)
    assert identity_for_token(db, token + "x") is None
    assert identity_for_token(db, "hltm_" + "A" * 43) is None
    from hltm.warehouse import connect

    with connect(db) as con:
        stored = con.execute("SELECT * FROM api_tokens").fetchall()
    assert token not in repr(stored)
    assert any(t.token_id == token_id and t.active for t in list_tokens(db))
    assert revoke_token(db, token_id) and not revoke_token(db, token_id)
    assert identity_for_token(db, token) is None


def test_missing_or_unknown_token_is_refused(client: TestClient) -> None:
    body = {"question": "Where do I usually hire?"}
    missing = client.post("/v1/ask", json=body)
    assert missing.status_code == 401 and missing.headers["www-authenticate"] == "Bearer"
    for header in (
        {"Authorization": "Bearer hltm_nope"},
        {"Authorization": "Basic abc"},
        {"Authorization": "Bearer "},
    ):
        assert client.post("/v1/ask", json=body, headers=header).status_code == 401
    assert client.get("/v1/whoami").status_code == 401
    assert client.get("/healthz").json() == {"status": "ok"}


def test_a_token_answers_inside_its_scope_and_never_widens(
    client: TestClient,
    built_world: BuiltWorld,  # noqa: F811
) -> None:
    db = built_world.settings.derived_db
    seat, other_seat = built_world.seats()[0], built_world.seats()[1]
    own = [p for p in built_world.projects() if built_world.project(p)["seat_id"] == seat]
    foreign = [p for p in built_world.projects() if built_world.project(p)["seat_id"] != seat]
    _, token = create_token(db, Identity("seat", seat))

    who = client.get("/v1/whoami", headers=_auth(token)).json()
    assert who["identity"] == f"seat:{seat}" and who["has_memory"]

    response = client.post(
        "/v1/ask",
        json={"question": "Where do I usually hire?", "context": True},
        headers=_auth(token),
    )
    assert response.status_code == 200
    data = response.json()
    assert data["identity"] == f"seat:{seat}" and data["citations"]
    nodes = {i["node_id"] for items in data["context"].values() for i in items}
    allowed = {f"seat:{seat}"} | {f"project:{p}" for p in own}
    assert nodes <= allowed and set(data["citations"]) <= allowed
    assert data["cost"]["llm_calls"] == 2

    narrowed = client.post(
        "/v1/ask", json={"question": "What work mode?", "project": own[0]}, headers=_auth(token)
    )
    assert narrowed.status_code == 200
    assert narrowed.json()["scope_root"] == f"project:{own[0]}"

    for widen in (
        {"project": foreign[0]},
        {"seat": other_seat},
        {"project": "nope"},
        {"contract": built_world.contracts()[0]},
    ):
        refused = client.post(
            "/v1/ask",
            json={"question": "Where do I usually hire?", **widen},
            headers=_auth(token),
        )
        assert refused.status_code == 403, widen
        assert "outside" in refused.json()["error"]

    _, project_token = create_token(db, Identity("project", own[0]))
    up = client.post("/v1/ask", json={"question": "x?", "seat": seat}, headers=_auth(project_token))
    assert up.status_code == 403
    for bad in ({}, {"question": ""}, {"question": 3}, [1, 2]):
        assert client.post("/v1/ask", json=bad, headers=_auth(token)).status_code == 400


def test_real_uvicorn_on_loopback_refuses_unknown_tokens(
    engine: QueryEngine,  # noqa: F811
    built_world: BuiltWorld,  # noqa: F811
) -> None:
    import uvicorn

    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(create_app(engine), host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        for _ in range(100):
            if server.started:
                break
            time.sleep(0.05)
        base = f"http://127.0.0.1:{port}"
        body = {"question": "Where do I usually hire?"}
        assert httpx.post(f"{base}/v1/ask", json=body).status_code == 401
        bogus = {"Authorization": "Bearer hltm_unknown"}
        assert httpx.post(f"{base}/v1/ask", json=body, headers=bogus).status_code == 401
        _, token = create_token(
            built_world.settings.derived_db, Identity("contract", built_world.contracts()[0])
        )
        ok = httpx.post(f"{base}/v1/ask", json=body, headers=_auth(token), timeout=60)
        assert ok.status_code == 200 and ok.json()["citations"]
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def test_the_workers_port_is_refused_when_another_program_holds_it() -> None:
    """Each worker listens on its own SO_REUSEPORT socket; a port held by a program that did not
    ask to share it is still refused, before any worker starts."""

    from hltm.serving.http import _port_socket

    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        with pytest.raises(OSError):
            _port_socket("127.0.0.1", other.getsockname()[1], listen=False)
    first = _port_socket("127.0.0.1", 0, listen=True)
    with first, _port_socket("127.0.0.1", first.getsockname()[1], listen=True) as second:
        assert second.getsockname() == first.getsockname()  # the workers share the port


def test_serve_runs_one_engine_per_worker_process_on_one_port(
    built_world: BuiltWorld,  # noqa: F811
) -> None:
    """`serve(workers=2)`: two processes answer on one port; SIGTERM stops them cleanly."""
    import multiprocessing
    import os
    import signal
    from concurrent.futures import ThreadPoolExecutor

    from hltm.serving.http import ServeLimits, serve

    port = free_port()
    args = (built_world.settings, "127.0.0.1", port, ServeLimits(), 2)
    server = multiprocessing.get_context("spawn").Process(target=serve, args=args)
    server.start()
    try:
        base = f"http://127.0.0.1:{port}"
        wait_until_healthy(base)
        _, token = create_token(
            built_world.settings.derived_db, Identity("seat", built_world.seats()[0])
        )
        body = {"question": "Where do I usually hire?"}

        def ask(_: int) -> tuple[int, str]:
            answer = httpx.post(f"{base}/v1/ask", json=body, headers=_auth(token), timeout=60)
            return answer.status_code, answer.json().get("answer", "")

        with ThreadPoolExecutor(6) as pool:
            answers = list(pool.map(ask, range(12)))
        assert {status for status, _ in answers} == {200}
        assert len({text for _, text in answers}) == 1  # every worker answers alike
        children = Path(f"/proc/{server.pid}/task/{server.pid}/children").read_text().split()
        commands = [Path(f"/proc/{c}/cmdline").read_bytes() for c in children]
        assert sum(b"spawn_main" in c for c in commands) == 2  # two serving processes
    finally:
        if server.pid is not None:
            os.kill(server.pid, signal.SIGTERM)
        server.join(timeout=60)
    assert server.exitcode == 0


def test_cli_ask_json_and_token_management(
    built_world: BuiltWorld,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import json

    from click.testing import CliRunner

    from hltm_cli import main

    monkeypatch.setenv("HLTM_DATA_DIR", str(built_world.settings.data_dir))
    monkeypatch.setenv("HLTM_LLM_BACKEND", "offline")
    runner = CliRunner()
    seat = built_world.seats()[0]
    out = runner.invoke(main, ["ask", "--seat", seat, "Where do I usually hire?", "--json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    assert data["identity"] == f"seat:{seat}" and data["citations"]
    assert data["cost"]["llm_calls"] == 2
    both = runner.invoke(main, ["ask", "--seat", seat, "--contract", "c01", "x?"])
    assert both.exit_code != 0 and "exactly one" in both.output

    created = runner.invoke(main, ["token", "create", "--seat", seat, "--label", "cli"])
    assert created.exit_code == 0, created.output
    token_id = created.stdout.split()[1]
    listed = runner.invoke(main, ["token", "list"])
    assert token_id in listed.output and "active" in listed.output
    assert "hltm_" not in listed.output  # tokens are never shown again
    assert runner.invoke(main, ["token", "revoke", token_id]).exit_code == 0
    assert runner.invoke(main, ["token", "revoke", token_id]).exit_code != 0
    unknown = runner.invoke(main, ["token", "create", "--seat", "no-such-seat"])
    assert unknown.exit_code != 0 and "unknown seat 'no-such-seat'" in unknown.output


def test_a_worker_over_its_share_of_connections_closes_the_one_it_answers_on() -> None:
    """`Connection: close` only while this worker holds more than its share (plus slack), at
    most once per interval; the response is otherwise untouched."""
    import asyncio

    from hltm.serving.balance import ConnectionShares, balanced

    counts = [0, 20]  # the other worker's published count
    mine = {"open": 31}
    shares = ConnectionShares(counts, 0, lambda: mine["open"], slack=1, min_interval_s=3600)
    assert shares.should_close()  # 31 of 51: over ceil(51 / 2) + 1 = 27
    assert not shares.should_close()  # not twice within the interval
    shares.min_interval_s = 0
    mine["open"] = 22
    assert not shares.should_close() and counts == [22, 20]  # ceil(42 / 2) + 1 = 22: its share

    async def app(scope, receive, send) -> None:  # type: ignore[no-untyped-def]
        await send({"type": "http.response.start", "status": 200, "headers": [(b"a", b"1")]})
        await send({"type": "http.response.body", "body": b"ok"})

    def headers_sent(open_now: int) -> list[tuple[bytes, bytes]]:
        mine["open"] = open_now
        sent: list[dict] = []

        async def send(message: dict) -> None:
            sent.append(message)

        asyncio.run(balanced(app, shares)({"type": "http"}, None, send))  # type: ignore[arg-type]
        assert sent[1] == {"type": "http.response.body", "body": b"ok"}
        return sent[0]["headers"]

    assert headers_sent(40) == [(b"a", b"1"), (b"connection", b"close")]
    assert headers_sent(22) == [(b"a", b"1")]


def test_ctrl_c_stops_serve_with_one_line_and_exit_0(
    built_world: BuiltWorld,  # noqa: F811
) -> None:
    """Ctrl-C in a terminal interrupts every process of its group: one line, exit status 0."""
    import os
    import signal
    import subprocess
    import sys

    port = free_port()
    env = {**os.environ, "HLTM_DATA_DIR": str(built_world.settings.data_dir)}
    hltm = Path(sys.executable).parent / "hltm"
    command = [str(hltm), "serve", "--workers", "2", "--port", str(port)]
    server = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)  # fmt: skip
    try:
        wait_until_healthy(f"http://127.0.0.1:{port}")
        os.killpg(server.pid, signal.SIGINT)  # what Ctrl-C does
        out, err = server.communicate(timeout=60)
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGKILL)
    assert server.returncode == 0, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    assert "failed" not in err
    assert out.splitlines()[-1] == "query endpoint stopped"


def test_queries_at_once_per_worker_follow_what_a_query_waits_on(tmp_path: Path) -> None:
    """With the offline backend a query is CPU only: one at a time per worker (threads would only
    take turns on the interpreter); with a model server, several wait on its answers at once."""
    from hltm.settings import Settings

    assert default_concurrency(Settings(data_dir=tmp_path, llm_backend="offline")) == 1
    assert default_concurrency(Settings(data_dir=tmp_path, llm_backend="openai")) == 8

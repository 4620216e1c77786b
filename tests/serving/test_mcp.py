"""The MCP server through the SDK's own client: streamable HTTP (real uvicorn on loopback) and
stdio (a real `hltm mcp` subprocess).

The client lists the tools and gets a scoped, cited answer; a token of seat A cannot read seat B
through either tool, and an unknown, foreign or missing vacancy gets one and the same refusal;
over HTTP a request without a valid token is refused before any MCP message is read, and a
revoked token stops working at once.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from click.testing import CliRunner
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from hltm.query.access import create_token, revoke_token
from hltm.query.engine import QueryEngine
from hltm.query.scope import Identity
from hltm.serving.mcp_server import create_server, http_app
from hltm.settings import E5_ONNX_BACKEND
from tests.support.api import RankedVacancies, publish_two_rankings
from tests.support.query import BuiltWorld, built_world, engine  # noqa: F401
from tests.support.serving import free_port

TOOLS = {"ask", "ranking", "whoami"}
QUESTION = "Where do I usually hire?"


@pytest.fixture(scope="module")
def ranked(built_world: BuiltWorld) -> RankedVacancies:  # noqa: F811
    return publish_two_rankings(built_world)


def _projects_of(world: BuiltWorld, seat: str) -> list[str]:
    return [p for p in world.projects() if world.project(p)["seat_id"] == seat]


@pytest.fixture(scope="module")
def mcp_url(engine: QueryEngine) -> Iterator[str]:  # noqa: F811
    import uvicorn

    port = free_port()
    app = http_app(create_server(engine, "http", base_url=f"http://127.0.0.1:{port}"))
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    for _ in range(200):
        if server.started:
            break
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}/mcp"
    server.should_exit = True
    thread.join(timeout=10)


async def _scoped_session_checks(
    session: ClientSession, world: BuiltWorld, ranked: RankedVacancies
) -> dict[str, Any]:
    """What seat A's session may and may not do, the same for every transport."""
    started = await session.initialize()
    assert started.server_info.version == version("hltm-platform")  # the package's, never ""
    listed = await session.list_tools()
    assert {tool.name for tool in listed.tools} == TOOLS
    ask_tool = next(tool for tool in listed.tools if tool.name == "ask")
    assert "question" in ask_tool.input_schema["required"] and ask_tool.output_schema

    own = _projects_of(world, ranked.seat)
    allowed = {f"seat:{ranked.seat}"} | {f"project:{p}" for p in own}
    answer = await session.call_tool("ask", {"question": QUESTION, "context": True})
    assert not answer.is_error, answer.content
    data = answer.structured_content
    assert data["identity"] == f"seat:{ranked.seat}" and data["citations"]
    context_nodes = {item["node_id"] for items in data["context"].values() for item in items}
    assert context_nodes <= allowed and set(data["citations"]) <= allowed

    narrowed = await session.call_tool("ask", {"question": QUESTION, "project": own[0]})
    assert not narrowed.is_error and narrowed.structured_content["scope_root"] == (
        f"project:{own[0]}"
    )
    foreign_project = _projects_of(world, ranked.other_seat)[0]
    for widen in ({"seat": ranked.other_seat}, {"project": foreign_project}):
        refused = await session.call_tool("ask", {"question": QUESTION, **widen})
        assert refused.is_error and "outside" in refused.content[0].text, widen

    mine = await session.call_tool("ranking", {"vacancy_id": ranked.own_vacancy, "top": 2})
    assert not mine.is_error, mine.content
    assert len(mine.structured_content["top"]) == 2
    refusals = set()
    for vacancy in (ranked.foreign_vacancy, "no-such-vacancy"):
        refused = await session.call_tool("ranking", {"vacancy_id": vacancy})
        assert refused.is_error and refused.structured_content is None
        refusals.add(refused.content[0].text)
    (refusal,) = refusals  # a foreign vacancy and an unknown one get the same answer
    assert "outside the token's scope" in refusal

    for tool, arguments in (
        ("ranking", {"vacancy_id": ranked.own_vacancy, "top": 0}),
        ("ask", {"question": "x" * 2001}),
    ):
        invalid = await session.call_tool(tool, arguments)  # the same bounds as over HTTP
        assert invalid.is_error and "validation error" in invalid.content[0].text

    who = await session.call_tool("whoami", {})
    return who.structured_content


def test_streamable_http_client_is_scoped_by_its_bearer_token(
    mcp_url: str,
    built_world: BuiltWorld,  # noqa: F811
    ranked: RankedVacancies,
) -> None:
    db = built_world.settings.derived_db
    token_id, token = create_token(db, Identity("seat", ranked.seat), "mcp test")

    async def session_as(bearer: str) -> dict[str, Any]:
        headers = {"Authorization": f"Bearer {bearer}"}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=60) as http,
            streamable_http_client(mcp_url, http_client=http) as (read, write),
            ClientSession(read, write) as session,
        ):
            return await _scoped_session_checks(session, built_world, ranked)

    who = anyio.run(session_as, token)
    assert who["identity"] == f"seat:{ranked.seat}" and who["has_memory"]

    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    accept = {"Accept": "application/json, text/event-stream"}
    for headers in ({}, {"Authorization": "Bearer hltm_unknown"}):
        refused = httpx2.post(mcp_url, json=body, headers={**accept, **headers})
        assert (
            refused.status_code == 401 and "bearer" in refused.headers["www-authenticate"].lower()
        )
    assert revoke_token(db, token_id)
    revoked = httpx2.post(
        mcp_url, json=body, headers={**accept, "Authorization": f"Bearer {token}"}
    )
    assert revoked.status_code == 401


def test_stdio_client_reads_only_the_subtree_of_hltm_token(
    built_world: BuiltWorld,  # noqa: F811
    ranked: RankedVacancies,
) -> None:
    settings = built_world.settings
    _, token = create_token(settings.derived_db, Identity("seat", ranked.seat), "stdio test")
    hltm = Path(sys.executable).with_name("hltm")
    params = StdioServerParameters(
        command=str(hltm),
        args=["mcp", "--transport", "stdio"],
        env={
            "HLTM_DATA_DIR": str(settings.data_dir),
            "HLTM_LLM_BACKEND": "offline",
            "HLTM_EMBEDDINGS": E5_ONNX_BACKEND,
            "HLTM_TOKEN": token,
        },
    )

    async def session() -> dict[str, Any]:
        async with (
            stdio_client(params) as (read, write),
            ClientSession(read, write) as client,
        ):
            return await _scoped_session_checks(client, built_world, ranked)

    who = anyio.run(session)
    assert who["identity"] == f"seat:{ranked.seat}"


def test_stdio_server_refuses_to_start_without_a_valid_token(
    built_world: BuiltWorld,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from hltm_cli import main

    monkeypatch.setenv("HLTM_DATA_DIR", str(built_world.settings.data_dir))
    for token in ("hltm_not-a-token", ""):
        monkeypatch.setenv("HLTM_TOKEN", token)
        out = CliRunner().invoke(main, ["mcp", "--transport", "stdio"])
        assert out.exit_code == 1 and "HLTM_TOKEN is missing, unknown or revoked" in out.output

"""The MCP face of the query path (the `mcp` SDK's `MCPServer`), over stdio or streamable HTTP.

Tools, with the same models as the HTTP endpoint (`hltm.serving.api`):

* `ask(question, seat?, project?, context?)` — a cited answer from the memory of the caller's
  subtree (`QueryEngine.ask`, the one scoped boundary);
* `ranking(vacancy_id, top?)` — the latest published ranking of a vacancy in the caller's subtree;
* `whoami()` — the caller's identity and scope.

The caller is always a token from `hltm token create`, never a tool argument:

* stdio: the token given at start (`HLTM_TOKEN`), one identity for the whole process;
* streamable HTTP: the bearer token of every request, verified by the SDK's auth middleware
  (`TokenVerifier`), so a request without a valid token gets 401 before any MCP message is read.

Either way the token is looked up again on every call, so a revoked token stops working at
once. Arguments may narrow the scope inside the token's subtree, never widen it: isolation is the
query engine's structural filter, the same as over HTTP, not something the tools re-implement.
"""

from __future__ import annotations

from importlib.metadata import version
from pathlib import Path
from typing import Literal

import anyio
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import ValidationError
from starlette.applications import Starlette

from hltm.query.access import identity_for_token
from hltm.query.engine import QueryEngine
from hltm.query.scope import Identity, ScopeError
from hltm.serving import api
from hltm.serving.api import (
    ApiError,
    AskRequest,
    AskResponse,
    NarrowProject,
    NarrowSeat,
    NodeIdText,
    Question,
    RankingResponse,
    Top,
    WhoAmI,
    WithContext,
    invalid_body,
)

Transport = Literal["stdio", "http"]
SERVER_NAME = "hltm-memory"
PACKAGE = "hltm-platform"  # whose version the server reports to every client
READ_SCOPE = "hltm:read"
# Reading only (a question is logged for pattern mining, nothing a caller sees changes).
READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)
INSTRUCTIONS = (
    "Recruiting memory of one contract, seat or project (the caller's token decides which). "
    "`ask` answers a recruiter's question with citations to memory node ids; its `status` says "
    "what the answer is worth (`not_in_memory`: the memory does not say; `unsupported`: nothing "
    "backs it, never pass it on). `ranking` returns a vacancy's current candidate ranking. "
    "Arguments can narrow the scope, never widen it."
)


class TokenIdentityVerifier:
    """The SDK's `TokenVerifier` over our own tokens: an active token → its identity."""

    def __init__(self, tokens_db: Path | str) -> None:
        self.tokens_db = tokens_db

    async def verify_token(self, token: str) -> AccessToken | None:
        identity = await anyio.to_thread.run_sync(identity_for_token, self.tokens_db, token)
        if identity is None:
            return None
        return AccessToken(token=token, client_id=identity.node_id, scopes=[READ_SCOPE])


def create_server(
    engine: QueryEngine,
    transport: Transport,
    *,
    token: str | None = None,
    tokens_db: Path | str | None = None,
    base_url: str = "http://127.0.0.1:8766",
) -> MCPServer:
    """The MCP server; `token` is the stdio caller's, HTTP callers bring their own per request."""
    tokens_db = Path(tokens_db or engine.settings.derived_db)
    if transport == "stdio" and identity_for_token(tokens_db, token) is None:
        raise PermissionError("HLTM_TOKEN is missing, unknown or revoked (see `hltm token`)")
    http = transport == "http"
    server = MCPServer(
        SERVER_NAME,
        version=version(PACKAGE),
        instructions=INSTRUCTIONS,
        token_verifier=TokenIdentityVerifier(tokens_db) if http else None,
        # Our tokens are issued by `hltm token create`, not by an OAuth server: no metadata routes.
        auth=AuthSettings(
            issuer_url=base_url, resource_server_url=None, required_scopes=[READ_SCOPE]
        )
        if http
        else None,
    )

    def caller(ctx: Context) -> Identity:
        if http:
            user = getattr(ctx.request_context.request, "scope", {}).get("user")
            presented = user.access_token.token if isinstance(user, AuthenticatedUser) else None
        else:
            presented = token
        identity = identity_for_token(tokens_db, presented)
        if identity is None:
            raise ToolError("the token is missing, unknown or revoked")
        return identity

    @server.tool(annotations=READ_ONLY)
    def ask(
        question: Question,
        ctx: Context,
        seat: NarrowSeat = None,
        project: NarrowProject = None,
        context: WithContext = False,
    ) -> AskResponse:
        """Answer a recruiter's question from the memory of the caller's subtree, with citations
        (node ids) and cost. `seat` / `project` narrow the scope inside the caller's own."""
        identity = caller(ctx)
        arguments = {"question": question, "seat": seat, "project": project, "context": context}
        try:
            asked = AskRequest.model_validate(arguments)
            result = api.answer(engine, identity, asked, channel="mcp")
        except ValidationError as err:
            raise ToolError(invalid_body(err).error) from None
        except ApiError as err:
            raise ToolError(err.message) from None
        return AskResponse.model_validate(result.as_dict(with_context=asked.context))

    @server.tool(annotations=READ_ONLY)
    def ranking(vacancy_id: NodeIdText, ctx: Context, top: Top = 10) -> RankingResponse:
        """The latest published candidate ranking of a vacancy of the caller's subtree, best
        first (judge scores 0-100; `current` says whether it is for the vacancy's present text)."""
        try:
            return api.ranking(engine, caller(ctx), vacancy_id, top)
        except ApiError as err:
            raise ToolError(err.message) from None

    @server.tool(annotations=READ_ONLY)
    def whoami(ctx: Context) -> WhoAmI:
        """The caller's identity (from its token) and the subtree it may read."""
        identity = caller(ctx)
        try:
            scope = engine.scope_for(identity)
        except ScopeError as err:
            raise ToolError(str(err)) from None
        return WhoAmI(identity=identity.node_id, scope=scope.describe(), has_memory=not scope.empty)

    return server


def http_app(server: MCPServer, host: str = "127.0.0.1") -> Starlette:
    """The streamable HTTP app at `/mcp`: stateless JSON responses, every request authenticated."""
    return server.streamable_http_app(stateless_http=True, json_response=True, host=host)


def run(
    engine: QueryEngine,
    transport: Transport,
    *,
    token: str | None = None,
    host: str = "127.0.0.1",
    port: int = 8766,
) -> None:
    """Serve until stopped (stdio: until the client closes the pipe)."""
    server = create_server(engine, transport, token=token, base_url=f"http://{host}:{port}")
    engine.warm_up()  # the embedding model loads now, not inside the first tool call
    if transport == "stdio":
        server.run("stdio")
        return
    import uvicorn

    uvicorn.run(http_app(server, host), host=host, port=port, log_level="warning")

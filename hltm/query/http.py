"""The HTTP endpoint a lead agent calls: Starlette, served by uvicorn (`hltm serve`).

    POST /v1/ask     Authorization: Bearer <token>
                     {"question": "...", "project": "<id>"?, "seat": "<id>"?, "context": false}
                     → 200 the query result (answer, rationale, citations, cost, …)
    GET  /v1/whoami  Authorization: Bearer <token>  → the token's identity and scope
    GET  /v1/rankings/<vacancy_id>?top=10  Authorization: Bearer <token>  → its current ranking
    GET  /healthz    → {"status": "ok"}
    GET  /openapi.json → the OpenAPI description (`hltm.query.api`), whose models validate input

The caller's identity comes only from the token (`hltm token create`). A missing, malformed,
unknown or revoked token is 401. The body may narrow the scope to a seat or project inside the
token's subtree; anything else (a sibling, another contract, a wider level) is 403 — a token never
widens its scope, and the answer never says whether the other id exists.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from hltm.query import api
from hltm.query.access import identity_for_token
from hltm.query.api import AskRequest, RankingQuery, invalid_body, openapi_spec
from hltm.query.engine import QueryEngine
from hltm.query.scope import Identity


def _error(status: int, message: str, **headers: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=headers or None)


def _bearer(request: Request) -> str | None:
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def create_app(engine: QueryEngine, tokens_db: Path | str | None = None) -> Starlette:
    tokens_db = Path(tokens_db or engine.settings.derived_db)

    def authenticate(request: Request) -> Identity | JSONResponse:
        token = _bearer(request)
        if token is None:
            return _error(401, "missing bearer token", **{"WWW-Authenticate": "Bearer"})
        identity = identity_for_token(tokens_db, token)
        if identity is None:
            return _error(
                401,
                "unknown or revoked token",
                **{"WWW-Authenticate": 'Bearer error="invalid_token"'},
            )
        return identity

    def health(request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    def whoami(request: Request) -> JSONResponse:
        identity = authenticate(request)
        if isinstance(identity, JSONResponse):
            return identity
        scope = engine.scope_for(identity)
        return JSONResponse(
            {"identity": identity.node_id, "scope": scope.describe(), "has_memory": not scope.empty}
        )

    async def ask(request: Request) -> JSONResponse:
        identity = authenticate(request)
        if isinstance(identity, JSONResponse):
            return identity
        try:
            body: Any = await request.json()
        except ValueError:
            return _error(400, "the body must be JSON")
        try:
            asked = AskRequest.model_validate(body)
        except ValidationError as err:
            return JSONResponse(invalid_body(err).model_dump(), status_code=400)
        return await _run(identity, asked)

    def ranking(request: Request) -> JSONResponse:
        identity = authenticate(request)
        if isinstance(identity, JSONResponse):
            return identity
        try:
            query = RankingQuery.model_validate(dict(request.query_params), strict=False)
        except ValidationError as err:
            return JSONResponse(invalid_body(err).model_dump(), status_code=400)
        try:
            found = api.ranking(engine, identity, request.path_params["vacancy_id"], query.top)
        except api.ApiError as err:
            return _error(err.status, err.message)
        return JSONResponse(found.model_dump())

    async def _run(identity: Identity, asked: AskRequest) -> JSONResponse:
        from starlette.concurrency import run_in_threadpool

        try:
            result = await run_in_threadpool(api.answer, engine, identity, asked, "http")
        except api.ApiError as err:
            return _error(err.status, err.message)
        return JSONResponse(result.as_dict(with_context=asked.context))

    return Starlette(
        routes=[
            Route("/healthz", health, methods=["GET"]),
            Route("/openapi.json", lambda _: JSONResponse(openapi_spec()), methods=["GET"]),
            Route("/v1/rankings/{vacancy_id}", ranking, methods=["GET"]),
            Route("/v1/whoami", whoami, methods=["GET"]),
            Route("/v1/ask", ask, methods=["POST"]),
        ]
    )


def serve(engine: QueryEngine, host: str = "127.0.0.1", port: int = 8765) -> None:
    import uvicorn

    uvicorn.run(create_app(engine), host=host, port=port, log_level="info")

"""The agent-facing API: request and response models, and the OpenAPI description built from them.

One set of pydantic models serves both faces a lead agent can call: the HTTP endpoint validates
its bodies with them and publishes `openapi_spec()` at `/openapi.json`, and the MCP server
(`hltm.serving.mcp_server`) takes the same arguments and returns the same structures as its tools.
The spec is generated from the models, so it cannot drift from what is validated.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StringConstraints, ValidationError
from pydantic.json_schema import models_json_schema

from hltm.judge.journal import Ranked
from hltm.llm import LLMError
from hltm.query.boundary import IsolationError
from hltm.query.scope import Identity, ScopeError
from hltm.serving.rankings import RankingNotServed, ScopedRanking, scoped_ranking

if TYPE_CHECKING:
    from hltm.query.engine import QueryEngine, QueryResult

log = logging.getLogger(__name__)

API_VERSION = "1.0.0"
MAX_BODY_BYTES = 16 * 1024  # of a POST /v1/ask body: 413 past it, before it is parsed
MAX_QUESTION_CHARS = 2000
NodeIdText = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=200)]
# Argument types shared by the HTTP bodies and the MCP tools' signatures (one schema for both).
Question = Annotated[
    str,
    StringConstraints(strip_whitespace=True, min_length=1, max_length=MAX_QUESTION_CHARS),
    Field(description="The question, in the recruiter's words (English or Russian)."),
]
NarrowSeat = Annotated[
    NodeIdText | None, Field(description="Narrow to this seat (inside the token's subtree).")
]
NarrowProject = Annotated[
    NodeIdText | None,
    Field(description="Narrow to this project (inside the token's subtree; wins over seat)."),
]
WithContext = Annotated[StrictBool, Field(description="Also return the retrieved context.")]
Top = Annotated[int, Field(ge=1, le=1000, description="How many of the best candidates.")]


class AskRequest(BaseModel):
    """A question, optionally narrowed to a seat or project inside the caller's own subtree."""

    model_config = ConfigDict(extra="forbid", strict=True)

    question: Question
    seat: NarrowSeat = None
    project: NarrowProject = None
    contract: NodeIdText | None = Field(
        None, description="Only the token's own contract is accepted; never widens."
    )
    context: WithContext = False

    def target(self, identity: Identity) -> Identity:
        """The identity to ask as: the narrowest level given, else the token's own.

        Whether the target really lies inside `identity`'s subtree is checked by the query engine
        (`within=`); here only the one rule the engine cannot see: a contract that is not the
        token's own is refused (`ScopeError`).
        """
        own_contract = identity.id if identity.level == "contract" else None
        if self.contract is not None and self.contract != own_contract:
            raise ScopeError("a token never widens its scope to a contract")
        if self.project is not None:
            return Identity("project", self.project)
        if self.seat is not None:
            return Identity("seat", self.seat)
        return identity


class QueryPair(BaseModel):
    field: str
    value: str = Field(description='"" when the question names the field without a value.')


class QueryCostOut(BaseModel):
    """What the query cost: LLM calls, tokens (o200k_base) and latency split by stage."""

    llm_calls: int
    prompt_tokens: int
    completion_tokens: int
    tokens: int
    embed_ms: float
    retrieval_ms: float
    parse_ms: float
    answer_ms: float
    llm_ms: float
    total_ms: float
    non_llm_ms: float


class AskResponse(BaseModel):
    """A cited answer from the memory of the permitted subtree (`QueryResult.as_dict`)."""

    query_id: str
    asked_at: str = Field(description="ISO timestamp (UTC).")
    identity: str = Field(description="The node id asked as, e.g. seat:c01-s02.")
    scope_root: str
    question: str
    intent: str = Field(description="preferences | find_projects | lookup ('' when no memory).")
    pairs: list[QueryPair]
    answer: str
    rationale: str
    citations: list[str] = Field(description="Node ids of the context that support the answer.")
    dropped_citations: list[str] = Field(description="Cited ids absent from the context.")
    mapped_citations: dict[str, list[str]] = Field(
        default_factory=dict,
        description="Cited document ids, each counted for the context nodes whose memory holds it.",
    )
    sources: list[str] = Field(description="Source document ids behind the cited QA pairs.")
    no_memory: bool
    not_in_memory: bool = Field(
        False,
        description="The scope has memory and was searched, but what was retrieved does not"
        " state what was asked about the subject the question names.",
    )
    nearest: list[str] = Field(
        default_factory=list,
        description="With not_in_memory: the nodes nearest to the question, a hint only.",
    )
    status: Literal["answered", "not_in_memory", "no_memory", "unsupported"] = Field(
        description="answered: cited, and every value it states is in what it cites;"
        " not_in_memory: the memory was searched and does not say (the answer says so);"
        " no_memory: the scope holds no memory; unsupported: no valid citation, or a stated"
        " value its citations do not hold — never pass it on as fact."
    )
    unsupported: bool = Field(description="Nothing in the context backs the answer.")
    ungrounded: list[str] = Field(
        default_factory=list,
        description="Values the answer states that its cited context does not (numbers, places,"
        " names, another field's value).",
    )
    warning: str = Field(
        "", description="Why the answer must not be passed on as fact, or may miss something."
    )
    incomplete: list[str] = Field(
        default_factory=list,
        description="Node ids of the scope whose last memory build failed: the answer may miss"
        " what they should hold.",
    )
    listing: dict[str, int] = Field(
        default_factory=dict,
        description="A field asked without a value listed in part: {nodes: how many the"
        " context lists, of: how many of the scope state it} (empty when listed whole).",
    )
    retrieved: dict[str, list[str]] = Field(description="Node ids per retriever.")
    cost: QueryCostOut
    context: dict[str, list[dict[str, Any]]] | None = Field(
        None, description="The retrieved facets, QA pairs and summaries (with context=true)."
    )


class WhoAmI(BaseModel):
    identity: str
    scope: str
    has_memory: bool


class Health(BaseModel):
    status: Literal["ok"]


class RankingQuery(BaseModel):
    """The query string of a ranking lookup."""

    top: Top = 10


class RankingResponse(BaseModel):
    """A vacancy's latest published ranking (from the append-only journal), sorted by overall."""

    vacancy_id: str
    title: str
    current: bool = Field(description="Computed for the vacancy's present version.")
    vacancy_version: str
    journal_seq: int
    computed_at: str
    model: str
    prompt_version: str
    pool_size: int
    judged: int
    pending: int
    failed: int
    top: list[Ranked] = Field(description="Best first (by overall): the position is the rank.")

    @classmethod
    def of(cls, ranking: ScopedRanking, top: int) -> RankingResponse:
        entry = ranking.entry
        return cls(
            vacancy_id=ranking.owner.vacancy_id,
            title=ranking.owner.title,
            current=ranking.current,
            vacancy_version=entry.vacancy_version,
            journal_seq=entry.seq,
            computed_at=entry.computed_at.isoformat(timespec="seconds"),
            model=entry.model,
            prompt_version=entry.prompt_version,
            pool_size=entry.pool_size,
            judged=entry.judged,
            pending=entry.pending,
            failed=entry.failed,
            top=entry.top(top),
        )


class ErrorResponse(BaseModel):
    error: str
    detail: list[dict[str, Any]] | None = Field(
        None, description="For an invalid body: each problem's location, message and type."
    )


def invalid_body(err: ValidationError) -> ErrorResponse:
    """A 400 body naming every problem (location: message), without echoing the input values."""
    problems = [
        {"loc": [str(p) for p in e["loc"]], "msg": e["msg"], "type": e["type"]}
        for e in err.errors()
    ]
    summary = "; ".join(f"{'.'.join(p['loc']) or '(body)'}: {p['msg']}" for p in problems)
    return ErrorResponse(error=f"invalid request body: {summary}", detail=problems)


# ---- the two lookups, as both faces run them ----------------------------------------------------

OUTSIDE = "outside the token's scope"


class ApiError(Exception):
    """A refusal both faces report alike: HTTP with `status`, MCP as a tool error."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def answer(engine: QueryEngine, identity: Identity, asked: AskRequest, channel: str) -> QueryResult:
    """Ask as `identity` (a token's), narrowed by the request but never widened."""
    try:
        target = asked.target(identity)
        within = identity if target != identity else None
        return engine.ask(target, asked.question, within=within, channel=channel)
    except ScopeError:
        raise ApiError(403, OUTSIDE) from None
    except LLMError as err:
        log.warning("LLM failure for %s: %s", identity, err)
        raise ApiError(502, f"the language model failed: {err.reason}") from None
    except IsolationError:
        log.exception("isolation check failed for %s", identity)
        raise ApiError(500, "refused: a store returned data outside the permitted scope") from None


def ranking(engine: QueryEngine, identity: Identity, vacancy_id: str, top: int) -> RankingResponse:
    """A vacancy's ranking if it lies in `identity`'s subtree (a foreign and an unknown vacancy
    get the same 403)."""
    settings = engine.settings
    try:
        found = scoped_ranking(settings.sources_db, settings.derived_db, identity, vacancy_id)
    except ScopeError:
        raise ApiError(403, OUTSIDE) from None
    except LookupError as err:
        raise ApiError(404, str(err)) from None
    except RankingNotServed as err:
        raise ApiError(409, str(err)) from None
    return RankingResponse.of(found, top)


# ---- the OpenAPI description ------------------------------------------------------------------

_MODELS: tuple[type[BaseModel], ...] = (
    AskRequest,
    AskResponse,
    WhoAmI,
    Health,
    RankingResponse,
    ErrorResponse,
)
_REF = "#/components/schemas/{model}"
_AUTH_ERRORS = {
    "401": "Missing, malformed, unknown or revoked token.",
    "403": "Outside the token's subtree (a token only narrows, never widens).",
}
# Every request with a token runs in a bounded worker pool and may read a store another process
# holds or that cannot be used (`hltm.serving.http`): all of them can answer 503.
_UNAVAILABLE = {
    "503": "Busy (the server is at capacity, or a DuckDB file is held by another process: retry"
    " after `Retry-After` seconds), or a store cannot be used (the message names it and what to"
    " do).",
}


def _response(description: str, model: type[BaseModel] = ErrorResponse) -> dict[str, Any]:
    return {
        "description": description,
        "content": {"application/json": {"schema": {"$ref": _REF.format(model=model.__name__)}}},
    }


def _operation(
    summary: str,
    ok: type[BaseModel] | None,
    errors: dict[str, str],
    *,
    secured: bool = True,
    **extra: Any,
) -> dict[str, Any]:
    responses = {"200": _response("OK", ok) if ok else {"description": "This description."}}
    responses |= {status: _response(text) for status, text in errors.items()}
    operation: dict[str, Any] = {"summary": summary, **extra, "responses": responses}
    if secured:
        operation["security"] = [{"bearerAuth": []}]
    return operation


PATHS: dict[str, dict[str, dict[str, Any]]] = {
    "/healthz": {"get": _operation("Liveness.", Health, {}, secured=False)},
    "/openapi.json": {"get": _operation("This OpenAPI description.", None, {}, secured=False)},
    "/v1/whoami": {
        "get": _operation(
            "The token's identity and permitted scope.", WhoAmI, _AUTH_ERRORS | _UNAVAILABLE
        )
    },
    "/v1/rankings/{vacancy_id}": {
        "get": _operation(
            "The latest published ranking of a vacancy inside the token's subtree.",
            RankingResponse,
            {
                "400": "A query parameter does not fit RankingQuery.",
                **_AUTH_ERRORS,
                "404": "The caller's own vacancy has no published ranking yet.",
                "409": "The vacancy's ranking fails verification against its journal: not served.",
                **_UNAVAILABLE,
            },
            parameters=[
                {
                    "name": "vacancy_id",
                    "in": "path",
                    "required": True,
                    "schema": {"type": "string"},
                },
                {
                    "name": "top",
                    "in": "query",
                    "required": False,
                    "schema": RankingQuery.model_json_schema()["properties"]["top"],
                },
            ],
        )
    },
    "/v1/ask": {
        "post": _operation(
            "Ask the memory of the token's subtree; a cited answer with its cost.",
            AskResponse,
            {
                "400": "The body is not JSON or does not fit AskRequest.",
                **_AUTH_ERRORS,
                "413": f"The body is larger than {MAX_BODY_BYTES} bytes (refused before it is"
                " parsed or any token is looked up).",
                "500": "Refused: a store returned data outside the permitted scope.",
                "502": "The language model failed.",
                **_UNAVAILABLE,
            },
            requestBody={
                "required": True,
                "content": {
                    "application/json": {"schema": {"$ref": _REF.format(model="AskRequest")}}
                },
            },
        )
    },
}


def openapi_spec() -> dict[str, Any]:
    """The OpenAPI 3.1 description of the HTTP endpoint, its schemas generated from the models."""
    _, schemas = models_json_schema([(model, "validation") for model in _MODELS], ref_template=_REF)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "HLTM memory query API",
            "version": API_VERSION,
            "description": "Identity-scoped questions to the recruiting memory. The caller's "
            "identity comes only from the bearer token (`hltm token create`); a request may "
            "narrow it to a seat or project inside the token's subtree, never widen it.",
        },
        "paths": PATHS,
        "components": {
            "schemas": schemas.get("$defs", {}),
            "securitySchemes": {"bearerAuth": {"type": "http", "scheme": "bearer"}},
        },
    }

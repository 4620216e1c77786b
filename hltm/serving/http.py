"""The HTTP endpoint a lead agent calls: Starlette, served by uvicorn (`hltm serve`).

    POST /v1/ask     Authorization: Bearer <token>
                     {"question": "...", "project": "<id>"?, "seat": "<id>"?, "context": false}
                     → 200 the query result (answer, rationale, citations, status, cost, …)
    GET  /v1/whoami  Authorization: Bearer <token>  → the token's identity and scope
    GET  /v1/rankings/<vacancy_id>?top=10  Authorization: Bearer <token>  → its current ranking
    GET  /healthz    → {"status": "ok"}  (answered on the event loop, never touches a store)
    GET  /openapi.json → the OpenAPI description (`hltm.serving.api`), whose models validate input

The caller's identity comes only from the token (`hltm token create`). A missing, malformed,
unknown or revoked token is 401. The body may narrow the scope to a seat or project inside the
token's subtree; anything else (a sibling, another contract, a wider level) is 403 — a token never
widens its scope, and the answer never says whether the other id exists.

`serve` runs one process per worker (`hltm serve --workers`, default one per core up to 4), each
with its own engine and its own listening socket on the one port (SO_REUSEPORT). In each, nothing
blocking runs on the event loop: token checks and queries run in worker threads, at most
`concurrency` at once, with at most `queue` more waiting; past that, or when another process
holds the DuckDB file longer than `db_wait_s`, the answer is 503 with `Retry-After` (busy,
retry). A body over `MAX_BODY_BYTES` is refused (413) before it is parsed or any token is looked
up; a question over `MAX_QUESTION_CHARS` is 400. A vector index or a DuckDB file that cannot be read is 503
naming it and what to do; the server starts anyway (a damaged index fails only the requests that
read it, until `hltm refresh` rebuilds it), and its query-log thread never stops on an error.
"""

from __future__ import annotations

import gc
import json
import logging
import multiprocessing
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, MutableSequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import anyio
import anyio.to_thread
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from hltm.errors import StoreError
from hltm.query.access import TokenCache
from hltm.query.engine import QueryEngine
from hltm.query.scope import Identity
from hltm.serving import api
from hltm.serving.api import (
    MAX_BODY_BYTES,
    AskRequest,
    RankingQuery,
    invalid_body,
    openapi_spec,
)
from hltm.serving.balance import ConnectionShares, balanced
from hltm.settings import OFFLINE_BACKEND, Settings
from hltm.vectors import VectorIndexUnavailable
from hltm.warehouse import DatabaseBusy

log = logging.getLogger(__name__)
RETRY_AFTER_S = 1
T = TypeVar("T")


@dataclass(frozen=True)
class ServeLimits:
    """How much work the server takes at once; the rest is told to retry (503)."""

    concurrency: int = 8  # queries running at once (threads; more only help a slow LLM)
    queue: int = 64  # queries waiting for a slot before new ones are refused
    db_wait_s: float = 2.0  # how long a request waits for a DuckDB file another process holds
    # `serve` inserts query-log rows in the background this often, into the log's own file
    # (`hltm.query.log`), so the readers of the derived file never wait on it.
    log_flush_s: float = 5.0


class Busy(Exception):
    """Too much work queued, or a store held by another process: answer 503, retry later."""


def _error(status: int, message: str, **headers: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=headers or None)


def _busy(message: str) -> JSONResponse:
    return _error(503, message, **{"Retry-After": str(RETRY_AFTER_S)})


def _bearer(request: Request) -> str | None:
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


async def _bounded_body(request: Request, limit: int) -> bytes | None:
    """The body, or None once it exceeds `limit` bytes (declared or streamed)."""
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > limit):
        return None
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def parse_ask_body(raw: bytes) -> AskRequest | JSONResponse:
    """The validated ask body, or the 400 answer. Types are strict (`AskRequest`): `context`
    must be a JSON boolean (the string "no" is not false), ids must be non-empty strings."""
    try:
        body: Any = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return _error(400, "the body must be JSON")
    except RecursionError:  # a few KiB of brackets exhaust the parser's stack
        return _error(400, "the body is nested too deeply")
    try:
        return AskRequest.model_validate(body)
    except ValidationError as err:
        return JSONResponse(invalid_body(err).model_dump(), status_code=400)


def create_app(
    engine: QueryEngine,
    tokens_db: Path | str | None = None,
    limits: ServeLimits | None = None,
) -> Starlette:
    tokens_db = Path(tokens_db or engine.settings.derived_db)
    limits = limits or ServeLimits()
    if engine.db_wait_s is None:
        engine.db_wait_s = limits.db_wait_s
    slots = anyio.CapacityLimiter(limits.concurrency)
    tokens = TokenCache(tokens_db)

    async def in_thread(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run blocking work in a worker thread, or raise `Busy` when the queue is full."""
        if slots.statistics().tasks_waiting >= limits.queue:
            raise Busy("the server is at capacity")
        return await anyio.to_thread.run_sync(lambda: fn(*args, **kwargs), limiter=slots)

    def identify(token: str | None) -> Identity | JSONResponse:
        """The token's identity, or the 401 answer (blocking: call it in a worker thread)."""
        if token is None:
            return _error(401, "missing bearer token", **{"WWW-Authenticate": "Bearer"})
        identity = tokens.identity(token, wait_s=limits.db_wait_s)
        if identity is None:
            return _error(
                401,
                "unknown or revoked token",
                **{"WWW-Authenticate": 'Bearer error="invalid_token"'},
            )
        return identity

    async def as_caller(request: Request, fn: Callable[[Identity], JSONResponse]) -> JSONResponse:
        """`fn(identity)` in ONE worker-thread hop with the token check: each hop waits its turn
        for a slot, so a check and a query in two hops queued twice."""

        def run() -> JSONResponse:
            identity = identify(_bearer(request))
            return identity if isinstance(identity, JSONResponse) else fn(identity)

        return await in_thread(run)

    async def health(request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    async def whoami(request: Request) -> JSONResponse:
        def describe(identity: Identity) -> JSONResponse:
            scope = engine.scope_for(identity)
            return JSONResponse(
                {
                    "identity": identity.node_id,
                    "scope": scope.describe(),
                    "has_memory": not scope.empty,
                }
            )

        return await as_caller(request, describe)

    async def ask(request: Request) -> JSONResponse:
        raw = await _bounded_body(request, MAX_BODY_BYTES)
        if raw is None:
            return _error(413, f"the body is larger than {MAX_BODY_BYTES} bytes")

        def answer(identity: Identity) -> JSONResponse:
            asked = parse_ask_body(raw)
            if isinstance(asked, JSONResponse):
                return asked
            try:
                result = api.answer(engine, identity, asked, "http")
            except api.ApiError as err:
                return _error(err.status, err.message)
            return JSONResponse(result.as_dict(with_context=asked.context))

        return await as_caller(request, answer)

    async def ranking(request: Request) -> JSONResponse:
        vacancy_id = request.path_params["vacancy_id"]
        params = dict(request.query_params)

        def ranked(identity: Identity) -> JSONResponse:
            try:
                query = RankingQuery.model_validate(params, strict=False)
            except ValidationError as err:
                return JSONResponse(invalid_body(err).model_dump(), status_code=400)
            try:
                found = api.ranking(engine, identity, vacancy_id, query.top)
            except api.ApiError as err:
                return _error(err.status, err.message)
            return JSONResponse(found.model_dump())

        return await as_caller(request, ranked)

    async def spec(request: Request) -> JSONResponse:
        return JSONResponse(openapi_spec())

    async def busy_handler(request: Request, exc: Exception) -> JSONResponse:
        return _busy(f"busy, retry: {exc}")

    async def unavailable_handler(request: Request, exc: Exception) -> JSONResponse:
        log.warning("store unavailable: %s", exc)
        return _busy(f"unavailable: {exc}")

    return Starlette(
        routes=[
            Route("/healthz", health, methods=["GET"]),
            Route("/openapi.json", spec, methods=["GET"]),
            Route("/v1/rankings/{vacancy_id}", ranking, methods=["GET"]),
            Route("/v1/whoami", whoami, methods=["GET"]),
            Route("/v1/ask", ask, methods=["POST"]),
        ],
        exception_handlers={
            Busy: busy_handler,
            DatabaseBusy: busy_handler,
            StoreError: unavailable_handler,  # the vector index, or a file, cannot be used
        },
    )


def start_engine(settings: Settings, limits: ServeLimits) -> QueryEngine:
    """A serving process's engine, warmed up. A store that cannot be read now (a damaged
    index, a full disk) is said once and served anyway: the requests that need it answer 503
    naming it and what to do, and answer again once it is repaired (`hltm refresh`).

    A stop (SIGTERM) during the warm-up is a normal exit: raised inside a DuckDB query, it comes
    back as DuckDB's "Query interrupted", which printed a traceback and made `hltm serve` report
    the worker as failed."""
    try:
        engine = QueryEngine(settings, db_wait_s=limits.db_wait_s)
        try:
            engine.warm_up()
        except StoreError as err:
            log.error("serving without a warm start: %s", err)
    except VectorIndexUnavailable as err:  # a Chroma server that is down: nothing to serve
        raise SystemExit(str(err)) from None
    except Exception:
        if _STOP_REQUESTED.is_set():
            raise SystemExit(0) from None
        raise
    if _STOP_REQUESTED.is_set():  # the interrupted query was said as a store that cannot be read
        raise SystemExit(0)
    return engine


_STOP_REQUESTED = threading.Event()  # set by SIGTERM: what the warm-up's errors are read against


def stop_cleanly_on_sigterm() -> None:
    """SIGTERM (serve's stop of its workers, `kill`) ends this process as a normal exit.

    uvicorn shuts down gracefully on SIGTERM, then raises it again under the handler it found;
    under Python's default one the process died there, before multiprocessing's finalizers ran,
    and the resource tracker reported the semaphores they release as leaked."""

    def stop(signum: int, frame: Any) -> None:
        _STOP_REQUESTED.set()
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)


def stop_with_parent(poll_s: float = 1.0) -> None:
    """A pool worker stops (gracefully, as on SIGTERM) once the `hltm serve` that started it is
    gone: killed with SIGKILL, that process cannot stop its workers, which kept serving the port
    as orphans and made the next `hltm serve` on it fail."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_s)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="stop-with-parent", daemon=True).start()


def _worker(
    settings: Settings,
    limits: ServeLimits,
    bind: tuple[str, int] | None,
    counts: MutableSequence[int] | None = None,
    index: int = 0,
    **config: Any,
) -> None:
    """One serving process: its own engine (model, stores, caches), on its own listening socket
    of the shared port (`bind`), or on uvicorn's own (`config`: host and port) when it is the
    only one. `counts` (one slot per worker, `index` this one's) balances the connections."""
    import uvicorn

    stop_cleanly_on_sigterm()
    if counts is not None:  # one of a pool: it lives no longer than the serve that started it
        stop_with_parent()
    engine = start_engine(settings, limits)
    # The warm caches (tree, node contents, vectors) live as long as the process: moved out of
    # the collector's reach, they are no longer traversed by every full collection, which
    # stalled a worker's every request for 0.4–0.6 s every few seconds under 50 clients.
    gc.collect()
    gc.freeze()
    engine.query_log.start_flushing(limits.log_flush_s)
    sockets = None if bind is None else [_port_socket(*bind, listen=True)]
    try:
        app: Any = create_app(engine, limits=limits)
        server: Any = None
        if counts is not None:
            shares = ConnectionShares(counts, index, lambda: len(server.server_state.connections))
            app = balanced(app, shares)
        server = uvicorn.Server(uvicorn.Config(app, log_level="info", **config))
        server.run(sockets=sockets)
    finally:
        if counts is not None:
            counts[index] = 0  # a stopped worker holds no share (the others stop closing)
        engine.query_log.stop_flushing(limits.db_wait_s)


def default_concurrency(settings: Settings) -> int:
    """Queries run at once per worker: 8 with a model server, whose answers they wait on; 1 with
    the offline backend, whose queries are CPU only, so threads of one process only take turns
    on the interpreter: under 50 clients, 8 slots spent 12% more CPU a request than under one
    client, 1 slot no more (docs/query.md)."""
    return 1 if settings.llm_backend == OFFLINE_BACKEND else ServeLimits.concurrency


def default_workers() -> int:
    """One serving process per core, up to 4 (each holds its own e5 and caches, ~400 MB)."""
    return max(1, min(4, os.cpu_count() or 1))


def _port_socket(host: str, port: int, listen: bool) -> socket.socket:
    """A socket on (host, port) with SO_REUSEPORT: every worker listens on its own, and the
    kernel spreads new connections across them by address hash.

    One socket shared by every worker gives each burst of connections to whichever worker wakes
    first: measured at 50 keep-alive clients and 2 workers, 35 connections went to one and 15 to
    the other, and the first one's clients waited twice as long (p95 382 ms at p50 140)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.bind((host, port))
        if listen:
            sock.listen(2048)
    except OSError:
        sock.close()
        raise
    return sock


def serve(
    settings: Settings,
    host: str = "127.0.0.1",
    port: int = 8765,
    limits: ServeLimits | None = None,
    workers: int | None = None,
    access_log: bool = False,
) -> None:
    """Serve until interrupted, in `workers` processes on one port.

    Every answered question is already a row of the query log, so uvicorn's line per request
    (`access_log`) is off unless asked for.

    Python runs one thread at a time per process, so the CPU of a query (parsing, retrieval
    bookkeeping, the offline composer) uses one core per process: one worker per core serves on
    all of them. Each worker has its own engine; they share only the files (the query log's
    single writer is each worker's flush, every `log_flush_s`, waited for like any other writer).
    """
    limits = limits or ServeLimits()
    workers = workers or default_workers()
    if workers <= 1:
        _worker(settings, limits, None, host=host, port=port, access_log=access_log)
        return
    if not hasattr(socket, "SO_REUSEPORT"):
        raise SystemExit("--workers above 1 needs SO_REUSEPORT (Linux, macOS, BSD)")
    # Bound, never listening (so no connection waits on it): the port is taken, a port already
    # in use fails here, and port 0 becomes the one port every worker binds.
    reserved = _port_socket(host, port, listen=False)
    bind = (host, reserved.getsockname()[1])
    spawn = multiprocessing.get_context("spawn")  # no fork of a process holding threads
    counts = spawn.Array("i", workers, lock=False)  # open connections, one slot per worker
    processes = [
        spawn.Process(
            target=_worker,
            args=(settings, limits, bind, counts, i),
            kwargs={"access_log": access_log},
            name=f"serve-{i}",
        )
        for i in range(workers)
    ]

    def stop(signum: int, frame: Any) -> None:
        for process in processes:
            if process.is_alive():
                process.terminate()

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        # Ctrl-C reaches every process of the terminal's group: the workers start with SIGINT
        # ignored (uvicorn still shuts down gracefully on it), and this process stops them, so an
        # interrupt is one clean stop instead of a traceback per worker.
        interrupt = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            for process in processes:
                process.start()
        finally:
            signal.signal(signal.SIGINT, interrupt)
        for process in processes:
            process.join()
    except KeyboardInterrupt:
        stop(signal.SIGINT, None)
        for process in processes:
            process.join(timeout=30)
    finally:
        signal.signal(signal.SIGTERM, previous)
        reserved.close()
    failed = [p.exitcode for p in processes if p.exitcode not in (0, -signal.SIGTERM)]
    if failed:
        raise SystemExit(f"{len(failed)} of {workers} serving processes failed: {failed}")

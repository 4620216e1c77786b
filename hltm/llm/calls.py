"""One LLM request as data, what it costs, what can go wrong, and the offline backend."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Protocol

from hltm.llm.registry import Task, payload_from_messages, prompt_tokens
from hltm.settings import OFFLINE_BACKEND, Settings


class LLMError(RuntimeError):
    """An LLM answer that stayed unusable after retries; names what it was for."""

    def __init__(self, task: str, context: str, reason: str) -> None:
        super().__init__(f"LLM task '{task}' failed for {context or 'this call'}: {reason}")
        self.task = task
        self.context = context
        self.reason = reason


@dataclass
class LLMUsage:
    """Every request counts: `calls` are requests sent (retries included), `failed_calls` those
    that gave no usable answer, `retries` the requests beyond each task's first, `interrupted`
    the failed ones whose stream the server ended unfinished (a transport failure, not the
    model's)."""

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    failed_calls: int = 0
    seconds: float = 0.0
    retries: int = 0
    interrupted: int = 0

    def __sub__(self, other: LLMUsage) -> LLMUsage:
        return LLMUsage(*(getattr(self, k) - getattr(other, k) for k in USAGE_FIELDS))

    def __add__(self, other: LLMUsage) -> LLMUsage:
        return LLMUsage(*(getattr(self, k) + getattr(other, k) for k in USAGE_FIELDS))

    def add(self, other: LLMUsage) -> None:
        """In place, for a total that others hold a reference to."""
        for k in USAGE_FIELDS:
            setattr(self, k, getattr(self, k) + getattr(other, k))

    def as_metadata(self) -> dict[str, float | int]:
        return {
            "llm_calls": self.calls,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "llm_failed_calls": self.failed_calls,
            "llm_retries": self.retries,
            "llm_interrupted": self.interrupted,
            "llm_seconds": round(self.seconds, 3),
        }


USAGE_FIELDS = tuple(LLMUsage.__dataclass_fields__)


# ---- one request: what is sent, what comes back, what went wrong ----------------------------


@dataclass(frozen=True)
class Request:
    task: Task[Any]
    messages: list[dict[str, str]]
    model: str
    schema: dict[str, Any]
    max_tokens: int
    timeout_s: float
    seed: int | None


@dataclass(frozen=True)
class Reply:
    content: str | None
    finish_reason: str
    prompt_tokens: int  # of the messages really sent (a degraded request carries the schema)
    refusal: str | None = None


class TransportError(Exception):
    """One request that got no answer. `adapted`: the endpoint lacked a feature we sent and the
    next request goes without it (not charged to the retry budget). `prompt_tokens`: 0 when the
    server refused the request unprocessed; `completion`: what a stalled or interrupted stream
    had sent; `interrupted`: the stream ended without a finish_reason (the server cut it off)."""

    def __init__(
        self,
        reason: str,
        prompt_tokens: int,
        *,
        retryable: bool,
        wait_s: float | None = None,
        timed_out: bool = False,
        adapted: bool = False,
        completion: str = "",
        interrupted: bool = False,
    ) -> None:
        super().__init__(reason)
        self.completion = completion
        self.reason = reason
        self.prompt_tokens = prompt_tokens
        self.retryable = retryable
        self.wait_s = wait_s
        self.timed_out = timed_out
        self.adapted = adapted
        self.interrupted = interrupted


@dataclass(frozen=True)
class CallLimits:
    """How hard one task tries: requests in all, pauses between them, timeouts, answer bounds."""

    attempts: int = 1
    backoff_s: float = 0.5  # backoff * 2**(retry-1), capped at 8 s, unless the server says when
    timeout_backoff_s: float | None = None  # None: as long as the timeout that expired
    timeout_s: float = 120.0
    task_timeouts: tuple[tuple[str, float], ...] = ()
    max_tokens_cap: int = 8192
    seed: int | None = None

    @classmethod
    def from_settings(cls, settings: Settings) -> CallLimits:
        return cls(
            attempts=1 + max(0, settings.llm_max_retries),
            timeout_backoff_s=settings.llm_timeout_backoff_s,
            timeout_s=settings.llm_timeout_s,
            task_timeouts=settings.llm_task_timeouts,
            max_tokens_cap=settings.llm_max_tokens_cap,
            seed=settings.llm_seed,
        )

    def timeout_for(self, task: str) -> float:
        return dict(self.task_timeouts).get(task, self.timeout_s)

    def pause(self, error: TransportError, retry: int, timeout_s: float) -> float:
        if error.wait_s is not None:
            return min(error.wait_s, 60.0)
        if error.timed_out:
            return timeout_s if self.timeout_backoff_s is None else self.timeout_backoff_s
        return min(self.backoff_s * 2 ** (retry - 1), 8.0)


class Backend(Protocol):
    """What `LLM` drives. `send` (one request) is the full interface; a backend with only
    `complete(task, messages, model) -> str` (a rule-based one) is sent once, never retried."""

    name: str

    def complete(self, task: Task[Any], messages: list[dict[str, str]], model: str) -> str: ...


def send_request(backend: Any, request: Request) -> Reply:
    """One request: the answer, or TransportError (or LLMError, a final verdict)."""
    send = getattr(backend, "send", None)
    if send is not None:
        return send(request)
    text = backend.complete(request.task, request.messages, request.model)
    return Reply(text, "stop", prompt_tokens(request.messages))


class DeterministicBackend:
    """The offline default: answers every task by rules, no model, same input → same bytes."""

    name = OFFLINE_BACKEND
    concurrency = 1  # CPU-bound: threads would only contend

    def complete(self, task: Task[Any], messages: list[dict[str, str]], model: str) -> str:
        answer = task.offline(payload_from_messages(messages))
        return json.dumps(answer, ensure_ascii=False, sort_keys=True)

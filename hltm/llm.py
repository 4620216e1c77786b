"""The one LLM interface every extractor, aggregator, answerer and judge goes through.

A `Task` is a versioned prompt from `prompts/` plus the pydantic model its answer must fit.
`LLM.run(task, payload)` renders the prompt, sends it to a backend and returns a validated answer.
Two backends sit behind it:

* `OpenAIBackend` — the real `openai` SDK against any OpenAI-compatible endpoint, with JSON-schema
  structured output (`chat.completions.parse`), the SDK's retries for 429/5xx/timeouts, and our own
  retries for answers that are cut off (`finish_reason=length`) or do not fit the schema.
* `DeterministicBackend` — the offline default: each task's own rule-based handler computes the
  same kind of answer from the same payload with no model at all.

Calls and tokens are counted here, on the rendered prompt and the answer, with o200k_base, so
the figures are what a real model would be sent whichever backend answered.
"""

from __future__ import annotations

import json
import threading
import time
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

from pydantic import BaseModel, ValidationError

from hltm.settings import OFFLINE_BACKEND, OPENAI_BACKEND, Settings
from hltm.tokens import count_tokens

PROMPTS_DIR = Path(__file__).resolve().parent.parent / "prompts"
INPUT_FENCE = "```json"
DETERMINISTIC_MODEL = "deterministic-rules-v1"
# Per-message framing tokens in the chat format (OpenAI's counting recipe).
_TOKENS_PER_MESSAGE = 3

OutputT = TypeVar("OutputT", bound=BaseModel)


class LLMError(RuntimeError):
    """An LLM answer that stayed unusable after retries; names what it was for."""

    def __init__(self, task: str, context: str, reason: str) -> None:
        super().__init__(f"LLM task '{task}' failed for {context or 'this call'}: {reason}")
        self.task = task
        self.context = context
        self.reason = reason


Handler = Callable[[dict[str, Any]], dict[str, Any]]


@dataclass(frozen=True)
class Task(Generic[OutputT]):
    """A versioned prompt, the schema its answer must fit, and its offline rule-based handler."""

    name: str
    version: str
    system: str
    user: str
    output_model: type[OutputT]
    offline: Handler

    @property
    def schema_name(self) -> str:
        return self.output_model.__name__

    def messages(self, payload: dict[str, Any]) -> list[dict[str, str]]:
        """The user message ends with the payload as a JSON block, the model's only input."""
        body = json.dumps(payload, ensure_ascii=False, indent=1, sort_keys=True)
        return [
            {"role": "system", "content": self.system.strip()},
            {"role": "user", "content": f"{self.user.strip()}\n\n{INPUT_FENCE}\n{body}\n```"},
        ]


_TASKS: dict[str, Task[Any]] = {}


def load_task(name: str, output_model: type[OutputT], offline: Handler) -> Task[OutputT]:
    """Load `prompts/<name>.toml` (keys: version, system, user) and register it."""
    spec = tomllib.loads((PROMPTS_DIR / f"{name}.toml").read_text(encoding="utf-8"))
    task = Task(name, str(spec["version"]), spec["system"], spec["user"], output_model, offline)
    return register_task(task)


def register_task(task: Task[OutputT]) -> Task[OutputT]:
    """Make `task` findable by its schema name (how the local protocol server finds it)."""
    _TASKS[task.schema_name] = task
    return task


def task_for_schema(schema_name: str) -> Task[Any] | None:
    return _TASKS.get(schema_name)


def registered_schemas() -> list[str]:
    return sorted(_TASKS)


def payload_from_messages(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """Recover the payload from a rendered prompt (used by the local protocol server)."""
    content = str(messages[-1]["content"])
    start = content.rindex(INPUT_FENCE) + len(INPUT_FENCE)
    return json.loads(content[start : content.rindex("```")])


@dataclass
class LLMUsage:
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    failed_calls: int = 0
    seconds: float = 0.0

    def __sub__(self, other: LLMUsage) -> LLMUsage:
        return LLMUsage(
            self.calls - other.calls,
            self.prompt_tokens - other.prompt_tokens,
            self.completion_tokens - other.completion_tokens,
            self.failed_calls - other.failed_calls,
            self.seconds - other.seconds,
        )

    def as_metadata(self) -> dict[str, float | int]:
        return {
            "llm_calls": self.calls,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "llm_failed_calls": self.failed_calls,
            "llm_seconds": round(self.seconds, 3),
        }


class Backend(Protocol):
    name: str

    def complete(self, task: Task[Any], messages: list[dict[str, str]], model: str) -> str:
        """Return the raw JSON text of the answer, or raise LLMError."""
        ...


class DeterministicBackend:
    """The offline default: answers every task by rules, no model, same input → same bytes."""

    name = OFFLINE_BACKEND

    def complete(self, task: Task[Any], messages: list[dict[str, str]], model: str) -> str:
        answer = task.offline(payload_from_messages(messages))
        return json.dumps(answer, ensure_ascii=False, sort_keys=True)


class OpenAIBackend:
    """Real `openai` client; structured output with a strict JSON schema from the pydantic model."""

    name = OPENAI_BACKEND

    def __init__(
        self, settings: Settings, answer_attempts: int = 3, answer_backoff_s: float = 0.5
    ) -> None:
        import openai

        self._openai = openai
        self._client = openai.OpenAI(
            base_url=settings.openai_base_url,
            api_key=settings.openai_api_key or "not-needed",
            timeout=settings.llm_timeout_s,
            max_retries=settings.llm_max_retries,
        )
        self._reasoning_effort = settings.reasoning_effort
        self._answer_attempts = answer_attempts
        # Pause before re-asking for an unusable answer: backoff * 2**attempt, capped at 8 s.
        self.answer_backoff_s = answer_backoff_s

    def complete(self, task: Task[Any], messages: list[dict[str, str]], model: str) -> str:
        openai = self._openai
        extra: dict[str, Any] = {}
        if self._reasoning_effort:
            extra["reasoning_effort"] = self._reasoning_effort
        problem = ""
        for attempt in range(self._answer_attempts):
            if attempt:
                time.sleep(min(self.answer_backoff_s * 2**attempt, 8.0))
            try:
                response = self._client.chat.completions.parse(
                    model=model, messages=messages, response_format=task.output_model, **extra
                )
            except openai.LengthFinishReasonError:
                problem = "the answer was cut off (finish_reason=length)"
                continue
            except openai.ContentFilterFinishReasonError:
                problem = "the answer was withheld by the content filter"
                continue
            except (ValidationError, json.JSONDecodeError) as err:
                problem = f"the answer does not fit {task.schema_name}: {_short(err)}"
                continue
            except openai.APITimeoutError:
                raise LLMError(task.name, "", "timed out after the client's retries") from None
            except openai.APIStatusError as err:
                raise LLMError(
                    task.name,
                    "",
                    f"HTTP {err.status_code} after the client's retries: {_status_detail(err)}",
                ) from None
            except openai.APIConnectionError as err:
                raise LLMError(task.name, "", f"cannot reach the endpoint: {err}") from None
            message = response.choices[0].message
            if message.refusal:
                problem = f"the model refused: {message.refusal[:200]}"
                continue
            if message.parsed is None:
                problem = "the answer had no parsable content"
                continue
            # The text the model sent (it parsed): completion tokens are then counted on what
            # the model really produced, not on a re-serialisation of it.
            return message.content or message.parsed.model_dump_json()
        raise LLMError(task.name, "", f"{problem} ({self._answer_attempts} attempts)")


def _short(err: Exception) -> str:
    if isinstance(err, ValidationError) and err.errors():
        # The first line ("1 validation error for X") says nothing; name the first problem.
        first = err.errors()[0]
        where = ".".join(str(part) for part in first.get("loc", ())) or "(root)"
        text = f"{err.error_count()} error(s), first {first['type']} at {where}: {first['msg']}"
        return text[:200]
    return str(err).splitlines()[0][:200]


def _status_detail(err: Any) -> str:
    """The server's own error message (`{"error": {"message": ...}}`) when it sent one."""
    body = getattr(err, "body", None)
    if isinstance(body, dict) and body.get("message"):
        return str(body["message"]).splitlines()[0][:300]
    return _short(err)


@dataclass
class LLM:
    """Backend + model + usage counters; thread-safe so judge workers can share one."""

    backend: Backend
    model: str
    usage: LLMUsage = field(default_factory=LLMUsage)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def backend_name(self) -> str:
        return self.backend.name

    def snapshot(self) -> LLMUsage:
        with self._lock:
            return LLMUsage(**{k: getattr(self.usage, k) for k in LLMUsage.__dataclass_fields__})

    def run(self, task: Task[OutputT], payload: dict[str, Any], context: str = "") -> OutputT:
        messages = task.messages(payload)
        prompt_tokens = sum(count_tokens(m["content"]) + _TOKENS_PER_MESSAGE for m in messages)
        started = time.perf_counter()
        try:
            raw = self.backend.complete(task, messages, self.model)
            result = task.output_model.model_validate_json(raw)
        except LLMError as err:
            self._count(prompt_tokens, 0, started, failed=True)
            raise LLMError(task.name, context, err.reason) from None
        except ValidationError as err:
            self._count(prompt_tokens, 0, started, failed=True)
            reason = f"answer does not fit the schema: {_short(err)}"
            raise LLMError(task.name, context, reason) from None
        self._count(prompt_tokens, count_tokens(raw), started, failed=False)
        return result

    def _count(self, prompt: int, completion: int, started: float, failed: bool) -> None:
        with self._lock:
            self.usage.calls += 1
            self.usage.prompt_tokens += prompt
            self.usage.completion_tokens += completion
            self.usage.failed_calls += int(failed)
            self.usage.seconds += time.perf_counter() - started


def make_llm(settings: Settings, model: str | None = None) -> LLM:
    """The configured LLM; `model` overrides the default (the judge uses its own)."""
    backend: Backend
    if settings.llm_backend == OFFLINE_BACKEND:
        # Its own model id, so cached scores never pass for a real model's.
        return LLM(backend=DeterministicBackend(), model=DETERMINISTIC_MODEL)
    if settings.llm_backend == OPENAI_BACKEND:
        backend = OpenAIBackend(settings)
    else:
        raise ValueError(
            f"HLTM_LLM_BACKEND={settings.llm_backend!r}: expected 'offline' or 'openai'"
        )
    return LLM(backend=backend, model=model or settings.llm_model)

"""The one LLM interface every extractor, aggregator, answerer and judge goes through.

A `Task` is a versioned prompt from `prompts/` plus the pydantic model its answer must fit.
`LLM.run(task, payload)` renders the prompt, sends it to a backend and returns a validated answer.
Two backends sit behind it:

* `OpenAIBackend` — the real `openai` SDK against any OpenAI-compatible endpoint (OpenAI, vLLM,
  llama.cpp server, Ollama). One HTTP request per `send`, the SDK's own retries off: every retry
  is ours, so every request and every token is counted. It sends a bounded `max_tokens`, a low
  temperature and a seed, and degrades per endpoint when the server lacks a feature
  (`json_schema` → `json_object` → plain text with the schema in the prompt and fences
  stripped; an unsupported parameter is dropped), remembering the choice for the process.
* `DeterministicBackend` — the offline default: each task's own rule-based handler computes the
  same kind of answer from the same payload with no model at all.

`LLM.run` owns the retry loop: transport errors (429/5xx/connection) are retried with backoff
(the server's Retry-After first); a timed-out request is retried only after a pause as long as
the timeout (a one-at-a-time server is still generating the abandoned answer); an unusable answer
(cut off, not JSON, not the schema, refused) is re-asked with a turn saying why, so a greedy
server does not repeat itself. Calls and tokens are counted per request, on the messages sent and
the text received, with o200k_base, so the figures are what a real model was sent whichever
backend answered (a timed-out request's completion is unknown and counts 0).
"""

from __future__ import annotations

import json
import re
import threading
import time
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

from pydantic import BaseModel, ValidationError

from hltm.settings import OFFLINE_BACKEND, OPENAI_BACKEND, Settings
from hltm.tokens import count_tokens

PROMPTS_DIR = Path(__file__).resolve().parent.parent / "prompts"
INPUT_FENCE = "```json"
# The offline rules' model id is in every score's cache key: bump it when the rules change a verdict.
DETERMINISTIC_MODEL = "deterministic-rules-v3"
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
Choices = Mapping[str, Sequence[str]]

# Size guesses for a schema's answer when a prompt does not state its `max_tokens`.
_STRING_TOKENS = 40
_SCALAR_TOKENS = 4
_LIST_ITEMS = 12
_MIN_MAX_TOKENS = 1024
# Above this many allowed values an enum is not sent (OpenAI's strict mode caps enum sizes);
# the ids are then still checked in code by the caller.
MAX_ENUM_VALUES = 500
REASONING_ALLOWANCE = 4096  # added to max_tokens when a reasoning effort is configured


@dataclass(frozen=True)
class Task(Generic[OutputT]):
    """A versioned prompt, the schema its answer must fit, and its offline rule-based handler.

    `max_tokens` bounds the answer (a prompt's own `max_tokens`, else a guess from the schema),
    so a model caught in a repetition loop is cut off early instead of at the server's cap."""

    name: str
    version: str
    system: str
    user: str
    output_model: type[OutputT]
    offline: Handler
    max_tokens: int | None = None

    @property
    def schema_name(self) -> str:
        return self.output_model.__name__

    @property
    def answer_budget(self) -> int:
        return self.max_tokens or estimate_max_tokens(self.output_model)

    def messages(self, payload: dict[str, Any]) -> list[dict[str, str]]:
        """The user message ends with the payload as a JSON block, the model's only input."""
        body = json.dumps(payload, ensure_ascii=False, indent=1, sort_keys=True)
        return [
            {"role": "system", "content": self.system.strip()},
            {"role": "user", "content": f"{self.user.strip()}\n\n{INPUT_FENCE}\n{body}\n```"},
        ]

    def json_schema(self, choices: Choices | None = None) -> dict[str, Any]:
        """The strict JSON schema the SDK would send, with `choices` (property name → allowed
        values) as enums, so a server's strict mode or grammar can only emit known ids."""
        import openai

        schema = openai.pydantic_function_tool(self.output_model)["function"]["parameters"]
        if choices:
            _constrain(schema, choices)
        return schema


@cache
def estimate_max_tokens(model: type[BaseModel]) -> int:
    """A generous answer bound from the schema's shape: strings ~40 tokens, lists ~12 items."""
    schema = model.model_json_schema()
    defs = schema.get("$defs", {})

    def size(node: dict[str, Any], depth: int = 0) -> int:
        if "$ref" in node:
            return size(defs[node["$ref"].rsplit("/", 1)[-1]], depth)
        if "anyOf" in node:
            return max(size(option, depth) for option in node["anyOf"])
        kind = node.get("type")
        if kind == "object":
            props = node.get("properties", {})
            return 2 + sum(len(name) // 4 + 2 + size(p, depth) for name, p in props.items())
        if kind == "array":
            items = node.get("maxItems", _LIST_ITEMS if depth == 0 else _LIST_ITEMS // 2)
            return 2 + items * size(node.get("items", {}), depth + 1)
        return _STRING_TOKENS if kind == "string" else _SCALAR_TOKENS

    return max(_MIN_MAX_TOKENS, size(schema))


def _constrain(schema: dict[str, Any], choices: Choices) -> None:
    """Put `enum`s on string properties (or string-array items) named in `choices`, anywhere."""
    for value in schema.values():
        if isinstance(value, dict):
            _constrain(value, choices)
    props = schema.get("properties")
    if not isinstance(props, dict):
        return
    for name, allowed in choices.items():
        prop = props.get(name)
        values = sorted(set(allowed))
        if not isinstance(prop, dict) or not values or len(values) > MAX_ENUM_VALUES:
            continue
        target = prop.get("items") if prop.get("type") == "array" else prop
        if isinstance(target, dict) and target.get("type") == "string":
            target["enum"] = values


_TASKS: dict[str, Task[Any]] = {}


def load_task(name: str, output_model: type[OutputT], offline: Handler) -> Task[OutputT]:
    """Load `prompts/<name>.toml` (keys: version, system, user, optional max_tokens)."""
    spec = tomllib.loads((PROMPTS_DIR / f"{name}.toml").read_text(encoding="utf-8"))
    max_tokens = int(spec["max_tokens"]) if "max_tokens" in spec else None
    task = Task(
        name, str(spec["version"]), spec["system"], spec["user"], output_model, offline, max_tokens
    )
    return register_task(task)


def register_task(task: Task[OutputT]) -> Task[OutputT]:
    """Make `task` findable by its schema name (how the local protocol server finds it)."""
    _TASKS[task.schema_name] = task
    return task


def task_for_schema(schema_name: str) -> Task[Any] | None:
    return _TASKS.get(schema_name)


def task_for_system_prompt(system: str) -> Task[Any] | None:
    """The registered task whose system prompt opens this one (requests without a schema)."""
    return next((t for t in _TASKS.values() if system.startswith(t.system.strip())), None)


def registered_schemas() -> list[str]:
    return sorted(_TASKS)


def payload_from_messages(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """Recover the payload from a rendered prompt (the latest user message that carries one)."""
    for message in reversed(messages):
        content = str(message.get("content") or "")
        if message.get("role") == "user" and INPUT_FENCE in content:
            start = content.rindex(INPUT_FENCE) + len(INPUT_FENCE)
            return json.loads(content[start : content.rindex("```")])
    raise ValueError("no user message carries a ```json payload block")


def prompt_tokens(messages: Sequence[Mapping[str, Any]]) -> int:
    """o200k_base tokens of a chat request's messages, with the per-message framing."""
    return sum(count_tokens(str(m.get("content") or "")) + _TOKENS_PER_MESSAGE for m in messages)


@dataclass
class LLMUsage:
    """Every request counts: `calls` are requests sent (retries included), `failed_calls` those
    that gave no usable answer, `retries` the requests beyond each task's first."""

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    failed_calls: int = 0
    seconds: float = 0.0
    retries: int = 0

    def __sub__(self, other: LLMUsage) -> LLMUsage:
        return LLMUsage(*(getattr(self, k) - getattr(other, k) for k in _USAGE_FIELDS))

    def __add__(self, other: LLMUsage) -> LLMUsage:
        return LLMUsage(*(getattr(self, k) + getattr(other, k) for k in _USAGE_FIELDS))

    def add(self, other: LLMUsage) -> None:
        """In place, for a total that others hold a reference to."""
        for k in _USAGE_FIELDS:
            setattr(self, k, getattr(self, k) + getattr(other, k))

    def as_metadata(self) -> dict[str, float | int]:
        return {
            "llm_calls": self.calls,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "llm_failed_calls": self.failed_calls,
            "llm_retries": self.retries,
            "llm_seconds": round(self.seconds, 3),
        }


_USAGE_FIELDS = tuple(LLMUsage.__dataclass_fields__)


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
    next request goes without it (not charged to the retry budget)."""

    def __init__(
        self,
        reason: str,
        prompt_tokens: int,
        *,
        retryable: bool,
        wait_s: float | None = None,
        timed_out: bool = False,
        adapted: bool = False,
    ) -> None:
        super().__init__(reason)
        self.reason = reason
        self.prompt_tokens = prompt_tokens
        self.retryable = retryable
        self.wait_s = wait_s
        self.timed_out = timed_out
        self.adapted = adapted


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


def _send(backend: Any, request: Request) -> Reply:
    """One request: the answer, or TransportError (or LLMError, a final verdict)."""
    send = getattr(backend, "send", None)
    if send is not None:
        return send(request)
    text = backend.complete(request.task, request.messages, request.model)
    return Reply(text, "stop", prompt_tokens(request.messages))


_ONE_ATTEMPT = CallLimits(attempts=1)


class DeterministicBackend:
    """The offline default: answers every task by rules, no model, same input → same bytes."""

    name = OFFLINE_BACKEND
    concurrency = 1  # CPU-bound: threads would only contend

    def complete(self, task: Task[Any], messages: list[dict[str, str]], model: str) -> str:
        answer = task.offline(payload_from_messages(messages))
        return json.dumps(answer, ensure_ascii=False, sort_keys=True)


# ---- what an endpoint supports, learnt from its errors and remembered per process ----------

RESPONSE_FORMATS = ("json_schema", "json_object", "text")
_ADAPTABLE_STATUS = frozenset({400, 404, 415, 422, 500, 501})
_DROPPABLE_PARAMS = ("temperature", "seed", "reasoning_effort")
_SCHEMA_HINT = (
    "Answer with one JSON object only (no prose, no code fence) that fits this JSON schema:\n"
)


@dataclass
class EndpointProfile:
    """The features one (endpoint, model) accepted; degraded on the first error naming one."""

    response_format: str = "json_schema"
    max_tokens_param: str = "max_tokens"
    dropped: set[str] = field(default_factory=set)
    notes: list[str] = field(default_factory=list)

    def adapt(self, status: int, detail: str, sent: Mapping[str, Any]) -> str | None:
        """Degrade what this error names, if anything; returns what changed."""
        if status not in _ADAPTABLE_STATUS:
            return None
        text = detail.lower()
        fmt = sent.get("response_format") or {}
        named_format = any(w in text for w in ("response_format", "json_schema", "json_object"))
        if fmt and named_format and self.response_format != "text":
            following = RESPONSE_FORMATS[RESPONSE_FORMATS.index(self.response_format) + 1]
            return self._note(f"response_format {self.response_format} → {following}", following)
        if self.max_tokens_param in sent and self.max_tokens_param in text:
            other = "max_completion_tokens" if self.max_tokens_param == "max_tokens" else None
            if other and other not in self.dropped:
                self.dropped.add(self.max_tokens_param)
                self.max_tokens_param = other
                return self._note(f"max_tokens sent as {other}")
        for name in _DROPPABLE_PARAMS:
            if name in sent and name in text and name not in self.dropped:
                self.dropped.add(name)
                return self._note(f"{name} no longer sent")
        return None

    def _note(self, change: str, response_format: str | None = None) -> str:
        if response_format:
            self.response_format = response_format
        self.notes.append(change)
        return change


class EndpointProfiles:
    """Per-process memory of what each endpoint supports (shared by every backend instance)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._profiles: dict[tuple[str, str], EndpointProfile] = {}

    def get(self, base_url: str, model: str) -> EndpointProfile:
        with self._lock:
            return self._profiles.setdefault((base_url, model), EndpointProfile())

    def forget(self) -> None:
        with self._lock:
            self._profiles.clear()


ENDPOINTS = EndpointProfiles()


class OpenAIBackend:
    """Real `openai` client, one request per `send` (SDK retries off; `LLM.run` retries)."""

    name = OPENAI_BACKEND

    def __init__(self, settings: Settings) -> None:
        import openai

        self._openai = openai
        self._client = openai.OpenAI(
            base_url=settings.openai_base_url,
            api_key=settings.openai_api_key or "not-needed",
            timeout=settings.llm_timeout_s,
            max_retries=0,
        )
        self.base_url = str(self._client.base_url)
        self.limits = CallLimits.from_settings(settings)
        self.concurrency = max(1, settings.llm_concurrency)
        self._temperature = settings.llm_temperature
        self._reasoning_effort = settings.reasoning_effort

    def profile(self, model: str) -> EndpointProfile:
        return ENDPOINTS.get(self.base_url, model)

    def send(self, request: Request) -> Reply:
        openai = self._openai
        profile = self.profile(request.model)
        kwargs = self._arguments(request, profile)
        sent_tokens = prompt_tokens(kwargs["messages"])
        try:
            response = self._client.chat.completions.create(**kwargs)
        except openai.APITimeoutError:
            reason = f"timed out after {request.timeout_s:g} s"
            raise TransportError(reason, sent_tokens, retryable=True, timed_out=True) from None
        except openai.APIStatusError as err:
            detail = _status_detail(err)
            reason = f"HTTP {err.status_code}: {detail}"
            change = profile.adapt(err.status_code, detail, kwargs)
            if change:
                reason = f"{reason} (the endpoint lacks it: {change})"
                raise TransportError(reason, sent_tokens, retryable=True, adapted=True) from None
            raise TransportError(
                reason, sent_tokens, retryable=_retryable(err), wait_s=_retry_after(err)
            ) from None
        except openai.APIConnectionError as err:
            reason = f"cannot reach the endpoint: {err}"
            raise TransportError(reason, sent_tokens, retryable=True) from None
        if not response.choices:
            return Reply(None, "no_choices", sent_tokens)
        choice = response.choices[0]
        message = choice.message
        return Reply(
            message.content,
            str(choice.finish_reason),
            sent_tokens,
            getattr(message, "refusal", None),
        )

    def _arguments(self, request: Request, profile: EndpointProfile) -> dict[str, Any]:
        messages = list(request.messages)
        kwargs: dict[str, Any] = {"model": request.model, "timeout": request.timeout_s}
        fmt = profile.response_format
        if fmt == "json_schema":
            kwargs["response_format"] = {
                "type": "json_schema",
                "json_schema": {
                    "name": request.task.schema_name,
                    "schema": request.schema,
                    "strict": True,
                },
            }
        else:
            if fmt == "json_object":
                kwargs["response_format"] = {"type": "json_object"}
            # Without a schema on the wire the model needs it in the prompt.
            schema = json.dumps(request.schema, ensure_ascii=False, sort_keys=True)
            system = f"{messages[0]['content']}\n\n{_SCHEMA_HINT}{schema}"
            messages[0] = {"role": "system", "content": system}
        kwargs["messages"] = messages
        # A reasoning model spends its completion budget on reasoning first.
        extra = REASONING_ALLOWANCE if self._reasoning_effort else 0
        kwargs[profile.max_tokens_param] = request.max_tokens + extra
        optional = {
            "temperature": self._temperature,
            "seed": request.seed,
            "reasoning_effort": self._reasoning_effort,
        }
        kwargs.update(
            {k: v for k, v in optional.items() if v is not None and k not in profile.dropped}
        )
        return kwargs


def _retryable(err: Any) -> bool:
    """The server's `x-should-retry`, else the usual: 408, 409, 429 and 5xx."""
    should = err.response.headers.get("x-should-retry") if err.response is not None else None
    if should in ("true", "false"):
        return should == "true"
    return err.status_code in (408, 409, 429) or err.status_code >= 500


def _retry_after(err: Any) -> float | None:
    headers = err.response.headers if err.response is not None else {}
    for name, scale in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        try:
            return float(headers[name]) / scale
        except (KeyError, ValueError):
            continue
    return None


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
        return " ".join(str(body["message"]).split())[:300]
    return _short(err)


_FENCED = re.compile(r"```[a-zA-Z]*\s*\n(.*?)\n?\s*```", re.DOTALL)
CUT_OFF = "the answer was cut off (finish_reason=length)"


def answer_text(content: str) -> str:
    """The JSON inside an answer: as is, else the first fenced block, else the outer braces."""
    text = content.strip()
    if text.startswith(("{", "[")):
        return text
    fenced = _FENCED.search(text)
    if fenced:
        return fenced.group(1).strip()
    first, last = text.find("{"), text.rfind("}")
    return text[first : last + 1] if 0 <= first < last else text


def _judge_reply(task: Task[OutputT], reply: Reply) -> tuple[OutputT | None, str]:
    """(answer, "") or (None, why it is unusable)."""
    if reply.refusal:
        return None, f"the model refused: {reply.refusal[:200]}"
    if reply.finish_reason == "content_filter":
        return None, "the answer was withheld by the content filter"
    if reply.finish_reason == "length":
        return None, CUT_OFF
    if not reply.content:
        return None, "the answer had no content"
    try:
        return task.output_model.model_validate_json(answer_text(reply.content)), ""
    except ValidationError as err:
        return None, f"the answer does not fit {task.schema_name}: {_short(err)}"


def _correction(problem: str, max_tokens: int) -> dict[str, str]:
    """The turn that makes a re-ask differ from the request that failed (greedy servers)."""
    advice = (
        f" Keep it under {max_tokens} tokens and never repeat an item."
        if problem == CUT_OFF
        else ""
    )
    return {
        "role": "user",
        "content": f"Your previous answer could not be used: {problem}. Answer again with one "
        f"complete JSON object that fits the schema, and nothing else.{advice}",
    }


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


@dataclass
class LLM:
    """Backend + model + usage counters; thread-safe so workers can share one."""

    backend: Backend
    model: str
    usage: LLMUsage = field(default_factory=LLMUsage)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def backend_name(self) -> str:
        return self.backend.name

    @property
    def concurrency(self) -> int:
        """Requests worth keeping in flight (1 for a backend that does not say)."""
        return int(getattr(self.backend, "concurrency", 1))

    def snapshot(self) -> LLMUsage:
        with self._lock:
            return LLMUsage(*(getattr(self.usage, k) for k in _USAGE_FIELDS))

    def absorb(self, usage: LLMUsage) -> None:
        """Add usage counted elsewhere (e.g. by a per-node LLM sharing this backend)."""
        with self._lock:
            self.usage.add(usage)

    def run(
        self,
        task: Task[OutputT],
        payload: dict[str, Any],
        context: str = "",
        choices: Choices | None = None,
    ) -> OutputT:
        """The validated answer, or LLMError once the attempts are spent; every request counts.

        `choices`: property name → allowed values (ids the answer may cite), sent as enums."""
        return self.run_counted(task, payload, context, choices)[0]

    def run_counted(
        self,
        task: Task[OutputT],
        payload: dict[str, Any],
        context: str = "",
        choices: Choices | None = None,
    ) -> tuple[OutputT, LLMUsage]:
        """`run`, with what this one task cost (all its attempts), so a caller that records the
        cost per item need not count the tokens a second time."""
        spent = LLMUsage()
        limits: CallLimits = getattr(self.backend, "limits", _ONE_ATTEMPT)
        base = task.messages(payload)
        messages = base
        schema = task.json_schema(choices) if self.backend.name != OFFLINE_BACKEND else {}
        max_tokens = min(task.answer_budget, limits.max_tokens_cap)
        timeout_s = limits.timeout_for(task.name)
        sent = failures = 0
        adaptations = len(RESPONSE_FORMATS) + len(_DROPPABLE_PARAMS) + 1
        while True:
            seed = None if limits.seed is None else limits.seed + failures
            request = Request(task, messages, self.model, schema, max_tokens, timeout_s, seed)
            started = time.perf_counter()
            try:
                reply = _send(self.backend, request)
            except TransportError as err:
                self._count(spent, err.prompt_tokens, 0, started, failed=True, retry=sent > 0)
                sent += 1
                if err.adapted and adaptations > 0:
                    adaptations -= 1
                    continue
                failures += 1
                if not err.retryable or failures >= limits.attempts:
                    reason = f"{err.reason} ({_plural(failures, 'attempt')})"
                    raise LLMError(task.name, context, reason) from None
                time.sleep(limits.pause(err, failures, timeout_s))
                continue
            except LLMError as err:  # a backend's own final verdict
                self._count(spent, prompt_tokens(messages), 0, started, True, retry=sent > 0)
                raise LLMError(task.name, context, err.reason) from None
            result, problem = _judge_reply(task, reply)
            completion = count_tokens(reply.content or reply.refusal or "")
            self._count(spent, reply.prompt_tokens, completion, started, result is None, sent > 0)
            sent += 1
            if result is not None:
                return result, spent
            failures += 1
            if failures >= limits.attempts:
                reason = f"{problem} ({_plural(failures, 'attempt')})"
                raise LLMError(task.name, context, reason)
            if problem == CUT_OFF:
                max_tokens = min(2 * max_tokens, max(limits.max_tokens_cap, max_tokens))
            messages = [*base, _correction(problem, max_tokens)]
            time.sleep(min(limits.backoff_s * 2 ** (failures - 1), 8.0))

    def _count(
        self,
        spent: LLMUsage,
        prompt: int,
        completion: int,
        started: float,
        failed: bool,
        retry: bool,
    ) -> None:
        one = LLMUsage(
            1, prompt, completion, int(failed), time.perf_counter() - started, int(retry)
        )
        spent.add(one)
        with self._lock:
            self.usage.add(one)


def make_llm(settings: Settings, model: str | None = None) -> LLM:
    """The configured LLM; `model` overrides the default (the judge uses its own)."""
    if settings.llm_backend == OFFLINE_BACKEND:
        # Its own model id, so cached scores never pass for a real model's.
        return LLM(backend=DeterministicBackend(), model=DETERMINISTIC_MODEL)
    if settings.llm_backend == OPENAI_BACKEND:
        return LLM(backend=OpenAIBackend(settings), model=model or settings.llm_model)
    raise ValueError(f"HLTM_LLM_BACKEND={settings.llm_backend!r}: expected 'offline' or 'openai'")

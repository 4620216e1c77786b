"""The OpenAI-compatible backend and the per-endpoint memory of which features it supports."""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from hltm.llm_calls import CallLimits, Reply, Request, TransportError
from hltm.llm_tasks import prompt_tokens
from hltm.settings import OPENAI_BACKEND, Settings

REASONING_ALLOWANCE = 4096  # added to max_tokens when a reasoning effort is configured


# ---- what an endpoint supports, learnt from its errors and remembered per process ----------

RESPONSE_FORMATS = ("json_schema", "json_object", "text")
_ADAPTABLE_STATUS = frozenset({400, 404, 415, 422, 500, 501})
DROPPABLE_PARAMS = ("temperature", "seed", "reasoning_effort")
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
        for name in DROPPABLE_PARAMS:
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


def short_error(err: Exception) -> str:
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
    return short_error(err)

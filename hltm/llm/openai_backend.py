"""The OpenAI-compatible backend and the per-endpoint memory of which features it supports."""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from hltm.llm.calls import CallLimits, Reply, Request, TransportError
from hltm.llm.registry import prompt_tokens
from hltm.settings import OPENAI_BACKEND, Settings

log = logging.getLogger(__name__)

REASONING_ALLOWANCE = 4096  # added to max_tokens when a reasoning effort is configured


# ---- what an endpoint supports, learnt from its errors and remembered across processes -------

# From the richest to none: `json_object_schema` is `{"type": "json_object", "schema": …}`, which
# llama-cpp-python's server (and llama.cpp's) enforce with a grammar where they refuse json_schema.
RESPONSE_FORMATS = ("json_schema", "json_object_schema", "json_object", "text")
_ADAPTABLE_STATUS = frozenset({400, 404, 415, 422, 500, 501})
DROPPABLE_PARAMS = ("temperature", "seed", "reasoning_effort")
# Requests that may go to learning what an endpoint lacks, per task: each response format, each
# droppable parameter, the max_tokens name, streaming, and one re-probe of a remembered profile.
MAX_ADAPTATIONS = len(RESPONSE_FORMATS) + len(DROPPABLE_PARAMS) + 3
PROFILES_FILE = "llm_endpoints.json"
INTERRUPTED = (
    "the stream ended without a finish_reason: the server cut the answer off (llama-cpp-python's"
    " server does when another request arrives, unless started with --interrupt_requests False)"
)
_SCHEMA_HINT = (
    "Answer with one JSON object only (no prose, no code fence) that fits this JSON schema:\n"
)


@dataclass
class EndpointProfile:
    """The features one (endpoint, model) accepted; degraded on the first error naming one.
    `remembered`: read from an earlier process, so a failure re-probes instead of degrading.
    `accepted`: the endpoint has answered a request as this profile sends it (until then
    `gate` lets one request at a time through, see `_Admission`)."""

    refused_formats: set[str] = field(default_factory=set)
    max_tokens_param: str = "max_tokens"
    dropped: set[str] = field(default_factory=set)
    stream: bool = True
    notes: list[str] = field(default_factory=list)
    remembered: bool = False
    accepted: bool = False
    gate: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    @property
    def response_format(self) -> str:
        """The richest format the endpoint has not refused."""
        return next(f for f in RESPONSE_FORMATS if f not in self.refused_formats or f == "text")

    def adapt(self, status: int, detail: str, sent: Mapping[str, Any]) -> str | None:
        """Degrade what this error names, if anything; returns what changed."""
        if status not in _ADAPTABLE_STATUS:
            return None
        text = detail.lower()
        fmt = sent.get("response_format") or {}
        named_format = any(w in text for w in ("response_format", "json_schema", "json_object"))
        if fmt and named_format and self.response_format != "text":
            refused = self.response_format
            self.refused_formats.add(refused)
            return self._note(f"response_format {refused} → {self.response_format}")
        if sent.get("stream") and "stream" in text:
            self.stream = False
            return self._note("streaming off")
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

    def _note(self, change: str) -> str:
        self.notes.append(change)
        return change

    def as_json(self) -> dict[str, Any]:
        return {
            "response_format": self.response_format,
            "refused_formats": sorted(self.refused_formats),
            "max_tokens_param": self.max_tokens_param,
            "dropped": sorted(self.dropped),
            "stream": self.stream,
            "notes": self.notes,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> EndpointProfile:
        return cls(
            refused_formats={str(f) for f in data.get("refused_formats", ())}
            & set(RESPONSE_FORMATS),
            max_tokens_param=str(data.get("max_tokens_param", "max_tokens")),
            dropped={str(d) for d in data.get("dropped", ())},
            stream=bool(data.get("stream", True)),
            notes=[str(n) for n in data.get("notes", ())],
            remembered=True,
            accepted=True,
        )


class EndpointProfiles:
    """What each endpoint supports: in memory for the process, and in a small JSON file of the
    data directory's cache (`PROFILES_FILE`) for the next ones, keyed by base URL and model, so
    a server that rejects `json_schema` is sent one such request per data directory, not one
    per process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._profiles: dict[tuple[str, str], EndpointProfile] = {}
        self._files: set[Path] = set()

    def get(self, base_url: str, model: str, path: Path | None = None) -> EndpointProfile:
        with self._lock:
            key = (base_url, model)
            if key not in self._profiles:
                stored = _read_profiles(path).get(_file_key(key)) if path else None
                self._profiles[key] = (
                    EndpointProfile.from_json(stored) if stored else EndpointProfile()
                )
            return self._profiles[key]

    def learnt(self, base_url: str, model: str, path: Path | None) -> None:
        """Write this endpoint's profile for later processes (atomically: a reader sees the old
        file or the new one); an unwritable cache only costs the next process a probe."""
        if path is None:
            return
        with self._lock:
            profile = self._profiles[(base_url, model)]
            profiles = _read_profiles(path)
            profiles[_file_key((base_url, model))] = profile.as_json()
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                scratch = path.with_suffix(f".{os.getpid()}.tmp")
                scratch.write_text(json.dumps(profiles, indent=1, sort_keys=True))
                os.replace(scratch, path)
                self._files.add(path)
            except OSError as err:
                log.warning("could not remember the endpoint's features in %s: %s", path, err)

    def reprobe(self, base_url: str, model: str) -> EndpointProfile:
        """Start over from the full feature set (a remembered profile just failed)."""
        with self._lock:
            fresh = EndpointProfile(notes=["re-probing: the remembered features failed"])
            self._profiles[(base_url, model)] = fresh
            return fresh

    def forget(self, *paths: Path) -> None:
        """Clear the process's memory and the files it wrote (and `paths`): for tests."""
        with self._lock:
            self._profiles.clear()
            for path in self._files | set(paths):
                path.unlink(missing_ok=True)
            self._files.clear()


def _file_key(key: tuple[str, str]) -> str:
    return f"{key[0]} {key[1]}"


def _read_profiles(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


ENDPOINTS = EndpointProfiles()


class OpenAIBackend:
    """Real `openai` client, one request per `send` (SDK retries off; `LLM.run` retries).

    Streamed where the endpoint streams: the request's timeout bounds the wait for the first
    token (a slot's queue and the prompt), `idle_s` each pause between tokens after it, so an
    answer that keeps coming is never thrown away for being long."""

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
        self.concurrency = settings.concurrency
        self.idle_s = settings.llm_idle_timeout_s
        self._stream = settings.llm_stream
        self._profiles_path = settings.cache_dir / PROFILES_FILE
        self._temperature = settings.llm_temperature
        self._reasoning_effort = settings.reasoning_effort

    def profile(self, model: str) -> EndpointProfile:
        return ENDPOINTS.get(self.base_url, model, self._profiles_path)

    def send(self, request: Request) -> Reply:
        admission = _Admission(self, request.model)
        try:
            return self._send(request, admission)
        finally:
            admission.release()

    def _send(self, request: Request, admission: _Admission) -> Reply:
        openai = self._openai
        profile = admission.profile
        kwargs = self._arguments(request, profile)
        sent_tokens = prompt_tokens(kwargs["messages"])
        try:
            if kwargs.get("stream"):
                return self._streamed(kwargs, request.timeout_s, sent_tokens, admission)
            response = self._client.chat.completions.create(**kwargs)
            admission.accepted()
        except openai.APITimeoutError:
            reason = f"timed out after {request.timeout_s:g} s"
            raise TransportError(reason, sent_tokens, retryable=True, timed_out=True) from None
        except openai.APIStatusError as err:
            # The server refused the request: it processed none of it, so no tokens are charged.
            detail = _status_detail(err)
            reason = f"HTTP {err.status_code}: {detail}"
            change = profile.adapt(err.status_code, detail, kwargs)
            if change and profile.remembered:
                ENDPOINTS.reprobe(self.base_url, request.model)
                change = "re-probing what it accepts (the remembered features failed)"
            if change:
                ENDPOINTS.learnt(self.base_url, request.model, self._profiles_path)
            if change:
                reason = f"{reason} (the endpoint lacks it: {change})"
                raise TransportError(reason, 0, retryable=True, adapted=True) from None
            raise TransportError(
                reason, 0, retryable=_retryable(err), wait_s=_retry_after(err)
            ) from None
        except openai.APIConnectionError as err:
            reason = f"cannot reach the endpoint: {err}"
            raise TransportError(reason, 0, retryable=True) from None
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

    def _streamed(
        self, kwargs: dict[str, Any], first_s: float, sent_tokens: int, admission: _Admission
    ) -> Reply:
        """Read a streamed answer, closing it when no first token comes within `first_s` or,
        after one, no token within `idle_s`; a stalled answer is a timeout (its text so far
        is counted: it was generated). A stream that ends with no finish_reason was cut off by
        the server, not finished by the model: a broken transport, re-sent as it was."""
        import httpx

        idle_s = self.idle_s
        # httpx bounds the wait for the headers (and each read) by the first-token limit.
        kwargs["timeout"] = httpx.Timeout(first_s, connect=min(first_s, 30.0))
        watch = _StallWatch(first_s, idle_s)
        parts: list[str] = []
        refusal: list[str] = []
        finish: str | None = None
        stream = self._client.chat.completions.create(**kwargs)
        admission.accepted()
        watch.start(stream)
        try:
            for chunk in stream:
                for choice in chunk.choices[:1]:
                    delta = choice.delta
                    if delta.content or getattr(delta, "refusal", None) or choice.finish_reason:
                        watch.progress()
                    parts.append(delta.content or "")
                    refusal.append(getattr(delta, "refusal", None) or "")
                    finish = str(choice.finish_reason) if choice.finish_reason else finish
        except (httpx.TimeoutException, self._openai.APITimeoutError):
            watch.stalled = watch.stalled or watch.reason()
        except (httpx.HTTPError, self._openai.APIError) as err:
            if not watch.stalled:  # the connection dropped, or the server sent an error event
                reason = f"the stream broke off: {short_error(err)}"
                raise TransportError(
                    reason, sent_tokens, retryable=True, completion="".join(parts)
                ) from None
        finally:
            watch.stop()
        if watch.stalled:
            # Not `timed_out`: closing the stream freed the server's slot (llama.cpp and vLLM stop
            # generating when the client goes), so the retry need not wait the answer out.
            raise TransportError(
                watch.stalled, sent_tokens, retryable=True, completion="".join(parts)
            )
        if finish is None:
            raise TransportError(
                INTERRUPTED,
                sent_tokens,
                retryable=True,
                completion="".join(parts),
                interrupted=True,
            )
        return Reply("".join(parts) or None, finish, sent_tokens, "".join(refusal) or None)

    def _arguments(self, request: Request, profile: EndpointProfile) -> dict[str, Any]:
        messages = list(request.messages)
        kwargs: dict[str, Any] = {"model": request.model, "timeout": request.timeout_s}
        if self._stream and profile.stream:
            kwargs["stream"] = True
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
            if fmt == "json_object_schema":
                kwargs["response_format"] = {"type": "json_object", "schema": request.schema}
            elif fmt == "json_object":
                kwargs["response_format"] = {"type": "json_object"}
            # Out of json_schema mode the model reads the schema too (where a grammar enforces
            # it, the answer's shape is known before it starts; where none does, it is all).
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


class _Admission:
    """Until an endpoint has accepted a request, one request at a time goes to it: the first
    real request learns what the endpoint refuses (no separate probe), and the others wait here
    instead of in the server's queue, where a one-slot server answers a refusal only after the
    answers ahead of it. Released once the server accepts (an answer starts) or fails."""

    def __init__(self, backend: OpenAIBackend, model: str) -> None:
        self.profile = backend.profile(model)
        self._held: threading.Lock | None = None
        if not self.profile.accepted:
            self._held = self.profile.gate
            self._held.acquire()
            self.profile = backend.profile(model)  # the one ahead may have learnt something
            if self.profile.accepted:
                self.release()

    def accepted(self) -> None:
        self.profile.accepted = True
        self.release()

    def release(self) -> None:
        if self._held is not None:
            self._held.release()
            self._held = None


class _StallWatch:
    """A thread that closes a stream which stalls: no first token within `first_s` of the
    request, or no token within `idle_s` (at most `first_s`, httpx's read bound) of the last
    one. `stalled` says which."""

    def __init__(self, first_s: float, idle_s: float) -> None:
        self.first_s = first_s
        self.idle_s = idle_s
        self.started = self.last = time.monotonic()
        self.tokens = False
        self.stalled = ""
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, stream: Any) -> None:
        self._thread = threading.Thread(target=self._watch, args=(stream,), daemon=True)
        self._thread.start()

    def progress(self) -> None:
        self.tokens = True
        self.last = time.monotonic()

    def stop(self) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join()

    def reason(self) -> str:
        if not self.tokens:
            return f"timed out: no first token within {self.first_s:g} s"
        return f"timed out: no token for {self.idle_s:g} s (the stream stalled)"

    def _watch(self, stream: Any) -> None:
        while not self._done.wait(min(0.05, self.idle_s / 4)):
            now = time.monotonic()
            if now - (self.last if self.tokens else self.started) > (
                self.idle_s if self.tokens else self.first_s
            ):
                self.stalled = self.reason()
                stream.close()
                return


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

"""The one LLM interface every extractor, aggregator, answerer and judge goes through.

A `Task` is a versioned prompt from `hltm/llm/prompts/` plus the pydantic model its answer must fit.
`LLM.run(task, payload)` renders the prompt, sends it to a backend and returns a validated answer.
Two backends sit behind it:

* `OpenAIBackend` — the real `openai` SDK against any OpenAI-compatible endpoint (OpenAI, vLLM,
  llama.cpp server, Ollama). One HTTP request per `send`, the SDK's own retries off: every retry
  is ours, so every request and every token is counted. It sends a bounded `max_tokens`, a low
  temperature and a seed, streams (a first-token limit, then an idle limit between tokens), and
  degrades per endpoint when the server lacks a feature (`json_schema` → `json_object` with the
  schema, which llama.cpp's servers enforce by grammar → `json_object` → plain text, the schema in
  the prompt below `json_schema` and fences stripped; an unsupported parameter is dropped;
  streaming off), remembering the choice per base URL and model across processes.
* `DeterministicBackend` — the offline default: each task's own rule-based handler computes the
  same kind of answer from the same payload with no model at all.

`LLM.run` owns the retry loop: transport errors (429/5xx/connection, a stream the server ended
without a finish_reason) are re-sent as they were, with backoff (the server's Retry-After first);
an unstreamed request that timed out is retried only after a pause as long as the timeout (a
one-at-a-time server is still generating the abandoned answer); an unusable answer (cut off, not
JSON, not the schema, refused) is re-asked with a turn saying why, so a greedy server does not
repeat itself. Calls and tokens are counted per request, on the messages sent and
the text received, with o200k_base, so the figures are what a real model was sent whichever
backend answered (a request the server refused costs no tokens; a timed-out request's completion
counts what it had streamed).

The task registry is `hltm.llm.registry`, one request's types and the offline backend
`hltm.llm.calls`, the OpenAI backend and its endpoint profiles `hltm.llm.openai_backend`.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from hltm.llm.calls import (
    USAGE_FIELDS,
    Backend,
    CallLimits,
    DeterministicBackend,
    LLMError,
    LLMUsage,
    Reply,
    Request,
    TransportError,
    send_request,
)
from hltm.llm.openai_backend import MAX_ADAPTATIONS, OpenAIBackend, short_error
from hltm.llm.registry import Choices, OutputT, Task, prompt_tokens
from hltm.settings import OFFLINE_BACKEND, OPENAI_BACKEND, Settings
from hltm.tokens import count_tokens

# The offline rules' model id is in every score's cache key: bump it when the rules change a verdict.
DETERMINISTIC_MODEL = "deterministic-rules-v5"

_ONE_ATTEMPT = CallLimits(attempts=1)

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
        return None, f"the answer does not fit {task.schema_name}: {short_error(err)}"


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

    def prepare(self, task: Task[Any], payloads: Iterable[dict[str, Any]]) -> None:
        """Let the offline backend read a batch before it answers any of it (`Task.prepare`);
        `payloads` is not consumed for a model backend."""
        if self.backend.name == OFFLINE_BACKEND and task.prepare is not None:
            task.prepare(list(payloads))

    def snapshot(self) -> LLMUsage:
        with self._lock:
            return LLMUsage(*(getattr(self.usage, k) for k in USAGE_FIELDS))

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
        adaptations = MAX_ADAPTATIONS
        while True:
            seed = None if limits.seed is None else limits.seed + failures
            request = Request(task, messages, self.model, schema, max_tokens, timeout_s, seed)
            started = time.perf_counter()
            try:
                reply = send_request(self.backend, request)
            except TransportError as err:
                completion = count_tokens(err.completion) if err.completion else 0
                self._count(
                    spent, err.prompt_tokens, completion, started, True, sent > 0, err.interrupted
                )
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
        interrupted: bool = False,
    ) -> None:
        elapsed = time.perf_counter() - started
        one = LLMUsage(1, prompt, completion, int(failed), elapsed, int(retry), int(interrupted))
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

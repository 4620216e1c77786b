"""The faults the local OpenAI server can inject, and how each one bends an answer."""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass
from typing import Any, Literal

from hltm.llm.registry import Task
from hltm.tokens import count_tokens
from hltm_devkit import protocol

ALWAYS = "always"
TRANSPORT_FAULTS = ("http_429", "http_500", "timeout")
# Answered with an HTTP error before any generation (a streamed request included).
REFUSING_FAULTS = ("http_429", "http_500", "reject_json_schema")
CONTENT_FAULTS = (
    "malformed_json",
    "truncated_json",
    "finish_length",
    "schema_violation",
    "invented_quotes",
    "partial_checklist",
    "unquoted",
    "refusal",
    "content_filter",
    "reject_json_schema",
    "fenced_json",
    "repetition_loop",
    "unknown_ids",
    "echo_examples",
    "slow_first_token",
    "cites_document_ids",
    "no_citations",
    "copies_all_sources",
    "neighbour_project",
    "neighbour_field",
    "interrupted_stream",
    "json_object_schema_only",
)
# Only a streamed answer can be cut off by the server (the others are answered whole).
STREAM_FAULTS = ("interrupted_stream",)
FAULT_KINDS = TRANSPORT_FAULTS + CONTENT_FAULTS
ENDPOINTS = ("chat", "embeddings")
DEFAULT_TIMEOUT_DELAY_S = 5.0
DEFAULT_RETRY_AFTER_S = 1.0
DEFAULT_MAX_TOKENS = 4096  # what a looping model produces when the request sets no bound
ID_FIELDS = ("source", "sources", "support", "citation")

Endpoint = Literal["chat", "embeddings"]


@dataclass
class Fault:
    """One injected misbehaviour. `times=None` means always."""

    kind: str
    times: int | None = 1
    match: str | None = None
    endpoint: str = "chat"
    delay_s: float = DEFAULT_TIMEOUT_DELAY_S
    retry_after_s: float | None = None
    served: int = 0

    def applies_to(
        self, endpoint: str, text: str, response_format: str | None, streamed: bool = False
    ) -> bool:
        if self.endpoint != endpoint or (self.times is not None and self.times <= 0):
            return False
        if self.kind == "reject_json_schema" and response_format != "json_schema":
            return False
        if self.kind in STREAM_FAULTS and not streamed:
            return False
        return self.match is None or self.match in text

    def refuses(self, response_format: str | None) -> bool:
        """Answered with an HTTP error before any generation (a streamed request included)."""
        if self.kind == "json_object_schema_only":  # llama-cpp-python's server
            return response_format == "json_schema"
        return self.kind in REFUSING_FAULTS

    def as_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["times"] = ALWAYS if self.times is None else self.times
        return out


class FaultError(ValueError):
    """An `inject` request that cannot be honoured."""


def make_fault(
    kind: str,
    times: int | str = 1,
    match: str | None = None,
    *,
    endpoint: str = "chat",
    delay_s: float | None = None,
    retry_after_s: float | None = None,
) -> Fault:
    """Validate the fields of a fault (as given to `inject` or `POST /_faults`)."""
    if kind not in FAULT_KINDS:
        raise FaultError(f"unknown fault kind {kind!r}; expected one of {', '.join(FAULT_KINDS)}")
    if endpoint not in ENDPOINTS:
        raise FaultError(f"unknown endpoint {endpoint!r}; expected 'chat' or 'embeddings'")
    if endpoint == "embeddings" and kind not in TRANSPORT_FAULTS:
        raise FaultError(f"fault {kind!r} only applies to chat completions")
    if times == ALWAYS:
        count: int | None = None
    elif isinstance(times, int) and not isinstance(times, bool) and times >= 1:
        count = times
    else:
        raise FaultError(f"times must be a positive integer or 'always', not {times!r}")
    if match is not None and (not isinstance(match, str) or not match):
        raise FaultError("match must be a non-empty string (or absent)")
    for name, value in (("delay_s", delay_s), ("retry_after_s", retry_after_s)):
        if value is not None and (
            not isinstance(value, int | float) or not math.isfinite(value) or value < 0
        ):
            raise FaultError(f"{name} must be a non-negative number, not {value!r}")
    return Fault(
        kind=kind,
        times=count,
        match=match,
        endpoint=endpoint,
        delay_s=DEFAULT_TIMEOUT_DELAY_S if delay_s is None else float(delay_s),
        retry_after_s=None if retry_after_s is None else float(retry_after_s),
    )


def fault_fields(spec: Any) -> dict[str, Any]:
    if not isinstance(spec, dict) or "kind" not in spec:
        raise FaultError("each fault must be a JSON object with at least 'kind'")
    allowed = {"kind", "times", "match", "endpoint", "delay_s", "retry_after_s"}
    unknown = sorted(set(spec) - allowed)
    if unknown:
        raise FaultError(f"unknown fault field(s) {unknown}; allowed: {sorted(allowed)}")
    return spec


def _violate_schema(answer: Any, task: Task[Any]) -> str:
    """Valid JSON that the task's output model rejects (checked, not assumed)."""
    model = task.output_model
    candidates: list[Any] = []
    if isinstance(answer, dict):
        required = [name for name, f in model.model_fields.items() if f.is_required()]
        if required:
            candidates.append({k: v for k, v in answer.items() if k not in required})
        # Every field given a value of the wrong shape.
        candidates.append({k: {"unexpected": [v]} for k, v in answer.items()})
        candidates.append({k: [v] if not isinstance(v, list) else 12345 for k, v in answer.items()})
    candidates.append([answer])  # an array where an object is required: always wrong
    for candidate in candidates:
        text = json.dumps(candidate, ensure_ascii=False, sort_keys=True)
        try:
            model.model_validate_json(text)
        except ValueError:  # pydantic.ValidationError is a ValueError
            return text
    return json.dumps([answer], ensure_ascii=False)


_INVENTED_EN = (
    "Led a team of 14 engineers migrating the billing platform to Kubernetes at Northwind Labs",
    "Cut p99 checkout latency from 900 ms to 120 ms by rewriting the pricing service in Rust",
    "Designed an event-sourced ledger processing 40 million transactions a day on Kafka",
    "Mentored six junior developers and ran the company-wide code review guild for two years",
    "Built a real-time fraud scoring pipeline with Flink and ClickHouse serving 3 markets",
    "Owned the on-call rotation and reduced production incidents by 65% year over year",
    "Shipped a multi-tenant GraphQL gateway adopted by 30 internal product teams",
    "Holds an AWS Certified Solutions Architect Professional certification since 2019",
)
_INVENTED_RU = (
    "Руководил командой из 14 инженеров при переносе биллинга в Kubernetes в Норд-Софт",
    "Сократил задержку оформления заказа с 900 до 120 мс, переписав сервис цен на Rust",
    "Спроектировал событийный реестр, обрабатывающий 40 млн транзакций в день на Kafka",
    "Был наставником шести младших разработчиков и вёл гильдию код-ревью два года",
    "Построил конвейер оценки мошенничества в реальном времени на Flink и ClickHouse",
    "Отвечал за дежурства и снизил число инцидентов в продакшене на 65% за год",
    "Запустил мультиарендный GraphQL-шлюз, которым пользуются 30 продуктовых команд",
    "Имеет сертификат AWS Solutions Architect Professional с 2019 года",
)
_CYRILLIC = re.compile("[а-яё]", re.IGNORECASE)


def _invent_quotes(answer: Any, user_text: str, payload: Any) -> Any:
    """Replace every non-null string `quote` (at any depth) with text absent from the input."""
    haystack = protocol.haystack(user_text, payload)
    pool = _INVENTED_RU if _CYRILLIC.search(user_text) else _INVENTED_EN
    counter = 0

    def fresh(original: str) -> str:
        nonlocal counter
        while True:
            base = pool[counter % len(pool)]
            text = base if counter < len(pool) else f"{base} (project {counter // len(pool)})"
            counter += 1
            folded = " ".join(text.lower().split())
            if folded not in haystack and text != original:
                return text

    def walk(value: Any) -> Any:
        if isinstance(value, dict):
            return {
                k: fresh(v) if k == "quote" and isinstance(v, str) and v else walk(v)
                for k, v in value.items()
            }
        if isinstance(value, list):
            return [walk(v) for v in value]
        return value

    return walk(answer)


def _first_items(answer: Any, key: str = "checklist") -> Any:
    """Every `key` list (at any depth) cut to its first item: a small model that stops early."""
    if isinstance(answer, dict):
        return {
            k: v[:1] if k == key and isinstance(v, list) else _first_items(v, key)
            for k, v in answer.items()
        }
    if isinstance(answer, list):
        return [_first_items(v, key) for v in answer]
    return answer


def _no_quotes(answer: Any) -> Any:
    """Every `quote` field (at any depth) null: a model that never quotes."""
    if isinstance(answer, dict):
        return {k: None if k == "quote" else _no_quotes(v) for k, v in answer.items()}
    if isinstance(answer, list):
        return [_no_quotes(v) for v in answer]
    return answer


def _cite_unknown_ids(answer: Any, haystack: str) -> Any:
    """Every id field's value(s) replaced by ids that occur nowhere in the input."""
    counter = 0

    def unknown() -> str:
        nonlocal counter
        while True:
            counter += 1
            candidate = f"unknown-id-{counter:04d}"
            if candidate not in haystack:
                return candidate

    def walk(value: Any) -> Any:
        if isinstance(value, dict):
            out = {}
            for k, v in value.items():
                if k in ID_FIELDS and isinstance(v, str) and v:
                    out[k] = unknown()
                elif k in ID_FIELDS and isinstance(v, list):
                    out[k] = [unknown() for _ in v]
                else:
                    out[k] = walk(v)
            return out
        if isinstance(value, list):
            return [walk(v) for v in value]
        return value

    return walk(answer)


def _echo_examples(answer: Any, examples: list[tuple[str, str]]) -> Any:
    """Lists of {field, value} items become the prompt's examples (other keys kept)."""
    if not examples:
        return answer
    if isinstance(answer, dict):
        return {k: _echo_examples(v, examples) for k, v in answer.items()}
    if isinstance(answer, list):
        if answer and all(isinstance(i, dict) and {"field", "value"} <= set(i) for i in answer):
            template = answer[0]
            return [{**template, "field": f, "value": v} for f, v in examples]
        return [_echo_examples(v, examples) for v in answer]
    return answer


def _cite_documents(answer: Any, payload: Any) -> Any:
    """Each cited node id of `citation` replaced by a document id the payload shows for that
    node (a QA pair's `source`): what a small model copies when it sees both kinds of id."""
    documents: dict[str, str] = {}
    for item in protocol.json_values(payload):
        if isinstance(item, dict) and item.get("node_id") and item.get("source"):
            documents.setdefault(str(item["node_id"]), str(item["source"]))
    if not isinstance(answer, dict) or not isinstance(answer.get("citation"), list):
        return answer
    return {**answer, "citation": [documents.get(c, c) for c in answer["citation"]]}


def _answer_from_neighbour(answer: Any, payload: Any, same_node: bool) -> Any:
    """A query answer that states a facet value the input holds for a neighbour, keeping its
    citations: the asked field's value of a node it does not cite (`same_node` false), or
    another field's value of a node it cites (true)."""
    if not isinstance(answer, dict) or not isinstance(payload, dict):
        return answer
    cited = set(answer.get("citation") or [])
    asked = {p.get("field") for p in payload.get("pairs", []) if not p.get("value")}
    for facet in payload.get("facets", []):
        own = facet.get("node_id") in cited
        field_asked = facet.get("field") in asked
        if (own and not field_asked) if same_node else (not own and field_asked):
            return {**answer, "answer": str(facet.get("value", ""))}
    return answer


def _allowed_sources(response_format: Any, system: str) -> list[str]:
    """The ids the schema lets `sources` name (its enum), on the wire or in the system prompt."""
    spec = response_format.get("json_schema") if isinstance(response_format, dict) else None
    schema = spec.get("schema") if isinstance(spec, dict) else None
    if schema is None and "{" in system:
        try:
            schema = json.loads(system[system.index("{") :])
        except ValueError:
            schema = None
    found: list[str] = []

    def walk(value: Any, name: str = "") -> None:
        if isinstance(value, dict):
            if name == "sources" and isinstance(value.get("items"), dict):
                found.extend(value["items"].get("enum", []))
            for key, item in value.items():
                walk(item, key if key != "properties" else name)
        elif isinstance(value, list):
            for item in value:
                walk(item, name)

    walk(schema)
    return sorted({str(v) for v in found if v})


def _copy_sources(answer: Any, allowed: list[str]) -> Any:
    """Every `sources` list (at any depth) set to the whole allowed list."""
    if isinstance(answer, dict):
        return {
            k: list(allowed) if k == "sources" and allowed else _copy_sources(v, allowed)
            for k, v in answer.items()
        }
    if isinstance(answer, list):
        return [_copy_sources(v, allowed) for v in answer]
    return answer


def _repetition_loop(text: str, max_tokens: int) -> str:
    """A start of the answer, then one line over and over until `max_tokens` tokens."""
    start = text[: max(1, len(text) // 3)]
    line = ' "and the same line again and again",\n'
    room = max(0, max_tokens - count_tokens(start))
    return start + line * max(1, room // count_tokens(line))


def _unconstrained(answer: Any, task: Task[Any], payload: Any) -> str:
    """What a small model wrote when no grammar held it to the schema: its input echoed back
    (checked to miss the schema; else a plain violation of it)."""
    echoed = json.dumps(payload, ensure_ascii=False, sort_keys=True)
    try:
        task.output_model.model_validate_json(echoed)
    except ValueError:
        return echoed
    return _violate_schema(answer, task)


def render(
    kind: str | None,
    answer: Any,
    task: Task[Any],
    user_text: str,
    payload: Any,
    messages: list[Any],
    max_tokens: int,
    response_format: Any = None,
) -> tuple[str | None, str, str | None]:
    """(content, finish_reason, refusal) for the answer, bent by the fault if there is one."""
    if kind == "cites_document_ids":
        answer = _cite_documents(answer, payload)
    elif kind == "no_citations" and isinstance(answer, dict) and "citation" in answer:
        answer = {**answer, "citation": []}
    elif kind == "partial_checklist":
        answer = _first_items(answer)
    elif kind == "unquoted":
        answer = _no_quotes(answer)
    elif kind in ("neighbour_project", "neighbour_field"):
        answer = _answer_from_neighbour(answer, payload, kind == "neighbour_field")
    elif kind == "copies_all_sources":
        system = next(
            (protocol.text_of(m.get("content")) for m in messages if m.get("role") == "system"),
            "",
        )
        answer = _copy_sources(answer, _allowed_sources(response_format, system))
    text = json.dumps(answer, ensure_ascii=False, sort_keys=True)
    if kind == "json_object_schema_only" and protocol.format_type(response_format) != (
        "json_object_schema"
    ):
        return _unconstrained(answer, task, payload), "stop", None
    if kind == "malformed_json":
        # Python's repr (single quotes): looks like JSON, parses as none, even salvaged.
        chatty = f"Sure! Here is the {task.schema_name} you asked for:\n{answer!r}\nHope it helps."
        return chatty, "stop", None
    if kind == "fenced_json":
        return f"Here is the JSON:\n```json\n{text}\n```", "stop", None
    if kind == "repetition_loop":
        return _repetition_loop(text, max_tokens), "length", None
    if kind == "unknown_ids":
        cited = _cite_unknown_ids(answer, protocol.haystack(user_text, payload))
        return json.dumps(cited, ensure_ascii=False, sort_keys=True), "stop", None
    if kind == "echo_examples":
        echoed = _echo_examples(answer, protocol.prompt_examples(messages))
        return json.dumps(echoed, ensure_ascii=False, sort_keys=True), "stop", None
    if kind == "truncated_json":
        return text[: max(1, len(text) // 2)], "length", None
    if kind == "finish_length":
        return text, "length", None
    if kind == "schema_violation":
        return _violate_schema(answer, task), "stop", None
    if kind == "invented_quotes":
        invented = _invent_quotes(answer, user_text, payload)
        return json.dumps(invented, ensure_ascii=False, sort_keys=True), "stop", None
    if kind == "refusal":
        return None, "stop", "I'm sorry, but I can't help with that request."
    if kind == "content_filter":
        return None, "content_filter", None
    return text, "stop", None

"""Reading chat requests and wording OpenAI errors, shared by the server and its faults."""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from typing import Any

from starlette.responses import JSONResponse

from hltm.llm.registry import INPUT_FENCE, Task, task_for_schema, task_for_system_prompt


def error(
    status: int, message: str, kind: str, code: str | None = None, **headers: str
) -> JSONResponse:
    body = {"error": {"message": message, "type": kind, "param": None, "code": code}}
    return JSONResponse(body, status_code=status, headers=headers or None)


def text_of(content: Any) -> str:
    """A message's text, whether a string or a list of content parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return ""


def user_text(messages: list[Any]) -> str:
    """All user turns (the payload's and any re-ask's), what a fault's `match` looks at."""
    texts = [
        text_of(m.get("content"))
        for m in messages
        if isinstance(m, dict) and m.get("role") == "user"
    ]
    return "\n".join(texts)


def schema_name(response_format: Any) -> str | None:
    if not isinstance(response_format, dict) or response_format.get("type") != "json_schema":
        return None
    spec = response_format.get("json_schema")
    name = spec.get("name") if isinstance(spec, dict) else None
    return name if isinstance(name, str) and name else None


def format_type(response_format: Any) -> str | None:
    """json_schema, json_object_schema (`json_object` with a `schema`, as llama-cpp-python
    takes it), json_object, or None (plain text)."""
    kind = response_format.get("type") if isinstance(response_format, dict) else None
    if kind == "json_object" and isinstance(response_format.get("schema"), dict):
        return "json_object_schema"
    return kind if kind in ("json_schema", "json_object") else None


def find_task(body: dict[str, Any], messages: list[Any]) -> tuple[str | None, Task[Any] | None]:
    """By the json_schema name the SDK sends, else (json_object / plain text) by the system
    prompt, which a degraded request still opens with."""
    schema = schema_name(body.get("response_format"))
    if schema is not None:
        return schema, task_for_schema(schema)
    system = next(
        (
            text_of(m.get("content"))
            for m in messages
            if isinstance(m, dict) and m.get("role") == "system"
        ),
        "",
    )
    task = task_for_system_prompt(system) if system else None
    return (task.schema_name if task else None), task


def max_tokens(body: dict[str, Any]) -> int | None:
    for name in ("max_completion_tokens", "max_tokens"):
        value = body.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def retry_headers(seconds: float) -> dict[str, str]:
    # Retry-After is whole seconds by the standard; retry-after-ms (which the openai SDK prefers,
    # and OpenAI sends) carries the exact figure, so tests can ask for short pauses.
    return {
        "retry-after": str(max(1, math.ceil(seconds))),
        "retry-after-ms": str(round(seconds * 1000)),
    }


def haystack(user_text: str, payload: Any) -> str:
    """Everything the model was shown, lowercased and whitespace-folded, payload strings decoded."""
    parts = [user_text, *(v for v in json_values(payload) if isinstance(v, str))]
    return " ".join(" ".join(parts).lower().split())


def json_values(value: Any) -> Iterator[Any]:
    """Every value of a decoded JSON document, containers first, at any depth."""
    yield value
    items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
    for item in items:
        yield from json_values(item)


_BACKTICK_EXAMPLE = re.compile(r"`([a-z_]+): ([^`\n]+)`")
_JSON_EXAMPLE = re.compile(r'\{"field": "([a-z_]+)", "value": "([^"\n]+)"')


def prompt_examples(messages: list[Any]) -> list[tuple[str, str]]:
    """`field: value` examples in the prompt's instructions (never in the payload block)."""
    found: list[tuple[str, str]] = []
    for message in messages:
        if not isinstance(message, dict) or message.get("role") not in ("system", "user"):
            continue
        text = text_of(message.get("content")).split(INPUT_FENCE)[0]
        for pattern in (_BACKTICK_EXAMPLE, _JSON_EXAMPLE):
            found += [(f, " ".join(v.split())) for f, v in pattern.findall(text)]
    return list(dict.fromkeys(found))

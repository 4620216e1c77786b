"""Prompts as `Task`s, registered so the local protocol server can find them; token counting."""

from __future__ import annotations

import json
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any, Generic, TypeVar

from pydantic import BaseModel

from hltm.tokens import count_tokens

# The versioned prompts ship inside the package, so an installed wheel has them.
PROMPTS = resources.files("hltm.llm") / "prompts"
INPUT_FENCE = "```json"
# Per-message framing tokens in the chat format (OpenAI's counting recipe).
_TOKENS_PER_MESSAGE = 3

OutputT = TypeVar("OutputT", bound=BaseModel)

Handler = Callable[[dict[str, Any]], dict[str, Any]]
BatchHandler = Callable[[list[dict[str, Any]]], None]
Choices = Mapping[str, Sequence[str]]

# Size guesses for a schema's answer when a prompt does not state its `max_tokens`.
_STRING_TOKENS = 40
_SCALAR_TOKENS = 4
_LIST_ITEMS = 12
_MIN_MAX_TOKENS = 1024
# Above this many allowed values an enum is not sent (OpenAI's strict mode caps enum sizes);
# the ids are then still checked in code by the caller.
MAX_ENUM_VALUES = 500


_SCALARS = (str, int, float, bool, type(None))


def payload_json(value: Any, sort_keys: bool = False) -> str:
    """`json.dumps(value, ensure_ascii=False, indent=1, sort_keys=sort_keys)`, byte for byte.

    With an indent, `json` writes in pure Python (about 0.3 ms for a context item: a contract's
    context holds thousands); here every object or list of scalars alone, the bulk of a payload,
    is written by the C encoder, its separators carrying the indentation."""
    out: list[str] = []
    _write_json(value, 0, sort_keys, out)
    return "".join(out)


@cache
def _flat_encoder(depth: int, sort_keys: bool) -> json.JSONEncoder:
    """The C encoder writing a flat object or list at `depth` as `indent=1` would."""
    inner = "\n" + " " * (depth + 1)
    return json.JSONEncoder(ensure_ascii=False, sort_keys=sort_keys, separators=("," + inner, ": "))


def _write_json(value: Any, depth: int, sort_keys: bool, out: list[str]) -> None:
    if not isinstance(value, dict | list | tuple) or not value:
        out.append(json.dumps(value, ensure_ascii=False, sort_keys=sort_keys))
        return
    is_dict = isinstance(value, dict)
    if is_dict and not all(isinstance(key, str) for key in value):  # json's own key rules
        text = json.dumps(value, ensure_ascii=False, indent=1, sort_keys=sort_keys)
        out.append(text.replace("\n", "\n" + " " * depth))
        return
    inner, outer = "\n" + " " * (depth + 1), "\n" + " " * depth
    if all(isinstance(v, _SCALARS) for v in (value.values() if is_dict else value)):
        body = _flat_encoder(depth, sort_keys).encode(value)
        out += [body[0], inner, body[1:-1], outer, body[-1]]
        return
    if is_dict:
        out.append("{")
        for i, key in enumerate(sorted(value) if sort_keys else value):
            out += ["," if i else "", inner, json.dumps(key, ensure_ascii=False), ": "]
            _write_json(value[key], depth + 1, sort_keys, out)
        out += [outer, "}"]
        return
    out.append("[")
    for i, item in enumerate(value):
        out += ["," if i else "", inner]
        _write_json(item, depth + 1, sort_keys, out)
    out += [outer, "]"]


@dataclass(frozen=True)
class Task(Generic[OutputT]):
    """A versioned prompt, the schema its answer must fit, and its offline rule-based handler.

    `max_tokens` bounds the answer (a prompt's own `max_tokens`, else a guess from the schema),
    so a model caught in a repetition loop is cut off early instead of at the server's cap.
    `prepare`, when set, lets the offline handler read a whole batch before answering any of it
    (the offline judge places each candidate within its vacancy's pool); a model needs no such
    step. The registry is the only way to a domain's `offline/` rules."""

    name: str
    version: str
    system: str
    user: str
    output_model: type[OutputT]
    offline: Handler
    max_tokens: int | None = None
    prepare: BatchHandler | None = None

    @property
    def schema_name(self) -> str:
        return self.output_model.__name__

    @property
    def answer_budget(self) -> int:
        return self.max_tokens or estimate_max_tokens(self.output_model)

    def messages(self, payload: dict[str, Any]) -> list[dict[str, str]]:
        """The user message ends with the payload as a JSON block, the model's only input."""
        body = payload_json(payload, sort_keys=True)
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


def load_task(
    name: str,
    output_model: type[OutputT],
    offline: Handler,
    prepare: BatchHandler | None = None,
) -> Task[OutputT]:
    """Load `hltm/llm/prompts/<name>.toml` (keys: version, system, user, optional max_tokens)."""
    spec = tomllib.loads((PROMPTS / f"{name}.toml").read_text(encoding="utf-8"))
    max_tokens = int(spec["max_tokens"]) if "max_tokens" in spec else None
    task = Task(
        name,
        str(spec["version"]),
        spec["system"],
        spec["user"],
        output_model,
        offline,
        max_tokens,
        prepare,
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

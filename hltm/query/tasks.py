"""The query path's LLM tasks: prompt + output schema + offline handler, registered with the LLM
layer (the local OpenAI-protocol server imports this module to serve them)."""

from __future__ import annotations

from typing import Any

from hltm.llm.registry import load_task
from hltm.query import parse
from hltm.query.models import AnswerOutput, ParsedQuery
from hltm.query.offline import compose


def _parse_offline(payload: dict[str, Any]) -> dict[str, Any]:
    return parse.parse_question(str(payload.get("question", "")))


PARSE = load_task("parse_query", ParsedQuery, _parse_offline)
ANSWER = load_task("answer", AnswerOutput, compose.answer)


def prompt_versions() -> dict[str, str]:
    return {t.name: t.version for t in (PARSE, ANSWER)}

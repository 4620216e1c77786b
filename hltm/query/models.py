"""Schemas of the query path's LLM tasks (OpenAI-strict: every field required, no free dicts)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

Intent = Literal["preferences", "find_projects", "lookup"]
INTENTS: tuple[Intent, ...] = ("preferences", "find_projects", "lookup")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class QueryPair(_Strict):
    """One `field: value` condition of the question; `value` is "" when only the field is asked."""

    field: str
    value: str


class ParsedQuery(_Strict):
    intent: Intent
    pairs: list[QueryPair]


class AnswerOutput(_Strict):
    """`in_memory` is false when the input does not state what was asked about the subject the
    question names; `answer` then says so, and `citation` names the nearest nodes as a hint."""

    rationale: str
    answer: str
    citation: list[str]
    in_memory: bool

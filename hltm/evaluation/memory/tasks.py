"""The answer judge, an LLM task of the evaluation only: it grades an answer against the
reference answer of a question set (LLM-as-judge correctness)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from hltm.evaluation.memory.metrics import judge_offline
from hltm.llm.registry import load_task


class CorrectnessOutput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    score: float
    rationale: str


ANSWER_JUDGE = load_task("answer_judge", CorrectnessOutput, judge_offline)

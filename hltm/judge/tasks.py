"""The judge as an LLM task: the versioned prompt, the strict answer schema, the payload.

`JUDGE_TASK` is what every judging path sends through `hltm.llm.LLM.run` — the nightly run, a
vacancy's Dagster partition, the golden evaluation, the local protocol server (which finds the
task by the schema name `JudgeVerdict` once this module is imported). Its offline handler is the
rule-based judge in `hltm.judge.offline.heuristic`.

The schema is OpenAI-strict compatible: every field required, no free-form objects; a missing
quote is an explicit null.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from hltm.judge.offline.heuristic import judge_offline, prepare_batch
from hltm.llm.registry import Task, load_task

__all__ = [
    "JUDGE_TASK",
    "SCORE_NAMES",
    "ChecklistItem",
    "JudgeVerdict",
    "Score",
    "build_payload",
    "prompt_version",
]

SCORE_NAMES = ("role", "level", "skills", "experience", "overall")


class Score(BaseModel):
    model_config = ConfigDict(extra="forbid")

    score: Annotated[int, Field(ge=0, le=100)]
    explanation: str


class ChecklistItem(BaseModel):
    model_config = ConfigDict(extra="forbid")

    requirement_id: str
    requirement: str
    mandatory: bool
    status: Literal["met", "partial", "not_found"]
    quote: str | None = Field(description="verbatim fragment of the resume, ≤ 200 characters")


class JudgeVerdict(BaseModel):
    model_config = ConfigDict(extra="forbid")

    actual_role: str
    role: Score
    level: Score
    skills: Score
    experience: Score
    checklist: list[ChecklistItem]
    overall: Score

    def scores(self) -> dict[str, int]:
        return {name: getattr(self, name).score for name in SCORE_NAMES}


JUDGE_TASK: Task[JudgeVerdict] = load_task("judge", JudgeVerdict, judge_offline, prepare_batch)


def prompt_version() -> str:
    return JUDGE_TASK.version


def build_payload(vacancy: Any, resume: Any) -> dict[str, Any]:
    """The model's only input: the vacancy with its requirements and the resume as written.

    ``vacancy`` / ``resume`` are `hltm.judge.data.Vacancy` / `Resume` (or anything with the same
    attributes). ``as_of`` tells what "present" in the resume's dates means: when the resume was
    last updated.
    """
    return {
        "vacancy": {
            "id": vacancy.vacancy_id,
            "title": vacancy.title,
            "text": vacancy.text,
            "requirements": [
                {"id": r.requirement_id, "text": r.text, "mandatory": r.mandatory}
                # a soft item the calibration proposed from the recruiter's past projects
                | ({"from_memory": True} if getattr(r, "origin", "") == "memory" else {})
                for r in vacancy.requirements
            ],
        },
        "resume": {
            "id": resume.resume_id,
            "headline": resume.headline,
            "as_of": resume.as_of,
            "text": resume.text,
        },
    }

"""The four memory tasks: prompt + output schema + offline handler, registered with the LLM layer."""

from __future__ import annotations

from hltm.llm.registry import load_task
from hltm.memory.models import AggregateOutput, FacetsOutput, QAOutput, SummaryOutput
from hltm.memory.offline import extract as offline
from hltm.memory.offline.places import load_gazetteer

FACETS = load_task("facets", FacetsOutput, offline.facets)
QA = load_task("qa", QAOutput, offline.qa)
SUMMARY = load_task("summary", SummaryOutput, offline.summary)
AGGREGATE = load_task("aggregate", AggregateOutput, offline.aggregate)

PROJECT_TASKS = (FACETS, QA, SUMMARY)
PARENT_TASKS = (AGGREGATE,)


def prompt_versions() -> dict[str, str]:
    return {t.name: t.version for t in (*PROJECT_TASKS, *PARENT_TASKS)}


def warm_up() -> None:
    """The offline rules' place tables, built before a server's first answer (see
    `hltm_devkit.openai_server.import_task_modules`)."""
    load_gazetteer()

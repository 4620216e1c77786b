"""An LLM's query parse is checked against the question: a value the question does not state is
dropped and the rule-based parse fills in (a 0.5B model returned the prompt's own
examples, "San Francisco Bay Area" and "remote", as the conditions of an unrelated question).

The model is replaced at the LLM interface (a `Backend` that echoes the examples of the prompt it
is really sent); every other part — prompt rendering, schema validation, call counting, the
engine's parse step — is the real one.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from hltm.llm import LLM, DeterministicBackend, Task
from hltm.query import tasks
from hltm.query.engine import QueryEngine
from hltm.query.parse import ground_pairs, is_grounded, parse_question
from hltm.settings import Settings

_EXAMPLE_PAIR = re.compile(r'\{"field": "(\w+)",\s*"value": "([^"]*)"\}')
# The pairs the 0.5B model returned in the reported run (the old prompt's examples).
REPORTED_ECHO = [
    {"field": "location", "value": "San Francisco Bay Area"},
    {"field": "work_mode", "value": "remote"},
    {"field": "title", "value": "software engineer"},
]


class EchoingExamples:
    """A model that answers the parse task with the example pairs of the prompt it was sent."""

    name = "echo-examples"

    def __init__(self, extra: list[dict[str, str]] | None = None) -> None:
        self.extra = extra or []
        self.rules = DeterministicBackend()

    def complete(self, task: Task[Any], messages: list[dict[str, str]], model: str) -> str:
        if task.name != tasks.PARSE.name:
            return self.rules.complete(task, messages, model)
        shown = [{"field": f, "value": v} for f, v in _EXAMPLE_PAIR.findall(messages[0]["content"])]
        return json.dumps({"intent": "preferences", "pairs": shown + self.extra})


def _engine(settings: Settings, backend: EchoingExamples) -> QueryEngine:
    return QueryEngine(settings, llm=LLM(backend=backend, model="echo"), log_queries=False)


@pytest.mark.parametrize(
    ("question", "field", "value", "stated"),
    [
        ("Which projects hire in the bay area?", "location", "San Francisco Bay Area", True),
        ("Какие проекты ищут разработчиков в Москве удалённо?", "location", "Moscow", True),
        ("Какие проекты ищут разработчиков в Москве удалённо?", "work_mode", "remote", True),
        ("Какие проекты ищут разработчиков в Москве удалённо?", "title", "разработчик", True),
        ("Which projects hire senior back-end engineers?", "title", "backend engineer", True),
        ("Do we hire Python developers?", "skill", "python", True),
        ("Roles paying 120k?", "salary", "120k", True),
        ("Where do I usually hire?", "location", "", True),
        ("Where do I usually hire?", "location", "San Francisco Bay Area", False),
        ("Where do I usually hire?", "work_mode", "remote", False),
        ("Which roles do we hire for?", "title", "software engineer", False),
        ("Do we hire onsite in Berlin?", "work_mode", "remote", False),
        ("Roles paying 120k?", "salary", "$150k", False),
        ("Which projects hire engineers in Berlin?", "title", "EXAMPLE-ROLE engineer", False),
    ],
)
def test_a_value_is_grounded_only_when_the_question_states_it(
    question: str, field: str, value: str, stated: bool
) -> None:
    assert is_grounded(field, value, question) is stated


def test_the_reported_echo_falls_back_to_the_rules() -> None:
    question = "Where do I usually hire?"
    kept, dropped = ground_pairs(question, REPORTED_ECHO)
    assert dropped == REPORTED_ECHO
    assert kept == parse_question(question)["pairs"] == [{"field": "location", "value": ""}]

    question = "Which of my projects need a Java developer in Berlin?"
    llm_pairs = [{"field": "title", "value": "Java developer"}, *REPORTED_ECHO[:2]]
    kept, dropped = ground_pairs(question, llm_pairs)
    assert dropped == REPORTED_ECHO[:2]
    assert {"field": "title", "value": "Java developer"} in kept
    assert {"field": "location", "value": "Berlin"} in kept  # the rules' grounded pair
    assert not any(p["value"] in ("San Francisco Bay Area", "remote") for p in kept)

    faithful = [{"field": "title", "value": "Java developer"}]
    assert ground_pairs(question, faithful) == (faithful, [])


def test_the_engine_drops_an_echo_of_the_real_prompt(settings: Settings) -> None:
    """Through the real parse step: whatever examples the prompt shows, echoing them is dropped,
    and the call is still counted in the query's cost."""
    engine = _engine(settings, EchoingExamples(extra=REPORTED_ECHO))
    before = engine.llm.snapshot()
    intent, pairs = engine.parse("Where do I usually hire?")
    assert pairs == [{"field": "location", "value": ""}]
    assert intent == "preferences"
    assert (engine.llm.snapshot() - before).calls == 1

    intent, pairs = engine.parse("Which projects hire senior data engineers in Berlin, remote?")
    values = {(p["field"], p["value"]) for p in pairs}
    assert ("location", "Berlin") in values and ("work_mode", "remote") in values
    assert ("location", "San Francisco Bay Area") not in values
    assert not any("EXAMPLE" in p["value"] for p in pairs)


def test_the_prompt_examples_cannot_pass_for_conditions() -> None:
    """Every example value in the parse prompt is a marked placeholder (or empty), and the prompt
    says they are examples only."""
    examples = _EXAMPLE_PAIR.findall(tasks.PARSE.system)
    assert examples, "the prompt shows the answer format"
    assert all(value == "" or "EXAMPLE" in value for _, value in examples)
    assert "never copy a value from the examples" in tasks.PARSE.system

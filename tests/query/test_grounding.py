"""The answer is checked against what it cites, whatever the backend: through the local
OpenAI-protocol server, a model that answers from a neighbouring project or field is flagged
`unsupported`; an ask whose answer never fits its schema is still logged, with its cost and status
`failed`; a node id run into a document suffix counts for that node when it can be only one."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

import hltm.query.tasks  # noqa: F401  (registers the query tasks with the local server)
from hltm.llm import LLMError, make_llm
from hltm.query.engine import QueryEngine, validate_citations
from hltm.query.grounding import ungrounded
from hltm.query.log import read_query_log
from hltm.query.scope import Identity
from hltm.settings import Settings
from hltm_cli import main
from hltm_devkit.openai_server import LocalOpenAIServer
from tests.support.llm import _clean_server as _clean_server  # noqa: F401 (autouse fixture)
from tests.support.llm import openai_settings, quick
from tests.support.llm import server as server  # noqa: F401 (fixture)
from tests.support.own_export import own_export  # noqa: F401

FINANCE = Identity("seat", "northwind-finance")
SALARY_QUESTION = "What salary is offered for the Senior Accountant role?"


def _item(node: str, **fields: str) -> dict[str, str]:
    return {"node_id": node, "level": "project", "label": "Month-end close", **fields}


def test_values_an_answer_states_must_be_in_what_it_cites() -> None:
    cited = [
        _item("project:a", field="salary", value="85,000-95,000 USD per year"),
        _item("project:a", field="location", value="Chicago"),
        _item("project:a", question="What type of employment is offered?", answer="full-time"),
    ]
    question = "What salary is offered?"
    assert ungrounded("salary: 85,000-95,000 USD per year", question, cited, ["salary"]) == []
    assert ungrounded("60,000-70,000 USD per year", question, cited, ["salary"]) == [
        "60000",
        "70000",
    ]
    assert ungrounded("The role is in Boston.", question, cited) == ["Boston"]
    assert ungrounded("Dana Reyes offers it.", question, cited) == ["Dana", "Reyes"]
    # A neighbouring field: the cited node's employment type is no salary.
    assert ungrounded("full-time", question, cited, ["salary"]) == ["full-time (not a salary)"]
    # A relative time resolved against a dated node ("last year" said in 2023) is grounded.
    dated = [_item("project:s1", label="session 3, 8 May 2023", answer="We went last year.")]
    assert ungrounded("2022", "When did they go?", dated) == []
    assert ungrounded("2019", "When did they go?", dated) == ["2019"]


def test_a_count_the_cited_facets_add_up_to_is_grounded() -> None:
    """A contract's listing counts each value's projects over the seats it cites: the total is
    stated by no single item, but by the citations together; any other count is not."""
    seat = {"level": "seat", "field": "location"}
    cited = [
        {**seat, "node_id": "seat:s1", "label": "North", "value": "Berlin", "support": 80},
        {**seat, "node_id": "seat:s2", "label": "South", "value": "berlin", "support": 72},
        {**seat, "node_id": "seat:s2", "label": "South", "value": "Berlin", "support": 72},
    ]
    question = "Where do we usually hire?"
    assert ungrounded("location: Berlin (152 projects)", question, cited, ["location"]) == []
    assert ungrounded("location: Berlin (224 projects)", question, cited, ["location"]) == ["224"]


def test_a_long_cited_text_is_scanned_once_for_all_the_names_an_answer_states(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from hltm.query import grounding

    names = [f"Name{i}" for i in range(60)]
    cited = [
        _item(f"project:p{i}", field="title", value=f"{name} lead") for i, name in enumerate(names)
    ]
    searched: list[str] = []
    search = grounding.re.search

    def counted(pattern: str, text: str, *args: object) -> object:
        searched.append(pattern)
        return search(pattern, text, *args)

    monkeypatch.setattr(grounding.re, "search", counted)
    answer = "We hire " + ", ".join(names[:50]) + " and Someone-Else'S."
    assert ungrounded(answer, "Which roles?", cited) == ["Someone-Else'S"]
    assert len(searched) <= 1, searched  # a name with an apostrophe may still need the pattern


def test_a_node_id_run_into_a_document_suffix_counts_for_that_node_only_when_unambiguous() -> None:
    context = {"project:c01-s01-p001", "project:c01-s01-p0012", "seat:c01-s01"}
    cited = validate_citations(["project:c01-s01-p001-notes"], context)
    assert cited.kept == ["project:c01-s01-p001"] and cited.dropped == []
    assert cited.mapped == {"project:c01-s01-p001-notes": ["project:c01-s01-p001"]}
    # Two context nodes it could be ("project:a" or "project:a-b", then "-notes"): not guessed.
    ambiguous = validate_citations(["project:a-b-notes"], {"project:a", "project:a-b"})
    assert ambiguous.kept == [] and ambiguous.dropped == ["project:a-b-notes"]
    # A longer id of another node is not a near miss of a prefix.
    other = validate_citations(["project:c01-s01-p0019"], {"project:c01-s01-p001"})
    assert other.kept == [] and other.dropped == ["project:c01-s01-p0019"]


def _remote(settings: Settings, server: LocalOpenAIServer) -> QueryEngine:  # noqa: F811
    online = openai_settings(server, data_dir=settings.data_dir, llm_timeout_s=30)
    return QueryEngine(settings, llm=quick(make_llm(online)), log_queries=False)


def test_a_model_answering_from_a_neighbouring_project_or_field_is_unsupported(
    own_export: Settings,  # noqa: F811
    server: LocalOpenAIServer,  # noqa: F811
) -> None:
    engine = _remote(own_export, server)
    honest = engine.ask(FINANCE, SALARY_QUESTION)
    assert honest.status == "answered" and "85,000" in honest.answer, honest.answer
    # "Not in memory" is an answer of the schema: the model says so, and cites nothing.
    unknown = engine.ask(Identity("seat", "northwind-kitchens"), "What salary is offered?")
    assert unknown.status == "not_in_memory" and unknown.citations == []
    server.inject("neighbour_project", times="always", match="Answer the question")
    other_project = engine.ask(FINANCE, SALARY_QUESTION)
    assert other_project.citations == honest.citations and "60,000" in other_project.answer
    assert other_project.status == "unsupported" and "60000" in other_project.ungrounded
    assert "do not state" in other_project.warning
    server.clear_faults()
    server.inject("neighbour_field", times="always", match="Answer the question")
    other_field = engine.ask(FINANCE, SALARY_QUESTION)
    assert other_field.citations and "85,000" not in other_field.answer
    assert other_field.status == "unsupported", other_field.answer
    assert any("not a salary" in value for value in other_field.ungrounded)


def test_a_failed_ask_is_logged_with_its_cost_and_json_stays_json(
    own_export: Settings,  # noqa: F811
    server: LocalOpenAIServer,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    data = tmp_path / "data"
    shutil.copytree(own_export.data_dir, data)
    settings = replace(own_export, data_dir=data)
    server.inject("schema_violation", times="always")  # no answer ever fits its schema
    engine = QueryEngine(settings, llm=quick(make_llm(openai_settings(server, data_dir=data))))
    with pytest.raises(LLMError) as failed:
        engine.ask(FINANCE, SALARY_QUESTION)
    assert any("status failed" in note for note in failed.value.__notes__)
    (row,) = read_query_log(settings.derived_db)
    assert row["status"] == "failed" and row["rationale"].startswith("failed: ")
    assert row["llm_calls"] == server.stats.chat_requests >= 3
    assert row["prompt_tokens"] > 0 and row["question"] == SALARY_QUESTION

    for name, value in {
        "HLTM_DATA_DIR": str(data),
        "HLTM_LLM_BACKEND": "openai",
        "OPENAI_BASE_URL": server.base_url,
        "OPENAI_API_KEY": "test",
        "HLTM_LLM_MAX_RETRIES": "1",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("CHROMA_HOST", raising=False)
    out = CliRunner().invoke(main, ["ask", "--seat", FINANCE.id, SALARY_QUESTION, "--json"])
    assert out.exit_code == 1
    body = json.loads(out.stdout)
    assert body["status"] == "failed" and "does not fit AnswerOutput" in body["error"], body
    assert [r["status"] for r in read_query_log(settings.derived_db)] == ["failed", "failed"]
    listed = CliRunner().invoke(main, ["queries"])
    assert listed.output.count(f"{FINANCE.id} failed ") == 2, listed.output

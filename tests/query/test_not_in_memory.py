"""Answers that claim no more than the memory holds, on the README's own-export world (one
contract, a finance and a kitchens recruiter, two projects each): a salary nobody states is
"not in memory", a neighbouring project's salary is never the answer, roles are the roles the
documents name (each once per project, none cut by the context budget), and an unknown id is an
error naming the nearest known ones."""

from __future__ import annotations

import json
import re
from dataclasses import replace

import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient

from hltm.query.access import create_token
from hltm.query.engine import QueryEngine
from hltm.query.log import read_query_log
from hltm.query.scope import Identity
from hltm.serving.http import create_app
from hltm.settings import Settings
from hltm_cli import main
from tests.support.own_export import own_engine, own_export  # noqa: F401

KITCHENS = Identity("seat", "northwind-kitchens")
FINANCE = Identity("seat", "northwind-finance")
CONTRACT = Identity("contract", "northwind")
FINANCE_SALARIES = ("60,000", "85,000")


def test_a_salary_no_kitchen_document_states_is_not_in_memory(
    own_engine: QueryEngine,  # noqa: F811
) -> None:
    result = own_engine.ask(KITCHENS, "What salary is offered?", log=False)
    assert result.status == "not_in_memory", result.answer
    assert result.answer.startswith("Not in memory") and "salary" in result.answer
    assert result.citations == [] and not result.unsupported
    assert "full-time" not in result.answer


def test_another_roles_salary_is_a_hint_never_the_answer(
    own_engine: QueryEngine,  # noqa: F811
) -> None:
    result = own_engine.ask(CONTRACT, "What salary do we offer catering chefs?", log=False)
    assert result.status == "not_in_memory", result.answer
    assert result.citations == []
    # The finance projects' salaries may follow as what was found nearest, named as such.
    answer, _, hint = result.answer.partition("Nearest:")
    assert not any(s in answer for s in FINANCE_SALARIES), result.answer
    assert all(n.startswith("project:fin-") for n in result.nearest) and "other" in hint


def test_a_place_the_seat_never_hired_in_is_not_in_memory_over_http(
    own_export: Settings,  # noqa: F811
    own_engine: QueryEngine,  # noqa: F811
) -> None:
    _, token = create_token(own_export.derived_db, FINANCE, "finance agent")
    with TestClient(create_app(own_engine)) as client:
        reply = client.post(
            "/v1/ask",
            json={"question": "What did we pay catering chefs in Boston?"},
            headers={"Authorization": f"Bearer {token}"},
        )
        spec = client.get("/openapi.json").json()
    body = reply.json()
    status = spec["components"]["schemas"]["AskResponse"]["properties"]["status"]
    assert "not_in_memory" in status["enum"]
    assert reply.status_code == 200 and body["status"] == "not_in_memory", body
    assert body["not_in_memory"] is True and body["citations"] == []
    assert not any(s in body["answer"] for s in FINANCE_SALARIES), body["answer"]


def _roles(answer: str) -> dict[str, int]:
    listed = answer.removeprefix("roles: ").rstrip(".")
    return {
        m.group(1): int(m.group(2)) for m in re.finditer(r"([^,]+?) \((\d+) projects?\)", listed)
    }


def test_roles_are_the_roles_the_documents_name_once_per_project(
    own_engine: QueryEngine,  # noqa: F811
) -> None:
    result = own_engine.ask(CONTRACT, "Which roles do we usually hire for?", log=False)
    roles = {name.strip(): n for name, n in _roles(result.answer).items()}
    assert roles == {
        "Accounts Payable Accountant": 1,
        "Catering Chef": 1,
        "Senior Accountant": 1,
        "Sous Chef": 1,
    }, result.answer
    assert result.status == "answered" and len(result.citations) == 4


def test_a_listing_over_the_context_budget_lists_the_projects_that_fit_and_says_so(
    own_engine: QueryEngine,  # noqa: F811
) -> None:
    tight = replace(own_engine.config, context_tokens=120)  # less than two projects' items
    result = own_engine.ask(
        CONTRACT, "Which roles do we usually hire for?", config=tight, log=False
    )
    projects = [n for n in result.context_ids if n.startswith("project:")]
    assert 1 <= len(projects) < 4 and len(_roles(result.answer)) == len(projects), result.answer
    assert result.listing == {"nodes": len(projects), "of": 4}
    assert f"This lists {len(projects)} of the 4 seats and projects" in result.answer


def test_ask_json_prints_json_for_an_unknown_id_too(
    own_export: Settings,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HLTM_DATA_DIR", str(own_export.data_dir))
    out = CliRunner().invoke(main, ["ask", "--contract", "northwnd", "Which roles?", "--json"])
    assert out.exit_code == 1
    assert "northwind" in json.loads(out.stdout)["error"]


def test_not_in_memory_is_logged_with_its_status(
    own_export: Settings,  # noqa: F811
    tmp_path,  # noqa: ANN001
) -> None:
    import shutil

    data = tmp_path / "data"
    shutil.copytree(own_export.data_dir, data)
    settings = replace(own_export, data_dir=data)
    result = QueryEngine(settings).ask(KITCHENS, "What salary is offered?")
    (row,) = [r for r in read_query_log(settings.derived_db) if r["query_id"] == result.query_id]
    assert row["status"] == "not_in_memory" and row["citations"] == []

"""The HTTP endpoint's OpenAPI description: served, matching the routes, and what is validated.

Every route of the app is in the spec (and nothing else is); a body that violates the request
schema gets 400 naming the problem; real responses validate against the response schemas, with
exactly the documented fields.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from starlette.routing import Route
from starlette.testclient import TestClient

from hltm.judge.calibration import Calibration, Proposal, calibrated_vacancies, store_calibrations
from hltm.judge.data import load_resumes, load_vacancies
from hltm.judge.gate import GateDecision
from hltm.judge.journal import publish_ranking
from hltm.judge.pipeline import judge_config, judge_pool
from hltm.llm import make_llm
from hltm.query.access import create_token
from hltm.query.engine import QueryEngine
from hltm.query.scope import Identity
from hltm.serving.http import MAX_BODY_BYTES, ServeLimits, create_app
from hltm.serving.rankings import scoped_ranking, vacancy_owner
from tests.support.api import RankedVacancies, publish_two_rankings
from tests.support.query import BuiltWorld, built_world, engine  # noqa: F401


@pytest.fixture(scope="module")
def app(engine: QueryEngine):  # type: ignore[no-untyped-def]  # noqa: F811
    return create_app(engine)


@pytest.fixture(scope="module")
def client(app) -> Iterator[TestClient]:  # type: ignore[no-untyped-def]
    with TestClient(app) as test_client:
        yield test_client


@pytest.fixture(scope="module")
def spec(client: TestClient) -> dict[str, Any]:
    response = client.get("/openapi.json")
    assert response.status_code == 200
    return response.json()


@pytest.fixture(scope="module")
def ranked(built_world: BuiltWorld) -> RankedVacancies:  # noqa: F811
    return publish_two_rankings(built_world)


@pytest.fixture(scope="module")
def seat_token(built_world: BuiltWorld, ranked: RankedVacancies) -> str:  # noqa: F811
    return create_token(built_world.settings.derived_db, Identity("seat", ranked.seat))[1]


def _validate(spec: dict[str, Any], model: str, instance: Any) -> None:
    """Validate against `#/components/schemas/<model>`, refs resolved inside the spec."""
    schema = {"$ref": f"#/components/schemas/{model}", "components": spec["components"]}
    jsonschema.Draft202012Validator(schema).validate(instance)


def _properties(spec: dict[str, Any], model: str) -> set[str]:
    return set(spec["components"]["schemas"][model]["properties"])


def test_every_route_is_described_and_nothing_else(app, spec: dict[str, Any]) -> None:  # type: ignore[no-untyped-def]
    assert spec["openapi"].startswith("3.1") and spec["info"]["version"]
    served = {
        (route.path, method.lower())
        for route in app.routes
        if isinstance(route, Route)
        for method in route.methods or ()
        if method != "HEAD"
    }
    described = {(path, method) for path, ops in spec["paths"].items() for method in ops}
    assert served == described
    jsonschema.Draft202012Validator.check_schema(spec["components"]["schemas"]["AskRequest"])
    for path, ops in spec["paths"].items():
        for op in ops.values():
            secured = "security" in op
            assert secured == path.startswith("/v1/"), path
            assert not secured or {"401", "403"} <= set(op["responses"]), path


def test_a_body_that_violates_the_schema_gets_400_naming_the_problem(
    client: TestClient, spec: dict[str, Any], seat_token: str
) -> None:
    auth = {"Authorization": f"Bearer {seat_token}"}
    cases = {
        "question": {"question": 3},
        "Extra inputs are not permitted": {"question": "Where?", "projct": "p1"},
        "at most 2000 characters": {"question": "x" * 2001},
        "at least 1 character": {"question": "   "},
        "valid boolean": {"question": "Where?", "context": "yes"},
        "valid dictionary": [1, 2],
    }
    for expected, body in cases.items():
        response = client.post("/v1/ask", json=body, headers=auth)
        assert response.status_code == 400, body
        data = response.json()
        _validate(spec, "ErrorResponse", data)
        assert data["error"].startswith("invalid request body") and expected in data["error"]
        assert data["detail"] and all({"loc", "msg", "type"} <= set(p) for p in data["detail"])
    not_json = client.post("/v1/ask", content=b"{", headers=auth)
    assert not_json.status_code == 400 and "JSON" in not_json.json()["error"]
    bad_top = client.get("/v1/rankings/x?top=0", headers=auth)
    assert bad_top.status_code == 400 and "top" in bad_top.json()["error"]


def test_responses_fit_the_response_schemas(
    client: TestClient,
    spec: dict[str, Any],
    seat_token: str,
    ranked: RankedVacancies,
) -> None:
    auth = {"Authorization": f"Bearer {seat_token}"}
    answer = client.post(
        "/v1/ask", json={"question": "Where do I usually hire?", "context": True}, headers=auth
    )
    assert answer.status_code == 200
    data = answer.json()
    _validate(spec, "AskResponse", data)
    assert set(data) == _properties(spec, "AskResponse")  # every field documented, and only those
    assert set(data["cost"]) == _properties(spec, "QueryCostOut")
    assert data["citations"] and data["identity"] == f"seat:{ranked.seat}"

    who = client.get("/v1/whoami", headers=auth).json()
    _validate(spec, "WhoAmI", who)
    _validate(spec, "Health", client.get("/healthz").json())

    own = client.get(f"/v1/rankings/{ranked.own_vacancy}?top=3", headers=auth)
    assert own.status_code == 200
    _validate(spec, "RankingResponse", own.json())
    assert set(own.json()) == _properties(spec, "RankingResponse")
    top = own.json()["top"]
    assert len(top) == 3 and [c["overall"] for c in top] == sorted(
        (c["overall"] for c in top), reverse=True
    )
    assert own.json()["current"]

    for refused in (ranked.foreign_vacancy, "no-such-vacancy"):
        response = client.get(f"/v1/rankings/{refused}", headers=auth)
        assert response.status_code == 403  # a foreign vacancy and a missing one look the same
        _validate(spec, "ErrorResponse", response.json())
    assert client.get(f"/v1/rankings/{ranked.own_vacancy}").status_code == 401


def test_a_calibrated_vacancy_s_ranking_is_current_right_after_publication(
    built_world: BuiltWorld,  # noqa: F811
    tmp_path: Path,
) -> None:
    """The judge ranks a calibrated vacancy under its calibrated version key; the ranking lookup
    (HTTP `GET /v1/rankings/{id}`, MCP `ranking`) must compare with that key, not the bare one."""
    for name in ("sources.duckdb", "derived.duckdb"):
        shutil.copy2(built_world.settings.data_dir / name, tmp_path / name)
    sources, derived = tmp_path / "sources.duckdb", tmp_path / "derived.duckdb"
    plain = load_vacancies(sources)[0]
    owner = vacancy_owner(sources, plain.vacancy_id)
    assert owner is not None
    usual = Proposal("location", "Lisbon", 3, 4, "seat", (f"seat:{owner.seat_id}",))
    store_calibrations(
        derived,
        [Calibration(plain.vacancy_id, plain.own_version_key, owner.seat_id, None, [usual])],
    )
    (vacancy,) = calibrated_vacancies(sources, derived, [plain.vacancy_id])
    assert vacancy.version_key != plain.version_key  # the calibration is part of the key
    pool = load_resumes(sources, layer="active")[:2]
    llm = make_llm(built_world.settings, model=built_world.settings.judge_model)
    judge_pool(derived, llm, vacancy, pool, workers=1)
    publish_ranking(derived, vacancy, pool, judge_config(llm), GateDecision(True, 1.0, "test"))

    found = scoped_ranking(sources, derived, Identity("seat", owner.seat_id), vacancy.vacancy_id)
    assert found.entry.vacancy_version == vacancy.version_key
    assert found.current


def test_every_status_a_route_answers_is_declared(
    engine: QueryEngine,  # noqa: F811
    client: TestClient,
    spec: dict[str, Any],
    seat_token: str,
) -> None:
    """413 for a body over the limit, 503 from a server at capacity: what a client sees is in
    the description it generates its code from."""
    auth = {"Authorization": f"Bearer {seat_token}"}
    too_big = client.post("/v1/ask", content=b"x" * (MAX_BODY_BYTES + 1), headers=auth)
    seen = [("/v1/ask", "post", too_big.status_code)]
    with TestClient(create_app(engine, limits=ServeLimits(queue=0))) as at_capacity:
        seen += [
            ("/v1/ask", "post", at_capacity.post("/v1/ask", json={"question": "Where?"},
                                                 headers=auth).status_code),
            ("/v1/whoami", "get", at_capacity.get("/v1/whoami", headers=auth).status_code),
            ("/v1/rankings/{vacancy_id}", "get",
             at_capacity.get("/v1/rankings/x", headers=auth).status_code),
        ]  # fmt: skip
    assert [status for *_, status in seen] == [413, 503, 503, 503]
    for path, method, status in seen:
        assert str(status) in spec["paths"][path][method]["responses"], (path, status)

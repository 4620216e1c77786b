"""The offline memory tasks: general EN/RU extraction from payloads this project did not generate,
real source ids, hints used, aggregation by support, strict output schemas, byte-stable output."""

from __future__ import annotations

import json
from typing import Any

import pytest
from openai.lib._pydantic import to_strict_json_schema

from hltm.memory.hints import Hints, QATemplate
from hltm.memory.models import (
    AggregateOutput,
    FacetsOutput,
    QAOutput,
    SummaryOutput,
    required_support,
)
from hltm.memory.offline import extract as offline
from hltm.memory.tasks import AGGREGATE, FACETS, QA, SUMMARY


def project_payload() -> dict[str, Any]:
    return {
        "node_id": "project:acme-17",
        "project": {"project_id": "acme-17", "title": "Senior Backend Engineer", "status": "open"},
        "documents": [
            {
                "document_id": "jd-1",
                "kind": "job_description",
                "text": "We are hiring a backend engineer to build payment APIs in Golang and "
                "Python on k8s. Hybrid: three days in our Berlin office. Full-time.\n"
                "Compensation: €80,000–€95,000 per year. 5+ years of backend experience, "
                "English B2. No remote outside Germany.\nVisa sponsorship is not available.",
            },
            {
                "document_id": "notes-ru",
                "kind": "intake_notes",
                "text": "Созвон с нанимающим менеджером. Рассматриваем также кандидатов из Москвы, "
                "полная занятость, опыт от 3 лет, обязательно Kafka и PostgreSQL.\n"
                "Headcount: 2\nMaria Lopez: rejected after the technical interview. Weak SQL.",
            },
        ],
        "vacancies": [],
        "actions": {
            "counts": {"rejected": 2, "viewed": 5},
            "with_reasons": [
                {"action_id": "act-1", "action": "rejected", "reason": "No production Go"},
                {"action_id": "act-2", "action": "rejected", "reason": "No production Go"},
            ],
        },
        "hints": {"attributes": ["visa sponsorship"]},
    }


def _facets(payload: dict[str, Any]) -> dict[tuple[str, str], list[str]]:
    out = FACETS.output_model.model_validate(offline.facets(payload))
    return {(f.field, f.value): f.sources for f in out.facets}


def test_facets_from_english_and_russian_text() -> None:
    facets = _facets(project_payload())
    expect = {
        ("title", "Senior Backend Engineer"): ["acme-17"],
        ("seniority", "senior"): ["acme-17"],
        ("location", "Berlin"): ["jd-1"],
        ("location", "Moscow"): ["notes-ru"],
        ("work_mode", "hybrid"): ["jd-1"],
        ("employment_type", "full-time"): ["jd-1", "notes-ru"],
        ("skill", "Go"): ["act-1", "act-2", "jd-1"],
        ("skill", "Kubernetes"): ["jd-1"],
        ("skill", "Kafka"): ["notes-ru"],
        ("salary", "80,000-95,000 EUR per year"): ["jd-1"],
        ("years_experience", "5+ years"): ["jd-1"],
        ("years_experience", "3+ years"): ["notes-ru"],
        ("language", "English B2"): ["jd-1"],
        ("headcount", "2"): ["notes-ru"],
        ("rejection_reason", "No production Go"): ["act-1", "act-2"],
        ("visa_sponsorship", "not available"): ["jd-1"],
    }
    for key, sources in expect.items():
        assert facets.get(key) == sources, (key, facets.get(key))
    assert ("work_mode", "remote") not in facets  # "No remote outside Germany" is negated
    assert not any(field == "maria_lopez" for field, _ in facets)  # a person, not a field
    every_id = {"acme-17", "jd-1", "notes-ru", "act-1", "act-2"}
    assert all(set(s) <= every_id and s for s in facets.values())


def test_qa_and_summary_cite_real_sources() -> None:
    payload = project_payload()
    payload["facets"] = offline.facets(payload)["facets"]
    payload["hints"] = Hints(
        attributes=("visa sponsorship",),
        qa_templates=(QATemplate("Does {node} sponsor visas?", "visa_sponsorship"),),
    ).as_payload()
    pairs = QA.output_model.model_validate(offline.qa(payload)).pairs
    assert 5 <= len(pairs) <= 10
    assert len({p.question for p in pairs}) == len(pairs)
    assert {p.source for p in pairs} <= {"acme-17", "jd-1", "notes-ru", "act-1", "act-2"}
    assert pairs[0].question == "Does the Senior Backend Engineer project sponsor visas?"
    assert pairs[0].answer == "not available" and pairs[0].source == "jd-1"
    where = next(p for p in pairs if p.question.startswith("Where is"))
    assert where.answer == "Berlin, Moscow" and "Berlin" in where.rationale

    summary = SUMMARY.output_model.model_validate(offline.summary(payload))
    assert "[jd-1]" in summary.summary_long and "[notes-ru]" in summary.summary_long
    assert "visa sponsorship: not available" in summary.summary_long
    assert summary.summary_short.count(". ") == 0 and summary.summary_short.endswith(".")
    assert "Senior Backend Engineer" in summary.summary_short


def test_output_is_byte_stable() -> None:
    first = json.dumps(offline.facets(project_payload()), sort_keys=True)
    # Same content, keys inserted in another order (as another JSON parser might give them).
    reordered = json.loads(
        json.dumps(project_payload()), object_hook=lambda d: dict(reversed(d.items()))
    )
    assert list(reordered) != list(project_payload())
    for _ in range(3):
        assert json.dumps(offline.facets(reordered), sort_keys=True) == first


def _child(node_id: str, facets: list[tuple[str, str, str]]) -> dict[str, Any]:
    return {
        "node_id": node_id,
        "label": node_id,
        "facets": [{"field": f, "value": v, "support": [s], "sources": [s]} for f, v, s in facets],
        "qa": [],
        "summary_long": f"{node_id} long.",
        "summary_short": f"{node_id} short.",
    }


def test_aggregation_keeps_supported_values_with_their_children() -> None:
    children = [
        _child("project:a", [("location", "SF Bay Area", "d1"), ("skill", "python", "d1")]),
        _child("project:b", [("Location", "San Francisco", "d2"), ("skill", "Python", "d2")]),
        _child("project:c", [("location", "Berlin", "d3"), ("work mode", "Remote", "d3")]),
    ]
    payload = {
        "node_id": "seat:s1",
        "level": "seat",
        "label": "recruiter Ann Lee",
        "child_level": "project",
        "support_threshold": 0.5,
        "min_support": required_support(0.5, 3),
        "children": children,
        "hints": {"attributes": [], "qa_templates": []},
    }
    out = AGGREGATE.output_model.model_validate(offline.aggregate(payload))
    kept = {(f.field, f.value): (f.support, f.sources) for f in out.facets}
    # Spellings and synonyms merge; Berlin (1 of 3) and remote (1 of 3) are too rare.
    assert kept == {
        ("location", "San Francisco Bay Area"): (["project:a", "project:b"], ["d1", "d2"]),
        ("skill", "Python"): (["project:a", "project:b"], ["d1", "d2"]),
    }
    where = next(q for q in out.qa if q.question == "Where does recruiter Ann Lee usually hire?")
    assert where.answer == "San Francisco Bay Area (2 of 3 projects)"
    assert where.support == ["project:a", "project:b"] and where.source == "d1"
    assert "[project:c] project:c short." in out.summary_long
    assert required_support(0.3, 10) == 3
    assert required_support(0.3, 3, minimum=2) == 2
    assert required_support(0.3, 1) == 1


@pytest.mark.parametrize("model", [FacetsOutput, QAOutput, SummaryOutput, AggregateOutput])
def test_output_models_are_openai_strict(model: type) -> None:
    schema = to_strict_json_schema(model)
    text = json.dumps(schema)
    assert '"additionalProperties": false' in text
    assert "patternProperties" not in text

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if node.get("type") == "object":
                assert sorted(node["required"]) == sorted(node["properties"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(schema)


def test_hints_version_is_content_addressed() -> None:
    empty = Hints()
    assert empty.version == "none" and empty.empty
    one = Hints(attributes=("b", "a"), qa_templates=(QATemplate("Q {node}?", "x"),))
    same = Hints(attributes=("a", "b", "a"), qa_templates=(QATemplate("Q {node}?", "x"),))
    assert one.version == same.version != "none"
    assert Hints.from_dict({**one.as_payload(), "version": ""}).version == one.version


def test_russian_job_post() -> None:
    payload = {
        "node_id": "project:ru-1",
        "project": {"project_id": "ru-1", "title": "Ведущий Java-разработчик", "status": "open"},
        "documents": [
            {
                "document_id": "vac-ru",
                "kind": "job_description",
                "text": "Ищем ведущего разработчика в команду платежей. Нужен опыт коммерческой "
                "разработки на Java и Spring Boot (микросервисы, Kafka) от 5 лет.\n"
                "Условия: Санкт-Петербург. Формат — офис, команда сидит вместе. "
                "Вилка: от 290 000 ₽ до 400 000 ₽ в месяц. Полная занятость.\n"
                "Английский не нужен.",
            }
        ],
        "vacancies": [],
        "actions": {"counts": {}, "with_reasons": []},
        "hints": {"attributes": []},
    }
    facets = _facets(payload)
    for key in [
        ("seniority", "lead"),
        ("location", "Saint Petersburg"),
        ("work_mode", "onsite"),
        ("employment_type", "full-time"),
        ("skill", "Java"),
        ("skill", "Spring"),
        ("skill", "Kafka"),
        ("skill", "microservices"),
        ("years_experience", "5+ years"),
        ("salary", "290,000-400,000 RUB per month"),
    ]:
        assert key in facets, (key, sorted(facets))
    assert not any(field == "language" for field, _ in facets)  # "Английский не нужен"

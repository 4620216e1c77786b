"""The offline judge on hand-written resumes (not the sample generator's): it must read other
people's resumes the way the rubric says — role from the recent positions, not the headline;
level from dates; skills only after the role; verbatim quotes; formal items ignored."""

from __future__ import annotations

from typing import Any

import pytest

from hltm.judge.offline.heuristic import judge_offline, key_terms, prepare_pool
from hltm.judge.quotes import validate_quote
from hltm.judge.resume import month_index, parse_resume
from hltm.judge.tasks import JUDGE_TASK, JudgeVerdict

BACKEND_VACANCY = {
    "id": "vac-go",
    "title": "Senior Go Developer (Payments)",
    "text": "We build payment services.\nRequirements:\n- 5+ years of backend development\n"
    "- Strong Go\n- PostgreSQL in production\n- Ready to sign an NDA\n",
    "requirements": [
        {"id": "r1", "text": "5+ years of backend development", "mandatory": True},
        {"id": "r2", "text": "Strong hands-on experience with Go", "mandatory": True},
        {"id": "r3", "text": "Production experience with PostgreSQL", "mandatory": True},
        {"id": "r4", "text": "Experience with Kafka is a plus", "mandatory": False},
        {"id": "r5", "text": "Ready to sign an NDA", "mandatory": True},
    ],
}

GO_DEVELOPER = """Ivan Petrov
Payments engineer

Experience
Senior Backend Engineer, FinCorp | Mar 2019 – present
* Built a card authorisation service in Go, 12k requests per second.
* Designed the PostgreSQL schema and replication for 4 TB of transactions.
* Introduced Kafka for settlement events.

Backend Developer, ShopCo | Jan 2015 – Feb 2019
* Go and Python microservices for the catalogue API.

Skills: Go, PostgreSQL, Kafka, Docker
"""

# Every keyword of the vacancy, but the job is testing (a "keyword twin"), and the headline
# claims a developer title.
QA_TWIN = """Anna Smith
Senior Go Developer

Experience
Lead QA Automation Engineer — FinCorp
03/2018 – present
- Wrote Go test harnesses for the payment services; 3,000 API tests run on every merge.
- Load-tested PostgreSQL-backed services; reported performance bugs to backend teams.
- Reviewed backend API designs for testability; Kafka contract tests.

QA Engineer — ShopCo
01/2014 – 02/2018
- Manual and automated regression testing of the checkout.

Skills: Go, PostgreSQL, Kafka, Selenium, Postman
"""

JUNIOR_GO = """Pavel Orlov
Go developer

Work experience
Junior Go Developer at StartUp, 2024-06 – present
• Small Go services over PostgreSQL.
"""

RUSSIAN_GO = """Сергей Иванов
Ведущий архитектор решений

Опыт работы
Старший Go-разработчик — Банк «Восток»
сентябрь 2018 — по настоящее время
• Разработал сервис процессинга платежей на Go, 20 тыс. запросов в секунду.
• Спроектировал схему PostgreSQL и партиционирование.

Бэкенд-разработчик — ООО «Ромашка»
март 2015 — август 2018
• Сервисы на Go и Python.

Навыки: Go, PostgreSQL, Kafka
"""


def _judge(text: str, as_of: str = "2025-06", vacancy: dict[str, Any] | None = None):  # type: ignore[no-untyped-def]
    payload = {
        "vacancy": vacancy or BACKEND_VACANCY,
        "resume": {"id": "x", "headline": None, "as_of": as_of, "text": text},
    }
    answer = judge_offline(payload)
    return JudgeVerdict.model_validate(answer)


def test_answer_fits_the_strict_schema() -> None:
    verdict = _judge(GO_DEVELOPER)
    assert set(verdict.scores()) == {"role", "level", "skills", "experience", "overall"}
    assert JUDGE_TASK.output_model is JudgeVerdict
    assert all(0 <= s <= 100 for s in verdict.scores().values())


def test_in_a_pool_the_right_role_and_level_ranks_first_and_russian_is_read() -> None:
    texts = {"good": GO_DEVELOPER, "junior": JUNIOR_GO, "ru": RUSSIAN_GO, "twin": QA_TWIN}
    payloads = {
        k: {"id": k, "headline": None, "as_of": "2025-06", "text": t} for k, t in texts.items()
    }
    prepare_pool(BACKEND_VACANCY, list(payloads.values()))
    got = {
        k: JudgeVerdict.model_validate(judge_offline({"vacancy": BACKEND_VACANCY, "resume": r}))
        for k, r in payloads.items()
    }
    statuses = {c.requirement_id: c.status for c in got["good"].checklist}
    assert statuses == {"r1": "met", "r2": "met", "r3": "met", "r4": "met"}
    assert got["good"].overall.score > got["junior"].overall.score
    assert got["junior"].level.score < got["good"].level.score  # one year is not five
    assert {c.requirement_id: c.status for c in got["junior"].checklist}["r1"] != "met"
    assert "unknown" not in got["ru"].role.explanation  # Russian titles are read


def test_quotes_are_verbatim_and_short_and_formal_items_are_skipped() -> None:
    for text in (GO_DEVELOPER, QA_TWIN, RUSSIAN_GO, JUNIOR_GO):
        verdict = _judge(text)
        assert "r5" not in {c.requirement_id for c in verdict.checklist}  # NDA: a formality
        for item in verdict.checklist:
            if item.quote is None:
                assert item.status != "met"
                continue
            assert len(item.quote) <= 200
            assert validate_quote(item.quote, text).outcome == "exact"


def test_long_lines_are_cut_to_a_real_span_around_the_evidence() -> None:
    long_line = "• " + "Maintained many internal tools and dashboards for several teams; " * 5
    text = GO_DEVELOPER.replace("* Introduced Kafka", long_line + "Introduced Kafka")
    verdict = _judge(text)
    kafka = next(c for c in verdict.checklist if c.requirement_id == "r4")
    assert kafka.status == "met" and kafka.quote and "Kafka" in kafka.quote
    assert len(kafka.quote) <= 200 and kafka.quote in text


def test_language_requirement_uses_cefr_levels() -> None:
    vacancy = {
        **BACKEND_VACANCY,
        "requirements": [{"id": "l1", "text": "English at B2 level or higher", "mandatory": True}],
    }
    b1 = _judge(GO_DEVELOPER + "Languages: English (B1)\n", vacancy=vacancy)
    c1 = _judge(GO_DEVELOPER + "Languages: English (C1)\n", vacancy=vacancy)
    assert b1.checklist[0].status == "partial"
    assert c1.checklist[0].status == "met" and c1.checklist[0].quote == "Languages: English (C1)"


def test_requirement_key_terms_keep_tech_terms() -> None:
    assert key_terms("Strong hands-on experience with C#/.NET") == ["c#", ".net"]
    assert key_terms("Уверенное владение Kafka") == ["kafka"]
    assert "swiftui" in key_terms("Опыт работы с SwiftUI в продакшене")


@pytest.mark.parametrize(
    ("line", "start", "end"),
    [
        ("2019-03 – present", (2019, 3), (2025, 6)),
        ("03.2019 — по настоящее время", (2019, 3), (2025, 6)),
        ("Jan 2015 - Feb 2019", (2015, 1), (2019, 2)),
        ("сентябрь 2018 — август 2020", (2018, 9), (2020, 8)),
        ("2016–2019", (2016, 7), (2019, 6)),
    ],
)
def test_date_ranges(line: str, start: tuple[int, int], end: tuple[int, int]) -> None:
    parsed = parse_resume(f"Name\n\nEngineer, Acme, {line}\n", as_of=month_index(2025, 6))
    assert len(parsed.positions) == 1
    pos = parsed.positions[0]
    assert (pos.start, pos.end) == (month_index(*start), month_index(*end))
    assert pos.title == "Engineer"

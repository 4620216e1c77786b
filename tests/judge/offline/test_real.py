"""The offline judge on real resumes (fixtures copied from realdata, see fixtures/judge/README):
date layouts people write, study periods kept out of employment, bounded titles, the role
ordering, and the quote relevance check."""

from __future__ import annotations

import re
from typing import Any

import pytest

from hltm.judge.offline.heuristic import judge_offline, prepare_pool
from hltm.judge.quotes import apply_validation
from hltm.judge.resume import MAX_TITLE_CHARS, month_index, parse_resume
from hltm.judge.tasks import JudgeVerdict
from tests.support import FIXTURES as SHARED_FIXTURES

FIXTURES = SHARED_FIXTURES / "judge"
ACCOUNTANT = (FIXTURES / "livecareer_11163645.txt").read_text(encoding="utf-8")  # ID 11163645
LINE_ATTENDANT = (FIXTURES / "livecareer_11995013.txt").read_text(encoding="utf-8")  # 11995013

# Requirements read off a real posting (postings_linkedin_en.csv, job_id 2428973832).
STAFF_ACCOUNTANT = {
    "id": "RV-ACC",
    "title": "Staff Accountant",
    "text": "Posting of AP and AR invoices. Prepare Bank Reconciliation Reports monthly.",
    "requirements": [
        {"id": "a1", "text": "0-2 years' experience in accounting", "mandatory": True},
        {"id": "a2", "text": "Accounts payable and accounts receivable", "mandatory": True},
        {"id": "a3", "text": "Prepare bank reconciliation reports monthly", "mandatory": True},
        {"id": "a4", "text": "Proficient in Microsoft Excel", "mandatory": True},
    ],
}


def _judge(text: str, vacancy: dict[str, Any] = STAFF_ACCOUNTANT) -> JudgeVerdict:
    payload = {
        "vacancy": vacancy,
        "resume": {"id": "x", "headline": None, "as_of": None, "text": text},
    }
    return JudgeVerdict.model_validate(judge_offline(payload))


def test_flattened_pdf_table_positions_are_read() -> None:
    parsed = parse_resume(ACCOUNTANT)
    got = [(p.title, p.start, p.end) for p in parsed.positions[:3]]
    assert got == [
        ("Accountant", month_index(2011, 1), month_index(2015, 11)),
        ("Accounts Receivable Clerk", month_index(2008, 1), month_index(2010, 1)),
        ("Mortgage Underwriter", month_index(2006, 1), month_index(2008, 1)),
    ]
    first = parsed.positions[0]
    assert any("accounts receivables payments" in ln.text for ln in first.body)
    assert all(len(p.title) <= MAX_TITLE_CHARS for p in parsed.positions)


def test_an_education_period_is_never_employment() -> None:
    parsed = parse_resume(LINE_ATTENDANT)
    titles = [p.title for p in parsed.positions]
    assert titles[:2] == ["Line Attendant", "Crew leader"]
    assert not any(re.search(r"diploma|institute", t, re.I) for t in titles)
    # the diploma ran August 2007 – September 2008: no position spans exactly that
    assert (month_index(2007, 8), month_index(2008, 9)) not in {
        (p.start, p.end) for p in parsed.positions
    }
    # the same period written in an experience section, without a job title, is still studies
    text = "Jane Doe\nExperience\nJuly 2009 to June 2013 Diploma in Mechanical Engineering\n"
    text += "Line Cook, Diner, 2013 - 2015\n"
    assert [p.title for p in parse_resume(text).positions] == ["Line Cook"]


@pytest.mark.parametrize(
    ("dates", "start", "end"),
    [
        ("2015 – present", (2015, 7), (2025, 6)),
        ("Dec 2017 - Till Date", (2017, 12), (2025, 6)),
        ("Sept' 2017 to till date", (2017, 9), (2025, 6)),
        ("с 2015 по н.в.", (2015, 7), (2025, 6)),
        ("2019–2021", (2019, 7), (2021, 6)),
        ("June 2018 - March 2020", (2018, 6), (2020, 3)),
        ("июнь 2018 — март 2020", (2018, 6), (2020, 3)),
        ("July 2011\n \nto \nNovember 2012", (2011, 7), (2012, 11)),
    ],
)
def test_date_layouts(dates: str, start: tuple[int, int], end: tuple[int, int]) -> None:
    # the real fixture's own layout: "Company Name / <dates> / <title> / City, State"
    text = f"ACCOUNTANT\nExperience\nCompany Name\n \n{dates}\n \nAccountant\n \nCity\n"
    text += "Reconcile all bank statements.\n"
    parsed = parse_resume(text, as_of=month_index(2025, 6))
    assert [(p.title, p.start, p.end) for p in parsed.positions] == [
        ("Accountant", month_index(*start), month_index(*end))
    ]


def test_a_section_without_a_date_on_every_line_keeps_its_lines() -> None:
    text = "Experience\nCompany - Acme Foods, a catering business\nSous Chef\n2016 - 2019\n"
    text += "Planned menus for 300 guests.\nOrdered produce.\n"
    parsed = parse_resume(text, as_of=month_index(2025, 6))
    assert [p.title for p in parsed.positions] == ["Sous Chef"]
    assert [ln.text for ln in parsed.positions[0].body] == [
        "Planned menus for 300 guests.",
        "Ordered produce.",
    ]


def test_titles_are_bounded() -> None:
    sentence = "Responsible for " + "many duties across the office and the warehouse, " * 20
    parsed = parse_resume(f"Name\nExperience\n{sentence} 2010 - 2012\nClerk\n")
    assert all(len(p.title) <= MAX_TITLE_CHARS for p in parsed.positions)


def _other_job(text: str) -> str:
    """The same resume, evidence and all, with the job titles of a cook."""
    for old, new in (("ACCOUNTANT", "LINE COOK"), ("Accounts Receivable Clerk", "Prep Cook"),
                     ("Mortgage Underwriter", "Dishwasher"), ("Accountant", "Line Cook")):  # fmt: skip
        text = text.replace(old, new)
    return text


def test_same_role_never_ranks_below_a_wrong_role_with_the_same_evidence() -> None:
    bare = "\n".join(
        ln
        for ln in ACCOUNTANT.split("\n")
        if not re.search(r"(?i)payable|receivable|bank|excel", ln)
    )
    texts = {"same": ACCOUNTANT, "wrong": _other_job(ACCOUNTANT), "bare": bare,
             "attendant": LINE_ATTENDANT}  # fmt: skip
    payloads = {k: {"id": k, "headline": None, "as_of": None, "text": t} for k, t in texts.items()}
    prepare_pool(STAFF_ACCOUNTANT, list(payloads.values()))
    got = {k: _judge(t) for k, t in texts.items()}
    assert got["same"].role.score > got["wrong"].role.score
    assert got["same"].overall.score > got["wrong"].overall.score
    # role outweighs stack: the accountant without the evidence lines still ranks above a cook
    # who has all of them
    assert sum(c.status == "met" for c in got["bare"].checklist) < sum(
        c.status == "met" for c in got["same"].checklist
    )
    assert got["bare"].overall.score > got["wrong"].overall.score
    assert got["attendant"].overall.score < got["same"].overall.score


def test_quotes_are_verbatim_and_none_cites_the_diploma() -> None:
    verdict = _judge(LINE_ATTENDANT)
    for item in verdict.checklist:
        if item.quote is not None:
            assert item.quote in LINE_ATTENDANT and len(item.quote) <= 200
            assert "Diploma" not in item.quote


def test_an_irrelevant_verbatim_quote_is_capped_at_partial_and_not_shown() -> None:
    # verbatim in the fixture, about payments (the case: a real line, no Kafka in it)
    quote = "Processed all accounts payables by check, domestic and international wires, ACH, and credit card."
    checklist = [
        {"requirement_id": "k", "requirement": "Strong hands-on experience with Kafka",
         "mandatory": True, "status": "met", "quote": quote},
        {"requirement_id": "b", "requirement": "Accounts payable by check and wire",
         "mandatory": True, "status": "met", "quote": quote},
    ]  # fmt: skip
    items, counts = apply_validation(checklist, ACCOUNTANT)
    kafka, banking = items
    assert kafka["quote_outcome"] == "exact" and kafka["quote_relevant"] is False
    assert kafka["status"] == "partial" and kafka["quote_reason"] == "irrelevant"
    assert kafka["quote"] is None and kafka["llm_quote"] == quote  # kept for audit only
    assert banking["quote_relevant"] is True and banking["status"] == "met"
    assert counts["irrelevant"] == counts["mandatory_irrelevant"] == 1
    assert counts["exact"] == 2 and counts["downgraded"] == 1
    assert counts["mandatory_survived"] == 1  # an irrelevant quote does not survive the gate

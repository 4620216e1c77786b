"""The offline judge from general evidence, on rows copied from realdata (fixtures/judge/README):
titles found in any layout, every line as evidence, an unknown role as doubt,
"A or B" requirements, and the role read relative to the pool."""

from __future__ import annotations

from typing import Any

from hltm.evaluation.judge.titles import designation_spans
from hltm.judge.offline.heuristic import judge_offline, prepare_pool
from hltm.judge.resume import parse_resume
from hltm.judge.tasks import JudgeVerdict
from tests.support import FIXTURES as SHARED_FIXTURES

FIXTURES = SHARED_FIXTURES / "judge"
EDUCATION_THEN_TITLE = (FIXTURES / "indeed_060_education_then_title.txt").read_text("utf-8")
SKILLS_FIRST_LINE = (FIXTURES / "indeed_060_skills_first_line.txt").read_text("utf-8")

# Title lines people marked as Designation in resumes_indeed_ner.jsonl (rows 4, 4, 104, 165),
# each with the company / date lines written under it in that resume.
JAVA = "java developer\n\nWORK EXPERIENCE\n\nApplication Developer\n\nAugust 2016 to Present\n"
MULE = "Mule ESB Integration Developer\n\nWORK EXPERIENCE\n\nJanuary 2016 to Present\n"
DOTNET = ".Net Developer\n\nWORK EXPERIENCE\n\nSystems Engineer\n\n2013 to Present\n"

JAVA_VACANCY = {
    "id": "V-JAVA",
    "title": "Java Developer",
    "text": "Java developer for web services.",
    "requirements": [
        {"id": "r1", "text": "Java and SQL", "mandatory": True},
        {"id": "r2", "text": "Programming in Python or Java", "mandatory": True},
        {"id": "r3", "text": "Git", "mandatory": False},
    ],
}


def _resume(rid: str, text: str) -> dict[str, Any]:
    return {"id": rid, "headline": None, "as_of": "2018-06", "text": text}


def _judge(resumes: dict[str, str], vacancy: dict[str, Any] = JAVA_VACANCY) -> dict[str, Any]:
    payloads = {rid: _resume(rid, text) for rid, text in resumes.items()}
    prepare_pool(vacancy, list(payloads.values()))
    return {
        rid: JudgeVerdict.model_validate(judge_offline({"vacancy": vacancy, "resume": r}))
        for rid, r in payloads.items()
    }


def test_a_title_after_an_education_block_is_found() -> None:
    titles = [t.text for t in parse_resume(EDUCATION_THEN_TITLE).titles]
    assert "Online Content Writer" in titles
    assert not any("B.Tech" in t or "Institute" in t for t in titles)
    # the found span is the marked one, after the education block
    span = next(t.span for t in parse_resume(EDUCATION_THEN_TITLE).titles)
    assert span[0] > EDUCATION_THEN_TITLE.index("EDUCATION")


def test_a_skills_list_first_line_is_evidence() -> None:
    verdict = _judge({"skills": SKILLS_FIRST_LINE, "java": JAVA})["skills"]
    git = next(c for c in verdict.checklist if c.requirement_id == "r3")
    assert git.status == "met"
    assert git.quote is not None and git.quote in SKILLS_FIRST_LINE.split("\n")[0]


def test_an_unreadable_role_is_doubt_not_the_middle() -> None:
    verdicts = _judge({"skills": SKILLS_FIRST_LINE, "java": JAVA, "dotnet": DOTNET})
    assert parse_resume(SKILLS_FIRST_LINE).titles == []
    # no evidence of the role is not the pool's average: a standard deviation below it
    assert verdicts["skills"].role.score == 16
    assert "doubt" in verdicts["skills"].role.explanation
    assert verdicts["skills"].overall.score < verdicts["java"].overall.score


def test_an_or_requirement_is_met_by_either() -> None:
    verdict = _judge({"skills": SKILLS_FIRST_LINE, "java": JAVA})["skills"]
    either = next(c for c in verdict.checklist if c.requirement_id == "r2")
    assert either.status == "met"
    assert either.quote is not None and "Java" in either.quote
    both = next(c for c in verdict.checklist if c.requirement_id == "r1")
    assert both.status == "met"


def test_sibling_developer_titles_rank_below_the_exact_one() -> None:
    verdicts = _judge({"java": JAVA, "mule": MULE, "dotnet": DOTNET})
    assert verdicts["java"].role.score > verdicts["mule"].role.score
    assert verdicts["java"].role.score > verdicts["dotnet"].role.score
    assert verdicts["java"].overall.score > max(
        verdicts["mule"].overall.score, verdicts["dotnet"].overall.score
    )


def test_designation_spans_are_read_as_half_open_offsets() -> None:
    # resumes_indeed_ner.jsonl writes inclusive ends (row 4: "java developer" on line 2)
    text = "Imgeeyaul Ansari\njava developer\n\nPune, Maharashtra\n"
    start = text.index("java developer")
    row = {
        "content": text,
        "annotation": [{"label": ["Designation"], "points": [{"start": start, "end": start + 13}]}],
    }
    assert [text[a:b] for a, b in designation_spans(row)] == ["java developer"]
    assert [t.text for t in parse_resume(text).titles] == ["java developer"]

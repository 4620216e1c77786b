"""Who a question and a sentence of a transcript are about, and the composer's verdict from it:
a passage about another speaker does not answer a question about this one."""

from __future__ import annotations

from typing import Any

from hltm.query.offline.compose import answer
from hltm.query.offline.subject import Span, Subject, about, speakers

PEOPLE = ["Caroline", "Melanie"]


def _qa(node: str, text: str, source: str) -> dict[str, Any]:
    label = f"Caroline and Melanie, {node}"
    quoted = f"What did Caroline and Melanie say: “{text}”?"
    return {"node_id": f"project:{node}", "level": "project", "label": label,
            "question": quoted, "answer": text, "source": source, "score": 0.03}  # fmt: skip


PAYLOAD: dict[str, Any] = {
    "intent": "lookup",
    "pairs": [],
    "scope": {"level": "contract", "node_id": "contract:c"},
    "facets": [],
    "summaries": [
        {
            "node_id": "project:s2",
            "level": "project",
            "label": "Caroline and Melanie, s2",
            "summary": "Project s2 (status: closed). Requirements: location: Paris. "
            "Also noted: pets: two. [t1] Melanie: I ran a charity race last Saturday.",
        }
    ],
    "qa": [
        _qa("s2", "Melanie: I ran a charity race for mental health last Saturday.", "t1"),
        _qa("s2", "Melanie: After the race I realized self-care is really important.", "t2"),
        _qa("s2", "Caroline: That charity race sounds great, Mel!", "t3"),
        _qa("s5", "Caroline: I painted a lake at sunrise. Caroline: Painting calms me.", "t4"),
    ],
}


def _span(text: str, speaker: str = "") -> Span:
    return Span(text, "project:s2", 0.0, 0, speaker)


def test_a_sentence_is_about_who_speaks_in_the_first_person_and_whom_it_names() -> None:
    assert speakers(PAYLOAD) == PEOPLE  # a summary's own "Requirements:" line is no speaker
    assert about(_span("Melanie: I realized self-care matters.", "Melanie"), PEOPLE) == {"Melanie"}
    assert about(_span("Caroline: Your race sounds great.", "Caroline"), PEOPLE) == {"Melanie"}
    # A name that addresses the listener is not the subject; a generic remark is about no one.
    assert about(_span("Caroline: Thanks, Melanie!", "Caroline"), PEOPLE) == set()
    assert about(_span("Caroline: That race sounds great, Mel!", "Caroline"), PEOPLE) == set()
    assert about(_span("Caroline: I told Melanie.", "Caroline"), PEOPLE) == set(PEOPLE)


def test_a_question_names_a_speaker_by_name_or_short_name() -> None:
    question = "What did Mel realize after her charity race?"
    assert Subject.of(PAYLOAD, question, PEOPLE).people == {"Melanie"}
    assert Subject.of(PAYLOAD, "What did they do in Paris?", PEOPLE).places == {"Paris"}


def test_what_one_speaker_said_of_herself_does_not_answer_a_question_about_the_other() -> None:
    asked = {**PAYLOAD, "question": "What did Melanie realize after her charity race?"}
    own = answer(asked)
    assert own["in_memory"] and own["answer"].startswith("Melanie:") and own["citation"]
    swapped = answer({**asked, "question": "What did Caroline realize after her charity race?"})
    assert not swapped["in_memory"], swapped
    assert swapped["answer"].startswith("Not in memory") and "Melanie" in swapped["answer"]
    # Someone the memory holds nothing about on this is not judged by person.
    unnamed = answer({**asked, "question": "What did they realize after the charity race?"})
    assert unnamed["in_memory"]


def test_a_passing_remark_of_the_asked_speaker_does_not_outweigh_the_other_telling_it() -> None:
    """Caroline once watched a charity race; Melanie ran one and tells of it: what Caroline
    realised after *her* race is still not in memory, what Melanie realised is."""
    remark = _qa("s3", "Caroline: I watched a charity race on TV.", "t5")
    told = {**PAYLOAD, "qa": [*PAYLOAD["qa"], remark]}
    swapped = answer({**told, "question": "What did Caroline realize after her charity race?"})
    assert not swapped["in_memory"], swapped
    assert "said of Melanie, not Caroline" in swapped["answer"]
    own = answer({**told, "question": "What did Melanie realize after her charity race?"})
    assert own["in_memory"] and own["answer"].startswith("Melanie:"), own

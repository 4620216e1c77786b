"""Who and what a question is about, and who a sentence of the retrieved memory is about.

An answer must rest on a passage about the subject the question names, not merely on one that
shares its words: "What did Caroline realise after her charity race?" is not answered by Melanie
saying she realised something after hers. The signals are general, read from the question and the
retrieved context alone:

* **people** are the speakers of the context's passages (`Name: …` turns, as
  `lexicon.speaker_labels` finds them); the question names one by its name or by a short form
  of it ("Mel" for Melanie);
* a sentence is about its **speaker** when it speaks in the first person ("I", "my", "we" — in
  English or Russian), about the **listener** when it speaks in the second person, and about
  anyone it names — except a name used to address someone ("Thanks, Caroline!"), which names the
  listener, not the subject;
* **places** the question names (the shared gazetteer) must be stated by the passage or its node;
* **names of projects**: words of the question that appear in the titles of some of the
  context's projects but not all of them ("catering" in "Catering kitchen expansion") pick
  those projects out.

A sentence with no such cue (a generic remark, a project's facet line) is about no one in
particular: it neither supports nor contradicts a person.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from hltm.memory import lexicon as lx
from hltm.memory.salience import terms
from hltm.query.grounding import item_text, place_names

Payload = dict[str, Any]

_LABEL = re.compile(r"^\s*([^:\n]{1,40}):\s*")
_TAG = lx.QUOTE_TAG
_WORD = re.compile(r"[^\W\d_][\w'’-]*")
_FIRST = re.compile(
    r"\b(?:i|i'm|i've|i'd|i'll|me|my|mine|myself|we|we're|we've|we'd|we'll|our|ours|us"
    r"|я|меня|мне|мной|мой|моя|моё|мои|моих|мы|нас|нам|нами|наш|наша|наше|наши|наших)\b",
    re.IGNORECASE,
)
_SECOND = re.compile(
    r"\b(?:you|you're|you've|you'd|you'll|your|yours|yourself"
    r"|ты|тебя|тебе|тобой|твой|твоя|твоё|твои|вы|вас|вам|вами|ваш|ваша|ваше|ваши)\b",
    re.IGNORECASE,
)
_SHORT_NAME = 3  # letters a short form of a name keeps ("Mel")


@dataclass(frozen=True)
class Span:
    """One sentence of the context: its text, node, retrieval score, position and speaker."""

    text: str
    node_id: str
    score: float
    order: int
    speaker: str = ""

    @property
    def body(self) -> str:
        """The sentence without its speaker label."""
        match = _LABEL.match(self.text)
        return self.text[match.end() :] if match and self.speaker else self.text


def _texts(payload: Payload) -> list[tuple[str, str, float]]:
    items = [(q["answer"], q["node_id"], float(q.get("score", 0.0))) for q in payload.get("qa", [])]
    items += [(x.get("summary", ""), x["node_id"], 0.0) for x in payload.get("summaries", [])]
    items += [(x.get("text", ""), x["node_id"], 0.0) for x in payload.get("passages", [])]
    return items


def speakers(payload: Payload) -> list[str]:
    """The speakers of the passages the context quotes (prepared answers, raw passages, and a
    summary's quotes, which carry their document's id — not its own lines such as
    "Requirements: …"), as they spell themselves."""
    summaries = {x.get("summary", "") for x in payload.get("summaries", [])}
    lines = [
        _TAG.sub("", sentence)
        for text, _, _ in _texts(payload)
        for sentence, _ in lx.sentences(text)
        if text not in summaries or _TAG.match(sentence)
    ]
    labels = lx.speaker_labels(lines)
    spelt: dict[str, str] = {}
    for line in lines:
        match = _LABEL.match(line)
        if match and match.group(1).strip().casefold() in labels:
            spelt.setdefault(match.group(1).strip().casefold(), match.group(1).strip())
    return sorted(spelt.values())


def spans(payload: Payload, people: Iterable[str] = ()) -> list[Span]:
    """Every sentence of the context's prepared answers, summaries and passages (3+ words), each
    with the speaker of the turn it belongs to: a turn's later sentences keep its speaker."""
    known = {p.casefold() for p in people}
    out: list[Span] = []
    for text, node_id, score in _texts(payload):
        speaker = ""
        for sentence, _ in lx.sentences(text):
            if _TAG.match(sentence):
                speaker = ""  # a summary's next quoted document
            sentence = _TAG.sub("", sentence)
            label = _LABEL.match(sentence)
            if label and label.group(1).strip().casefold() in known:
                speaker = label.group(1).strip()
            if len(sentence.split()) >= lx.STATEMENT_WORDS:
                out.append(Span(sentence, node_id, score, len(out), speaker))
    return out


def _matches(word: str, person: str) -> bool:
    word = re.sub(r"['’]s$", "", word).casefold()
    parts = [p.casefold() for p in person.split()]
    return word in parts or (len(word) >= _SHORT_NAME and parts[0].startswith(word))


def named(text: str, people: Iterable[str]) -> set[str]:
    """The people `text` names by a capitalised name or short form of it."""
    people = list(people)
    return {
        person
        for match in _WORD.finditer(text)
        if match.group(0)[0].isupper()
        for person in people
        if _matches(match.group(0), person)
    }


def _addressed(body: str, people: list[str]) -> set[str]:
    """People a sentence addresses by name: the name follows its start, a comma or one opening
    word ("Hey Caroline,", "Thanks, Mel!") and ends its phrase."""
    out = set()
    for match in _WORD.finditer(body):
        before = body[: match.start()].rstrip()
        after = body[match.end() : match.end() + 1]
        opening = not before or before.endswith(",") or len(before.split()) == 1
        if opening and after in ("", ",", "!", "?", "."):
            out |= {p for p in people if _matches(match.group(0), p)}
    return out


def about(span: Span, people: list[str]) -> set[str]:
    """The people a sentence is about (empty: no one in particular)."""
    body = span.body
    subject = named(body, people) - _addressed(body, people)
    if span.speaker:
        if _FIRST.search(body):
            subject.add(span.speaker)
        if _SECOND.search(body):
            subject |= {p for p in people if p != span.speaker}
    return subject


@dataclass
class Subject:
    """What a question names: people of the context, places, and project-naming words."""

    people: set[str] = field(default_factory=set)
    places: frozenset[str] = field(default_factory=frozenset)
    speakers: list[str] = field(default_factory=list)  # every person of the context
    nodes: set[str] = field(default_factory=set)  # projects whose titles the question names
    words: list[str] = field(default_factory=list)  # the words that name them

    @classmethod
    def of(cls, payload: Payload, question: str, people: list[str]) -> Subject:
        labels: dict[str, set[str]] = {}  # the projects' titles: what a question names
        for kind in ("facets", "qa", "summaries", "passages"):
            for item in payload.get(kind, []):
                if item.get("level", "project") == "project":
                    labels.setdefault(item["node_id"], set()).update(_stems(item.get("label", "")))
        asked = set(_stems(question)) - {w for p in people for w in _stems(p)}
        words = sorted(
            w for w in asked if 0 < sum(w in held for held in labels.values()) < len(labels)
        )
        nodes = {n for n, held in labels.items() if any(w in held for w in words)}
        return cls(named(question, people), place_names(question), people, nodes, words)

    def states_places(self, text: str) -> bool:
        return self.places <= place_names(text)


def _stems(text: str) -> list[str]:
    """Content terms with an English plural's `s` dropped ("chefs" → "chef")."""
    return [t[:-1] if len(t) > 3 and t.endswith("s") and t.isascii() else t for t in terms(text)]


def node_texts(payload: Payload) -> dict[str, str]:
    """node id → everything the context holds of it (labels, facets, answers, summaries)."""
    out: dict[str, list[str]] = {}
    for kind in ("facets", "qa", "summaries", "passages"):
        for item in payload.get(kind, []):
            out.setdefault(item["node_id"], []).append(item_text(item))
    return {node_id: "\n".join(parts) for node_id, parts in out.items()}

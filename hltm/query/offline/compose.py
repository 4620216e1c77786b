"""The offline answer composer: the `answer` task answered by rules from the retrieved items.

It receives exactly what an LLM would (the question, its parsed pairs, and the retrieved
`facets`, `qa`, `summaries` and — for the baselines — raw `passages`) and returns the same JSON
`{rationale, answer, citation, in_memory}`. It cites only node ids present in its input, by
construction, and claims no more than they state: when they do not state what was asked about
the subject the question names (`subject.py`), `in_memory` is false, the answer says so, and the
nodes found nearest are named as a hint.

* fields ("where do I usually hire?", "what salary is offered?") — for each field asked without
  a value, over the nodes about the question's subject (the values it gives, the projects its
  words name): the values of the most aggregated nodes in the context (a seat's or contract's
  facets, ranked by how many children support them); without aggregated facets, values are
  counted across the projects in the context (or found in passages with the shared
  vocabularies); values at least half as supported as the best are kept. Nothing stated is not
  in memory.
* a field asked without a value at a contract or seat scope ("which roles do we usually hire
  for?") — every distinct value the scope's projects state (the retriever lists them all), each
  project counted once per value, citing each project.
* a field asked about a person of a transcript ("which cities has John been to?") — the values
  named in what the passages about that person say.
* find_projects ("which projects hire X in Y?") — every project in the context whose memory
  states all the valued pairs (facet values first, then its QA answers, summary and passages);
  none is not in memory, the closest as a hint.
* lookup — the context sentence (of prepared answers, summaries, passages) closest to the
  question in meaning (bundled e5) and terms, citing its node and every other node whose best
  sentence is nearly as close (at most 3), a statement answering before a question the context
  asks; else the best prepared QA answer or summary. Not in
  memory when the statements holding the question's words are about another person or place
  (`_off_subject`).
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from datetime import date, datetime, timedelta
from typing import Any

from hltm.embeddings import similarities
from hltm.memory import lexicon as lx
from hltm.memory.salience import terms
from hltm.query.grounding import value_counts
from hltm.query.offline.subject import Span, Subject, about, named, node_texts, speakers
from hltm.query.offline.subject import spans as context_spans
from hltm.query.parse import CUES

Payload = dict[str, Any]
NO_ANSWER = "The retrieved memory does not answer this question."
NOT_IN_MEMORY = "Not in memory:"
FIELD_PHRASE = {**lx.FIELD_PHRASES, "title": "roles"}
PROFILE_FIELDS = ("title", "location", "work_mode", "employment_type", "seniority")
_KEEP_SHARE = 0.5
_MAX_VALUES = 6
_MAX_PROJECTS = 25
_DEPTH = {"contract": 0, "seat": 1, "project": 2}
_TERM_WEIGHT = 0.5  # the question's terms a sentence holds (0–1) beside its rescaled meaning (0–1)
_CITE_MARGIN = 0.25  # other nodes whose best sentence scores this close to the best are cited too
_MAX_CITED = 3
_TEXT_TERMS = {
    "location": lx.LOCATIONS,
    "work_mode": lx.WORK_MODES,
    "employment_type": lx.EMPLOYMENT_TYPES,
    "seniority": lx.SENIORITY,
    "skill": lx.SKILLS_ALL,
    "language": lx.LANGUAGES,
}


def _norm(value: str) -> str:
    return lx.normalise_value(value)


def _tokens(text: str) -> list[str]:
    words = re.findall(r"[\w+#]+", text.casefold())
    return [w[:-1] if len(w) > 3 and w.endswith("s") and w.isascii() else w for w in words]


def _value_matches(field: str, wanted: str, stated: str) -> bool:
    """Whether a stated facet value satisfies a wanted value of the same field."""
    if not wanted:
        return True
    a, b = _norm(lx.canonical(field, wanted)), _norm(lx.canonical(field, stated))
    if a == b:
        return True
    if field in _TEXT_TERMS:
        return False
    want = _tokens(wanted)
    have = set(_tokens(stated))
    return bool(want) and all(w in have for w in want)


def _text_states(field: str, wanted: str, text: str) -> bool:
    """Whether free text states `field: wanted` (vocabulary terms, else all words present)."""
    if not text:
        return False
    terms = _TEXT_TERMS.get(field)
    canonical = lx.canonical(field, wanted)
    if terms:
        found = {name for name, _ in lx.find_terms(terms, text, negatable=True)}
        if canonical in found:
            return True
    want = _tokens(wanted)
    have = set(_tokens(text))
    return bool(want) and all(w in have for w in want)


def _text_values(field: str, text: str) -> list[str]:
    terms = _TEXT_TERMS.get(field)
    if not terms:
        return []
    return [name for name, _ in lx.find_terms(terms, text, negatable=True)]


def _label(payload: Payload, node_id: str) -> str:
    for kind in ("facets", "summaries", "passages", "qa"):
        for item in payload.get(kind, []):
            if item.get("node_id") == node_id and item.get("label"):
                return str(item["label"])
    return node_id


def _context_ids(payload: Payload) -> list[str]:
    kinds = ("facets", "qa", "summaries", "passages")
    found = (item.get("node_id") for kind in kinds for item in payload.get(kind, []))
    return list(dict.fromkeys(nid for nid in found if nid))


# ---- preferences -------------------------------------------------------------------------------


def _rank(
    weights: dict[str, float], spelling: dict[str, str], backers: dict[str, set[str]]
) -> tuple[list[str], list[str]]:
    best = max(weights.values())
    ranked = sorted(weights, key=lambda k: (-weights[k], k))
    kept = [k for k in ranked if weights[k] >= _KEEP_SHARE * best][:_MAX_VALUES]
    nodes = sorted({n for k in kept for n in backers[k]})
    return [spelling[k] for k in kept], nodes


def _field_values(payload: Payload, field: str) -> tuple[list[str], list[str], str]:
    """(values, supporting node ids, where from) for a field, best supported first.

    Structured facets first (those of the most aggregated nodes, weighted by support); without
    any, values the shared vocabularies find in the text the context holds — prepared answers to
    questions about the field, summaries, passages — from the most aggregated nodes that have
    any, one vote per node.
    """
    weights: dict[str, float] = defaultdict(float)
    spelling: dict[str, str] = {}
    backers: dict[str, set[str]] = defaultdict(set)

    def vote(key_value: str, node_id: str, weight: float = 1.0) -> None:
        key = _norm(key_value)
        spelling.setdefault(key, key_value)
        if node_id not in backers[key] or weight != 1.0:
            weights[key] += weight
        backers[key].add(node_id)

    facets = [f for f in payload.get("facets", []) if f.get("field") == field]
    if facets:
        top = min(_DEPTH.get(f.get("level", "project"), 2) for f in facets)
        for facet in facets:
            if _DEPTH.get(facet.get("level", "project"), 2) == top:
                support = facet.get("support") or 0
                vote(facet["value"], facet["node_id"], support if top < 2 and support else 1)
        values, nodes = _rank(weights, spelling, backers)
        return values, nodes, "aggregated facets" if top < 2 else "project facets"

    cue = CUES.get(field)
    texts: list[tuple[int, str, str]] = []  # (depth, node id, text)
    for qa in payload.get("qa", []):
        if cue is not None and cue.search(qa.get("question", "")):
            texts.append((_DEPTH.get(qa.get("level", "project"), 2), qa["node_id"], qa["answer"]))
    for kind, key in (("summaries", "summary"), ("passages", "text")):
        for item in payload.get(kind, []):
            depth = _DEPTH.get(item.get("level", "project"), 2)
            texts.append((depth, item["node_id"], item.get(key, "")))
    found = [(d, n, v) for d, n, t in texts for v in dict.fromkeys(_text_values(field, t))]
    if field == "title":
        found += [
            (2, p["node_id"], p["label"]) for p in payload.get("passages", []) if p.get("label")
        ]
    if not found:
        return [], [], ""
    top = min(d for d, _, _ in found)
    for depth, node_id, value in found:
        if depth == top:
            vote(value, node_id)
    values, nodes = _rank(weights, spelling, backers)
    return values, nodes, "text of " + ("aggregated nodes" if top < 2 else "projects")


def _branch_values(payload: Payload, field: str) -> tuple[list[str], list[str]]:
    """(values with their project counts, best first; the nodes stating them) of a field the
    question leaves open, over the nodes below a contract or seat scope (the retriever lists
    the shallowest node of each branch that states it): each project counts once for each
    distinct value it states (spellings merged), a seat's value the projects supporting it.
    Empty at a project scope or when nothing below the scope states the field."""
    scope = payload.get("scope") or {}
    if scope.get("level") not in ("contract", "seat"):
        return [], []
    facets = [
        f
        for f in payload.get("facets", [])
        if f.get("field") == field and f.get("node_id") != scope.get("node_id")
    ]
    counts = value_counts(facets)  # what the grounding check holds the counts to
    spelling: dict[str, str] = {}
    nodes: list[str] = []
    for facet in facets:
        spelling.setdefault(_norm(facet["value"]), facet["value"])
        if facet["node_id"] not in nodes:
            nodes.append(facet["node_id"])
    ranked = sorted(counts, key=lambda k: (-counts[k], k))
    values = [f"{spelling[k]} ({counts[k]} project{'' if counts[k] == 1 else 's'})" for k in ranked]
    return values, nodes


def _qa_for_field(payload: Payload, field: str) -> dict[str, Any] | None:
    cue = CUES.get(field)
    items = payload.get("qa", [])
    if cue is None:
        return None
    matching = [q for q in items if cue.search(q.get("question", ""))]
    if not matching:
        return None
    return min(matching, key=lambda q: _DEPTH.get(q.get("level", "project"), 2))


def _restricted(payload: Payload, nodes: set[str]) -> Payload:
    """The payload with only the items of `nodes`."""
    kinds = ("facets", "qa", "summaries", "passages")
    kept = {k: [i for i in payload.get(k, []) if i["node_id"] in nodes] for k in kinds}
    return {**payload, **kept}


def _subject_nodes(payload: Payload, subject: Subject) -> set[str] | None:
    """The nodes the question's subject picks out: the projects its words name (by their
    labels), and the nodes stating every value the question gives (`location: Boston`);
    None when it names neither."""
    chosen = set(subject.nodes) if subject.words else None
    valued = [p for p in payload.get("pairs", []) if p.get("field") and p.get("value")]
    if valued:
        evidence = _project_evidence(payload, level=None)
        stating = {
            node_id
            for node_id, item in evidence.items()
            if all(_states(item, p["field"], p["value"]) for p in valued)
        }
        chosen = stating if chosen is None else chosen & stating
    return chosen


def _subject_phrase(payload: Payload, subject: Subject) -> str:
    valued = [p["value"] for p in payload.get("pairs", []) if p.get("field") and p.get("value")]
    named_ = [_label(payload, n) for n in sorted(subject.nodes)] if subject.words else []
    about_ = valued + [f"“{label}”" for label in named_]
    return f" for {' and '.join(about_)}" if about_ else ""


def _field_lines(payload: Payload, fields: list[str]) -> tuple[list[str], list[str], list[str]]:
    """(one line per field that has values, the nodes they rest on, where each came from)."""
    lines, cited, reasons = [], [], []
    asked_open = {
        p["field"] for p in payload.get("pairs", []) if p.get("field") and not p.get("value")
    }
    for field in fields:
        phrase = FIELD_PHRASE.get(field, field.replace("_", " "))
        values, nodes = _branch_values(payload, field) if field in asked_open else ([], [])
        if values:
            lines.append(f"{phrase}: {', '.join(values)}")
            cited += [n for n in nodes if n not in cited]
            reasons.append(f"{phrase} from the facets of the scope's projects: {', '.join(nodes)}")
            continue
        values, nodes, origin = _field_values(payload, field)
        if values:
            lines.append(f"{phrase}: {', '.join(values)}")
            cited += [n for n in nodes if n not in cited]
            reasons.append(f"{phrase} from {origin} of {', '.join(nodes)}")
            continue
        qa = _qa_for_field(payload, field)
        if qa:
            lines.append(f"{phrase}: {qa['answer']}")
            if qa["node_id"] not in cited:
                cited.append(qa["node_id"])
            reasons.append(f"{phrase} from the prepared answer of {qa['node_id']}")
    return lines, cited, reasons


def _preferences(payload: Payload, fields: list[str], subject: Subject) -> Payload:
    """The asked fields' values (`fields`; none asked: the profile's) over the nodes about the
    question's subject; not in memory when fields were asked and nothing about the subject
    states them."""
    chosen = _subject_nodes(payload, subject)
    scoped = payload if chosen is None else _restricted(payload, chosen)
    lines, cited, reasons = _field_lines(scoped, fields or list(PROFILE_FIELDS))
    if lines:
        return {
            "answer": "; ".join(lines) + ".",
            "citation": cited,
            "rationale": "Usual values, best supported first: " + "; ".join(reasons) + ".",
            "in_memory": True,
        }
    if not fields:
        return _lookup(payload, subject)
    phrase = " or ".join(FIELD_PHRASE.get(f, f.replace("_", " ")) for f in fields)
    elsewhere, nodes, _ = _field_lines(payload, fields) if chosen else ([], [], [])
    scope = (payload.get("scope") or {}).get("node_id") or "this scope"
    return _not_in_memory(
        f"nothing in {scope} states {phrase}{_subject_phrase(payload, subject)}.",
        f"other projects state {'; '.join(elsewhere)}" if elsewhere else "",
        nodes,
    )


# ---- find projects -----------------------------------------------------------------------------


def _project_evidence(payload: Payload, level: str | None = "project") -> dict[str, dict[str, Any]]:
    """node id → its facets by field, its texts and label, for the nodes of `level` (None:
    every level)."""
    projects: dict[str, dict[str, Any]] = {}

    def entry(node_id: str) -> dict[str, Any]:
        return projects.setdefault(
            node_id, {"facets": defaultdict(list), "texts": [], "label": _label(payload, node_id)}
        )

    def wanted(item: dict[str, Any]) -> bool:
        return level is None or item.get("level", "project") == level

    for facet in payload.get("facets", []):
        if wanted(facet):
            entry(facet["node_id"])["facets"][facet["field"]].append(facet["value"])
    for qa in payload.get("qa", []):
        if wanted(qa):
            entry(qa["node_id"])["texts"].append(f"{qa['question']} {qa['answer']}")
    for summary in payload.get("summaries", []):
        if wanted(summary):
            entry(summary["node_id"])["texts"].append(summary.get("summary", ""))
    for passage in payload.get("passages", []):
        if wanted(passage):
            item = entry(passage["node_id"])
            item["texts"].append(passage.get("text", ""))
    for item in projects.values():
        item["texts"].append(item["label"])
        item["facets"] = dict(item["facets"])
    return projects


def _states(item: dict[str, Any], field: str, value: str) -> bool:
    stated = item["facets"].get(field)
    if stated is not None:
        if any(_value_matches(field, value, s) for s in stated):
            return True
        if field not in ("title", "skill"):
            return False  # the project's own facets say otherwise
    return any(_text_states(field, value, text) for text in item["texts"])


def _find_projects(payload: Payload, pairs: list[dict[str, str]]) -> Payload:
    projects = _project_evidence(payload)
    if not projects:
        return _lookup(payload)
    valued = [p for p in pairs if p.get("value")]
    if not valued:
        chosen = list(projects)[:_MAX_PROJECTS]
    else:
        counts = {
            nid: sum(_states(item, p["field"], p["value"]) for p in valued)
            for nid, item in projects.items()
        }
        chosen = [nid for nid, c in counts.items() if c == len(valued)][:_MAX_PROJECTS]
        if not chosen:
            best = max(counts.values())
            conditions = ", ".join(f"{p['field']}: {p['value']}" for p in valued)
            if best == 0:
                return _not_in_memory(
                    f"none of the {len(projects)} retrieved projects matches {conditions}."
                )
            chosen = [nid for nid, c in counts.items() if c == best][:_MAX_PROJECTS]
            return _not_in_memory(
                f"no retrieved project matches all of {conditions}.",
                "; ".join(f"{projects[nid]['label']} [{nid}]" for nid in chosen),
                chosen,
            )
    listing = "; ".join(f"{projects[nid]['label']} [{nid}]" for nid in chosen)
    conditions = ", ".join(f"{p['field']}: {p['value']}" for p in valued) or "the question"
    return {
        "answer": f"Matching projects: {listing}.",
        "citation": chosen,
        "rationale": f"These projects' memory states {conditions}.",
        "in_memory": True,
    }


# ---- lookup ------------------------------------------------------------------------------------


_WHEN = re.compile(r"^\s*(?:when|what (?:year|month|day|date|time)|how long ago|когда)\b", re.I)
_DATE = re.compile(r"\b(\d{1,2}) ([A-Z][a-z]+),? (\d{4})\b")
_RELATIVE = re.compile(
    r"\b(yesterday|last (?:week|weekend|month|year)|(?:this|next) month)\b", re.I
)


def _dated(label: str) -> date | None:
    """The date a node's label names (a session titled with its date), if any."""
    match = _DATE.search(label)
    if not match:
        return None
    try:
        return datetime.strptime(" ".join(match.groups()), "%d %B %Y").date()
    except ValueError:
        return None


def when_said(sentence: str, label: str) -> str | None:
    """The time a sentence speaks of, resolved against its node's date: "yesterday" in a session
    of 8 May 2023 is 7 May 2023, "last year" 2022; a sentence naming no time, the date itself."""
    day = _dated(label)
    if day is None:
        return None
    match = _RELATIVE.search(sentence)
    said = match.group(1).casefold() if match else ""
    if said == "yesterday":
        return f"{day - timedelta(days=1):%-d %B %Y}"
    if said == "last year":
        return str(day.year - 1)
    if said.endswith("month"):
        step = {"last": -1, "this": 0, "next": 1}[said.split()[0]]
        month = (day.year * 12 + day.month - 1) + step
        return f"{date(month // 12, month % 12 + 1, 1):%B %Y}"
    if said:
        return f"the {said.split()[1]} before {day:%-d %B %Y}"
    return f"{day:%-d %B %Y}"


def _overlaps(question: str, spans: list[Span], ignore: set[str] = frozenset()) -> list[float]:
    """Each span's share of the question's terms it holds (`ignore`d terms left out), rare
    terms (across the context) weighing more: 0 (none) … 1 (all)."""
    wanted = set(terms(question)) - ignore
    held = [set(terms(span.text)) - ignore for span in spans]
    df = {t: sum(t in h for h in held) for t in wanted}
    weight = {t: math.log(1 + len(spans) / df[t]) for t in wanted if df[t]}
    total = sum(weight.values()) or 1.0
    return [sum(weight.get(t, 0.0) for t in h & wanted) / total for h in held]


def _meanings(question: str, spans: list[Span]) -> list[float]:
    """Each span's e5 similarity to the question, rescaled over this context from its least
    (0) to its most similar span (1): e5's cosines are compressed, their order is what counts."""
    sims = similarities(question, [span.text for span in spans])
    low, high = min(sims), max(sims)
    return [(x - low) / (high - low) if high > low else 0.0 for x in sims]


def _ranked(
    spans: list[Span], meaning: list[float], overlap: list[float]
) -> list[tuple[int, float]]:
    """(span index, score) best first: meaning plus the share of the question's terms held."""
    score = [m + _TERM_WEIGHT * o for m, o in zip(meaning, overlap, strict=True)]
    order = sorted(
        range(len(spans)), key=lambda i: (-round(score[i], 6), -spans[i].score, spans[i].order)
    )
    return [(i, score[i]) for i in order]


_ASKS = re.compile(r"\?[\"”’')\]]*\s*$")  # a sentence that asks states nothing


def supporting_spans(
    question: str, spans: list[Span], meaning: list[float]
) -> list[tuple[str, str, float]]:
    """The context sentences that support an answer, best first, as (sentence, node id, score),
    at most one per node and `_MAX_CITED` in all.

    A sentence scores by meaning (e5 against the question) plus the question's terms it holds;
    the best one answers, and every other node whose best sentence scores within `_CITE_MARGIN`
    of it is cited beside it (a fact told across sessions, or two equally good readings).
    A question asked in the context states nothing: a node is quoted by its best statement
    within the margin when it has one, and a node quoted by a statement answers before one
    quoted by a question. A context sharing no term with the question supports nothing.
    """
    overlap = _overlaps(question, spans)
    if not spans or max(overlap) == 0:
        return []
    ranked = _ranked(spans, meaning, overlap)
    best = ranked[0][1]
    quoted: dict[str, tuple[int, float]] = {}  # node id → (its quoted sentence, its best score)
    for i, score in ranked:
        if score < best - _CITE_MARGIN:
            break
        node_id = spans[i].node_id
        if overlap[i] == 0 or (node_id not in quoted and len(quoted) >= _MAX_CITED):
            continue
        if node_id not in quoted:
            quoted[node_id] = (i, score)
        elif _ASKS.search(spans[quoted[node_id][0]].text) and not _ASKS.search(spans[i].text):
            quoted[node_id] = (i, quoted[node_id][1])
    out = [(spans[i].text, node_id, round(score, 4)) for node_id, (i, score) in quoted.items()]
    return sorted(out, key=lambda found: bool(_ASKS.search(found[0])))


def _stating(
    payload: Payload, question: str, spans: list[Span], meaning: list[float], ignore: set[str]
) -> list[tuple[Span, float, float]]:
    """(span, score, share of the question's terms held) of every statement holding a question
    term other than `ignore`d ones, best first. A question states nothing, and neither does a
    line naming its own node (a summary's "Project … “title”")."""
    overlap = _overlaps(question, spans, ignore)
    return [
        (spans[i], score, overlap[i])
        for i, score in _ranked(spans, meaning, overlap)
        if overlap[i] > 0
        and not _ASKS.search(spans[i].text)
        and _label(payload, spans[i].node_id) not in spans[i].text
    ]


def _evidence(stating: list[tuple[Span, float, float]]) -> list[Span]:
    """The statements that state what was asked: the best down to `_CITE_MARGIN` below it."""
    return [span for span, score, _ in stating if score >= stating[0][1] - _CITE_MARGIN]


def _said_of_another(person: str, whom: list[set[str]]) -> set[str]:
    """Whom the evidence is said of instead of `person` (`whom`: each statement's people, best
    first): the best statement about anyone is about others and more statements are about others
    than about `person`; empty when it is not so."""
    best = next((who for who in whom if who), set())
    mine = sum(person in who for who in whom)
    others = sum(bool(who - {person}) for who in whom)
    return set() if person in best or others <= mine else best


def _off_subject(
    payload: Payload, question: str, spans: list[Span], meaning: list[float], subject: Subject
) -> str | None:
    """Why what was asked is not in memory, when the passages that state it are about another
    subject (None: they are not, or nothing tells).

    A place the question names must be stated by one of the evidence's nodes (`_evidence`). A
    person it names is judged by whom the passages stating the rest of the question are about
    (`subject.about`): not in memory when the best of them about anyone is about someone else and
    more of them are about others than about that person (a speaker's own passing remark on the
    topic does not outweigh the other speaker telling it). Those passages are found without the
    name, whose words and meaning would favour whatever that person said about anything.

    A sentence of a turn with no personal cue ("The kids loved it and it was a nice way to relax
    after the road trip") is then read as its speaker's, and decides the same way — but only when
    no statement of the person asked (by them or about them) holds more than `_KEEP_SHARE` of the
    question's weighted terms the best statement of the others holds: a cue-less reply echoing
    the listener's topic ("Sounds special, those beach trips!") is the speaker's only when the
    listener's own words on it were not retrieved. A line with no speaker (a facet, a summary's
    own line) is about no one in particular and decides nothing; a question naming no one, or
    two people, is not judged by person."""
    people = subject.speakers
    naming = [w for w in re.findall(r"\S+", question) if named(w.strip("?!.,;:"), people)]
    names = {t for w in naming for t in terms(w)} | {t for p in people for t in terms(p)}
    evidence = _evidence(_stating(payload, question, spans, meaning, names))
    if not evidence:
        return None
    if subject.places:
        texts = node_texts(payload)
        if not any(subject.states_places(f"{s.text}\n{texts[s.node_id]}") for s in evidence):
            return f"nothing retrieved states this for {' or '.join(sorted(subject.places))}."
    if len(subject.people) != 1:
        return None
    (person,) = subject.people
    rest = " ".join(w for w in question.split() if w not in naming)
    stating = _stating(payload, question, spans, _meanings(rest, spans), names)
    evidence = _evidence(stating)
    other = _said_of_another(person, [about(span, people) for span in evidence])
    if not other:
        whose = {span: about(span, people) or {span.speaker} - {""} for span, _, _ in stating}
        mine, theirs = (_held(person, stating, whose, of_person) for of_person in (True, False))
        if mine <= _KEEP_SHARE * theirs:
            other = _said_of_another(person, [whose[span] for span in evidence])
    if not other:
        return None
    return f"what the memory holds on this is said of {' and '.join(sorted(other))}, not {person}."


def _held(
    person: str,
    stating: list[tuple[Span, float, float]],
    whose: dict[Span, set[str]],
    of_person: bool,
) -> float:
    """The largest share of the question's terms one statement holds, among the statements of
    `person` (`of_person`) or among those of others."""
    return max(
        (
            share
            for span, _, share in stating
            if whose[span] and (person in whose[span]) == of_person
        ),
        default=0.0,
    )


def _said_of(payload: Payload, subject: Subject, fields: list[str]) -> Payload | None:
    """The asked fields' values the passages about the person the question names state ("which
    cities has John been to?": the places his own words name), in order of appearance; None when
    they state none (or the field has no vocabulary to read text with)."""
    people = subject.speakers
    spans = [s for s in context_spans(payload, people) if not _ASKS.search(s.text)]
    about_them = [s for s in spans if subject.people & about(s, people)]
    lines, cited = [], []
    for field in fields:
        values: dict[str, str] = {}
        for span in about_them:
            for value in _text_values(field, span.body):
                values.setdefault(_norm(value), value)
                if span.node_id not in cited:
                    cited.append(span.node_id)
        if values:
            lines.append(f"{FIELD_PHRASE.get(field, field)}: {', '.join(values.values())}")
    if not lines:
        return None
    who = " and ".join(sorted(subject.people))
    return {
        "answer": "; ".join(lines) + ".",
        "citation": cited,
        "rationale": f"Named in what the memory holds about {who}, in {', '.join(cited)}.",
        "in_memory": True,
    }


def _not_in_memory(reason: str, hint: str = "", nearest: list[str] | None = None) -> Payload:
    """An answer saying the memory does not state what was asked; the nearest find may follow
    as a hint, its nodes named in `citation` (which the engine keeps as `nearest`)."""
    return {
        "answer": f"{NOT_IN_MEMORY} {reason}" + (f" Nearest: {hint}" if hint else ""),
        "citation": nearest or [],
        "rationale": reason[0].upper() + reason[1:],
        "in_memory": False,
    }


def _document_of(payload: Payload, node_id: str, sentence: str) -> str:
    """The source document of the prepared answer that holds `sentence`, if one does."""
    for item in payload.get("qa", []):
        if item["node_id"] == node_id and sentence in item.get("answer", ""):
            return str(item.get("source") or "")
    return ""


def _lookup(payload: Payload, subject: Subject | None = None) -> Payload:
    """The best supporting sentence of the context, citing the nodes that hold support; not in
    memory when the sentences that state it are about another subject (`_off_subject`), with
    that sentence as the hint."""
    question = str(payload.get("question") or "")
    subject = subject or Subject.of(payload, question, speakers(payload))
    spans = context_spans(payload, subject.speakers)
    found: list[tuple[str, str, float]] = []
    off = None
    if spans and terms(question):
        meaning = _meanings(question, spans)
        found = supporting_spans(question, spans, meaning)
        off = _off_subject(payload, question, spans, meaning, subject)
    if found:
        sentence, node_id, _ = found[0]
        answer = sentence
        if _WHEN.search(question):  # the time lives in the node's label (a session's date)
            answer = when_said(sentence, _label(payload, node_id)) or (
                f"{sentence} ({_label(payload, node_id)})"
            )
        if off is not None:
            said_when = "" if answer == sentence else f" ({answer})"
            return _not_in_memory(off, f"“{sentence}”{said_when}", [n for _, n, _ in found])
        source = _document_of(payload, node_id, sentence)
        also = [n for _, n, _ in found[1:]]
        return {
            "answer": answer,
            "citation": [n for _, n, _ in found],
            "rationale": f"“{sentence}”: the context sentence closest to the question in meaning"
            f" and terms, from {node_id}"
            + (f", document {source}" if source else "")
            + (f"; as close in {', '.join(also)}." if also else "."),
        }
    if off is not None:
        return _not_in_memory(off)
    qa = payload.get("qa", [])
    if qa:
        best = max(qa, key=lambda q: q.get("score", 0.0))
        return {
            "answer": best["answer"],
            "citation": [best["node_id"]],
            "rationale": f"Prepared answer of {best['node_id']} to “{best['question']}”"
            + (f" (source {best['source']})." if best.get("source") else "."),
        }
    summaries = payload.get("summaries", [])
    if summaries:
        best = summaries[0]
        return {
            "answer": lx.first_sentence(best.get("summary", ""), 400) or NO_ANSWER,
            "citation": [best["node_id"]],
            "rationale": f"From the summary of {best['node_id']}.",
        }
    facets = payload.get("facets", [])
    if facets:
        node = facets[0]["node_id"]
        mine = [f for f in facets if f["node_id"] == node][:8]
        return {
            "answer": "; ".join(f"{f['field']}: {f['value']}" for f in mine) + ".",
            "citation": [node],
            "rationale": f"Facets of {node}.",
        }
    passages = payload.get("passages", [])
    if passages:
        best = passages[0]
        return {
            "answer": lx.first_sentence(best.get("text", ""), 400) or NO_ANSWER,
            "citation": [best["node_id"]],
            "rationale": f"From a passage of {best['node_id']}.",
        }
    return _not_in_memory("nothing retrieved answers this.")


def answer(payload: Payload) -> Payload:
    """The offline handler of the `answer` task."""
    if not _context_ids(payload):
        return _not_in_memory("nothing was retrieved.")
    intent = payload.get("intent", "lookup")
    pairs = [p for p in payload.get("pairs", []) if p.get("field")]
    subject = Subject.of(payload, str(payload.get("question") or ""), speakers(payload))
    if intent == "find_projects":
        result = _find_projects(payload, pairs)
    elif subject.people:  # what a person said or did is in their passages, not in facets
        asked = [p["field"] for p in pairs if not p.get("value")]
        result = _said_of(payload, subject, asked) or _lookup(payload, subject)
    elif intent == "preferences" or any(not p.get("value") for p in pairs):
        # The fields asked without a value are what is asked; the valued ones are conditions.
        asked = [p["field"] for p in pairs if not p.get("value")] or [p["field"] for p in pairs]
        result = _preferences(payload, list(dict.fromkeys(asked)), subject)
    else:
        result = _lookup(payload, subject)
    known = set(_context_ids(payload))
    result["citation"] = [c for c in result["citation"] if c in known]
    result.setdefault("in_memory", True)
    return result

"""A project's own texts as passages, and the QA pair the build adds for each fact-bearing one.

Every backend's project QA gets these pairs (`passage_pairs`): the question quotes the passage,
because the question is what the QA retriever embeds, and the answer is the passage as said,
citing its document. The offline extractors read the same passages.
"""

from __future__ import annotations

from typing import Any

from hltm.memory import lexicon as lx
from hltm.memory.salience import Salience, Unit, units

Payload = dict[str, Any]
PASSAGE_SENTENCES = 4  # sentences of a long document one passage pair holds
_QUOTE_CHARS = 160  # of each sentence an extract's question quotes


def sources_of(payload: Payload) -> list[tuple[str, str, str]]:
    """Every text of a project as (source id, kind, text), in a fixed order."""
    out: list[tuple[str, str, str]] = []
    project = payload["project"]
    out.append((project["project_id"], "project record", str(project.get("title") or "")))
    for doc in payload.get("documents", []):
        out.append((doc["document_id"], doc.get("kind") or "document", str(doc.get("text") or "")))
    for vacancy in payload.get("vacancies", []):
        parts = [str(vacancy.get("title") or ""), str(vacancy.get("text") or "")]
        parts += [str(r.get("text") or "") for r in vacancy.get("requirements", [])]
        out.append((vacancy["vacancy_id"], "vacancy", "\n".join(p for p in parts if p)))
    for action in payload.get("actions", {}).get("with_reasons", []):
        out.append((action["action_id"], f"{action.get('action')} action", action["reason"] or ""))
    return out


def content(payload: Payload) -> tuple[list[Unit], Salience, dict[str, str]]:
    """The sentences of a project's documents and vacancies, their salience, and source kinds."""
    texts = [(sid, kind, text) for sid, kind, text in sources_of(payload)[1:] if text]
    texts = [t for t in texts if not t[1].endswith(" action")]
    speakers = lx.speaker_labels([text for _, _, text in texts])
    items = units([(sid, text) for sid, _, text in texts], speakers)
    return items, Salience(items), {sid: kind.replace("_", " ") for sid, kind, _ in texts}


def said(unit: Unit) -> str:
    return f"{unit.speaker}: {unit.text}" if unit.speaker else unit.text


def listing(words: list[str]) -> str:
    return ", ".join(words[:-1]) + f" and {words[-1]}" if len(words) > 1 else "".join(words)


def quote(units_: list[Unit]) -> str:
    cut = [u.text if len(u.text) <= _QUOTE_CHARS else u.text[:_QUOTE_CHARS].rstrip() + "…"
           for u in units_]  # fmt: skip
    return " ".join(cut)


def passages_of(items: list[Unit]) -> list[list[Unit]]:
    """The project's texts as passages: each document, a long one cut into runs of
    `PASSAGE_SENTENCES` sentences."""
    out: list[list[Unit]] = []
    for source in dict.fromkeys(u.source for u in items):
        sentences = [u for u in items if u.source == source]
        for start in range(0, len(sentences), PASSAGE_SENTENCES):
            out.append(sentences[start : start + PASSAGE_SENTENCES])
    return out


def passage_pairs(payload: Payload) -> list[dict[str, str]]:
    """One QA pair per fact-bearing passage of the project's own texts (a passage that names a
    salient term; a bare "Thanks!" bears none), whatever the backend: answered with the passage
    as said, citing its document, and asked by a question that quotes the passage after the one
    before it. The question is what the QA retriever embeds; a chat turn rarely stands alone (an
    answer follows its question), so the preceding passage rides along as context."""
    items, salience, kinds = content(payload)
    passages = passages_of(items)
    pairs = []
    for i, part in enumerate(passages):
        if not salience.top_terms(part, 1):
            continue
        window = (passages[i - 1] if i else []) + part
        who = list(dict.fromkeys(u.speaker for u in window if u.speaker))
        source = part[0].source
        lead = (
            f"What did {listing(who)} say"
            if who
            else f"What is said in the {kinds.get(source, 'document')}"
        )
        pairs.append(
            {
                "question": f"{lead}: “{quote(window)}”?",
                "answer": " ".join(said(u) for u in part),
                "rationale": f"Quoted from {source}.",
                "source": source,
            }
        )
    return pairs

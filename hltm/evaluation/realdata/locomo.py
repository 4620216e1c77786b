"""Conversation retrieval on LoCoMo: does the memory find the sessions that hold the evidence?

LoCoMo's long two-person conversations map onto the ownership tree as contract = conversation,
seat = the speaker pair, project = one session (titled with its date), document = one turn
(`Speaker: text`, with the caption of a shared photo). The project schema has no "chat" kind, so
turns load as `recruiter_notes`. The real ingest, memory build and query path run on them.

Per question with evidence (categories 1–4), asked by the conversation's own contract:

* **retrieved recall** — share of the question's evidence sessions among the projects in the
  answer context (every node HLTM retrieved), **cited recall** — among the cited projects;
* **Token-F1** of the answer against the gold answer;
* **leakage** — the same questions asked by *another* conversation's contract: the share of
  queries whose context or citations hold any node outside the asker's subtree.

Category 5 is adversarial: questions about something the conversation never says (one speaker's
event pinned on the other, a detail swapped), with only an `adversarial_answer`. The right
answer is that the memory does not say: **abstention** is the share answered `not_in_memory`
(or `no_memory`), beside the same share among the answerable questions (false abstention), per
conversation too, since conversations kept aside are measured the same way.

Beside HLTM: plain vector RAG over the raw turns (the same e5 embeddings, the same scope, the
top-k turns through the same answer task), the same vector search cut at as many sessions as
HLTM retrieved for that question, and the expectation of choosing that many sessions at random.
"""

from __future__ import annotations

import json
import re
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from hltm.evaluation.memory.baselines import Baselines, RawCorpus, SystemAnswer
from hltm.evaluation.memory.metrics import bleu1, token_f1
from hltm.evaluation.realdata import build_memory, ingest_rows, realdata_file, scratch_settings
from hltm.query.engine import QueryEngine
from hltm.query.scope import Identity
from hltm.settings import Settings
from hltm.tokens import count_tokens

LOCOMO_FILE = "locomo_dev.json"
_EVIDENCE = re.compile(r"D(\d+):(\d+)")


@dataclass(frozen=True)
class Question:
    conversation: str
    question: str
    answer: str  # the gold answer; for an adversarial question, the wrong one it baits
    sessions: frozenset[str]  # project ids of the evidence sessions
    category: int

    @property
    def adversarial(self) -> bool:
        return self.category == ADVERSARIAL


ADVERSARIAL = 5
ABSTAINED = ("not_in_memory", "no_memory")  # statuses of an answer that says memory lacks it


def session_id(conversation: str, number: int) -> str:
    return f"{conversation}-s{number:02d}"


def _sessions(conversation: dict[str, Any]) -> list[tuple[int, str, list[dict[str, Any]]]]:
    out = []
    for key, turns in conversation.items():
        match = re.fullmatch(r"session_(\d+)", key)
        if match and isinstance(turns, list) and turns:
            number = int(match.group(1))
            out.append((number, str(conversation.get(f"{key}_date_time") or ""), turns))
    return sorted(out)


def _turn_text(turn: dict[str, Any]) -> str:
    text = f"{turn['speaker']}: {turn.get('text') or ''}".strip()
    if turn.get("blip_caption"):
        text += f" [shares {turn['blip_caption']}]"
    return text


def load(
    path: Path, conversations: int | None = None
) -> tuple[dict[str, list[dict]], list[Question]]:
    """Source tables and the questions of the first `conversations` conversations: those with
    evidence (categories 1–4), and the adversarial ones (category 5)."""
    data = json.loads(path.read_text(encoding="utf-8"))[: conversations or None]
    tables: dict[str, list[dict[str, Any]]] = {
        "contracts": [], "seats": [], "projects": [], "project_documents": []
    }  # fmt: skip
    questions: list[Question] = []
    for sample in data:
        conv, body = sample["sample_id"], sample["conversation"]
        pair = f"{body['speaker_a']} and {body['speaker_b']}"
        tables["contracts"].append({"contract_id": conv, "name": f"conversation {conv}"})
        tables["seats"].append(
            {"seat_id": f"{conv}-pair", "contract_id": conv, "recruiter_name": pair}
        )
        for number, when, turns in _sessions(body):
            pid = session_id(conv, number)
            title = f"{pair}, session {number}" + (f", {when}" if when else "")
            tables["projects"].append(
                {"project_id": pid, "seat_id": f"{conv}-pair", "title": title, "status": "closed"}
            )
            for index, turn in enumerate(turns, start=1):
                match = _EVIDENCE.fullmatch(str(turn.get("dia_id") or ""))
                turn_no = int(match.group(2)) if match else index
                tables["project_documents"].append(
                    {"document_id": f"{pid}-t{turn_no:03d}", "project_id": pid,
                     "kind": "recruiter_notes", "text": _turn_text(turn)}
                )  # fmt: skip
        for qa in sample["qa"]:
            evidence = {
                int(m.group(1)) for e in qa.get("evidence") or [] for m in _EVIDENCE.finditer(e)
            }
            category = int(qa.get("category") or 0)
            gold = qa.get("adversarial_answer" if category == ADVERSARIAL else "answer")
            if gold is None or (category != ADVERSARIAL and not evidence):
                continue
            questions.append(
                Question(conv, qa["question"], str(gold),
                         frozenset(session_id(conv, n) for n in evidence), category)
            )  # fmt: skip
    return tables, questions


# ---- systems -----------------------------------------------------------------------------------

CURVE_SESSIONS = (1, 2, 3, 5, 7, 10)


@dataclass
class Row:
    name: str
    retrieved: list[float] = field(default_factory=list)
    cited: list[float] = field(default_factory=list)
    f1: list[float] = field(default_factory=list)
    bleu: list[float] = field(default_factory=list)
    sessions: list[int] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    leaks: list[bool] = field(default_factory=list)

    @staticmethod
    def _mean(values: list[float] | list[int] | list[bool]) -> float | None:
        return statistics.fmean(values) if values else None

    def as_dict(self) -> dict[str, float | None]:
        return {
            "retrieved_recall": self._mean(self.retrieved), "cited_recall": self._mean(self.cited),
            "token_f1": self._mean(self.f1), "bleu1": self._mean(self.bleu),
            "sessions_retrieved": self._mean(self.sessions),
            "tokens": self._mean(self.tokens), "leakage": self._mean(self.leaks),
        }  # fmt: skip


def _recall(projects: list[str], evidence: frozenset[str]) -> float:
    got = {p.removeprefix("project:") for p in projects if p.startswith("project:")}
    return len(got & evidence) / len(evidence)


def _projects(ids: list[str]) -> list[str]:
    return list(dict.fromkeys(i for i in ids if i.startswith("project:")))


def _hltm(engine: QueryEngine) -> Callable[[Identity, str], SystemAnswer]:
    def run(identity: Identity, question: str) -> SystemAnswer:
        result = engine.ask(identity, question, log=False, channel="eval")
        entities = list(dict.fromkeys(result.context_ids + result.citations))
        return SystemAnswer(
            result.answer, result.citations, entities, result.cost, status=result.status
        )

    return run


@dataclass
class Abstention:
    """Per conversation: (answers saying the memory lacks it, questions), adversarial
    (category 5) and answerable (categories 1–4)."""

    adversarial: dict[str, list[int]] = field(default_factory=dict)
    answerable: dict[str, list[int]] = field(default_factory=dict)

    def add(self, question: Question, status: str) -> None:
        tally = self.adversarial if question.adversarial else self.answerable
        counts = tally.setdefault(question.conversation, [0, 0])
        counts[0] += status in ABSTAINED
        counts[1] += 1

    @staticmethod
    def _rate(tally: dict[str, list[int]]) -> float | None:
        asked = sum(n for _, n in tally.values())
        return sum(a for a, _ in tally.values()) / asked if asked else None

    def as_dict(self) -> dict[str, Any]:
        return {
            "adversarial": self._rate(self.adversarial),
            "answerable": self._rate(self.answerable),
            "per_conversation": {
                conv: {
                    "adversarial": self._rate({conv: self.adversarial.get(conv, [0, 0])}),
                    "answerable": self._rate({conv: self.answerable.get(conv, [0, 0])}),
                }
                for conv in sorted(set(self.adversarial) | set(self.answerable))
            },
        }

    def lines(self) -> list[str]:
        if not self.adversarial:
            return []

        def share(tally: dict[str, list[int]]) -> str:
            rate = self._rate(tally)
            asked = sum(n for _, n in tally.values())
            return f"{rate:.3f} of {asked}" if rate is not None else "—"

        per = ", ".join(
            f"{conv} {share({conv: self.adversarial[conv]})}" for conv in sorted(self.adversarial)
        )
        return [
            f"HLTM abstention (answer: not in memory): adversarial (category 5)"
            f" {share(self.adversarial)}; answerable (categories 1–4) {share(self.answerable)}.",
            f"  adversarial, per conversation: {per}.",
        ]


@dataclass(frozen=True)
class SessionRanking:
    """A plain vector search's sessions, best first (by their best turn), and the tokens of the
    turns it reads down its ranking until each new session appears."""

    sessions: list[str]
    tokens: list[int]  # tokens[i]: turns read to reach i + 1 sessions

    def top(self, n: int) -> tuple[list[str], int]:
        """The first `n` sessions and the tokens of the turns read to find them."""
        if n <= 0 or not self.sessions:
            return [], 0
        n = min(n, len(self.sessions))
        return self.sessions[:n], self.tokens[n - 1]


def _ranked_sessions(
    corpus: RawCorpus, engine: QueryEngine, identity: Identity, question: str
) -> SessionRanking:
    """Sessions in the order of their best turn by cosine, inside the asker's scope."""
    if corpus.vectors is None:
        return SessionRanking([], [])
    scores = corpus.vectors @ engine.embed([question])[0]
    sessions: list[str] = []
    tokens: list[int] = []
    read = 0
    for i in np.argsort(-scores, kind="stable"):
        chunk = corpus.chunks[i]
        if not corpus.in_scope(identity, chunk.project_id):
            continue
        read += count_tokens(chunk.text)
        if f"project:{chunk.project_id}" not in sessions:
            sessions.append(f"project:{chunk.project_id}")
            tokens.append(read)
    return SessionRanking(sessions, tokens)


@dataclass
class LocomoReport:
    rows: list[Row]
    questions: int
    conversations: int
    leakage_queries: int
    seconds: float
    per_question: list[dict[str, Any]] = field(default_factory=list)
    abstention: Abstention = field(default_factory=Abstention)

    def row(self, name: str) -> Row:
        return next(r for r in self.rows if r.name == name)

    def margins(self) -> dict[str, float | None]:
        """HLTM minus the plain search at HLTM's own number of sessions, question by question."""
        hltm, plain = self.rows[0].as_dict(), self.rows[1].as_dict()

        def minus(key: str) -> float | None:
            a, b = hltm[key], plain[key]
            return None if a is None or b is None else a - b

        return {"retrieved": minus("retrieved_recall"), "cited": minus("cited_recall")}

    def table(self) -> str:
        head = (
            f"{'system':<46} {'retR':>6} {'citeR':>6} {'F1':>6} {'BLEU1':>6} {'sess':>5}"
            f" {'tokens':>7} {'leak':>6}"
        )
        lines = [head, "-" * len(head)]

        def cell(value: float | None, width: int = 6, digits: int = 3) -> str:
            return f"{value:{width}.{digits}f}" if value is not None else f"{'—':>{width}}"

        for row in self.rows:
            d = row.as_dict()
            lines.append(
                f"{row.name:<46} {cell(d['retrieved_recall'])} {cell(d['cited_recall'])}"
                f" {cell(d['token_f1'])} {cell(d['bleu1'])} {cell(d['sessions_retrieved'], 5, 1)}"
                f" {cell(d['tokens'], 7, 0)} {cell(d['leakage'])}"
            )
        margin = self.margins()
        lines.append(
            f"\nHLTM minus plain search at HLTM's own number of sessions: retrieved"
            f" {cell(margin['retrieved'], 0)}, cited {cell(margin['cited'], 0)}."
        )
        lines += self.abstention.lines()
        lines.append(
            f"{self.questions} evidence questions of {self.conversations} conversation(s);"
            f" leakage over {self.leakage_queries} questions asked by another conversation."
            " retR / citeR = evidence-session recall of retrieved / cited projects (the plain"
            " search's citeR: cut at as many sessions as HLTM cited); sess = sessions retrieved"
            " per question; tokens = prompt tokens per question (o200k_base) for the systems that"
            " answer, the turns read down the ranking for a plain search."
        )
        return "\n".join(lines)

    def as_dict(self) -> dict[str, Any]:
        return {"questions": self.questions, "conversations": self.conversations,
                "rows": {r.name: r.as_dict() for r in self.rows}, "margins": self.margins(),
                "abstention": self.abstention.as_dict(),
                "per_question": self.per_question}  # fmt: skip


def evaluate_locomo(
    base: Settings,
    *,
    data_dir: Path | None = None,
    conversations: int | None = None,
    questions: int | None = None,
    leakage: int = 50,
    rag_k: int = 8,
    keep: Path | None = None,
    progress: Callable[[str], None] | None = None,
) -> LocomoReport:
    """Load LoCoMo as sources, build the memory, and score HLTM beside the raw-turn baselines."""
    started = time.perf_counter()
    tables, loaded = load(realdata_file(LOCOMO_FILE, data_dir), conversations)
    if questions is not None:  # an even share of each conversation's questions of each kind
        convs = list(dict.fromkeys(q.conversation for q in loaded))
        share = -(-questions // max(1, len(convs)))
        loaded = [
            q
            for c in convs
            for kind in (False, True)
            for q in [x for x in loaded if x.conversation == c and x.adversarial == kind][:share]
        ]
    asked = [q for q in loaded if not q.adversarial]
    adversarial = [q for q in loaded if q.adversarial]
    abstention = Abstention()
    note = progress or (lambda _m: None)
    with scratch_settings(base, keep) as settings:
        note(f"ingest + memory build of {len(tables['projects'])} sessions")
        ingest_rows(settings, tables)
        build_memory(settings)
        engine = QueryEngine(settings, log_queries=False)
        engine.warm_up()
        note(f"embedding {len(tables['project_documents'])} raw turns for the baselines")
        corpus = RawCorpus.load(settings.sources_db)
        baselines = Baselines(engine, corpus, rag_k=rag_k)
        hltm = Row("HLTM")
        same = Row("plain vector search, HLTM's number of sessions")
        rag = Row(f"vector RAG over raw turns (top {rag_k} turns)")
        curve = {n: Row(f"plain vector search, top {n} sessions") for n in CURVE_SESSIONS}
        rand = Row("random sessions, as many as HLTM (expected)")
        sessions_of = {c["contract_id"]: 0 for c in tables["contracts"]}
        for project in tables["projects"]:
            sessions_of[project["seat_id"].removesuffix("-pair")] += 1
        run_hltm = _hltm(engine)
        per_question: list[dict[str, Any]] = []
        note(f"asking {len(asked)} questions")
        for q in asked:
            identity = Identity("contract", q.conversation)
            got = run_hltm(identity, q.question)
            abstention.add(q, got.status)
            retrieved, cited = _projects(got.entities), _projects(got.citations)
            hltm.retrieved.append(_recall(retrieved, q.sessions))
            hltm.cited.append(_recall(cited, q.sessions))
            hltm.f1.append(token_f1(got.answer, q.answer))
            hltm.bleu.append(bleu1(got.answer, q.answer))
            hltm.sessions.append(len(retrieved))
            hltm.tokens.append(got.cost.prompt_tokens)
            base_got = baselines.rag(identity, q.question)
            base_sessions = _projects(base_got.entities)
            rag.retrieved.append(_recall(base_sessions, q.sessions))
            rag.cited.append(_recall(base_got.citations, q.sessions))
            rag.f1.append(token_f1(base_got.answer, q.answer))
            rag.bleu.append(bleu1(base_got.answer, q.answer))
            rag.sessions.append(len(base_sessions))
            rag.tokens.append(base_got.cost.prompt_tokens)
            ranking = _ranked_sessions(corpus, engine, identity, q.question)
            plain, plain_tokens = ranking.top(len(retrieved))
            same.retrieved.append(_recall(plain, q.sessions))
            same.cited.append(_recall(ranking.top(len(cited))[0], q.sessions))
            same.sessions.append(len(plain))
            same.tokens.append(plain_tokens)
            for n, row in curve.items():
                top, read = ranking.top(n)
                row.retrieved.append(_recall(top, q.sessions))
                row.sessions.append(len(top))
                row.tokens.append(read)
            rand.retrieved.append(min(1.0, len(retrieved) / sessions_of[q.conversation]))
            rand.sessions.append(len(retrieved))
            per_question.append(
                {"conversation": q.conversation, "question": q.question, "category": q.category,
                 "evidence": sorted(q.sessions), "hltm_sessions": len(retrieved),
                 "hltm_retrieved": hltm.retrieved[-1], "plain_retrieved": same.retrieved[-1],
                 "hltm_cited": hltm.cited[-1], "plain_cited": same.cited[-1],
                 "hltm_tokens": hltm.tokens[-1], "answer": got.answer, "gold": q.answer,
                 "status": got.status}
            )  # fmt: skip
        note(f"asking {len(adversarial)} adversarial questions")
        for q in adversarial:
            got = run_hltm(Identity("contract", q.conversation), q.question)
            abstention.add(q, got.status)
            per_question.append(
                {"conversation": q.conversation, "question": q.question, "category": q.category,
                 "answer": got.answer, "adversarial_answer": q.answer, "status": got.status}
            )  # fmt: skip
        others = sorted(sessions_of)
        leak_items = [q for q in asked if len(others) > 1][:leakage]
        note(f"leakage: {len(leak_items)} questions asked by another conversation")
        for q in leak_items:
            asker = Identity("contract", others[(others.index(q.conversation) + 1) % len(others)])
            for row, system in ((hltm, run_hltm), (rag, baselines.rag)):
                got = system(asker, q.question)
                row.leaks.append(
                    any(not corpus.node_in_scope(asker, n) for n in got.entities + got.citations)
                )
    return LocomoReport(
        [hltm, same, rag, *curve.values(), rand], len(asked), len(sessions_of), len(leak_items),
        time.perf_counter() - started, per_question, abstention,
    )  # fmt: skip

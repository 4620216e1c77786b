"""The isolation test: do other owners' memories ever reach an answer?

Askers at every level (each contract, each seat, several projects — including the owners of the
sample world's deliberately similar projects) ask questions that *name other owners' projects*
("What salary is offered for the Senior Solutions Architect (Mobile App) role?", "Which projects
are hiring a …?") or other recruiters ("What does recruiter … usually hire for?"). For every
answer we collect its entities — every node retrieved into the context and every node cited —
and check each against the ownership tree *as the source tables state it* (an oracle
independent of the memory store and its filters):

* **query-wise leakage** = share of queries with at least one foreign entity;
* **entity-wise leakage** = mean over queries of the share of foreign entities among its entities.

The same questions go to the unfiltered RAG baseline (the asker is only named in the prompt),
which must leak — showing the test can fail.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from hltm.query.scope import Identity

if TYPE_CHECKING:
    from hltm.evaluation.memory.baselines import Baselines, RawCorpus, SystemAnswer
    from hltm.query.engine import QueryEngine


@dataclass(frozen=True)
class LeakQuestion:
    identity: Identity
    question: str
    names: str  # the foreign node the question names


def _asker_identities(gt: dict[str, Any]) -> list[Identity]:
    out = [Identity("contract", c) for c in sorted(gt["contracts"])]
    out += [Identity("seat", s) for s in sorted(gt["seats"])]
    projects = sorted(gt["projects"])
    similar = sorted({p for g in gt.get("similar_title_groups", []) for p in g["projects"]})
    first_per_seat: dict[str, str] = {}
    for pid in projects:
        first_per_seat.setdefault(gt["projects"][pid]["seat_id"], pid)
    chosen = list(dict.fromkeys(similar + sorted(first_per_seat.values())))
    out += [Identity("project", p) for p in chosen]
    return out


def leakage_questions(
    gt: dict[str, Any], corpus: RawCorpus, per_identity: int = 4
) -> list[LeakQuestion]:
    projects = gt["projects"]
    group_of: dict[str, list[str]] = {}
    for group in gt.get("similar_title_groups", []):
        for pid in group["projects"]:
            group_of[pid] = group["projects"]
    out: list[LeakQuestion] = []
    for identity in _asker_identities(gt):
        mine = set(corpus.projects_in(identity))
        # Foreign projects, most confusable first: near-identical titles of other owners, then
        # the nearest relatives in the tree (sibling projects, sibling seats, other contracts).
        twins = [p for own in sorted(mine) for p in group_of.get(own, []) if p not in mine]
        owner = next(iter(mine), None)

        def closeness(pid: str, owner: str | None = owner) -> tuple[int, str]:
            if owner is None:
                return (3, pid)
            a, b = projects[owner], projects[pid]
            if a["seat_id"] == b["seat_id"]:
                return (0, pid)
            if a["contract_id"] == b["contract_id"]:
                return (1, pid)
            return (2, pid)

        others = sorted((p for p in projects if p not in mine), key=closeness)
        foreign = list(dict.fromkeys(twins + others))
        for i, pid in enumerate(foreign[: per_identity - 1]):
            title = projects[pid]["title"]
            text = (
                f"What salary is offered for the {title} role?"
                if i % 2 == 0
                else f"Which projects are hiring a {title}?"
            )
            out.append(LeakQuestion(identity, text, f"project:{pid}"))
        seats = [s for s in sorted(gt["seats"]) if not corpus.node_in_scope(identity, f"seat:{s}")]
        if seats:
            seat = gt["seats"][seats[0]]
            out.append(
                LeakQuestion(
                    identity,
                    f"What does recruiter {seat['recruiter_name']} usually hire for?",
                    f"seat:{seats[0]}",
                )
            )
    return out


@dataclass
class LevelLeakage:
    queries: int = 0
    leaking_queries: int = 0
    entity_shares: list[float] = field(default_factory=list)
    foreign_examples: list[str] = field(default_factory=list)

    @property
    def query_wise(self) -> float:
        return self.leaking_queries / self.queries if self.queries else 0.0

    @property
    def entity_wise(self) -> float:
        return statistics.fmean(self.entity_shares) if self.entity_shares else 0.0


@dataclass
class LeakageReport:
    # system → level ("contract" | "seat" | "project" | "all") → figures
    systems: dict[str, dict[str, LevelLeakage]]

    def get(self, system: str, level: str = "all") -> LevelLeakage:
        return self.systems[system][level]

    def table(self) -> str:
        head = f"{'leakage':<26} {'level':<9} {'queries':>7} {'query-wise':>11} {'entity-wise':>12}"
        lines = [head, "-" * len(head)]
        for system, levels in self.systems.items():
            for level in ("contract", "seat", "project", "all"):
                if level not in levels:
                    continue
                figures = levels[level]
                lines.append(
                    f"{system:<26} {level:<9} {figures.queries:>7}"
                    f" {figures.query_wise:>10.1%} {figures.entity_wise:>11.1%}"
                )
        return "\n".join(lines)

    def as_dict(self) -> dict[str, Any]:
        return {
            system: {
                level: {
                    "queries": f.queries,
                    "query_wise": round(f.query_wise, 4),
                    "entity_wise": round(f.entity_wise, 4),
                }
                for level, f in levels.items()
            }
            for system, levels in self.systems.items()
        }


def _measure(
    answers: list[tuple[LeakQuestion, SystemAnswer]], corpus: RawCorpus
) -> dict[str, LevelLeakage]:
    levels: dict[str, LevelLeakage] = defaultdict(LevelLeakage)
    for item, answer in answers:
        entities = list(dict.fromkeys(answer.entities + answer.citations))
        foreign = [e for e in entities if not corpus.node_in_scope(item.identity, e)]
        share = len(foreign) / len(entities) if entities else 0.0
        for level in (item.identity.level, "all"):
            figures = levels[level]
            figures.queries += 1
            figures.leaking_queries += bool(foreign)
            figures.entity_shares.append(share)
            if foreign and len(figures.foreign_examples) < 5:
                figures.foreign_examples.append(f"{item.identity} ← {foreign[0]}")
    return dict(levels)


def run_leakage(
    engine: QueryEngine,
    baselines: Baselines | None,
    corpus: RawCorpus,
    questions: list[LeakQuestion],
) -> LeakageReport:
    """HLTM's leakage, beside unfiltered RAG's (the proof the test can fail) unless `baselines`
    is None (a quick run without the chunk index)."""
    from hltm.evaluation.memory.baselines import SystemAnswer

    ours: list[tuple[LeakQuestion, SystemAnswer]] = []
    theirs: list[tuple[LeakQuestion, SystemAnswer]] = []
    for item in questions:
        result = engine.ask(item.identity, item.question, log=False, channel="eval")
        ours.append(
            (
                item,
                SystemAnswer(
                    result.answer,
                    result.citations,
                    list(dict.fromkeys(result.context_ids + result.citations)),
                    result.cost,
                    result.dropped_citations,
                ),
            )
        )
        if baselines is not None:
            theirs.append((item, baselines.unfiltered_rag(item.identity, item.question)))
    return LeakageReport(
        {
            "HLTM (subtree filter)": _measure(ours, corpus),
            **({"RAG, unfiltered": _measure(theirs, corpus)} if baselines is not None else {}),
        }
    )

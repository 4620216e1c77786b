"""Vacancy calibration from memory: support from past projects only, the vacancy's own text
wins, citations name memory nodes, the seat scope is never widened, and the version moves only
when the proposals do.

The memory here is written as the store writes it (`memory_nodes` rows of real `MemoryNode`s),
so the calibration reads it through the real query boundary without a build or embeddings."""

from __future__ import annotations

from pathlib import Path

from hltm.judge.calibration import (
    Calibration,
    apply_stored,
    calibrate,
    load_calibrations,
    store_calibrations,
)
from hltm.judge.data import MEMORY_ORIGIN, Requirement, Vacancy
from hltm.memory.models import Facet, MemoryNode, Placement
from hltm.memory.store import _row, ensure_memory_schema
from hltm.warehouse import connect


def _node(node_id: str, contract: str, seat: str | None, facets: list[Facet]) -> MemoryNode:
    level, _, ident = node_id.partition(":")
    project = ident if level == "project" else None
    parent = f"seat:{seat}" if level == "project" else (f"contract:{contract}" if seat else None)
    placement = Placement(node_id, level, contract, seat, project, parent, ident)  # type: ignore[arg-type]
    return MemoryNode(placement, f"v-{node_id}", tuple(facets), (), "", "")


def _facet(field: str, value: str, *support: str) -> Facet:
    return Facet(field, value, tuple(support), ())


def _write(db: Path, nodes: list[MemoryNode]) -> None:
    with connect(db) as con:
        ensure_memory_schema(con)
        con.executemany(
            "INSERT OR REPLACE INTO memory_nodes VALUES"
            " (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, now())",
            [_row(n) for n in nodes],
        )


P = [f"project:p{i}" for i in range(1, 5)]  # p1 is the vacancy's own project


def _memory(db: Path) -> None:
    seat = _node(
        "seat:s1",
        "c1",
        "s1",
        [
            _facet("location", "Berlin", *P),  # own project included: 3 past projects remain
            _facet("work_mode", "hybrid", "project:p1", "project:p2", "project:p3"),
            _facet("employment_type", "contract", "project:p1", "project:p2"),  # 1 past only
            _facet("skill", "Kafka", "project:p2", "project:p3", "project:p4"),
            _facet("skill", "Python", "project:p2", "project:p3"),
        ],
    )
    projects = [_node(p, "c1", "s1", [_facet("title", "Senior Backend Developer", p)]) for p in P]
    other_seat = _node("seat:s2", "c1", "s2", [_facet("location", "Lisbon", "project:q1")])
    foreign = _node("project:q1", "c1", "s2", [_facet("title", "Data Engineer", "q1")])
    contract = _node(
        "contract:c1",
        "c1",
        None,
        [_facet("employment_type", "full-time", "seat:s1", "seat:s2")],
    )
    _write(db, [seat, *projects, other_seat, foreign, contract])


VACANCY = Vacancy(
    "v1",
    1,
    "Engineer (Payments)",  # states no level and no role family the lexicon knows
    "The team is fully remote. Python is our main language.",
    (Requirement("v1-q1", "Solid Python", True),),
    "p1",
)


def _calibrate(db: Path, projects: list[str] | None = None) -> Calibration:
    ids = projects or [p.removeprefix("project:") for p in P] + ["q1"]
    with connect(db) as con:
        return calibrate(con, VACANCY, "s1", "c1", ids)


def test_usual_values_come_from_past_projects_and_the_vacancy_wins(tmp_path: Path) -> None:
    db = tmp_path / "derived.duckdb"
    _memory(db)
    cal = _calibrate(db)
    proposed = {(p.field, p.value): p for p in cal.proposals}
    # Berlin: 3 of the 3 past projects (the vacancy's own project does not count)
    berlin = proposed[("location", "Berlin")]
    assert (berlin.support, berlin.of, berlin.level) == (3, 3, "seat")
    assert berlin.citations == ("seat:s1", "project:p2", "project:p3", "project:p4")
    # the title family is read from the past projects' titles
    assert proposed[("title_family", "backend developer")].support == 3
    assert ("skill", "Kafka") in proposed
    # the seat's one-past-project contract habit is not "usual"; the organisation's is used
    org = proposed[("employment_type", "full-time")]
    assert (org.level, org.support, org.of, org.citations[0]) == ("contract", 2, 2, "contract:c1")
    # the vacancy says remote (contradiction) and Python (duplicate): neither is proposed
    assert ("work_mode", "hybrid") not in proposed and ("skill", "Python") not in proposed
    reasons = {p.value: why for p, why in cal.skipped}
    assert reasons["hybrid"] == "the vacancy says remote"
    assert reasons["Python"] == "already stated in the vacancy"
    # another recruiter's memory never enters, even when its ids are passed in, and the
    # organisation's items cite the contract node only
    assert all("s2" not in c and "q1" not in c for p in cal.proposals for c in p.citations)
    assert "Lisbon" not in {p.value for p in cal.proposals}
    assert "project:q1" not in cal.memory_versions
    assert cal.sentence().startswith("from your past projects: usually location Berlin (3 of 3")


def test_the_judge_gets_soft_memory_items_and_a_keyed_version(tmp_path: Path) -> None:
    db = tmp_path / "derived.duckdb"
    _memory(db)
    cal = _calibrate(db)
    store_calibrations(db, [cal])
    (judged,) = apply_stored(db, [VACANCY])
    memory = judged.memory_requirements
    assert len(memory) == len(cal.proposals) and all(not r.mandatory for r in memory)
    assert all(r.origin == MEMORY_ORIGIN for r in memory)
    assert judged.own_requirements == VACANCY.requirements
    assert judged.version_key == f"{VACANCY.version_key}+cal:{cal.version}"
    assert judged.bm25_query() == VACANCY.bm25_query()  # retrieval reads the vacancy only
    # a calibration made for an older text of the vacancy is not applied
    edited = Vacancy(**{**VACANCY.__dict__, "text": VACANCY.text + " Go."})
    (fresh,) = apply_stored(db, [edited])
    assert fresh.version_key == edited.version_key and not fresh.memory_requirements
    # a memory change that leaves the proposals as they were keeps the version (no re-judging)
    stored = load_calibrations(db)["v1"]
    assert stored.version == cal.version and stored.proposals == cal.proposals


def test_no_memory_proposes_nothing_and_keeps_the_vacancy_key(tmp_path: Path) -> None:
    db = tmp_path / "derived.duckdb"
    with connect(db) as con:
        ensure_memory_schema(con)
        cal = calibrate(con, VACANCY, "s1", "c1", ["p1"])
    assert cal.proposals == [] and cal.version == ""
    assert cal.memory_versions == {"seat:s1": "", "contract:c1": ""}  # stale once memory exists
    assert VACANCY.calibrated(cal.requirements(), cal.version).version_key == VACANCY.version_key

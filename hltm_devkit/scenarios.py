"""Source mutations for tests, benchmarks and demos of incremental refresh.

Every operation goes through the ingest API (`ingest_directory`, `delete_project`,
`delete_document`), as a user's change would, and returns the node ids it touched — the change
log a refresh starts from. Random sequences of them (`random_operation`) drive the test that the
incrementally refreshed tree equals a full rebuild.
"""

from __future__ import annotations

import json
import random
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hltm.sources.ingest import delete_document, delete_project, ingest_directory
from hltm.warehouse import connect

_STATUSES = ("open", "paused", "closed")
_EXTRA_SENTENCES = (
    "Update: the hiring manager now accepts fully remote candidates from Lisbon.",
    "Budget revised: salary up to €95,000 per year, full-time.",
    "Must-have added: Kubernetes and Terraform in production.",
    "Обновление: рассматриваем кандидатов из Казани, гибридный формат, опыт от 4 лет.",
    "Seniority raised to lead; the team grows to eight engineers.",
    "Candidates keep failing the system design round; look for stronger architecture skills.",
)


@dataclass
class World:
    """The current shape of the sources (ids only)."""

    contracts: list[str]
    seats: dict[str, str]  # seat → contract
    projects: dict[str, str]  # project → seat
    documents: dict[str, str]  # document → project


def read_world(sources_db: Path | str) -> World:
    with connect(sources_db, read_only=True) as con:
        contracts = [
            r[0] for r in con.execute("SELECT contract_id FROM contracts ORDER BY 1").fetchall()
        ]
        seats = dict(con.execute("SELECT seat_id, contract_id FROM seats ORDER BY 1").fetchall())
        projects = dict(
            con.execute("SELECT project_id, seat_id FROM projects ORDER BY 1").fetchall()
        )
        documents = dict(
            con.execute(
                "SELECT document_id, project_id FROM project_documents ORDER BY 1"
            ).fetchall()
        )
    return World(contracts, seats, projects, documents)


def _rows(sources_db: Path | str, sql: str, params: list[Any]) -> list[dict[str, Any]]:
    with connect(sources_db, read_only=True) as con:
        cursor = con.execute(sql, params)
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, r, strict=True)) for r in cursor.fetchall()]


def _ingest(sources_db: Path | str, tables: dict[str, list[dict[str, Any]]]) -> None:
    with tempfile.TemporaryDirectory(prefix="hltm-change-") as tmp:
        for table, rows in tables.items():
            with (Path(tmp) / f"{table}.jsonl").open("w", encoding="utf-8") as out:
                for row in rows:
                    out.write(json.dumps(row, ensure_ascii=False, default=str) + "\n")
        report = ingest_directory(tmp, sources_db)
        if report.quarantined:
            raise ValueError(f"change rejected by ingest:\n{report.summary()}")


def _project_row(sources_db: Path | str, project_id: str) -> dict[str, Any]:
    row = _rows(
        sources_db,
        "SELECT project_id, seat_id, title, status, created_at FROM projects WHERE project_id = ?",
        [project_id],
    )[0]
    return {k: (v.isoformat() if hasattr(v, "isoformat") else v) for k, v in row.items()}


def _fresh_id(taken: set[str] | dict[str, Any], stem: str) -> str:
    n = 1
    while f"{stem}{n}" in taken:
        n += 1
    return f"{stem}{n}"


# ---- operations: each returns the node ids it touched ------------------------------------------


def add_project(
    sources_db: Path | str, rng: random.Random, seat_id: str | None = None
) -> list[str]:
    world = read_world(sources_db)
    seat = seat_id or rng.choice(sorted(world.seats))
    pid = _fresh_id(world.projects, f"{seat}-n")
    donors = rng.sample(sorted(world.documents), k=min(2, len(world.documents)))
    docs = _rows(
        sources_db,
        "SELECT kind, text FROM project_documents WHERE document_id IN (SELECT unnest(?::VARCHAR[]))"
        " ORDER BY document_id",
        [donors],
    )
    title = rng.choice(["Senior Data Engineer", "Backend Developer (Go)", "QA Automation Lead",
                        "Ведущий Python-разработчик", "Product Analyst"])  # fmt: skip
    _ingest(
        sources_db,
        {
            "projects": [{"project_id": pid, "seat_id": seat, "title": title, "status": "open"}],
            "project_documents": [
                {
                    "document_id": f"{pid}-d{i}",
                    "project_id": pid,
                    "kind": doc["kind"],
                    "text": f"{doc['text']}\n{rng.choice(_EXTRA_SENTENCES)}",
                }
                for i, doc in enumerate(docs, 1)
            ],
        },
    )
    return [f"project:{pid}"]


CHANGE_KINDS = ("edit", "title", "status", "add_doc", "drop_doc")


def change_project(
    sources_db: Path | str,
    rng: random.Random,
    project_id: str | None = None,
    kind: str | None = None,
) -> list[str]:
    """Edit a document, retitle, change status, add or drop a document (`kind`, or at random)."""
    world = read_world(sources_db)
    pid = project_id or rng.choice(sorted(world.projects))
    docs = sorted(d for d, p in world.documents.items() if p == pid)
    kind = kind or rng.choice(["edit", "edit", "title", "status", "add_doc", "drop_doc"])
    if kind not in CHANGE_KINDS:
        raise ValueError(f"unknown change {kind!r}; expected one of {', '.join(CHANGE_KINDS)}")
    if kind == "drop_doc" and len(docs) > 1:
        delete_document(sources_db, rng.choice(docs))
    elif kind == "title" or (kind == "drop_doc") or (kind == "edit" and not docs):
        row = _project_row(sources_db, pid)
        row["title"] = f"{row['title']} ({rng.choice(['Platform', 'Payments', 'Growth'])})"
        _ingest(sources_db, {"projects": [row]})
    elif kind == "status":
        row = _project_row(sources_db, pid)
        row["status"] = rng.choice([s for s in _STATUSES if s != row["status"]])
        _ingest(sources_db, {"projects": [row]})
    elif kind == "add_doc":
        doc_id = _fresh_id(world.documents, f"{pid}-extra")
        _ingest(
            sources_db,
            {
                "project_documents": [
                    {
                        "document_id": doc_id,
                        "project_id": pid,
                        "kind": "recruiter_notes",
                        "text": rng.choice(_EXTRA_SENTENCES),
                    }
                ]
            },
        )
    else:
        doc_id = rng.choice(docs)
        row = _rows(
            sources_db,
            "SELECT document_id, project_id, kind, text FROM project_documents"
            " WHERE document_id = ?",
            [doc_id],
        )[0]
        row["text"] = f"{row['text']}\n{rng.choice(_EXTRA_SENTENCES)}"
        _ingest(sources_db, {"project_documents": [row]})
    return [f"project:{pid}"]


def remove_project(
    sources_db: Path | str, rng: random.Random, project_id: str | None = None
) -> list[str]:
    world = read_world(sources_db)
    pid = project_id or rng.choice(sorted(world.projects))
    delete_project(sources_db, pid)
    return [f"project:{pid}"]


def move_project(
    sources_db: Path | str,
    rng: random.Random,
    project_id: str | None = None,
    seat_id: str | None = None,
) -> list[str]:
    world = read_world(sources_db)
    pid = project_id or rng.choice(sorted(world.projects))
    row = _project_row(sources_db, pid)
    row["seat_id"] = seat_id or rng.choice(sorted(s for s in world.seats if s != row["seat_id"]))
    _ingest(sources_db, {"projects": [row]})
    return [f"project:{pid}"]


def add_seat(sources_db: Path | str, rng: random.Random) -> list[str]:
    """A new recruiter seat, which takes over one existing project."""
    world = read_world(sources_db)
    contract = rng.choice(world.contracts)
    seat = _fresh_id(world.seats, f"{contract}-ns")
    name = rng.choice(["Olga Smirnova", "Jonas Weber", "Aisha Khan", "Ли Вэй"])
    _ingest(
        sources_db, {"seats": [{"seat_id": seat, "contract_id": contract, "recruiter_name": name}]}
    )
    return [f"seat:{seat}", *move_project(sources_db, rng, seat_id=seat)]


def remove_seat(sources_db: Path | str, rng: random.Random) -> list[str]:
    """A seat is closed: its projects move to another seat of the same contract, then it goes."""
    world = read_world(sources_db)
    candidates = [
        s
        for s in sorted(world.seats)
        if sum(1 for c in world.seats.values() if c == world.seats[s]) > 1
    ]
    if not candidates:
        return change_project(sources_db, rng)
    seat = rng.choice(candidates)
    heir = rng.choice(
        sorted(s for s, c in world.seats.items() if c == world.seats[seat] and s != seat)
    )
    touched = [f"seat:{seat}"]
    for pid in sorted(p for p, s in world.projects.items() if s == seat):
        touched += move_project(sources_db, rng, project_id=pid, seat_id=heir)
    with connect(sources_db) as con:  # ingest never deletes seats; a user would do it like this
        con.execute("DELETE FROM seats WHERE seat_id = ?", [seat])
    return touched


Operation = Callable[[Path | str, random.Random], list[str]]
OPERATIONS: dict[str, Operation] = {
    "add": add_project,
    "change": change_project,
    "delete": remove_project,
    "move": move_project,
    "add_seat": add_seat,
    "remove_seat": remove_seat,
}
_WEIGHTS = {"add": 3, "change": 4, "delete": 2, "move": 2, "add_seat": 1, "remove_seat": 1}


def random_operation(sources_db: Path | str, rng: random.Random) -> tuple[str, list[str]]:
    names = sorted(_WEIGHTS)
    name = rng.choices(names, weights=[_WEIGHTS[n] for n in names])[0]
    if name == "delete" and len(read_world(sources_db).projects) < 4:
        name = "add"
    return name, OPERATIONS[name](sources_db, rng)

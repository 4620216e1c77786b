"""Vacancy calibration from memory: what this recruiter and this organisation usually want.

When a recruiter opens a vacancy, the assistant should not ask again what their past projects
already say. For each vacancy this module asks the memory of the vacancy's own seat (the
recruiter) and its contract (the organisation) — through the query boundary
(`hltm.query.boundary.ScopedMemory`, one scope per identity, never a wider one) — for the usual
locations, work mode, employment type, seniority, title family and recurring qualifications,
and turns them into *proposed soft requirements*:

* **Seat first.** A value is usual when at least ``min_support`` of the seat's *past* projects
  (the vacancy's own project does not count) and at least ``min_share`` of them show it; of a
  field that takes one value (work mode, employment type, level, role) only the best-supported
  value is kept (all of them on a tie). The seat's aggregated facets carry the supporting
  project ids, so support and citations are exact.
  The title family is read from the past projects' titles with the judge's own role lexicon.
* **Contract second.** The organisation's usual value fills a field only where the seat has
  none of its own (support counted in seats).
* **The vacancy wins.** A value the vacancy already states is not proposed again; a field the
  vacancy states differently (another work mode, its own locations, its own level or role) is
  not proposed at all. Both are kept in ``skipped`` with the reason, for the record.

Proposals become non-mandatory checklist items (`Requirement(origin="memory")`). The
calibration *version* is a hash of the proposals alone (not of the memory versions), so a memory
rebuild that leaves the proposals unchanged costs no re-judging, and one that changes them
re-judges only the vacancies whose proposals changed. No LLM call is made.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb

from hltm.judge.data import Requirement, Vacancy, load_vacancies
from hltm.judge.lexicon import FAMILY_BY_NAME
from hltm.judge.roles import level_from_title, title_evidence, vacancy_role
from hltm.memory import lexicon as lx
from hltm.query.boundary import NodeView, ScopedMemory
from hltm.query.scope import Identity, resolve_scope
from hltm.warehouse import connect, insert_rows, store_exists, table_exists

__all__ = [
    "CALIBRATION_TABLE",
    "Calibration",
    "CalibrationSettings",
    "Proposal",
    "apply_stored",
    "calibrate",
    "calibrate_vacancies",
    "load_calibrations",
    "store_calibrations",
]

CALIBRATION_TABLE = "vacancy_calibrations"

# The fields asked about, in the order they are shown, and how an item names each.
FIELD_LABELS: dict[str, str] = {
    "location": "location",
    "work_mode": "work mode",
    "employment_type": "employment",
    "seniority": "level",
    "title_family": "role",
    "skill": "skill",
}
SINGLE_VALUED = ("work_mode", "employment_type", "seniority", "title_family")


@dataclass(frozen=True)
class CalibrationSettings:
    """What "usually" means: enough past projects, and a large enough share of them."""

    min_support: int = 2  # past projects (seat) or seats (contract) showing the value
    min_share: float = 0.5  # of the seat's past projects / the contract's seats
    max_skills: int = 5  # recurring qualifications proposed at most


@dataclass(frozen=True)
class Proposal:
    """One usual value: where memory says it, how many past projects (or seats) show it."""

    field: str
    value: str
    support: int
    of: int
    level: str  # "seat" (past projects of this recruiter) or "contract" (its seats)
    citations: tuple[str, ...]  # memory node ids: the seat/contract node and its supporters

    @property
    def unit(self) -> str:
        return "past projects" if self.level == "seat" else "seats of the organisation"

    def requirement(self, vacancy_id: str) -> Requirement:
        slug = re.sub(r"[^0-9a-z]+", "-", self.value.casefold()).strip("-")[:40]
        return Requirement(
            f"{vacancy_id}-mem-{self.field}-{slug}",
            f"Preferred {FIELD_LABELS[self.field]}: {self.value}",
            False,
        )

    def describe(self) -> str:
        return f"{FIELD_LABELS[self.field]} {self.value} ({self.support} of {self.of} {self.unit})"

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "citations": list(self.citations)}

    @classmethod
    def from_dict(cls, row: dict[str, Any]) -> Proposal:
        return cls(
            row["field"], row["value"], int(row["support"]), int(row["of"]), row["level"],
            tuple(row["citations"]),
        )  # fmt: skip


@dataclass
class Calibration:
    vacancy_id: str
    vacancy_version: str  # the vacancy's own version key it was made for
    seat_id: str | None
    contract_id: str | None
    proposals: list[Proposal] = field(default_factory=list)
    skipped: list[tuple[Proposal, str]] = field(default_factory=list)  # (usual value, why not)
    memory_versions: dict[str, str] = field(default_factory=dict)  # node id → version read

    @property
    def version(self) -> str:
        """Hash of the proposals ("" when memory proposes nothing)."""
        if not self.proposals:
            return ""
        body = json.dumps([[p.field, p.value] for p in self.proposals], ensure_ascii=False)
        return hashlib.sha1(body.encode("utf-8")).hexdigest()[:10]

    def requirements(self) -> list[Requirement]:
        return [p.requirement(self.vacancy_id) for p in self.proposals]

    def sentence(self) -> str:
        """The one line a recruiter reads: "from your past projects: usually …"."""
        seat = [p.describe() for p in self.proposals if p.level == "seat"]
        org = [p.describe() for p in self.proposals if p.level == "contract"]
        parts = []
        if seat:
            parts.append("from your past projects: usually " + "; ".join(seat))
        if org:
            parts.append("from your organisation: usually " + "; ".join(org))
        if not parts:
            stated = len(self.skipped)
            return (
                f"from your past projects: nothing to add ({stated} usual value(s) the vacancy"
                " already settles)"
                if stated
                else "from your past projects: no usual preferences in memory yet"
            )
        return " — ".join(parts)

    def as_row(self) -> list[Any]:
        return [
            self.vacancy_id, self.vacancy_version, self.version, self.seat_id, self.contract_id,
            json.dumps([p.as_dict() for p in self.proposals], ensure_ascii=False),
            json.dumps([[p.as_dict(), why] for p, why in self.skipped], ensure_ascii=False),
            json.dumps(self.memory_versions, sort_keys=True),
            datetime.now(UTC).replace(tzinfo=None),
        ]  # fmt: skip


# ---------------------------------------------------------------------------- reading memory


def _family_of(title: str) -> str | None:
    evidence = title_evidence(title)
    return max(evidence, key=evidence.__getitem__) if evidence else None


def _facet_field(facet: dict[str, Any]) -> str:
    return lx.normalise_field(str(facet.get("field", "")))


def _needed(of: int, settings: CalibrationSettings) -> float:
    """Supporters a value needs out of ``of`` past projects (or seats)."""
    return max(settings.min_support, settings.min_share * of)


def _best_supported(proposals: list[Proposal]) -> list[Proposal]:
    """Of each one-value field only the best-supported value(s); other fields as they are."""
    top: dict[str, int] = {}
    for p in proposals:
        if p.field in SINGLE_VALUED:
            top[p.field] = max(top.get(p.field, 0), p.support)
    return [p for p in proposals if p.field not in top or p.support == top[p.field]]


def _seat_usual(
    seat: NodeView,
    projects: dict[str, NodeView],
    own_node: str | None,
    settings: CalibrationSettings,
) -> list[Proposal]:
    """Values shown by enough of the seat's past projects (the vacancy's own one excluded)."""
    past = sorted(n for n in projects if n != own_node)
    if not past:
        return []
    out: list[Proposal] = []
    for facet in seat.facets:
        name = _facet_field(facet)
        if name not in FIELD_LABELS or name == "title_family":
            continue
        support = sorted(s for s in facet.get("support") or () if s in past)
        if len(support) >= _needed(len(past), settings):
            value = lx.canonical(name, str(facet["value"]))
            out.append(
                Proposal(name, value, len(support), len(past), "seat", (seat.node_id, *support))
            )
    families: dict[str, set[str]] = {}
    for node_id in past:
        titles = [str(f["value"]) for f in projects[node_id].facets if _facet_field(f) == "title"]
        for fam in {f for f in map(_family_of, titles) if f}:
            families.setdefault(fam, set()).add(node_id)
    for fam, support_set in sorted(families.items()):
        if len(support_set) >= _needed(len(past), settings):
            support = sorted(support_set)
            label = FAMILY_BY_NAME[fam].label
            out.append(
                Proposal(
                    "title_family",
                    label,
                    len(support),
                    len(past),
                    "seat",
                    (seat.node_id, *support),
                )  # fmt: skip
            )
    skills = sorted((p for p in out if p.field == "skill"), key=lambda p: (-p.support, p.value))
    return _best_supported([p for p in out if p.field != "skill"]) + skills[: settings.max_skills]


def _contract_usual(
    contract: NodeView, seats: int, settings: CalibrationSettings
) -> list[Proposal]:
    """The organisation's usual single-valued settings and locations (support in seats; only
    the contract node is cited, never another recruiter's seat)."""
    if seats <= 0:
        return []
    out = []
    for facet in contract.facets:
        name = _facet_field(facet)
        if name not in ("location", "work_mode", "employment_type"):
            continue
        support = sorted(facet.get("support") or ())
        if len(support) >= _needed(seats, settings):
            value = lx.canonical(name, str(facet["value"]))
            out.append(Proposal(name, value, len(support), seats, "contract", (contract.node_id,)))
    return _best_supported(out)


# ------------------------------------------------------------------------ the vacancy's word


def _stated(vacancy: Vacancy) -> dict[str, set[str]]:
    """What the vacancy itself says for each field, in memory's canonical vocabulary."""
    own = [r.text for r in vacancy.own_requirements]
    text = "\n".join([vacancy.title, vacancy.text, *own])
    out: dict[str, set[str]] = {}
    for name in ("location", "work_mode", "employment_type", "skill"):
        vocabulary = lx.CANONICAL_TERMS[name]
        found = lx.find_terms(vocabulary, text, negatable=name != "location")
        out[name] = {lx.normalise_value(v) for v, _ in found}
    level, _ = level_from_title(vacancy.title)
    levels = {level} if level else {v for v, _ in lx.find_terms(lx.SENIORITY, vacancy.title)}
    out["seniority"] = {lx.normalise_value(v) for v in levels}
    role = vacancy_role(vacancy.title, own, vacancy.text)
    out["title_family"] = {lx.normalise_value(role.label)} if role.family else set()
    return out


def _reconcile(
    usual: list[Proposal], stated: dict[str, set[str]]
) -> tuple[list[Proposal], list[tuple[Proposal, str]]]:
    """(proposals, skipped): the vacancy's own text wins every overlap."""
    kept: list[Proposal] = []
    skipped: list[tuple[Proposal, str]] = []
    for p in usual:
        said = stated.get(p.field, set())
        value = lx.normalise_value(p.value)
        if value in said:
            skipped.append((p, "already stated in the vacancy"))
        elif said and (p.field in SINGLE_VALUED or p.field == "location"):
            skipped.append((p, f"the vacancy says {', '.join(sorted(said))}"))
        elif any(k.field == p.field and k.value == p.value for k in kept):
            continue
        else:
            kept.append(p)
    return kept, skipped


# ------------------------------------------------------------------------------ calibration


def _scoped(con: duckdb.DuckDBPyConnection, level: str, ident: str | None, levels=None):  # type: ignore[no-untyped-def]
    """The boundary for one identity (no vectors: calibration fetches nodes by id only)."""
    if not ident:
        return None
    scope = resolve_scope(con, Identity(level, ident))  # type: ignore[arg-type]
    return None if scope.empty else ScopedMemory(scope, con, None, levels)


def calibrate(
    con: duckdb.DuckDBPyConnection,
    vacancy: Vacancy,
    seat_id: str | None,
    contract_id: str | None,
    seat_projects: Sequence[str],
    settings: CalibrationSettings | None = None,
) -> Calibration:
    """Calibrate one vacancy from the memory of its seat and its contract.

    ``con``: the derived DuckDB; ``seat_projects``: the source ids of the seat's projects (whose
    memories are then read through the seat's own scope: ids outside it read as absent)."""
    settings = settings or CalibrationSettings()
    cal = Calibration(vacancy.vacancy_id, vacancy.own_version_key, seat_id, contract_id)
    usual: list[Proposal] = []
    # The nodes asked, "" while they hold no memory: the calibration is stale once they do.
    if seat_id:
        cal.memory_versions[f"seat:{seat_id}"] = ""
    if contract_id:
        cal.memory_versions[f"contract:{contract_id}"] = ""
    seat_memory = _scoped(con, "seat", seat_id)
    if seat_memory is not None:
        seat_node = f"seat:{seat_id}"
        project_nodes = [f"project:{p}" for p in seat_projects]
        nodes = seat_memory.nodes([seat_node, *project_nodes])
        projects = {n: v for n, v in nodes.items() if v.level == "project"}
        if seat_node in nodes:
            own = f"project:{vacancy.project_id}" if vacancy.project_id else None
            usual += _seat_usual(nodes[seat_node], projects, own, settings)
        cal.memory_versions.update({n: v.version for n, v in nodes.items()})
    contract_memory = _scoped(con, "contract", contract_id, levels=["contract", "seat"])
    if contract_memory is not None:
        contract_node = f"contract:{contract_id}"
        found = contract_memory.nodes([contract_node])
        if contract_node in found:
            seats = contract_memory.node_count() - 1
            covered = {p.field for p in usual}
            usual += [
                p
                for p in _contract_usual(found[contract_node], seats, settings)
                if p.field not in covered
            ]
            cal.memory_versions[contract_node] = found[contract_node].version
    cal.proposals, cal.skipped = _reconcile(usual, _stated(vacancy))
    return cal


def _ownership(sources_db: Path | str) -> tuple[dict[str, tuple[str, str]], dict[str, list[str]]]:
    """(project → (seat, contract), seat → its projects) from the sources."""
    with connect(sources_db, read_only=True) as con:
        if not (table_exists(con, "projects") and table_exists(con, "seats")):
            return {}, {}
        rows = con.execute(
            "SELECT p.project_id, p.seat_id, s.contract_id FROM projects p"
            " JOIN seats s USING (seat_id) ORDER BY p.project_id"
        ).fetchall()
    owner = {p: (s, c) for p, s, c in rows}
    by_seat: dict[str, list[str]] = {}
    for p, s, _ in rows:
        by_seat.setdefault(s, []).append(p)
    return owner, by_seat


def calibrate_vacancies(
    sources_db: Path | str,
    derived_db: Path | str,
    vacancies: Sequence[Vacancy],
    settings: CalibrationSettings | None = None,
) -> list[Calibration]:
    """Calibrate each vacancy (uncalibrated input: its own text) from the current memory."""
    owner, by_seat = _ownership(sources_db)
    out = []
    with connect(derived_db) as con:
        for vacancy in vacancies:
            seat_id, contract_id = owner.get(vacancy.project_id or "", (None, None))
            projects = by_seat.get(seat_id or "", [])
            out.append(calibrate(con, vacancy, seat_id, contract_id, projects, settings))
    return out


# ---------------------------------------------------------------------------------- storage


def _ensure_table(con: duckdb.DuckDBPyConnection) -> None:
    con.execute(
        f"CREATE TABLE IF NOT EXISTS {CALIBRATION_TABLE} (vacancy_id VARCHAR PRIMARY KEY,"
        " vacancy_version VARCHAR, calibration_version VARCHAR, seat_id VARCHAR,"
        " contract_id VARCHAR, proposals VARCHAR, skipped VARCHAR, memory_versions VARCHAR,"
        " computed_at TIMESTAMP)"
    )


def store_calibrations(derived_db: Path | str, calibrations: Sequence[Calibration]) -> None:
    """Replace each vacancy's stored calibration (the judge reads the current one)."""
    if not calibrations:
        return
    with connect(derived_db) as con:
        _ensure_table(con)
        insert_rows(
            con, f"INSERT OR REPLACE INTO {CALIBRATION_TABLE}", [c.as_row() for c in calibrations]
        )


def load_calibrations(
    derived_db: Path | str, vacancy_ids: Sequence[str] | None = None, read_only: bool = False
) -> dict[str, Calibration]:
    """vacancy id → its stored calibration (nothing stored reads as empty). Sensors read with
    ``read_only``; a run reads with the same kind of connection as its writes (DuckDB refuses
    two configurations of one file in a process)."""
    path = Path(derived_db)
    if not store_exists(path):
        return {}
    with connect(path, read_only=read_only) as con:
        if not table_exists(con, CALIBRATION_TABLE):
            return {}
        rows = con.execute(
            "SELECT vacancy_id, vacancy_version, seat_id, contract_id, proposals, skipped,"
            f" memory_versions FROM {CALIBRATION_TABLE} ORDER BY vacancy_id"
        ).fetchall()
    wanted = set(vacancy_ids) if vacancy_ids is not None else None
    out = {}
    for vid, version, seat, contract, proposals, skipped, versions in rows:
        if wanted is not None and vid not in wanted:
            continue
        out[vid] = Calibration(
            vid, version, seat, contract,
            [Proposal.from_dict(p) for p in json.loads(proposals)],
            [(Proposal.from_dict(p), why) for p, why in json.loads(skipped)],
            json.loads(versions),
        )  # fmt: skip
    return out


def calibrated_vacancies(
    sources_db: Path | str, derived_db: Path | str, ids: Sequence[str] | None = None
) -> list[Vacancy]:
    """Vacancies from the sources (all or `ids`), each carrying the memory items of its stored
    calibration when that calibration was made for the vacancy's current text."""
    return apply_stored(derived_db, load_vacancies(sources_db, ids))


def apply_stored(derived_db: Path | str, vacancies: Sequence[Vacancy]) -> list[Vacancy]:
    """Each vacancy with its stored calibration's items, when it was made for its current text
    (a calibration of an older text is ignored until the vacancy is calibrated again)."""
    stored = load_calibrations(derived_db, [v.vacancy_id for v in vacancies])
    out = []
    for v in vacancies:
        cal = stored.get(v.vacancy_id)
        if cal is not None and cal.vacancy_version == v.own_version_key:
            v = v.calibrated(cal.requirements(), cal.version)
        out.append(v)
    return out

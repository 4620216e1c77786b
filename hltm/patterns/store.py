"""Mined patterns in the derived DuckDB, their approval, and their release as memory hints.

Table `query_patterns` (one row per pattern, keyed by `pattern_id` = hash of kind + normalised
key, so re-mining updates the same row and keeps its decision):

    pattern_id PK, kind ('template' | 'attribute'), key, text, answer_field, slots JSON,
    support (distinct identities), occurrences, identities JSON, examples JSON, variants JSON,
    first_seen, last_seen, min_support, current (meets min support in the latest mining run),
    releasable, status, decided_by, decided_at, released_version, mined_at

Table `query_pattern_events` is the insert-only audit trail of every decision and release:
`(event_at, pattern_id, status, actor, note)`.

Statuses: `proposed` (mined, waiting for a person) → `approved` (by a person, or by `auto`
when auto-approval is on) → `released` (part of the newest hints release); `rejected` at any
point. Only approved/released patterns that are still current and releasable ever reach the
extractors: `release()` builds `Hints` from exactly those and saves them with `save_hints`
(a no-op when the newest release already holds the same hints, so node versions stay put).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import duckdb

from hltm.memory.hints import Hints, QATemplate, load_hints, save_hints
from hltm.patterns.mining import Pattern
from hltm.patterns.templates import ENTITY_FIELDS
from hltm.warehouse import table_exists

PATTERNS_TABLE = "query_patterns"
EVENTS_TABLE = "query_pattern_events"
MEMORY_TABLE = "memory_nodes"

PROPOSED, APPROVED, REJECTED, RELEASED = "proposed", "approved", "rejected", "released"
STATUSES = (PROPOSED, APPROVED, REJECTED, RELEASED)
AUTO = "auto"

_COLUMNS = (
    ("pattern_id", "VARCHAR PRIMARY KEY"),
    ("kind", "VARCHAR NOT NULL"),
    ("key", "VARCHAR NOT NULL"),
    ("text", "VARCHAR NOT NULL"),
    ("answer_field", "VARCHAR"),
    ("slots", "VARCHAR NOT NULL"),
    ("support", "INTEGER NOT NULL"),
    ("occurrences", "INTEGER NOT NULL"),
    ("identities", "VARCHAR NOT NULL"),
    ("examples", "VARCHAR NOT NULL"),
    ("variants", "VARCHAR NOT NULL"),
    ("first_seen", "TIMESTAMP"),
    ("last_seen", "TIMESTAMP"),
    ("min_support", "INTEGER NOT NULL"),
    ("current", "BOOLEAN NOT NULL"),
    ("releasable", "BOOLEAN NOT NULL"),
    ("status", "VARCHAR NOT NULL"),
    ("decided_by", "VARCHAR"),
    ("decided_at", "TIMESTAMP"),
    ("released_version", "VARCHAR"),
    ("mined_at", "TIMESTAMP NOT NULL"),
)
COLUMN_NAMES = tuple(name for name, _ in _COLUMNS)
_JSON = ("slots", "identities", "examples", "variants")


def _now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


def ensure_tables(con: duckdb.DuckDBPyConnection) -> None:
    columns = ", ".join(f"{name} {kind}" for name, kind in _COLUMNS)
    con.execute(f"CREATE TABLE IF NOT EXISTS {PATTERNS_TABLE} ({columns})")
    con.execute(
        f"CREATE TABLE IF NOT EXISTS {EVENTS_TABLE} (event_at TIMESTAMP NOT NULL,"
        " pattern_id VARCHAR NOT NULL, status VARCHAR NOT NULL, actor VARCHAR NOT NULL,"
        " note VARCHAR NOT NULL)"
    )


@dataclass(frozen=True)
class StoredPattern:
    pattern_id: str
    kind: str
    key: str
    text: str
    answer_field: str | None
    slots: tuple[str, ...]
    support: int
    occurrences: int
    identities: tuple[str, ...]
    examples: tuple[str, ...]
    variants: tuple[str, ...]
    first_seen: datetime | None
    last_seen: datetime | None
    min_support: int
    current: bool
    releasable: bool
    status: str
    decided_by: str | None
    decided_at: datetime | None
    released_version: str | None
    mined_at: datetime

    @property
    def live(self) -> bool:
        """Would the next release carry it?"""
        return self.status in (APPROVED, RELEASED) and self.current and self.releasable

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name in COLUMN_NAMES:
            value = getattr(self, name)
            out[name] = (
                list(value)
                if isinstance(value, tuple)
                else value.isoformat()
                if isinstance(value, datetime)
                else value
            )
        return out


def _row_to_pattern(row: Sequence[Any]) -> StoredPattern:
    item = dict(zip(COLUMN_NAMES, row, strict=True))
    for name in _JSON:
        item[name] = tuple(json.loads(item[name]))
    return StoredPattern(**item)


def _event(
    con: duckdb.DuckDBPyConnection, pattern_ids: Iterable[str], status: str, actor: str, note: str
) -> None:
    rows = [(_now(), pid, status, actor, note) for pid in pattern_ids]
    if rows:
        con.executemany(f"INSERT INTO {EVENTS_TABLE} VALUES (?, ?, ?, ?, ?)", rows)


@dataclass
class MiningRecord:
    """What one mining run changed in the table."""

    new: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    no_longer_current: list[str] = field(default_factory=list)
    auto_approved: list[str] = field(default_factory=list)


def record_mining(
    con: duckdb.DuckDBPyConnection,
    patterns: Sequence[Pattern],
    min_support: int,
    auto_approve: bool = False,
    now: datetime | None = None,
) -> MiningRecord:
    """Upsert a mining run's patterns; decisions on known patterns are kept.

    New patterns start `proposed` (or `approved` by `auto` with auto-approval). Stored patterns
    the run no longer finds with enough support are marked not current (kept, with their
    decision, so a person's approval survives a quiet month; they are not released meanwhile).
    """
    ensure_tables(con)
    now = now or _now()
    out = MiningRecord()
    existing = {
        r[0]: r[1]
        for r in con.execute(f"SELECT pattern_id, status FROM {PATTERNS_TABLE}").fetchall()
    }
    seen: set[str] = set()
    con.execute("BEGIN TRANSACTION")
    try:
        for p in patterns:
            pid = p.pattern_id
            seen.add(pid)
            values = {
                "pattern_id": pid,
                "kind": p.kind,
                "key": p.key,
                "text": p.text,
                "answer_field": p.answer_field,
                "slots": json.dumps(list(p.slots), ensure_ascii=False),
                "support": p.support,
                "occurrences": p.occurrences,
                "identities": json.dumps(list(p.identities), ensure_ascii=False),
                "examples": json.dumps(list(p.examples), ensure_ascii=False),
                "variants": json.dumps(list(p.variants), ensure_ascii=False),
                "first_seen": p.first_seen,
                "last_seen": p.last_seen,
                "min_support": min_support,
                "current": p.support >= min_support,
                "releasable": p.releasable,
                "mined_at": now,
            }
            if pid in existing:
                sets = ", ".join(f"{k} = ?" for k in values if k != "pattern_id")
                con.execute(
                    f"UPDATE {PATTERNS_TABLE} SET {sets} WHERE pattern_id = ?",
                    [v for k, v in values.items() if k != "pattern_id"] + [pid],
                )
                out.updated.append(pid)
                continue
            status = APPROVED if auto_approve and p.releasable else PROPOSED
            values.update(
                status=status,
                decided_by=AUTO if status == APPROVED else None,
                decided_at=now if status == APPROVED else None,
                released_version=None,
            )
            con.execute(
                f"INSERT INTO {PATTERNS_TABLE} ({', '.join(COLUMN_NAMES)})"
                f" VALUES ({', '.join('?' for _ in COLUMN_NAMES)})",
                [values[name] for name in COLUMN_NAMES],
            )
            out.new.append(pid)
            _event(con, [pid], PROPOSED, "mining", f"support {p.support}")
            if status == APPROVED:
                out.auto_approved.append(pid)
                _event(con, [pid], APPROVED, AUTO, "auto-approval is on")
        gone = [pid for pid in existing if pid not in seen]
        if gone:
            con.execute(
                f"UPDATE {PATTERNS_TABLE} SET current = false, mined_at = ?"
                f" WHERE pattern_id IN ({', '.join('?' for _ in gone)}) AND current",
                [now, *gone],
            )
            out.no_longer_current = gone
        con.execute("COMMIT")
    except Exception:
        con.execute("ROLLBACK")
        raise
    return out


def list_patterns(
    con: duckdb.DuckDBPyConnection,
    status: str | Sequence[str] | None = None,
    kind: str | None = None,
    current_only: bool = False,
) -> list[StoredPattern]:
    if not table_exists(con, PATTERNS_TABLE):
        return []
    where, params = [], []
    if status:
        statuses = [status] if isinstance(status, str) else list(status)
        where.append(f"status IN ({', '.join('?' for _ in statuses)})")
        params += statuses
    if kind:
        where.append("kind = ?")
        params.append(kind)
    if current_only:
        where.append("current")
    sql = f"SELECT {', '.join(COLUMN_NAMES)} FROM {PATTERNS_TABLE}"
    if where:
        sql += " WHERE " + " AND ".join(where)
    sql += " ORDER BY support DESC, occurrences DESC, kind, key"
    return [_row_to_pattern(r) for r in con.execute(sql, params).fetchall()]


def get_patterns(con: duckdb.DuckDBPyConnection, ids: Iterable[str]) -> list[StoredPattern]:
    ids = list(ids)
    if not ids or not table_exists(con, PATTERNS_TABLE):
        return []
    rows = con.execute(
        f"SELECT {', '.join(COLUMN_NAMES)} FROM {PATTERNS_TABLE}"
        f" WHERE pattern_id IN ({', '.join('?' for _ in ids)})",
        ids,
    ).fetchall()
    return [_row_to_pattern(r) for r in rows]


def resolve_ids(con: duckdb.DuckDBPyConnection, prefixes: Iterable[str]) -> list[str]:
    """Full ids for ids or unambiguous id prefixes (as a person types them)."""
    known = [p.pattern_id for p in list_patterns(con)]
    out = []
    for prefix in prefixes:
        matches = [pid for pid in known if pid.startswith(prefix)]
        if len(matches) != 1:
            raise KeyError(
                f"pattern {prefix!r}: " + ("no such pattern" if not matches else "ambiguous prefix")
            )
        out.append(matches[0])
    return out


def decide(
    con: duckdb.DuckDBPyConnection,
    pattern_ids: Iterable[str],
    status: str,
    actor: str,
    note: str = "",
) -> list[str]:
    """Approve or reject patterns (a person's decision). Returns the ids whose status changed."""
    if status not in (APPROVED, REJECTED):
        raise ValueError(f"a decision is {APPROVED!r} or {REJECTED!r}, not {status!r}")
    ensure_tables(con)
    changed = []
    for p in get_patterns(con, pattern_ids):
        if status == APPROVED and p.status in (APPROVED, RELEASED):
            continue
        if status == REJECTED and p.status == REJECTED:
            continue
        if status == APPROVED and not p.releasable:
            raise ValueError(
                f"pattern {p.pattern_id} ({p.text!r}) cannot be released: "
                + ("no answer field" if not p.answer_field else f"slots {list(p.slots)}")
            )
        con.execute(
            f"UPDATE {PATTERNS_TABLE} SET status = ?, decided_by = ?, decided_at = ?"
            " WHERE pattern_id = ?",
            [status, actor, _now(), p.pattern_id],
        )
        _event(con, [p.pattern_id], status, actor, note)
        changed.append(p.pattern_id)
    return changed


def hints_from(patterns: Iterable[StoredPattern]) -> Hints:
    """Hints of exactly the live (approved/released, current, releasable) patterns."""
    attributes: list[str] = []
    templates: list[QATemplate] = []
    for p in patterns:
        if not p.live:
            continue
        if p.kind == "attribute":
            attributes.append(p.key)
        elif p.kind == "template" and p.answer_field:
            templates.append(QATemplate(p.text, p.answer_field))
    return Hints(attributes=tuple(attributes), qa_templates=tuple(templates))


@dataclass(frozen=True)
class Release:
    hints: Hints
    previous_version: str
    changed: bool
    pattern_ids: tuple[str, ...]

    def as_metadata(self) -> dict[str, Any]:
        return {
            "hints_version": self.hints.version,
            "previous_hints_version": self.previous_version,
            "hints_changed": self.changed,
            "released_attributes": list(self.hints.attributes),
            "released_templates": [t.template for t in self.hints.qa_templates],
        }


def release(con: duckdb.DuckDBPyConnection, actor: str = "release") -> Release:
    """Save the live patterns as the newest memory hints (only if they differ from it).

    The memory build reads the newest release and puts its version into every node's version,
    so a changed release makes the next materialisation rebuild nodes with the new hints.
    """
    ensure_tables(con)
    patterns = list_patterns(con)
    live = [p for p in patterns if p.live]
    hints = hints_from(live)
    previous = load_hints(con)
    changed = hints.version != previous.version and not (hints.empty and previous.empty)
    if changed:
        save_hints(con, hints)
    live_ids = [p.pattern_id for p in live]
    if live_ids:
        newly = [p.pattern_id for p in live if p.status != RELEASED or changed]
        con.execute(
            f"UPDATE {PATTERNS_TABLE} SET status = ?, released_version = ?"
            f" WHERE pattern_id IN ({', '.join('?' for _ in live_ids)})",
            [RELEASED, hints.version, *live_ids],
        )
        _event(con, newly, RELEASED, actor, f"hints {hints.version}")
    # Released before but not carried now (no longer current): back to approved.
    dropped = [p.pattern_id for p in patterns if p.status == RELEASED and not p.live]
    if dropped:
        con.execute(
            f"UPDATE {PATTERNS_TABLE} SET status = ?"
            f" WHERE pattern_id IN ({', '.join('?' for _ in dropped)})",
            [APPROVED, *dropped],
        )
        _event(con, dropped, APPROVED, actor, f"not in hints {hints.version} (support fell)")
    return Release(hints, previous.version, changed, tuple(live_ids))


def known_values(con: duckdb.DuckDBPyConnection) -> dict[str, set[str]]:
    """Facet values the memory already holds for slot fields (titles, cities, skills, …):
    any of them named in a question becomes that field's slot."""
    if not table_exists(con, MEMORY_TABLE):
        return {}
    wanted = set(ENTITY_FIELDS) - {"salary", "years_experience"}
    out: dict[str, set[str]] = {}
    for (facets,) in con.execute(f"SELECT facets FROM {MEMORY_TABLE}").fetchall():
        for facet in json.loads(facets):
            fld = facet.get("field")
            if fld in wanted and facet.get("value"):
                out.setdefault(fld, set()).add(str(facet["value"]))
    return out

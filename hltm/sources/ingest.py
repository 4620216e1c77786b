"""Load a directory of user files (CSV / Parquet / JSONL, one or more per table) into the sources.

The rule: every good row is loaded, every bad one goes to `quarantine` with its reason (and its
line when the file has lines), and nothing already good is lost. A file that cannot be read at
all (a corrupt Parquet file) is reported and quarantined as a whole; the other files still load,
and the summary is printed whatever happened.

Reading (`hltm.sources.reading`) tolerates what real exports contain: a UTF-8 byte-order mark,
`;` / tab / `|` separated CSV, header names in any case with spaces (`Resume ID`), common
alternative names (`id`, `body`, `description`, see `Column.aliases`), undecodable lines
(quarantined; `encoding=` reads a file in another encoding), a truncated last JSONL line, blank
lines, empty files (said so in the summary), binary data under a text name (refused as one
file, not as thousands of garbage rows). Two files for one table (`x.csv` and `x.jsonl`) are both read; an id found
in both is a duplicate, and both copies are quarantined.

Quarantine: a row's `raw` keeps at most `MAX_RAW_CHARS` (a 50 MB line is not copied whole); a
row is known by its content (`raw_hash`), its id when it has one (a line with a bad byte still
names its id when its fields can be told apart) and the hash of the file it came from — never by
the file's name, which another folder's file shares. A load resolves (`resolved_at`) the open
rows of ids it stored a good row for, and the id-less rows of a file with the same bytes that
this read no longer quarantines (the file read with the right `--encoding`); a row quarantined
again is open again. Counts are of the open rows; `hltm quarantine` lists them with what
resolves each (`quarantined`).

Validation (`hltm.sources.validation`) is column-wise (polars expressions over whole columns;
Python only over the distinct values of the few checks SQL-like expressions cannot state).
Re-ingesting is idempotent: rows are upserted by id and a row whose content hash is unchanged is
not touched, so `updated_at` and `content_hash` stay meaningful for change detection.

Change log, so a reader can look at only what changed (the `source_changes` sensor): every table
load and every deletion takes one number from the `source_change_seq` sequence. Rows it inserts
or updates carry it in `change_seq`; a row that *leaves* its owner in the memory tree (deleted, or
updated to point at another seat, project or vacancy) is recorded in `source_departures` as
(number, owner column, owner id). A deleted row's own id is never recorded, so deletion still
leaves no trace of it.
"""

from __future__ import annotations

import codecs
import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import polars as pl

from hltm.sources.reading import (
    FILE,
    LINE,
    SUFFIXES,
    UNDECODABLE,
    FileRead,
    map_columns,
    on_schema,
    read_file,
)
from hltm.sources.report import IngestReport, TableReport
from hltm.sources.schema import LOAD_ORDER, TABLES, TABLES_BY_NAME, Table
from hltm.sources.validation import reasons
from hltm.warehouse import connect, store_fault

CHANGE_SEQUENCE = "source_change_seq"
DEPARTURES_TABLE = "source_departures"
MAX_RAW_CHARS = 4096  # of a quarantined row kept in `quarantine.raw`: enough to find and fix it
# Each memory-tree table's owner column: a row moving away from its owner changes the owner.
TREE_OWNERS = {
    "seats": "contract_id",
    "projects": "seat_id",
    "project_documents": "project_id",
    "recruiter_actions": "project_id",
    "vacancies": "project_id",
    "vacancy_requirements": "vacancy_id",
}


def source_ddl(table: Table) -> str:
    cols = [f"{c.name} {c.sql_type}" for c in table.columns if c.name != "updated_at"]
    cols += ["updated_at TIMESTAMP", "content_hash VARCHAR", "ingested_at TIMESTAMP"]
    cols += ["change_seq BIGINT"]
    return f"CREATE TABLE IF NOT EXISTS {table.name} ({', '.join(cols)}, PRIMARY KEY ({table.key}))"


def ensure_sources_schema(con: duckdb.DuckDBPyConnection) -> None:
    con.execute(f"CREATE SEQUENCE IF NOT EXISTS {CHANGE_SEQUENCE}")
    con.execute(
        f"CREATE TABLE IF NOT EXISTS {DEPARTURES_TABLE} (change_seq BIGINT NOT NULL,"
        " owner_column VARCHAR NOT NULL, owner_id VARCHAR NOT NULL)"
    )
    for table in TABLES:
        con.execute(source_ddl(table))
        # Sources written before the change log: their rows count as older than any change.
        con.execute(f"ALTER TABLE {table.name} ADD COLUMN IF NOT EXISTS change_seq BIGINT")
    con.execute(
        "CREATE TABLE IF NOT EXISTS quarantine (table_name VARCHAR, row_key VARCHAR,"
        " reason VARCHAR, raw VARCHAR, raw_hash VARCHAR, source_file VARCHAR,"
        " quarantined_at TIMESTAMP, PRIMARY KEY (table_name, raw_hash, reason))"
    )
    con.execute("ALTER TABLE quarantine ADD COLUMN IF NOT EXISTS line INTEGER")
    con.execute("ALTER TABLE quarantine ADD COLUMN IF NOT EXISTS resolved_at TIMESTAMP")
    con.execute("ALTER TABLE quarantine ADD COLUMN IF NOT EXISTS source_hash VARCHAR")


class _ArrowStream:
    """A polars frame as a plain Arrow C stream, which DuckDB scans without pyarrow installed."""

    def __init__(self, frame: pl.DataFrame) -> None:
        self.frame = frame

    def __arrow_c_stream__(self, requested_schema: object = None) -> object:
        return self.frame.__arrow_c_stream__(requested_schema)


def _keys(con: duckdb.DuckDBPyConnection, sql: str) -> pl.DataFrame:
    rows = con.execute(sql).fetchall()
    names = [d[0] for d in con.description or []]
    return pl.DataFrame(rows, schema=dict.fromkeys(names, pl.Utf8), orient="row")


def content_hash(table: Table, row: dict[str, Any]) -> str:
    content = {c.name: row[c.name] for c in table.columns if c.name != "updated_at"}
    return hashlib.sha1(json.dumps(content, default=str, sort_keys=True).encode()).hexdigest()


def _bounded_raw(raw: str) -> str:
    if len(raw) <= MAX_RAW_CHARS:
        return raw
    return f"{raw[:MAX_RAW_CHARS]}… [cut: {len(raw)} characters in all]"


def _resolve_unnamed(con: duckdb.DuckDBPyConnection, table: Table, digests: list[str]) -> None:
    """Mark resolved the id-less rows these very files (by their bytes) left in quarantine;
    `_quarantine` reopens those their new read quarantines again."""
    con.execute(
        "UPDATE quarantine SET resolved_at = now() WHERE table_name = ? AND resolved_at IS NULL"
        " AND row_key IS NULL AND source_hash IN (SELECT unnest(?::VARCHAR[]))",
        [table.name, [d for d in digests if d]],
    )


def _resolve_loaded(con: duckdb.DuckDBPyConnection, table: Table, keys: list[str]) -> None:
    """Mark resolved the quarantined rows of ids this load stored a good row for."""
    con.execute(
        "UPDATE quarantine SET resolved_at = now() WHERE table_name = ? AND resolved_at IS NULL"
        " AND row_key IN (SELECT unnest(?::VARCHAR[]))",
        [table.name, keys],
    )


def _key_of(table: Table, fields: Mapping[str, Any] | None) -> str | None:
    """The id a row that could not be read still names (its header mapped as for good rows)."""
    if not fields:
        return None
    source = map_columns(table, fields)[0].get(table.key)
    value = fields.get(source) if source else None
    text = str(value).strip() if value is not None else ""
    return text if text and not UNDECODABLE.search(text) else None


def _quarantine(
    con: duckdb.DuckDBPyConnection,
    table: Table,
    rows: list[dict[str, Any]],
    report: TableReport,
    digests: Mapping[str, str],
) -> None:
    """Store bad rows (`key`, `reason`, `raw`, `file`, `line`) and count them by reason; the
    hash is of the whole row, the stored `raw` a bounded prefix, `digests` each file's hash."""
    if not rows:
        return
    frame = pl.DataFrame(
        {
            "table_name": [table.name] * len(rows),
            "row_key": [r["key"] for r in rows],
            "reason": [r["reason"] for r in rows],
            "raw": [_bounded_raw(r["raw"]) for r in rows],
            "raw_hash": [hashlib.sha1(r["raw"].encode()).hexdigest() for r in rows],
            "source_file": [r["file"] for r in rows],
            "source_hash": [digests.get(r["file"], "") for r in rows],
            "line": [r["line"] for r in rows],
        },
        schema_overrides={"row_key": pl.Utf8, "line": pl.Int32},
    ).unique(["raw_hash", "reason"], keep="first", maintain_order=True)
    bad_rows = _ArrowStream(frame)  # noqa: F841 - scanned by name in the SQL below
    con.execute(
        "INSERT INTO quarantine (table_name, row_key, reason, raw, raw_hash, source_file,"
        " source_hash, quarantined_at, line) SELECT table_name, row_key, reason, raw, raw_hash,"
        " source_file, source_hash, now(), line FROM bad_rows"
        " ON CONFLICT (table_name, raw_hash, reason) DO UPDATE SET resolved_at = NULL,"
        " source_file = excluded.source_file, source_hash = excluded.source_hash,"
        " line = excluded.line, row_key = excluded.row_key"
    )
    for r in rows:
        report.count(r["reason"], r["line"])


def _load_table(
    con: duckdb.DuckDBPyConnection,
    table: Table,
    reads: list[FileRead],
    report: TableReport,
    defaults: Mapping[str, str] | None = None,
) -> None:
    unreadable = [u for r in reads for u in r.unreadable]
    report.read = sum(r.frame.height for r in reads) + sum(1 for u in unreadable if u.line)
    file_digests = {r.name: r.digest for r in reads}
    _resolve_unnamed(con, table, [r.digest for r in reads])
    report.notes += [f"{u.file}: {u.reason}" for u in unreadable if u.line is None]
    _quarantine(
        con,
        table,
        [
            {
                "key": _key_of(table, u.fields),
                "reason": u.reason,
                "raw": u.raw,
                "file": u.file,
                "line": u.line,
            }
            for u in unreadable
        ],
        report,
        file_digests,
    )
    frames = [
        on_schema(table, r, r.frame[FILE][0], report, defaults) for r in reads if r.frame.height
    ]
    if not frames:
        return
    frame = pl.concat(frames, how="vertical_relaxed")
    where = (
        frame.filter(pl.col(table.key).is_duplicated() & pl.col(table.key).is_not_null())
        .group_by(table.key)
        .agg(pl.format("{}:{}", pl.col(FILE), pl.col(LINE)).head(5).str.join(", ").alias("__where"))
    )
    frame = frame.join(where, on=table.key, how="left", nulls_equal=False)
    parents = {
        fk.column: _keys(con, f"SELECT {TABLES_BY_NAME[fk.table].key} FROM {fk.table}").to_series()
        for fk in table.foreign_keys
    }
    reason, typed = reasons(table, frame, parents)
    checked = frame.with_columns(reason.alias("__reason"))
    bad = checked.filter(pl.col("__reason").is_not_null())
    names = [c.name for c in table.columns]
    _quarantine(
        con,
        table,
        [
            {
                "key": row[table.key],
                "reason": row["__reason"],
                "raw": json.dumps(
                    {k: row[k] for k in names if row[k] is not None},
                    sort_keys=True,
                    ensure_ascii=False,
                ),
                "file": row[FILE],
                "line": row[LINE],
            }
            for row in bad.iter_rows(named=True)
        ],
        report,
        file_digests,
    )
    good = checked.filter(pl.col("__reason").is_null()).select(*(typed[n].alias(n) for n in names))
    _resolve_loaded(con, table, good[table.key].cast(pl.Utf8).to_list())
    hashed = [n for n in names if n != "updated_at"]
    digests = [
        content_hash(table, dict(zip(hashed, row, strict=True)))
        for row in good.select(hashed).iter_rows()
    ]
    owner = TREE_OWNERS.get(table.name)
    old_owner = f", {owner} AS __old_owner" if owner else ""
    existing = _keys(con, f"SELECT {table.key}, content_hash AS __old{old_owner} FROM {table.name}")
    good = good.with_columns(pl.Series("content_hash", digests, dtype=pl.Utf8)).join(
        existing, on=table.key, how="left"
    )
    same = pl.col("__old") == pl.col("content_hash")
    report.unchanged = good.filter(same.fill_null(False)).height
    report.inserted = good.filter(pl.col("__old").is_null()).height
    report.updated = good.height - report.unchanged - report.inserted
    now = datetime.now(UTC).replace(tzinfo=None)
    change = next_change(con)
    if owner:
        moved = good.filter(
            pl.col("__old").is_not_null() & pl.col(owner).ne_missing(pl.col("__old_owner"))
        )
        _record_departures(con, change, owner, moved["__old_owner"].drop_nulls().unique().to_list())
    upserts = good.filter(~same.fill_null(False)).select(
        *hashed,
        (
            pl.col("updated_at").fill_null(pl.lit(now, dtype=pl.Datetime("us")))
            if "updated_at" in names
            else pl.lit(now, dtype=pl.Datetime("us")).alias("updated_at")
        ),
        "content_hash",
        pl.lit(now, dtype=pl.Datetime("us")).alias("ingested_at"),
        pl.lit(change, dtype=pl.Int64).alias("change_seq"),
    )
    if upserts.height:
        columns = ", ".join(upserts.columns)
        rows = _ArrowStream(upserts)  # noqa: F841 - scanned by name in the SQL below
        con.execute(f"INSERT OR REPLACE INTO {table.name} ({columns}) SELECT {columns} FROM rows")


class OtherWorld(ValueError):
    """A folder whose contracts are all new to a data dir that holds contracts already: another
    organisation's export, or a sample world beside a real one. Loading it would mix two worlds
    in one resume pool, one set of rankings and one UI, so it takes an explicit yes."""

    def __init__(self, held: list[str], brought: list[str]) -> None:
        self.held, self.brought = held, brought
        super().__init__(
            f"holds contract{'s' * (len(held) > 1)} {_some(held)}; the folder brings only"
            f" contract{'s' * (len(brought) > 1)} it does not hold ({_some(brought)})"
        )


def _some(ids: list[str], shown: int = 3) -> str:
    return ", ".join(ids[:shown]) + (f" and {len(ids) - shown} more" if len(ids) > shown else "")


def _contracts_brought(files: Mapping[str, list[Path]], encoding: str) -> set[str]:
    """The contract ids a folder's files name: its contracts' own ids and its seats' owners."""
    found: set[str] = set()
    for name, column in (("contracts", "contract_id"), ("seats", "contract_id")):
        table = TABLES_BY_NAME[name]
        for path in files.get(name, []):
            frame = read_file(path, encoding).frame
            source = map_columns(table, [c for c in frame.columns if not c.startswith("__")])[0]
            if column in source:
                values = frame[source[column]].drop_nulls().str.strip_chars()
                found |= {v for v in values.to_list() if v}
    return found


def _check_same_world(
    con: duckdb.DuckDBPyConnection, files: Mapping[str, list[Path]], encoding: str
) -> None:
    held = sorted(r[0] for r in con.execute("SELECT contract_id FROM contracts").fetchall())
    if not held:
        return
    brought = _contracts_brought(files, encoding)
    if brought and not brought & set(held):
        raise OtherWorld(held, sorted(brought))


def find_table_files(src_dir: Path) -> tuple[dict[str, list[Path]], list[str]]:
    """Each table's files (by name, any case: `projects.csv`, `Projects.JSONL`), and the
    readable files that are not named after a table."""
    files: dict[str, list[Path]] = {}
    unknown: list[str] = []
    for path in sorted(src_dir.iterdir()):
        if path.suffix.lower() not in SUFFIXES:
            continue
        table = path.stem.lower()
        if table in TABLES_BY_NAME:
            files.setdefault(table, []).append(path)
        else:
            unknown.append(path.name)
    return files, unknown


def ingest_directory(
    src_dir: Path | str,
    sources_db: Path | str,
    encoding: str = "utf-8",
    defaults: Mapping[str, str] | None = None,
    add_contracts: bool = False,
) -> IngestReport:
    """Load every table file of `src_dir`; one table's failure never stops the others.
    `defaults`: a value for a column no file has (e.g. `{"language": "en"}`). A folder that
    shares no contract with the contracts the sources hold raises `OtherWorld` before anything
    is loaded, unless `add_contracts` (an update of the same world shares them, or brings
    none)."""
    started = datetime.now(UTC)
    src_dir = Path(src_dir)
    if not src_dir.is_dir():
        raise FileNotFoundError(f"{src_dir} is not a directory")
    codecs.lookup(encoding)  # an unknown encoding is the caller's error, before anything is read
    files, unknown = find_table_files(src_dir)
    report = IngestReport(unknown_files=unknown)
    if not files:
        return report
    with connect(sources_db) as con:
        ensure_sources_schema(con)
        if not add_contracts:
            _check_same_world(con, files, encoding)
        for name in LOAD_ORDER:
            if name not in files:
                continue
            table = TABLES_BY_NAME[name]
            table_report = TableReport(name, files=[p.name for p in files[name]])
            if len(files[name]) > 1:
                table_report.notes.append(
                    f"{len(files[name])} files for {name}: all are read; an id in more than one"
                    " is a duplicate and every copy is quarantined"
                )
            reads = [read_file(p, encoding) for p in files[name]]
            for path, read in zip(files[name], reads, strict=True):
                if not read.frame.height and not read.unreadable:
                    header = any(not c.startswith("__") for c in read.frame.columns)
                    what = "a header and no rows" if header else "empty file, no rows"
                    table_report.notes.append(f"{path.name}: {what} to load")
            con.execute("BEGIN TRANSACTION")
            try:
                _load_table(con, table, reads, table_report, defaults)
                con.execute("COMMIT")
            except Exception as err:  # noqa: BLE001 - reported per table; the others still load
                if fault := store_fault(Path(sources_db), err):
                    raise fault from err  # a full or damaged file fails every table alike
                con.execute("ROLLBACK")
                table_report = TableReport(name, files=table_report.files, notes=table_report.notes)
                table_report.error = f"{type(err).__name__}: {err}".splitlines()[0]
            report.tables.append(table_report)
    report.seconds = (datetime.now(UTC) - started).total_seconds()
    return report


def next_change(con: duckdb.DuckDBPyConnection) -> int:
    """The number of one load or deletion in the change log (see the module docstring)."""
    row = con.execute(f"SELECT nextval('{CHANGE_SEQUENCE}')").fetchone()
    return int(row[0]) if row else 0


def _record_departures(
    con: duckdb.DuckDBPyConnection, change: int, owner_column: str, owner_ids: Iterable[str]
) -> None:
    con.execute(
        f"INSERT INTO {DEPARTURES_TABLE} SELECT ?, ?, unnest(?::VARCHAR[])",
        [change, owner_column, sorted(set(owner_ids))],
    )


# Deletion: children first, so no row is ever left pointing at a deleted parent. Each deletion
# records the owners its rows leave (the seat of a deleted project, the project of a deleted
# document or action), never the deleted ids themselves.
def _delete(
    con: duckdb.DuckDBPyConnection,
    departures: tuple[str, str, list[Any]],
    statements: Iterable[tuple[str, list[Any]]],
) -> None:
    ensure_sources_schema(con)
    owner_column, owners_sql, params = departures
    con.execute("BEGIN TRANSACTION")
    owners = [r[0] for r in con.execute(owners_sql, params).fetchall() if r[0] is not None]
    _record_departures(con, next_change(con), owner_column, owners)
    for sql, params in statements:
        con.execute(sql, params)
    con.execute("COMMIT")


def _require(con: duckdb.DuckDBPyConnection, table: str, key: str, value: str) -> None:
    if not con.execute(f"SELECT 1 FROM {table} WHERE {key} = ?", [value]).fetchone():
        raise KeyError(f"no {table[:-1].replace('_', ' ')} with id '{value}'")


def delete_project(sources_db: Path | str, project_id: str) -> None:
    with connect(sources_db) as con:
        _require(con, "projects", "project_id", project_id)
        vacancies = "SELECT vacancy_id FROM vacancies WHERE project_id = ?"
        _delete(
            con,
            ("seat_id", "SELECT seat_id FROM projects WHERE project_id = ?", [project_id]),
            [
                (
                    f"DELETE FROM vacancy_requirements WHERE vacancy_id IN ({vacancies})",
                    [project_id],
                ),
                ("DELETE FROM vacancies WHERE project_id = ?", [project_id]),
                ("DELETE FROM recruiter_actions WHERE project_id = ?", [project_id]),
                ("DELETE FROM project_documents WHERE project_id = ?", [project_id]),
                ("DELETE FROM projects WHERE project_id = ?", [project_id]),
            ],
        )


def delete_document(sources_db: Path | str, document_id: str) -> None:
    with connect(sources_db) as con:
        _require(con, "project_documents", "document_id", document_id)
        _delete(
            con,
            (
                "project_id",
                "SELECT project_id FROM project_documents WHERE document_id = ?",
                [document_id],
            ),
            [("DELETE FROM project_documents WHERE document_id = ?", [document_id])],
        )


def delete_resume(sources_db: Path | str, resume_id: str) -> None:
    with connect(sources_db) as con:
        _require(con, "resumes", "resume_id", resume_id)
        _delete(
            con,
            (
                "project_id",
                "SELECT DISTINCT project_id FROM recruiter_actions WHERE resume_id = ?",
                [resume_id],
            ),
            [
                ("DELETE FROM recruiter_actions WHERE resume_id = ?", [resume_id]),
                ("DELETE FROM resumes WHERE resume_id = ?", [resume_id]),
            ],
        )


def table_counts(con: duckdb.DuckDBPyConnection) -> dict[str, int]:
    return {
        t.name: con.execute(f"SELECT count(*) FROM {t.name}").fetchone()[0]  # type: ignore[index]
        for t in TABLES
    }


@dataclass(frozen=True)
class Quarantined:
    """One quarantined row as `hltm quarantine` lists it."""

    table: str
    key: str | None
    reason: str
    file: str
    line: int | None
    quarantined_at: datetime
    resolved_at: datetime | None


def quarantined(sources_db: Path | str, include_resolved: bool = False) -> list[Quarantined]:
    """The open quarantine rows (and, asked, the resolved ones), by table, file and line."""
    if not Path(sources_db).exists():
        return []
    with connect(sources_db, read_only=True) as con:
        if not con.execute(
            "SELECT 1 FROM information_schema.tables WHERE table_name = 'quarantine'"
        ).fetchone():
            return []
        rows = con.execute(
            "SELECT table_name, row_key, reason, source_file, line, quarantined_at, resolved_at"
            " FROM quarantine"
            + ("" if include_resolved else " WHERE resolved_at IS NULL")
            + " ORDER BY table_name, source_file, line NULLS FIRST, row_key"
        ).fetchall()
    return [Quarantined(*row) for row in rows]


def quarantine_counts(con: duckdb.DuckDBPyConnection) -> dict[str, int]:
    """Open quarantine rows per table (not those a later load of their file resolved)."""
    return dict(
        con.execute(
            "SELECT table_name, count(*) FROM quarantine WHERE resolved_at IS NULL GROUP BY 1"
        ).fetchall()
    )

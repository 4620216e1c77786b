"""Load a directory of user files (CSV / Parquet / JSONL, one per table) into the sources DuckDB.

Every good row is loaded, every bad one goes to `quarantine` with its reason, and nothing already
good is lost. Re-ingesting is idempotent: rows are upserted by id and a row whose content hash is
unchanged is not touched, so `updated_at` and `content_hash` stay meaningful for change detection.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import duckdb
import polars as pl

from hltm.sources.schema import LOAD_ORDER, TABLES, TABLES_BY_NAME, Column, Table
from hltm.warehouse import connect

SUFFIXES = (".jsonl", ".ndjson", ".csv", ".parquet")
_TRUE = {"true", "1", "yes", "y", "t"}
_FALSE = {"false", "0", "no", "n", "f"}


class BadValue(ValueError):
    pass


@dataclass
class TableReport:
    table: str
    file: str
    read: int = 0
    inserted: int = 0
    updated: int = 0
    unchanged: int = 0
    quarantined: int = 0
    reasons: dict[str, int] = field(default_factory=dict)

    @property
    def loaded(self) -> int:
        return self.inserted + self.updated + self.unchanged


@dataclass
class IngestReport:
    tables: list[TableReport] = field(default_factory=list)
    unknown_files: list[str] = field(default_factory=list)

    @property
    def loaded(self) -> int:
        return sum(t.loaded for t in self.tables)

    @property
    def quarantined(self) -> int:
        return sum(t.quarantined for t in self.tables)

    @property
    def changed(self) -> int:
        return sum(t.inserted + t.updated for t in self.tables)

    def summary(self) -> str:
        lines = [
            f"{'table':22} {'read':>6} {'new':>6} {'updated':>7} {'same':>6} {'bad':>5}  file",
        ]
        for t in self.tables:
            lines.append(
                f"{t.table:22} {t.read:6} {t.inserted:6} {t.updated:7} {t.unchanged:6}"
                f" {t.quarantined:5}  {t.file}"
            )
            for reason, n in sorted(t.reasons.items()):
                lines.append(f"{'':24}quarantined {n} × {reason}")
        for name in self.unknown_files:
            lines.append(
                f"ignored {name}: not a known table (expected one of {', '.join(LOAD_ORDER)})"
            )
        lines.append(
            f"loaded {self.loaded} rows ({self.changed} new or changed), "
            f"quarantined {self.quarantined}"
        )
        return "\n".join(lines)


def source_ddl(table: Table) -> str:
    cols = [f"{c.name} {c.sql_type}" for c in table.columns if c.name != "updated_at"]
    cols += ["updated_at TIMESTAMP", "content_hash VARCHAR", "ingested_at TIMESTAMP"]
    return f"CREATE TABLE IF NOT EXISTS {table.name} ({', '.join(cols)}, PRIMARY KEY ({table.key}))"


def ensure_sources_schema(con: duckdb.DuckDBPyConnection) -> None:
    for table in TABLES:
        con.execute(source_ddl(table))
    con.execute(
        "CREATE TABLE IF NOT EXISTS quarantine (table_name VARCHAR, row_key VARCHAR,"
        " reason VARCHAR, raw VARCHAR, raw_hash VARCHAR, source_file VARCHAR,"
        " quarantined_at TIMESTAMP, PRIMARY KEY (table_name, raw_hash, reason))"
    )


def _read_file(path: Path) -> list[dict[str, Any]]:
    if path.suffix == ".csv":
        frame = pl.read_csv(path, infer_schema=False)
    elif path.suffix == ".parquet":
        frame = pl.read_parquet(path)
    else:
        frame = pl.read_ndjson(path, infer_schema_length=None)
    return frame.to_dicts()


def _coerce(column: Column, value: Any) -> Any:
    if value is None or (isinstance(value, str) and value.strip() == "" and not column.required):
        if column.required:
            raise BadValue(f"missing value for required column '{column.name}'")
        return None
    if isinstance(value, str) and value.strip() == "":
        raise BadValue(f"empty value for required column '{column.name}'")
    kind = column.sql_type
    try:
        if kind == "VARCHAR":
            text = str(value)
            if column.choices and text not in column.choices:
                raise BadValue(
                    f"unknown {column.name} '{text}' (expected one of {', '.join(column.choices)})"
                )
            return text
        if kind == "INTEGER":
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError
            return int(value)
        if kind == "BOOLEAN":
            if isinstance(value, bool):
                return value
            text = str(value).strip().lower()
            if text in _TRUE | _FALSE:
                return text in _TRUE
            raise ValueError
        if kind == "TIMESTAMP":
            if isinstance(value, datetime):
                return value.replace(tzinfo=None)
            if isinstance(value, date):
                return datetime(value.year, value.month, value.day)
            parsed = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
            return parsed.astimezone(UTC).replace(tzinfo=None) if parsed.tzinfo else parsed
    except BadValue:
        raise
    except (ValueError, TypeError):
        raise BadValue(f"bad {kind.lower()} in column '{column.name}': {value!r}") from None
    raise AssertionError(f"unhandled column type {kind}")


def _validate_row(table: Table, raw: dict[str, Any]) -> dict[str, Any]:
    row = {}
    for column in table.columns:
        row[column.name] = _coerce(column, raw.get(column.name))
        if column.non_empty_text and not str(row[column.name]).strip():
            raise BadValue(f"empty text in column '{column.name}'")
    return row


def content_hash(table: Table, row: dict[str, Any]) -> str:
    content = {c.name: row[c.name] for c in table.columns if c.name != "updated_at"}
    return hashlib.sha1(json.dumps(content, default=str, sort_keys=True).encode()).hexdigest()


def _existing_keys(con: duckdb.DuckDBPyConnection, table: str, key: str) -> set[str]:
    return {r[0] for r in con.execute(f"SELECT {key} FROM {table}").fetchall()}


def _quarantine(
    con: duckdb.DuckDBPyConnection,
    report: TableReport,
    raw: dict[str, Any],
    key: str,
    reason: str,
) -> None:
    raw_text = json.dumps(raw, default=str, sort_keys=True, ensure_ascii=False)
    raw_hash = hashlib.sha1(raw_text.encode()).hexdigest()
    con.execute(
        "INSERT OR IGNORE INTO quarantine VALUES (?, ?, ?, ?, ?, ?, now())",
        [report.table, str(raw.get(key)), reason, raw_text, raw_hash, report.file],
    )
    report.quarantined += 1
    reason_kind = reason.split(":")[0]
    report.reasons[reason_kind] = report.reasons.get(reason_kind, 0) + 1


def _load_table(
    con: duckdb.DuckDBPyConnection, table: Table, path: Path, rows: list[dict[str, Any]]
) -> TableReport:
    report = TableReport(table.name, path.name, read=len(rows))
    present = set().union(*(r.keys() for r in rows)) if rows else set()
    missing = [c.name for c in table.columns if c.required and c.name not in present]
    counts: dict[str, int] = {}
    for raw in rows:
        counts[str(raw.get(table.key))] = counts.get(str(raw.get(table.key)), 0) + 1
    parents = {
        fk.column: _existing_keys(con, fk.table, TABLES_BY_NAME[fk.table].key)
        for fk in table.foreign_keys
    }
    existing = dict(con.execute(f"SELECT {table.key}, content_hash FROM {table.name}").fetchall())
    good: list[tuple[dict[str, Any], str]] = []
    for raw in rows:
        if missing:
            _quarantine(
                con, report, raw, table.key, f"missing required column: {', '.join(missing)}"
            )
            continue
        if counts[str(raw.get(table.key))] > 1:
            _quarantine(con, report, raw, table.key, f"duplicate id: {raw.get(table.key)}")
            continue
        try:
            row = _validate_row(table, raw)
        except BadValue as err:
            _quarantine(con, report, raw, table.key, f"bad value: {err}")
            continue
        dangling = [fk for fk in table.foreign_keys if row[fk.column] not in parents[fk.column]]
        if dangling:
            fk = dangling[0]
            _quarantine(
                con,
                report,
                raw,
                table.key,
                f"unknown reference: {fk.column} '{row[fk.column]}' not in {fk.table}",
            )
            continue
        good.append((row, content_hash(table, row)))

    now = datetime.now(UTC).replace(tzinfo=None)
    upserts = []
    for row, digest in good:
        old = existing.get(row[table.key])
        if old == digest:
            report.unchanged += 1
            continue
        if old is None:
            report.inserted += 1
        else:
            report.updated += 1
        values = [row[c.name] for c in table.columns if c.name != "updated_at"]
        updated_at = row.get("updated_at") or now
        upserts.append([*values, updated_at, digest, now])
    if upserts:
        names = [c.name for c in table.columns if c.name != "updated_at"]
        names += ["updated_at", "content_hash", "ingested_at"]
        placeholders = ", ".join("?" for _ in names)
        con.executemany(
            f"INSERT OR REPLACE INTO {table.name} ({', '.join(names)}) VALUES ({placeholders})",
            upserts,
        )
    return report


def find_table_files(src_dir: Path) -> tuple[dict[str, Path], list[str]]:
    files: dict[str, Path] = {}
    unknown: list[str] = []
    for path in sorted(src_dir.iterdir()):
        if path.suffix not in SUFFIXES:
            continue
        if path.stem in TABLES_BY_NAME:
            files[path.stem] = path
        else:
            unknown.append(path.name)
    return files, unknown


def ingest_directory(src_dir: Path | str, sources_db: Path | str) -> IngestReport:
    src_dir = Path(src_dir)
    if not src_dir.is_dir():
        raise FileNotFoundError(f"{src_dir} is not a directory")
    files, unknown = find_table_files(src_dir)
    report = IngestReport(unknown_files=unknown)
    if not files:
        return report
    with connect(sources_db) as con:
        ensure_sources_schema(con)
        for name in LOAD_ORDER:
            if name not in files:
                continue
            rows = _read_file(files[name])
            con.execute("BEGIN TRANSACTION")
            report.tables.append(_load_table(con, TABLES_BY_NAME[name], files[name], rows))
            con.execute("COMMIT")
    return report


# Deletion: children first, so no row is ever left pointing at a deleted parent.
def _delete(con: duckdb.DuckDBPyConnection, statements: Iterable[tuple[str, list[Any]]]) -> None:
    con.execute("BEGIN TRANSACTION")
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
        _delete(con, [("DELETE FROM project_documents WHERE document_id = ?", [document_id])])


def delete_resume(sources_db: Path | str, resume_id: str) -> None:
    with connect(sources_db) as con:
        _require(con, "resumes", "resume_id", resume_id)
        _delete(
            con,
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


def quarantine_counts(con: duckdb.DuckDBPyConnection) -> dict[str, int]:
    return dict(con.execute("SELECT table_name, count(*) FROM quarantine GROUP BY 1").fetchall())

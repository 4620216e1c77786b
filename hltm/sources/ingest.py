"""Load a directory of user files (CSV / Parquet / JSONL, one or more per table) into the sources.

The rule: every good row is loaded, every bad one goes to `quarantine` with its reason (and its
line when the file has lines), and nothing already good is lost. A file that cannot be read at
all (a corrupt Parquet file) is reported and quarantined as a whole; the other files still load,
and the summary is printed whatever happened.

Reading tolerates what real exports contain: a UTF-8 byte-order mark, `;` / tab / `|` separated
CSV, header names in any case with spaces (`Resume ID`), common alternative names (`id`, `body`,
`description`, see `Column.aliases`), undecodable lines (quarantined; `encoding=` reads a file in
another encoding), a truncated last JSONL line, blank lines, empty files. Two files for one table
(`x.csv` and `x.jsonl`) are both read; an id found in both is a duplicate, and both copies are
quarantined.

Validation is column-wise (polars expressions over whole columns; Python only over the distinct
values of the few checks SQL-like expressions cannot state). Re-ingesting is idempotent: rows are
upserted by id and a row whose content hash is unchanged is not touched, so `updated_at` and
`content_hash` stay meaningful for change detection.

Change log, so a reader can look at only what changed (the `source_changes` sensor): every table
load and every deletion takes one number from the `source_change_seq` sequence. Rows it inserts
or updates carry it in `change_seq`; a row that *leaves* its owner in the memory tree (deleted, or
updated to point at another seat, project or vacancy) is recorded in `source_departures` as
(number, owner column, owner id). A deleted row's own id is never recorded, so deletion still
leaves no trace of it.
"""

from __future__ import annotations

import codecs
import csv
import hashlib
import io
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import polars as pl

from hltm.sources.schema import (
    CANONICAL_ASCII_ID,
    LOAD_ORDER,
    TABLES,
    TABLES_BY_NAME,
    Column,
    Table,
    id_problem,
)
from hltm.warehouse import connect

SUFFIXES = (".jsonl", ".ndjson", ".csv", ".parquet")
_TRUE = ("true", "1", "yes", "y", "t")
_FALSE = ("false", "0", "no", "n", "f")
_LINE = "__line"  # bookkeeping columns added to every frame read
_FILE = "__file"
_NESTED = "__nested"  # JSONL: "|a|b|" = columns whose value was an array or object
_UNDECODABLE = re.compile("[\udc80-\udcff]")  # what surrogateescape leaves for a bad byte
_SEPARATORS = (",", ";", "\t", "|")


@dataclass
class TableReport:
    table: str
    files: list[str] = field(default_factory=list)
    read: int = 0
    inserted: int = 0
    updated: int = 0
    unchanged: int = 0
    quarantined: int = 0
    reasons: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    error: str | None = None

    @property
    def file(self) -> str:
        return ", ".join(self.files)

    @property
    def loaded(self) -> int:
        return self.inserted + self.updated + self.unchanged

    def count(self, reason: str, n: int = 1) -> None:
        kind = reason.split(":")[0]
        self.quarantined += n
        self.reasons[kind] = self.reasons.get(kind, 0) + n


@dataclass
class IngestReport:
    tables: list[TableReport] = field(default_factory=list)
    unknown_files: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def loaded(self) -> int:
        return sum(t.loaded for t in self.tables)

    @property
    def quarantined(self) -> int:
        return sum(t.quarantined for t in self.tables)

    @property
    def changed(self) -> int:
        return sum(t.inserted + t.updated for t in self.tables)

    @property
    def failed(self) -> list[TableReport]:
        return [t for t in self.tables if t.error]

    def summary(self) -> str:
        lines = [
            f"{'table':22} {'read':>6} {'new':>6} {'updated':>7} {'same':>6} {'bad':>5}  file",
        ]
        for t in self.tables:
            lines.append(
                f"{t.table:22} {t.read:6} {t.inserted:6} {t.updated:7} {t.unchanged:6}"
                f" {t.quarantined:5}  {t.file}"
            )
            lines += [f"{'':24}{note}" for note in t.notes]
            for reason, n in sorted(t.reasons.items()):
                lines.append(f"{'':24}quarantined {n} × {reason}")
            if t.error:
                lines.append(f"{'':24}FAILED, nothing of this table was stored: {t.error}")
        for name in self.unknown_files:
            lines.append(
                f"ignored {name}: not a known table (expected one of {', '.join(LOAD_ORDER)})"
            )
        lines.append(
            f"loaded {self.loaded} rows ({self.changed} new or changed), "
            f"quarantined {self.quarantined} (see the `quarantine` table)"
            + (f", in {self.seconds:.1f}s" if self.seconds else "")
        )
        return "\n".join(lines)


CHANGE_SEQUENCE = "source_change_seq"
DEPARTURES_TABLE = "source_departures"
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


# ---- reading: every file becomes a frame of text columns plus the rows it could not read ------


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


@dataclass
class Unreadable:
    """A row (or a whole file, `line` None) that could not be read, with why."""

    file: str
    line: int | None
    reason: str
    raw: str


@dataclass
class FileRead:
    frame: pl.DataFrame  # every column Utf8 (null = absent), plus _LINE, _FILE, _NESTED
    unreadable: list[Unreadable]


def _decode(path: Path, encoding: str) -> tuple[str, bool]:
    """The file's text and whether some bytes did not decode (they become lone surrogates)."""
    data = path.read_bytes()
    if codecs.lookup(encoding).name == "utf-8" and data.startswith(codecs.BOM_UTF8):
        data = data[len(codecs.BOM_UTF8) :]
    try:
        return data.decode(encoding), False
    except UnicodeDecodeError:
        return data.decode(encoding, errors="surrogateescape"), True


def _undecodable(path: Path, line: int, text: str, encoding: str) -> Unreadable:
    raw = text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return Unreadable(
        path.name,
        line,
        f"undecodable bytes: line {line} is not valid {encoding}"
        " (re-save the file as UTF-8, or ingest it with --encoding)",
        raw,
    )


def _text_cell(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, dict)):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def _frame(records: list[dict[str, Any]], lines: list[int], path: Path) -> pl.DataFrame:
    names = list(dict.fromkeys(k for r in records for k in r))
    columns = {n: [_text_cell(r.get(n)) for r in records] for n in names}
    nested = [
        "|" + "|".join(k for k, v in r.items() if isinstance(v, (list, dict))) + "|"
        for r in records
    ]
    frame = pl.DataFrame(
        {**columns, _NESTED: nested}, schema={**dict.fromkeys(names, pl.Utf8), _NESTED: pl.Utf8}
    )
    return frame.with_columns(
        pl.Series(_LINE, lines, dtype=pl.Int64), pl.lit(path.name).alias(_FILE)
    )


def _read_jsonl(path: Path, encoding: str) -> FileRead:
    text, flawed = _decode(path, encoding)
    records: list[dict[str, Any]] = []
    lines: list[int] = []
    unreadable: list[Unreadable] = []
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        if flawed and _UNDECODABLE.search(line):
            unreadable.append(_undecodable(path, number, line, encoding))
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as err:
            unreadable.append(
                Unreadable(
                    path.name,
                    number,
                    f"unparsable JSON: {err.msg} (line {number}, column {err.colno})",
                    line,
                )
            )
            continue
        if not isinstance(value, dict):
            unreadable.append(
                Unreadable(
                    path.name,
                    number,
                    f"not a JSON object: line {number} holds a {type(value).__name__}",
                    line,
                )
            )
            continue
        records.append(value)
        lines.append(number)
    return FileRead(_frame(records, lines, path), unreadable)


def _read_csv(path: Path, encoding: str) -> FileRead:
    text, flawed = _decode(path, encoding)
    first = text.split("\n", 1)[0]
    separator = max(_SEPARATORS, key=first.count) if any(s in first for s in _SEPARATORS) else ","
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=separator)
    unreadable: list[Unreadable] = []
    header: list[str] | None = None
    records: list[dict[str, Any]] = []
    lines: list[int] = []
    start = 1
    while True:
        try:
            fields = next(reader)
        except StopIteration:
            break
        except csv.Error as err:
            unreadable.append(Unreadable(path.name, start, f"unparsable CSV: {err}", ""))
            start = reader.line_num + 1
            continue
        number, start = start, reader.line_num + 1
        if not any(f.strip() for f in fields):
            continue
        raw = separator.join(fields)
        if flawed and _UNDECODABLE.search(raw):
            unreadable.append(_undecodable(path, number, raw, encoding))
            continue
        if header is None:
            header = [f.strip() for f in fields]
            continue
        if len(fields) != len(header):
            unreadable.append(
                Unreadable(
                    path.name,
                    number,
                    f"wrong field count: line {number} has {len(fields)} fields,"
                    f" the header has {len(header)}",
                    raw,
                )
            )
            continue
        records.append({h: (f if f != "" else None) for h, f in zip(header, fields, strict=True)})
        lines.append(number)
    frame = _frame(records, lines, path)
    for name in header or []:  # a header-only file still names its columns
        if name not in frame.columns:
            frame = frame.with_columns(pl.lit(None, dtype=pl.Utf8).alias(name))
    return FileRead(frame, unreadable)


def _read_parquet(path: Path) -> FileRead:
    frame = pl.read_parquet(path)
    nested = [n for n, t in frame.schema.items() if t.is_nested()]
    text = frame.select(
        pl.lit(None, dtype=pl.Utf8).alias(n) if n in nested else pl.col(n).cast(pl.Utf8)
        for n in frame.columns
    )
    marker = pl.concat_str(
        [pl.lit("|"), *(pl.when(pl.col(n).is_not_null()).then(pl.lit(f"{n}|")) for n in nested)],
        ignore_nulls=True,
    )
    return FileRead(
        text.with_columns(
            frame.with_columns(marker.alias(_NESTED))[_NESTED],
            pl.int_range(1, frame.height + 1, dtype=pl.Int64).alias(_LINE),
            pl.lit(path.name).alias(_FILE),
        ),
        [],
    )


def read_file(path: Path, encoding: str = "utf-8") -> FileRead:
    """One file as text columns, or one `Unreadable` for the whole file when it cannot be read."""
    try:
        suffix = path.suffix.lower()
        if suffix == ".csv":
            return _read_csv(path, encoding)
        if suffix == ".parquet":
            return _read_parquet(path)
        return _read_jsonl(path, encoding)
    except (OSError, pl.exceptions.PolarsError, LookupError, ValueError) as err:
        reason = f"unreadable file: {type(err).__name__}: {err}".splitlines()[0][:500]
        return FileRead(_frame([], [], path), [Unreadable(path.name, None, reason, "")])


# ---- mapping a file's header onto the schema ---------------------------------------------------


def _normal(name: str) -> str:
    return re.sub(r"[\s\-]+", "_", name.strip().lower())


def map_columns(table: Table, names: Iterable[str]) -> tuple[dict[str, str], list[str]]:
    """Schema column → the file's header for it (its own name first, then its aliases, matched
    case- and spacing-insensitively), and the headers left unused."""
    names = list(names)
    by_normal: dict[str, str] = {}
    for name in names:
        by_normal.setdefault(_normal(name), name)
    mapping: dict[str, str] = {}
    for column in table.columns:
        for candidate in (column.name, *column.aliases):
            source = by_normal.get(candidate)
            if source is not None and source not in mapping.values():
                mapping[column.name] = source
                break
    return mapping, [n for n in names if n not in mapping.values()]


def _on_schema(table: Table, read: FileRead, file: str, report: TableReport) -> pl.DataFrame:
    """The file's rows under the schema's column names, with a `__missing` reason when a
    required column is absent, defaults for absent defaulted columns, nulls for absent optional."""
    frame = read.frame
    mapping, unused = map_columns(table, [c for c in frame.columns if not c.startswith("__")])
    renamed = [f"'{src}' as {dst}" for dst, src in mapping.items() if src != dst]
    if renamed:
        report.notes.append(f"{file}: read column {', '.join(renamed)}")
    if unused:
        report.notes.append(f"{file}: ignored column(s) {', '.join(unused)} (not in the schema)")
    missing = [c for c in table.columns if c.name not in mapping and c.required and not c.default]
    if missing and frame.height:
        accepted = "; ".join(f"{c.name}: {', '.join((c.name, *c.aliases))}" for c in missing)
        report.notes.append(
            f"{file}: MISSING required column(s) {', '.join(c.name for c in missing)}:"
            f" all {frame.height} rows quarantined (accepted names — {accepted})"
        )
    exprs = []
    for column in table.columns:
        if column.name in mapping:
            exprs.append(pl.col(mapping[column.name]).alias(column.name))
        else:
            if column.default and frame.height:
                report.notes.append(
                    f"{file}: no {column.name} column, every row gets '{column.default}'"
                )
            exprs.append(pl.lit(column.default, dtype=pl.Utf8).alias(column.name))
    nested = pl.concat_str(
        [
            pl.lit("|"),
            *(
                pl.when(pl.col(_NESTED).str.contains(f"|{src}|", literal=True)).then(
                    pl.lit(f"{dst}|")
                )
                for dst, src in mapping.items()
            ),
        ],
        ignore_nulls=True,
    )
    reason = f"missing required column: {', '.join(c.name for c in missing)}" if missing else None
    return frame.select(
        *exprs,
        nested.alias(_NESTED),
        pl.lit(reason, dtype=pl.Utf8).alias("__missing"),
        pl.col(_LINE),
        pl.col(_FILE),
    )


# ---- column-wise validation --------------------------------------------------------------------


def _parse_timestamp(text: str) -> datetime | None:
    try:
        parsed = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed.astimezone(UTC).replace(tzinfo=None) if parsed.tzinfo else parsed


def _by_value(values: pl.Series, fn: Any) -> dict[str, Any]:
    """`fn` over the distinct values only: a column of 100k ids has far fewer odd spellings."""
    return {v: fn(v) for v in values.drop_nulls().unique().to_list()}


def _typed(column: Column, frame: pl.DataFrame) -> tuple[pl.Expr, pl.Expr | None]:
    """The column converted to its SQL type, and the condition under which a present value does
    not convert (None when every text converts)."""
    c = pl.col(column.name)
    if column.sql_type == "INTEGER":
        number = c.str.strip_chars().cast(pl.Float64, strict=False)
        bad = c.is_not_null() & (
            number.is_null() | (number != number.floor()) | (number.abs() > 2**31 - 1)
        )
        return number.cast(pl.Int64, strict=False).cast(pl.Int32, strict=False), bad
    if column.sql_type == "BOOLEAN":
        word = c.str.strip_chars().str.to_lowercase()
        return word.is_in(_TRUE), c.is_not_null() & ~word.is_in((*_TRUE, *_FALSE))
    if column.sql_type == "TIMESTAMP":
        parsed = _by_value(frame[column.name], _parse_timestamp)
        value = c.replace_strict(parsed, default=None, return_dtype=pl.Datetime("us"))
        return value, c.is_not_null() & value.is_null()
    return c, None


def _reasons(
    table: Table, frame: pl.DataFrame, parents: dict[str, pl.Series]
) -> tuple[pl.Expr, dict[str, pl.Expr]]:
    """The first reason each row is bad (null for a good row), and each column's typed value."""
    checks: list[tuple[pl.Expr, pl.Expr]] = [
        (pl.col("__missing").is_not_null(), pl.col("__missing")),
        (
            pl.col(table.key).is_not_null() & pl.col(table.key).is_duplicated(),
            pl.format("duplicate id: {} (rows at {})", pl.col(table.key), pl.col("__where")),
        ),
    ]
    typed: dict[str, pl.Expr] = {}
    for column in table.columns:
        name = column.name
        c = pl.col(name)
        checks.append(
            (
                pl.col(_NESTED).str.contains(f"|{name}|", literal=True),
                pl.lit(f"bad value: column '{name}' holds a JSON array or object, not one value"),
            )
        )
        if column.required:
            checks.append(
                (c.is_null(), pl.lit(f"bad value: missing value for required column '{name}'"))
            )
            checks.append(
                (
                    c.str.strip_chars() == "",
                    pl.lit(f"bad value: empty value for required column '{name}'"),
                )
            )
        if column.is_id:
            odd = frame.filter(~c.str.contains(CANONICAL_ASCII_ID))[name]
            problems = {v: p for v, p in _by_value(odd, id_problem).items() if p}
            if problems:
                reasons = {v: f"bad id in column '{name}': {p}: {v!r}" for v, p in problems.items()}
                checks.append(
                    (
                        c.is_in(list(problems)),
                        c.replace_strict(reasons, default=None, return_dtype=pl.Utf8),
                    )
                )
        elif column.sql_type == "VARCHAR":
            checks.append(
                (
                    c.str.contains("\x00", literal=True),
                    pl.lit(f"bad value: NUL character in column '{name}'"),
                )
            )
            checks.append(
                (
                    c.str.len_chars() > column.max_chars,
                    pl.format(
                        f"too long: column '{name}' has {{}} characters"
                        f" (limit {column.max_chars:,}; split or shorten it)",
                        c.str.len_chars(),
                    ),
                )
            )
        if column.choices:
            checks.append(
                (
                    c.is_not_null() & ~c.is_in(column.choices),
                    pl.format(
                        f"bad value: unknown {name} '{{}}' (expected one of"
                        f" {', '.join(column.choices)})",
                        c,
                    ),
                )
            )
        value, bad = _typed(column, frame)
        if bad is not None:
            checks.append(
                (
                    bad,
                    pl.format(
                        f"bad value: bad {column.sql_type.lower()} in column '{name}': {{}}", c
                    ),
                )
            )
        if not column.required and column.sql_type == "VARCHAR":
            value = pl.when(c.str.strip_chars() == "").then(None).otherwise(c)
        typed[name] = value
    for fk in table.foreign_keys:
        c = pl.col(fk.column)
        checks.append(
            (
                c.is_not_null() & ~c.is_in(parents[fk.column].implode()),
                pl.format(f"unknown reference: {fk.column} '{{}}' not in {fk.table}", c),
            )
        )
    reason: Any = pl
    for condition, text in checks:
        reason = reason.when(condition.fill_null(False)).then(text)
    return reason.otherwise(pl.lit(None, dtype=pl.Utf8)), typed


def content_hash(table: Table, row: dict[str, Any]) -> str:
    content = {c.name: row[c.name] for c in table.columns if c.name != "updated_at"}
    return hashlib.sha1(json.dumps(content, default=str, sort_keys=True).encode()).hexdigest()


def _quarantine(
    con: duckdb.DuckDBPyConnection, table: Table, rows: list[dict[str, Any]], report: TableReport
) -> None:
    """Store bad rows (`key`, `reason`, `raw`, `file`, `line`) and count them by reason."""
    if not rows:
        return
    frame = pl.DataFrame(
        {
            "table_name": [table.name] * len(rows),
            "row_key": [r["key"] for r in rows],
            "reason": [r["reason"] for r in rows],
            "raw": [r["raw"] for r in rows],
            "raw_hash": [hashlib.sha1(r["raw"].encode()).hexdigest() for r in rows],
            "source_file": [r["file"] for r in rows],
            "line": [r["line"] for r in rows],
        },
        schema_overrides={"row_key": pl.Utf8, "line": pl.Int32},
    ).unique(["raw_hash", "reason"], keep="first", maintain_order=True)
    bad_rows = _ArrowStream(frame)  # noqa: F841 - scanned by name in the SQL below
    con.execute(
        "INSERT OR IGNORE INTO quarantine (table_name, row_key, reason, raw, raw_hash,"
        " source_file, quarantined_at, line) SELECT table_name, row_key, reason, raw, raw_hash,"
        " source_file, now(), line FROM bad_rows"
    )
    for r in rows:
        report.count(r["reason"])


def _load_table(
    con: duckdb.DuckDBPyConnection, table: Table, reads: list[FileRead], report: TableReport
) -> None:
    unreadable = [u for r in reads for u in r.unreadable]
    report.read = sum(r.frame.height for r in reads) + sum(1 for u in unreadable if u.line)
    _quarantine(
        con,
        table,
        [
            {"key": None, "reason": u.reason, "raw": u.raw, "file": u.file, "line": u.line}
            for u in unreadable
        ],
        report,
    )
    frames = [_on_schema(table, r, r.frame[_FILE][0], report) for r in reads if r.frame.height]
    if not frames:
        return
    frame = pl.concat(frames, how="vertical_relaxed")
    where = (
        frame.filter(pl.col(table.key).is_duplicated() & pl.col(table.key).is_not_null())
        .group_by(table.key)
        .agg(
            pl.format("{}:{}", pl.col(_FILE), pl.col(_LINE)).head(5).str.join(", ").alias("__where")
        )
    )
    frame = frame.join(where, on=table.key, how="left", nulls_equal=False)
    parents = {
        fk.column: _keys(con, f"SELECT {TABLES_BY_NAME[fk.table].key} FROM {fk.table}").to_series()
        for fk in table.foreign_keys
    }
    reason, typed = _reasons(table, frame, parents)
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
                "file": row[_FILE],
                "line": row[_LINE],
            }
            for row in bad.iter_rows(named=True)
        ],
        report,
    )
    good = checked.filter(pl.col("__reason").is_null()).select(*(typed[n].alias(n) for n in names))
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
    src_dir: Path | str, sources_db: Path | str, encoding: str = "utf-8"
) -> IngestReport:
    """Load every table file of `src_dir`; one table's failure never stops the others."""
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
            con.execute("BEGIN TRANSACTION")
            try:
                _load_table(con, table, reads, table_report)
                con.execute("COMMIT")
            except Exception as err:  # noqa: BLE001 - reported per table; the others still load
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


def quarantine_counts(con: duckdb.DuckDBPyConnection) -> dict[str, int]:
    return dict(con.execute("SELECT table_name, count(*) FROM quarantine GROUP BY 1").fetchall())

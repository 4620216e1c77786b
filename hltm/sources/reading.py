"""Each file as text columns under the schema's names, plus the rows that could not be read."""

from __future__ import annotations

import codecs
import csv
import hashlib
import io
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import polars as pl

from hltm.sources.language import detect_language
from hltm.sources.report import TableReport
from hltm.sources.schema import Table

SUFFIXES = (".jsonl", ".ndjson", ".csv", ".parquet")
LINE = "__line"  # bookkeeping columns added to every frame read
FILE = "__file"
NESTED = "__nested"  # JSONL: "|a|b|" = columns whose value was an array or object
UNDECODABLE = re.compile("[\udc80-\udcff]")  # what surrogateescape leaves for a bad byte
_SEPARATORS = (",", ";", "\t", "|")
_BINARY_PROBE = 8192  # characters looked at for a NUL, as git and `file` decide "binary"


# ---- reading: every file becomes a frame of text columns plus the rows it could not read ------


@dataclass
class Unreadable:
    """A row (or a whole file, `line` None) that could not be read, with why; `fields`: the
    row's values by header when they could still be told apart (a line with a bad byte), so its
    id names it in the quarantine."""

    file: str
    line: int | None
    reason: str
    raw: str
    fields: dict[str, Any] | None = None


@dataclass
class FileRead:
    frame: pl.DataFrame  # every column Utf8 (null = absent), plus LINE, FILE, NESTED
    unreadable: list[Unreadable]
    name: str = ""  # the file's name
    digest: str = ""  # sha1 of its bytes: what the quarantine knows the file by


class BinaryFile(ValueError):
    """A file named as text (`.csv`, `.jsonl`) that holds binary data: refused as a whole, not
    quarantined line by line as garbage."""


def _decode(path: Path, encoding: str) -> tuple[str, bool]:
    """The file's text and whether some bytes did not decode (they become lone surrogates).
    Text in any encoding has no NUL character; binary data (a spreadsheet, an archive, an
    image renamed `.csv`) has them from its first bytes."""
    data = path.read_bytes()
    if codecs.lookup(encoding).name == "utf-8" and data.startswith(codecs.BOM_UTF8):
        data = data[len(codecs.BOM_UTF8) :]
    try:
        text, flawed = data.decode(encoding), False
    except UnicodeDecodeError:
        text, flawed = data.decode(encoding, errors="surrogateescape"), True
    nul = text.find("\x00", 0, _BINARY_PROBE)
    if nul >= 0:
        raise BinaryFile(
            f"binary content, not {encoding} text (a NUL character at offset {nul}):"
            f" export the table as CSV, JSONL or Parquet"
        )
    return text, flawed


def _undecodable(
    path: Path, line: int, text: str, encoding: str, fields: dict[str, Any] | None = None
) -> Unreadable:
    raw = text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return Unreadable(
        path.name,
        line,
        f"undecodable bytes: line {line} is not valid {encoding}",
        raw,
        fields,
    )


def _json_fields(line: str) -> dict[str, Any] | None:
    try:
        value = json.loads(line)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


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
        {**columns, NESTED: nested}, schema={**dict.fromkeys(names, pl.Utf8), NESTED: pl.Utf8}
    )
    return frame.with_columns(pl.Series(LINE, lines, dtype=pl.Int64), pl.lit(path.name).alias(FILE))


def _read_jsonl(path: Path, encoding: str) -> FileRead:
    text, flawed = _decode(path, encoding)
    records: list[dict[str, Any]] = []
    lines: list[int] = []
    unreadable: list[Unreadable] = []
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        if flawed and UNDECODABLE.search(line):
            unreadable.append(_undecodable(path, number, line, encoding, _json_fields(line)))
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
        if flawed and UNDECODABLE.search(raw):
            values = (
                dict(zip(header, fields, strict=True))
                if header is not None and len(fields) == len(header)
                else None
            )
            unreadable.append(_undecodable(path, number, raw, encoding, values))
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
            frame.with_columns(marker.alias(NESTED))[NESTED],
            pl.int_range(1, frame.height + 1, dtype=pl.Int64).alias(LINE),
            pl.lit(path.name).alias(FILE),
        ),
        [],
    )


def _digest(path: Path) -> str:
    sha = hashlib.sha1()
    try:
        with path.open("rb") as f:
            while chunk := f.read(1 << 20):
                sha.update(chunk)
    except OSError:
        return ""
    return sha.hexdigest()


def read_file(path: Path, encoding: str = "utf-8") -> FileRead:
    """One file as text columns, or one `Unreadable` for the whole file when it cannot be read."""
    digest = _digest(path)
    try:
        suffix = path.suffix.lower()
        if suffix == ".csv":
            read = _read_csv(path, encoding)
        elif suffix == ".parquet":
            read = _read_parquet(path)
        else:
            read = _read_jsonl(path, encoding)
    except (OSError, pl.exceptions.PolarsError, LookupError, ValueError) as err:
        reason = f"unreadable file: {type(err).__name__}: {err}".splitlines()[0][:500]
        read = FileRead(_frame([], [], path), [Unreadable(path.name, None, reason, "")])
    return replace(read, name=path.name, digest=digest)


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


def _most_first(row: tuple[str | None, int]) -> tuple[int, bool, str]:
    """Value counts, most frequent first, then by value, undetected (None) last among equals."""
    value, count = row
    return -count, value is None, value or ""


def on_schema(
    table: Table,
    read: FileRead,
    file: str,
    report: TableReport,
    defaults: Mapping[str, str] | None = None,
) -> pl.DataFrame:
    """The file's rows under the schema's column names, with a `__missing` reason when a
    required column is absent. An absent column gets the caller's default (`defaults`, e.g.
    `hltm ingest --language en`), else the schema's, else a value detected from another column
    (`Column.detected_from`), else nulls; each such choice is noted in the report."""
    frame = read.frame
    defaults = defaults or {}
    mapping, unused = map_columns(table, [c for c in frame.columns if not c.startswith("__")])
    renamed = [f"'{src}' as {dst}" for dst, src in mapping.items() if src != dst]
    if renamed:
        report.notes.append(f"{file}: read column {', '.join(renamed)}")
    if unused:
        report.notes.append(f"{file}: ignored column(s) {', '.join(unused)} (not in the schema)")
    exprs = {
        c.name: pl.col(src).alias(c.name) for c in table.columns if (src := mapping.get(c.name))
    }
    for column in table.columns:
        if column.name in exprs or not frame.height:
            continue
        given = defaults.get(column.name) or column.default
        source = mapping.get(column.detected_from or "")
        if given:
            report.notes.append(f"{file}: no {column.name} column, every row gets '{given}'")
            exprs[column.name] = pl.lit(given, dtype=pl.Utf8).alias(column.name)
        elif source is not None:
            detected = frame[source].map_elements(detect_language, return_dtype=pl.Utf8)
            counts = ", ".join(
                f"{value or 'undetectable'} {n:,}"
                for value, n in sorted(detected.value_counts().rows(), key=_most_first)
            )
            report.notes.append(
                f"{file}: no {column.name} column, detected from {column.detected_from}: {counts}"
                f" (--{column.name.replace('_', '-')} sets one value for every row)"
            )
            exprs[column.name] = pl.lit(detected).alias(column.name)
    missing = [c for c in table.columns if c.name not in exprs and c.required]
    if missing and frame.height:
        report.notes.append(
            f"{file}: MISSING required column(s) {', '.join(c.name for c in missing)}:"
            f" all {frame.height} rows quarantined"
        )
    columns = [exprs.get(c.name, pl.lit(None, dtype=pl.Utf8).alias(c.name)) for c in table.columns]
    nested = pl.concat_str(
        [
            pl.lit("|"),
            *(
                pl.when(pl.col(NESTED).str.contains(f"|{src}|", literal=True)).then(
                    pl.lit(f"{dst}|")
                )
                for dst, src in mapping.items()
            ),
        ],
        ignore_nulls=True,
    )
    reason = f"missing required column: {', '.join(c.name for c in missing)}" if missing else None
    return frame.select(
        *columns,
        nested.alias(NESTED),
        pl.lit(reason, dtype=pl.Utf8).alias("__missing"),
        pl.col(LINE),
        pl.col(FILE),
    )

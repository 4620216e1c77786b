"""Why each row is bad, stated column-wise as polars expressions over whole columns."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import polars as pl

from hltm.sources.reading import NESTED
from hltm.sources.schema import CANONICAL_ASCII_ID, RESERVED_IN_IDS, Column, Table, id_problem

_TRUE = ("true", "1", "yes", "y", "t")
_FALSE = ("false", "0", "no", "n", "f")


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


def reasons(
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
                pl.col(NESTED).str.contains(f"|{name}|", literal=True),
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
            odd = frame.filter(
                ~c.str.contains(CANONICAL_ASCII_ID) | c.str.contains(RESERVED_IN_IDS, literal=True)
            )[name]
            problems = {v: p for v, p in _by_value(odd, id_problem).items() if p}
            if problems:
                why = {v: f"bad id in column '{name}': {p}: {v!r}" for v, p in problems.items()}
                checks.append(
                    (
                        c.is_in(list(problems)),
                        c.replace_strict(why, default=None, return_dtype=pl.Utf8),
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
                        f" (limit {column.max_chars:,})",
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

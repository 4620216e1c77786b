"""DuckDB files: one for the sources users ingest, one for everything derived from them.

A DuckDB file has one writer process at a time, so connections are short-lived and a busy file
is retried briefly instead of failing the first time a sensor and a run meet.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb

_LOCK_RETRIES = 20
_LOCK_WAIT_S = 0.25


@contextmanager
def connect(path: Path | str, read_only: bool = False) -> Iterator[duckdb.DuckDBPyConnection]:
    path = Path(path)
    if read_only and not path.exists():
        raise FileNotFoundError(
            f"{path} does not exist yet: ingest sources first (`hltm ingest` or `hltm demo`)"
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    for attempt in range(_LOCK_RETRIES):
        try:
            con = duckdb.connect(str(path), read_only=read_only)
            break
        except duckdb.IOException as err:
            if "lock" not in str(err).lower() or attempt == _LOCK_RETRIES - 1:
                raise
            time.sleep(_LOCK_WAIT_S * (attempt + 1))
    try:
        yield con
    finally:
        con.close()


def table_exists(con: duckdb.DuckDBPyConnection, name: str) -> bool:
    row = con.execute(
        "SELECT count(*) FROM information_schema.tables WHERE table_name = ?", [name]
    ).fetchone()
    return bool(row and row[0])

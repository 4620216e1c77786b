"""DuckDB files: one for the sources users ingest, one for everything derived from them.

A DuckDB file has one writer process at a time, so connections are short-lived and a busy file
is retried briefly instead of failing the first time a sensor and a run meet. A caller that must
answer within a bounded time (the query path) passes `wait_s` and gets `DatabaseBusy` when the
file stays locked that long.

A file that cannot be used is a `StoreError` naming it, what is wrong and what to do, whether
`connect` meets the problem opening the file or in a statement of its block: a full disk, a
read-only one (a file that cannot be opened for writing is opened read-only, so readers go on
working and the first write says why it cannot be done), or a damaged file (`corrupt`). Any
other error of a statement (a constraint, a missing table) is the caller's and passes unchanged.

The server profile (`HLTM_DATABASE_URL`) keeps the shared stores — sources, derived, the query
log — in PostgreSQL instead, one schema each, named by the file they replace (`SERVER_STORES`);
`connect` then yields a connection taking the same statements (`hltm.postgres`), and the host's
own caches stay DuckDB files. Callers ask `store_exists` and `change_token` rather than the file.
"""

from __future__ import annotations

import contextlib
import gc
import os
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb
import numpy as np

from hltm.errors import BUSY, DAMAGED, READ_ONLY, UNAVAILABLE, StoreError, disk_fault
from hltm.settings import database_url, without_password

if TYPE_CHECKING:
    import polars as pl

_LOCK_RETRIES = 20
_LOCK_WAIT_S = 0.25
# How DuckDB says a file's bytes are not what it wrote: a file cut short, a header that is not
# DuckDB's, a block whose checksum fails.
_CORRUPT_TEXTS = (
    "could not read enough bytes",
    "not a valid duckdb database file",
    "corrupt database file",
)
# What to do when a file of the data dir is damaged, by its name (`Settings`, `hltm.query.log`).
_RECOVERY = {
    "sources.duckdb": "restore it from a backup, or move it aside and load your export again"
    " (`hltm ingest DIR`, then `hltm refresh`)",
    "derived.duckdb": "restore it from a backup, or move it aside with derived.journal-head.json"
    " and run `hltm refresh`: memory, calibrations, judge scores and rankings are rebuilt from"
    " the sources (with LLM calls); API tokens must be created again and the ranking journal"
    " starts anew",
}


# The stores a server profile keeps in PostgreSQL: the schema of each (its file's name without
# `.duckdb`, which an ATTACH of the file is also read as), by its embedded file's name.
SERVER_STORES = {
    "sources.duckdb": "sources",
    "derived.duckdb": "derived",
    "query_log.duckdb": "query_log",
}


def server_store(path: Path | str) -> tuple[str, str] | None:
    """(database URL, schema) of a store the server profile keeps in PostgreSQL; None for a
    DuckDB file (the embedded profile, or a host's cache)."""
    url = database_url()
    schema = SERVER_STORES.get(Path(path).name)
    return (url, schema) if url and schema else None


def store_exists(path: Path | str) -> bool:
    """Whether a store has been written yet: its file, or its schema's tables."""
    server = server_store(path)
    if server is None:
        return Path(path).exists()
    from hltm import postgres

    with _server_faults(*server):
        return postgres.schema_exists(*server)


ChangeToken = tuple[Any, ...]


def change_token(path: Path | str) -> ChangeToken:
    """Changes whenever a store is written, replaced or removed: the stat (inode, size, mtime)
    of a DuckDB file and of its write-ahead log, or the database's write position."""
    server = server_store(path)
    if server is not None:
        from hltm import postgres

        with _server_faults(*server):
            return postgres.change_token(*server)
    out: list[tuple[int, int, int] | None] = []
    for name in (str(path), f"{path}.wal"):
        try:
            st = os.stat(name)
        except FileNotFoundError:
            out.append(None)
            continue
        out.append((st.st_ino, st.st_size, st.st_mtime_ns))
    return tuple(out)


def migrate_to_server(data_dir: Path, replace: bool = False) -> dict[str, dict[str, int]]:
    """Copy a data dir's DuckDB stores (`SERVER_STORES` present in it) into the server
    profile's database (`HLTM_DATABASE_URL`); rows copied, by store and table. The files stay
    as they were: the embedded profile still reads them until the setting is made."""
    url = database_url()
    if not url:
        raise ValueError("HLTM_DATABASE_URL is not set: name the PostgreSQL database to copy to")
    from hltm import postgres

    copied = {}
    for name, schema in SERVER_STORES.items():
        path = Path(data_dir) / name
        if path.exists():
            with _server_faults(url, schema):
                copied[schema] = postgres.copy_store(path, url, schema, replace)
    return copied


@contextmanager
def _server_faults(url: str, schema: str) -> Iterator[None]:
    """A database that cannot be reached, as the `StoreError` of the store."""
    from hltm import postgres

    try:
        yield
    except postgres.OPERATIONAL as err:
        raise StoreError(
            f"the {schema} store at {without_password(url)}",
            f"PostgreSQL failed ({str(err).strip().splitlines()[0][:160]})",
            "check that it is running and that HLTM_DATABASE_URL names it",
            UNAVAILABLE,
        ) from err


class DatabaseBusy(StoreError):
    """Another process holds the DuckDB file (its single-writer lock) longer than we may wait."""

    def __init__(self, path: Path, waited_s: float) -> None:
        super().__init__(
            path,
            f"locked by another process (waited {waited_s:.1f} s)",
            "retry in a moment (a refresh or a delete is writing it)",
            BUSY,
        )
        self.path = path
        self.waited_s = waited_s


def corrupt(path: Path, detail: str) -> StoreError:
    """A damaged DuckDB file, with what to do about the file it is."""
    remedy = _RECOVERY.get(path.name, "move it aside and run the command again")
    return StoreError(
        path, f"the file is damaged ({detail.splitlines()[0][:160]})", remedy, DAMAGED
    )


def store_fault(path: Path, err: BaseException) -> StoreError | None:
    """The `StoreError` behind a DuckDB or OS error on `path`; None for any other error."""
    if isinstance(err, StoreError):
        return err
    if not isinstance(err, duckdb.Error | OSError):
        return None
    if fault := disk_fault(path, err):
        return fault
    text = str(err).lower()
    if isinstance(err, duckdb.Error) and any(t in text for t in _CORRUPT_TEXTS):
        return corrupt(path, str(err))
    if isinstance(err, duckdb.FatalException):  # a write failed and the instance gave up
        return StoreError(
            path, f"a write failed ({str(err)[:160]})", "run the command again", UNAVAILABLE
        )
    return None


def _is_lock_error(err: duckdb.IOException) -> bool:
    return "lock" in str(err).lower()


def _open(
    path: Path, read_only: bool, wait_s: float | None, config: dict[str, str] | None = None
) -> duckdb.DuckDBPyConnection:
    started = time.monotonic()
    attempt = 0
    while True:
        try:
            return duckdb.connect(str(path), read_only=read_only, config=config or {})
        except duckdb.Error as err:
            if not (isinstance(err, duckdb.IOException) and _is_lock_error(err)):
                fault = store_fault(path, err)
                if fault is None:
                    raise
                if fault.kind == READ_ONLY and not read_only and path.exists():
                    read_only = True  # readers go on; a write says why it cannot be done
                    continue
                raise fault from err
            waited = time.monotonic() - started
            if wait_s is None:
                if attempt == _LOCK_RETRIES - 1:
                    raise DatabaseBusy(path, waited) from err
                pause = _LOCK_WAIT_S * (attempt + 1)
            else:
                if waited >= wait_s:
                    raise DatabaseBusy(path, waited) from err
                pause = min(0.05 * (attempt + 1), wait_s - waited)
        time.sleep(pause)
        attempt += 1


@contextmanager
def connect(
    path: Path | str, read_only: bool = False, wait_s: float | None = None
) -> Iterator[duckdb.DuckDBPyConnection]:
    """A short-lived connection; a locked file is retried (about 50 s in all, or `wait_s`).
    A server-profile store is a PostgreSQL schema, where nothing is locked for readers."""
    path = Path(path)
    server = server_store(path)
    if server is not None:
        with _server_faults(*server):
            yield from _server_connection(*server, read_only)
        return
    if read_only and not path.exists():
        raise FileNotFoundError(
            f"{path} does not exist yet: ingest sources first (`hltm ingest` or `hltm demo`)"
        )
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise (store_fault(path, err) or err) from err
    con = _open(path, read_only, wait_s)
    try:
        yield con
    except (duckdb.Error, OSError) as err:
        fault = store_fault(path, err)
        if fault is None:
            raise
        raise fault from err
    finally:
        # A connection whose file failed under it has nothing left to close.
        with contextlib.suppress(duckdb.Error):
            con.close()


def _server_connection(url: str, schema: str, read_only: bool) -> Iterator[Any]:
    from hltm import postgres

    con = postgres.connection(url, schema)
    if read_only and not postgres.schema_exists(url, schema):
        raise FileNotFoundError(
            f"the {schema} store at {without_password(url)} is empty yet: ingest sources first"
            " (`hltm ingest` or `hltm demo`)"
        )
    try:
        yield con
    finally:
        con.close()


def table_exists(con: Any, name: str, database: str | None = None) -> bool:
    """Whether table `name` is in the connection's store, or in the store attached to it as
    `database` (`ATTACH … AS database`)."""
    if database is None:
        where, value = "table_schema = current_schema()", None
    elif isinstance(con, duckdb.DuckDBPyConnection):
        where, value = "table_catalog = ?", database
    else:
        where, value = "table_schema = ?", con.attached[database]
    row = con.execute(
        f"SELECT count(*) FROM information_schema.tables WHERE table_name = ? AND {where}",
        [name] if value is None else [name, value],
    ).fetchone()
    return bool(row and row[0])


def insert_rows(
    con: duckdb.DuckDBPyConnection,
    statement: str,
    rows: Sequence[Sequence[Any]],
    columns: Sequence[str] | None = None,
) -> None:
    """``{statement} [(columns)] …`` for every row, as one statement over one list per column.

    DuckDB's ``executemany`` runs row by row (seconds for a few thousand rows, the judge's and
    journal's usual batch); unnesting column lists inserts the same rows in milliseconds.
    ``statement`` is e.g. ``INSERT OR IGNORE INTO judge_scores``; without ``columns`` the rows
    fill the table's columns in order."""
    if not rows:
        return
    width = len(rows[0])
    names = f" ({', '.join(columns)})" if columns else ""
    if not isinstance(con, duckdb.DuckDBPyConnection):  # PostgreSQL: one pipelined batch
        values = ", ".join("?" * width)
        con.executemany(
            f"{statement}{names} VALUES ({values})", [[_plain(v) for v in row] for row in rows]
        )
        return
    unnests = ", ".join(f"unnest(${i + 1})" for i in range(width))
    con.execute(
        f"{statement}{names} SELECT * FROM (SELECT {unnests})",
        [[_plain(row[i]) for row in rows] for i in range(width)],
    )


class _ArrowStream:
    """A polars frame as a plain Arrow C stream, which DuckDB scans without pyarrow installed."""

    def __init__(self, frame: pl.DataFrame) -> None:
        self.frame = frame

    def __arrow_c_stream__(self, requested_schema: object = None) -> object:
        return self.frame.__arrow_c_stream__(requested_schema)


def insert_frame(con: Any, statement: str, frame: pl.DataFrame, tail: str = "") -> None:
    """``{statement} (frame's columns) <its rows> {tail}``: DuckDB scans the frame where it is
    (Arrow), PostgreSQL gets its rows in one pipelined batch. `tail` is e.g. an ``ON CONFLICT``
    clause, which both read alike."""
    if not frame.height:
        return
    columns = ", ".join(frame.columns)
    if isinstance(con, duckdb.DuckDBPyConnection):
        rows = _ArrowStream(frame)  # noqa: F841 - scanned by name in the SQL below
        con.execute(f"{statement} ({columns}) SELECT {columns} FROM rows{tail}")
    else:
        values = ", ".join("?" * frame.width)
        con.executemany(f"{statement} ({columns}) VALUES ({values}){tail}", frame.rows())


def serialize_writers(con: Any, name: str) -> None:
    """Make the open transaction wait for any other holding `name` until it ends. A DuckDB
    file has one writer process already; in PostgreSQL, writers that read before they write
    (the query log's inserts against its deletions) would otherwise interleave. Readers are
    never held."""
    if not isinstance(con, duckdb.DuckDBPyConnection):
        con.execute("SELECT pg_advisory_xact_lock(hashtext(?))", [name])


def _plain(value: Any) -> Any:
    """A NumPy scalar as its Python value (DuckDB converts those, not NumPy's, inside a list)."""
    return value.item() if isinstance(value, np.generic) else value


def rewrite_live_rows(path: Path | str) -> bool:
    """Copy a DuckDB file's live contents into a fresh file and swap it in; False (nothing
    done) while another connection of this process has the file open. A server-profile store
    is rewritten by `VACUUM FULL` of its tables (`hltm.postgres.vacuum_full`).

    A deleted row's values stay in the file: in its row group (marked deleted) until the group
    is rewritten, and in freed blocks, which DuckDB reuses but never clears; CHECKPOINT and
    VACUUM leave both. A copy holds live rows only. The old file's lock is held throughout, so
    no other process opens it meanwhile and loses a write to the replaced file; and it is
    opened with a configuration of its own, which DuckDB refuses while this process already
    has an instance of the file (that instance would go on writing to the replaced file)."""
    path = Path(path)
    server = server_store(path)
    if server is not None:  # PostgreSQL: every table of the store rewritten
        from hltm import postgres

        with _server_faults(*server):
            postgres.vacuum_full(*server)
        return True
    fresh = path.with_name(f"{path.name}.rewrite")
    for stale in (fresh, fresh.with_name(f"{fresh.name}.wal")):
        stale.unlink(missing_ok=True)
    gc.collect()  # unreachable results of finished work can still hold an instance open
    try:
        con = _open(path, False, None, config={"custom_user_agent": "hltm-rewrite"})
    except duckdb.ConnectionException:
        return False
    try:
        con.execute("CHECKPOINT")
        row = con.execute("SELECT current_database()").fetchone()
        assert row is not None
        con.execute("ATTACH ? AS rewritten", [str(fresh)])
        try:
            con.execute(f'COPY FROM DATABASE "{row[0]}" TO rewritten')
        finally:
            con.execute("DETACH rewritten")
        os.replace(fresh, path)
    finally:
        con.close()
    return True

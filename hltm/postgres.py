"""The server profile's side of the warehouse: a store kept in a PostgreSQL schema, reached
through a connection that takes the same statements as DuckDB.

Every query of the product is written once, in the SQL both databases share; this connection
translates the few DuckDB forms the stores use (`?` and `$n` parameters, `INSERT OR IGNORE`,
`INSERT OR REPLACE`, `DOUBLE`, `BLOB`) as it sends them. Each store is a schema of one database
(`sources`, `derived`, `query_log`), so the statements name their tables unqualified, as they do
in their own DuckDB file. What PostgreSQL lacks of DuckDB's functions is defined in the schema
(`hash` of text values, for the tree's fingerprint), and a missing table or column raises
DuckDB's error classes, so a caller has one `except` for both.

PostgreSQL readers never wait on writers (MVCC), so a connection is kept open per thread and
store and reused: nothing is locked by holding it, and the ~25 ms a DuckDB file costs to open
is not paid per request. The run locks (`hltm.runlock`) are the database's advisory locks, a
run's on a connection of its own.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import socket
import struct
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import duckdb
import psycopg
from psycopg import errors as pg_errors
from psycopg import sql
from psycopg.adapt import Loader

from hltm.settings import without_password

# The quoted parts of a statement (left as they are) and the rest (translated).
_QUOTED = re.compile(r"('(?:[^']|'')*'|\"(?:[^\"]|\"\")*\")")
_DOLLAR = re.compile(r"\$(\d+)")
_ATTACH = re.compile(r"^\s*ATTACH\s+'((?:[^']|'')*)'\s+AS\s+(\w+)", re.IGNORECASE)
_DETACH = re.compile(r"^\s*DETACH\s+(\w+)\s*$", re.IGNORECASE)
_INSERT_OR = re.compile(r"^\s*INSERT\s+OR\s+(IGNORE|REPLACE)\s+INTO\s+", re.IGNORECASE)
_TARGET = re.compile(r"^\s*([A-Za-z_][\w.]*)\s*(\(([^)]*)\))?", re.DOTALL)
_RETURNING = re.compile(r"\sRETURNING\s", re.IGNORECASE)
_TYPES = (
    (re.compile(r"\bDOUBLE\b(?!\s+PRECISION)", re.IGNORECASE), "DOUBLE PRECISION"),
    (re.compile(r"\bBLOB\b", re.IGNORECASE), "BYTEA"),
    # DuckDB's FLOAT has 4 bytes, PostgreSQL's 8: a vector stored as REAL reads back as in DuckDB.
    (re.compile(r"\bFLOAT\b", re.IGNORECASE), "REAL"),
)
# A text column sorts, compares and aggregates in byte order, as DuckDB's does, whatever the
# database's default collation (a managed PostgreSQL's is usually a language's, where 'B' follows
# 'a'): the column carries it, and every expression over the column inherits it.
_DDL = re.compile(r"^\s*(CREATE|ALTER)\s+(TEMP\w*\s+)?TABLE\b", re.IGNORECASE)
_IF_NOT_EXISTS = re.compile(
    r"^\s*CREATE\s+(UNIQUE\s+)?(TABLE|INDEX)\s+IF\s+NOT\s+EXISTS\b", re.IGNORECASE
)
_MADE_MEANWHILE = (pg_errors.UniqueViolation, pg_errors.DuplicateTable, pg_errors.DuplicateObject)
_TEXT_COLUMN = re.compile(r"\bVARCHAR\b(\s*\[\])?", re.IGNORECASE)
# A text holds no NUL in PostgreSQL: a statement that hashes DuckDB's NULL marker `chr(0)` marks
# with U+0001 instead, and its md5 hashes the bytes DuckDB hashes (`md5_with_nul`, below).
_NUL = re.compile(r"\bchr\(0\)", re.IGNORECASE)
_MD5 = re.compile(r"\bmd5\(", re.IGNORECASE)
_local = threading.local()
log = logging.getLogger(__name__)


def _outside_quotes(sql: str, change: Any) -> str:
    parts = _QUOTED.split(sql)
    return "".join(part if i % 2 else change(part) for i, part in enumerate(parts))


def translate(sql: str, params: Sequence[Any] | None) -> tuple[str, list[Any] | None]:
    """A DuckDB statement's PostgreSQL text and parameters (`INSERT OR …` aside)."""
    if _DDL.match(sql):
        sql = _outside_quotes(sql, lambda t: _TEXT_COLUMN.sub(r'\g<0> COLLATE "C"', t))
    if _NUL.search(sql):
        sql = _outside_quotes(sql, lambda t: _MD5.sub("md5_with_nul(", _NUL.sub("chr(1)", t)))
    if params is None:
        return _outside_quotes(sql, _types), None
    order: list[int] = []

    def placeholders(text: str) -> str:
        text = _types(text).replace("%", "%%")
        if "$" in text:

            def numbered(match: re.Match[str]) -> str:
                order.append(int(match.group(1)) - 1)
                return "%s"

            return _DOLLAR.sub(numbered, text)
        return text.replace("?", "%s")

    # A literal's '%' must be doubled too: psycopg reads the whole text for placeholders.
    parts = _QUOTED.split(sql)
    text = "".join(
        part.replace("%", "%%") if i % 2 else placeholders(part) for i, part in enumerate(parts)
    )
    values = list(params)
    return text, [values[i] for i in order] if order else values


def _types(text: str) -> str:
    for pattern, name in _TYPES:
        text = pattern.sub(name, text)
    return text


class _Float4Loader(Loader):
    """A REAL read as the 4-byte float it is, as DuckDB reads a FLOAT (PostgreSQL's text of
    0.2::real is '0.2', which Python would read as the 8-byte 0.2)."""

    def load(self, data: Any) -> float:
        return float(struct.unpack("f", struct.pack("f", float(bytes(data))))[0])


class PostgresConnection:
    """What the stores use of a DuckDB connection (`execute`, `executemany`, `fetchone`,
    `fetchall`, `close`), on one schema of a PostgreSQL database, in autocommit mode as
    DuckDB's: a statement is its own transaction unless the caller says `BEGIN`."""

    def __init__(self, raw: psycopg.Connection[Any], schema: str) -> None:
        self.raw = raw
        self.schema = schema
        self._cursor: psycopg.Cursor[Any] | None = None
        self._keys: dict[str, tuple[list[str], list[str]]] = {}
        self.attached: dict[str, str] = {}  # DuckDB alias → the schema it names

    def execute(self, sql: str, params: Sequence[Any] | None = None) -> PostgresConnection:
        if self._attach(sql):
            self._cursor = None
            return self
        for alias, schema in self.attached.items():
            sql = _outside_quotes(
                sql, lambda t, a=alias, s=schema: re.sub(rf"\b{a}\.", f'"{s}".', t)
            )
        sql, params = self._upsert(sql, params)
        text, values = translate(sql, params)
        alone = self.raw.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        try:
            self._cursor = self.raw.execute(text, values, prepare=False)
        except _MADE_MEANWHILE:
            # `CREATE … IF NOT EXISTS` is not atomic: two sessions creating one table at once
            # (two refreshes' first writes) make one of them fail. It exists now, as asked.
            if not (alone and _IF_NOT_EXISTS.match(sql)):
                raise
            self._cursor = None
        except pg_errors.UndefinedTable as err:
            raise duckdb.CatalogException(str(err)) from err
        except pg_errors.UndefinedColumn as err:
            raise duckdb.BinderException(str(err)) from err
        return self

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> PostgresConnection:
        sql, _ = self._upsert(sql, None)
        text, _ = translate(sql, [])
        with self.raw.cursor() as cursor:
            cursor.executemany(text, [list(r) for r in rows])
        self._cursor = None
        return self

    def fetchone(self) -> tuple[Any, ...] | None:
        if self._cursor is None:
            return None
        if self._cursor.description is None:  # DuckDB answers a write with its row count
            count = self._cursor.rowcount
            return (count,) if count >= 0 else None
        return self._cursor.fetchone()

    def fetchall(self) -> list[tuple[Any, ...]]:
        if self._cursor is not None and self._cursor.description is not None:
            return self._cursor.fetchall()
        row = self.fetchone()
        return [row] if row else []

    @property
    def description(self) -> Any:
        return self._cursor.description if self._cursor else None

    def _attach(self, sql: str) -> bool:
        """`ATTACH 'store file' AS alias` of another server store: its schema, in the same
        database, named by the alias until `DETACH alias` (nothing is sent)."""
        if match := _ATTACH.match(sql):
            # A store's schema is its embedded file's name without `.duckdb` (the warehouse's
            # `SERVER_STORES`): derived.duckdb → derived.
            self.attached[match.group(2)] = Path(match.group(1).replace("''", "'")).stem
            return True
        if match := _DETACH.match(sql):
            return self.attached.pop(match.group(1), None) is not None
        return False

    def close(self) -> None:
        """Leave the connection for the next use in this thread, with no transaction open."""
        self.attached.clear()
        if self.raw.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            self.raw.execute("ROLLBACK")

    def _upsert(self, sql: str, params: Sequence[Any] | None) -> tuple[str, Sequence[Any] | None]:
        """`INSERT OR IGNORE` → `ON CONFLICT DO NOTHING`; `INSERT OR REPLACE` → `ON CONFLICT
        (primary key) DO UPDATE` of the other columns inserted."""
        match = _INSERT_OR.match(sql)
        if not match:
            return sql, params
        rest = sql[match.end() :]
        target = _TARGET.match(rest)
        assert target is not None, f"no table in {sql[:80]!r}"
        table = target.group(1)
        if match.group(1).upper() == "IGNORE":
            clause = " ON CONFLICT DO NOTHING"
        else:
            key, columns = self._key_and_columns(table)
            named = (
                [c.strip().strip('"') for c in target.group(3).split(",")]
                if target.group(3)
                else columns
            )
            updates = ", ".join(f"{c} = EXCLUDED.{c}" for c in named if c not in key)
            action = f"DO UPDATE SET {updates}" if updates else "DO NOTHING"
            clause = f" ON CONFLICT ({', '.join(key)}) {action}"
        body = "INSERT INTO " + rest
        returning = _RETURNING.search(body)
        if returning:
            body = body[: returning.start()] + clause + body[returning.start() :]
        else:
            body = body.rstrip().rstrip(";") + clause
        return body, params

    def _key_and_columns(self, table: str) -> tuple[list[str], list[str]]:
        if table not in self._keys:
            rows = self.raw.execute(
                "SELECT a.attname, coalesce(a.attnum = ANY(i.indkey), false)"
                " FROM pg_attribute a LEFT JOIN pg_index i"
                " ON i.indrelid = a.attrelid AND i.indisprimary"
                " WHERE a.attrelid = %s::regclass AND a.attnum > 0 AND NOT a.attisdropped"
                " ORDER BY a.attnum",
                [table],
            ).fetchall()
            self._keys[table] = ([r[0] for r in rows if r[1]], [r[0] for r in rows])
        return self._keys[table]


def connection(url: str, schema: str) -> PostgresConnection:
    """This thread's connection to `schema` of the database at `url` (made, with the schema,
    on first use; made again if the server closed it, or in a forked child process, which must
    not talk over its parent's socket)."""
    pool: dict[tuple[str, str], PostgresConnection] = getattr(_local, "connections", None) or {}
    if getattr(_local, "pid", None) != os.getpid():  # a forked child: the parent's are not ours
        pool = {}
        _local.pid = os.getpid()
    _local.connections = pool
    con = pool.get((url, schema))
    if con is not None and not con.raw.closed and not con.raw.broken:
        return con
    raw = psycopg.connect(url, autocommit=True)
    raw.adapters.register_loader("float4", _Float4Loader)
    with contextlib.suppress(pg_errors.UniqueViolation):  # made by another process meanwhile
        raw.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
    raw.execute(f'SET search_path TO "{schema}"')
    for signature, definition in _FUNCTIONS:
        if raw.execute("SELECT to_regprocedure(%s)", [signature]).fetchone() == (None,):
            # Made by another session meanwhile (two processes' first connections at once).
            made = (pg_errors.UniqueViolation, pg_errors.DuplicateFunction, pg_errors.InternalError)
            with contextlib.suppress(*made):
                raw.execute(definition)
    pool[(url, schema)] = con = PostgresConnection(raw, schema)
    return con


# DuckDB's functions the stores use, made in each schema: `hash(a, b, …)` of text values (64
# bits of their MD5, NULL and '' alike), DuckDB's md5 of a text holding NULs (`md5_with_nul`:
# each U+0001 hashed as the NUL DuckDB's text held), and the catalog's `duckdb_tables()` and
# `duckdb_columns()` (a schema is the database an ATTACH names).
_FUNCTIONS = (
    (
        "hash(text[])",
        "CREATE FUNCTION hash(VARIADIC text[]) RETURNS bigint LANGUAGE sql IMMUTABLE AS $$SELECT"
        " ('x' || substr(md5(array_to_string($1, chr(31), '')), 1, 16))::bit(64)::bigint$$",
    ),
    (
        "md5_with_nul(text)",
        "CREATE FUNCTION md5_with_nul(text) RETURNS text LANGUAGE sql IMMUTABLE STRICT AS $$SELECT"
        " CASE WHEN strpos($1, chr(1)) = 0 THEN md5($1) ELSE (SELECT md5(string_agg("
        "convert_to(part, 'UTF8'), '\\x00'::bytea ORDER BY n)) FROM unnest(string_to_array($1,"
        " chr(1))) WITH ORDINALITY AS t(part, n)) END$$",
    ),
    (
        "duckdb_tables()",
        "CREATE FUNCTION duckdb_tables() RETURNS TABLE(database_name text, table_name text)"
        " LANGUAGE sql STABLE AS $$SELECT table_schema::text, table_name::text"
        " FROM information_schema.tables WHERE table_schema = current_schema()$$",
    ),
    (
        "duckdb_columns()",
        "CREATE FUNCTION duckdb_columns() RETURNS TABLE(table_name text, column_name text)"
        " LANGUAGE sql STABLE AS $$SELECT table_name::text, column_name::text"
        " FROM information_schema.columns WHERE table_schema = current_schema()$$",
    ),
)


def schema_exists(url: str, schema: str) -> bool:
    """Whether the store has any table yet (the embedded profile's "the file exists")."""
    row = (
        connection(url, schema)
        .execute("SELECT count(*) FROM information_schema.tables WHERE table_schema = ?", [schema])
        .fetchone()
    )
    return bool(row and row[0])


def change_token(url: str, schema: str) -> tuple[Any, ...]:
    """Moves whenever the database is written (its write-ahead log position), as a DuckDB
    file's stat does for its file."""
    row = connection(url, schema).execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()
    return (row[0] if row else None,)


def drop_store(url: str, schema: str) -> None:
    connection(url, schema).execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def vacuum_full(url: str, schema: str) -> None:
    """Rewrite every table of the store so a deleted row's bytes are in no page of it: a
    PostgreSQL delete only marks the row dead; `VACUUM FULL` writes a new file of the live
    rows and removes the old one. The planner's statistics sample column values too: they are
    taken again from the live rows (`ANALYZE`), and their own table rewritten, which needs a
    superuser or its owner (said in the log when the database refuses it)."""
    con = connection(url, schema)
    tables = con.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = ?"
        " AND table_type = 'BASE TABLE'",
        [schema],
    ).fetchall()
    for (table,) in tables:
        con.execute(f'VACUUM (FULL, ANALYZE) "{schema}"."{table}"')
    try:
        con.execute("VACUUM FULL pg_catalog.pg_statistic")
    except pg_errors.InsufficientPrivilege:
        log.warning(
            "%s: the planner's statistics were taken again but their old rows stay until"
            " PostgreSQL reuses the space: run `VACUUM FULL pg_catalog.pg_statistic` as a"
            " superuser after a deletion",
            without_password(url),
        )


MISSING_TABLE = pg_errors.UndefinedTable
OPERATIONAL = psycopg.OperationalError


def copy_store(duckdb_path: Path, url: str, schema: str, replace: bool = False) -> dict[str, int]:
    """Copy one DuckDB store (its sequences, tables with their keys, and rows) into `schema`;
    the rows copied per table. A schema that already holds tables is refused unless `replace`
    (then it is dropped first): a migration never mixes two stores."""
    if schema_exists(url, schema):
        if not replace:
            raise FileExistsError(
                f"the {schema} store at {without_password(url)} already holds tables: pass"
                " --replace to drop them and copy again"
            )
        drop_store(url, schema)
    target = connection(url, schema)
    copied: dict[str, int] = {}
    source = duckdb.connect(str(duckdb_path), read_only=True)
    try:
        sequences = source.execute("SELECT sql, last_value FROM duckdb_sequences()").fetchall()
        tables = source.execute(
            "SELECT table_name, sql FROM duckdb_tables() ORDER BY table_name"
        ).fetchall()
        target.execute("BEGIN")
        for sql, last in sequences:
            target.execute(sql)
            if last is not None:
                name = sql.split()[2]
                target.execute("SELECT setval(?, ?)", [name, last])
        for table, sql in tables:
            target.execute(sql)
            copied[table] = _copy_rows(source, target, table)
        for (sql,) in source.execute("SELECT sql FROM duckdb_indexes()").fetchall():
            target.execute(sql)
        target.execute("COMMIT")
    finally:
        source.close()
        target.close()
    return copied


def _copy_rows(source: duckdb.DuckDBPyConnection, target: PostgresConnection, table: str) -> int:
    result = source.execute(f'SELECT * FROM "{table}"')
    columns = ", ".join(f'"{d[0]}"' for d in result.description or [])
    count = 0
    with (
        target.raw.cursor() as cursor,
        cursor.copy(f'COPY "{table}" ({columns}) FROM STDIN') as copy,
    ):
        while batch := result.fetchmany(10_000):
            for row in batch:
                copy.write_row(row)
            count += len(batch)
    return count


# ---- run locks: session-level advisory locks ---------------------------------------------------

_NAME_BYTES = 63  # PostgreSQL keeps this much of a connection's application_name
# A holder's note is kept short: PostgreSQL shows the first 1024 bytes of a statement (its
# `track_activity_query_size`), and the note is in the statement's text (6 bytes a character
# at most, as JSON).
_NOTE_CHARS = 150
_NOTE_MARK = "hltm_lock_note"
_NOTE = re.compile(r"\$\$([^$]*)\$\$ AS \"?" + _NOTE_MARK + r"\"?\s*$")


def lock_key(name: str) -> int:
    """A run lock's advisory key: 64 bits of its name's BLAKE2b digest, as a signed bigint."""
    digest = hashlib.blake2b(f"hltm run lock: {name}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


@dataclass(frozen=True)
class LockHolder:
    """A session that holds a run lock: who (its run), its process and host, since when (None
    for a holder of another role: PostgreSQL shows its connection's name but not its times),
    whether it holds the lock shared, the note it left on what it holds (None when it cannot be
    read), and its session's id in the database."""

    holder: str
    pid: int
    host: str
    since: datetime | None
    shared: bool
    note: str | None
    session: int


@contextmanager
def advisory_locks(
    url: str,
    holder: str,
    exclusive: Sequence[str],
    shared: str | None = None,
    waiting: Callable[[], None] | None = None,
    note: str = "",
) -> Iterator[None]:
    """Hold the database's lock `shared` in shared mode, then the locks `exclusive` (sorted by
    name) for the block, all on one connection of its own: session locks, so PostgreSQL
    releases them when that connection ends, whether the block returns or its process dies.
    Every caller takes them in this one order, so two holders never wait on each other. When
    another session holds one, `waiting` is called, then this one waits for it. The
    connection's application_name says who holds them and its last statement carries `note`
    (what it holds, for `lock_holders`)."""
    wanted = ([(lock_key(shared), True)] if shared is not None else []) + [
        (lock_key(name), False) for name in sorted(set(exclusive))
    ]
    who = f"{os.getpid()}@{socket.gethostname()} "
    who += holder.encode()[: _NAME_BYTES - len(who.encode())].decode(errors="ignore")
    # A server-wide idle_session_timeout would end the idle connection, and the locks with it.
    raw = psycopg.connect(
        url, autocommit=True, application_name=who, options="-c idle_session_timeout=0"
    )
    try:
        for key, in_shared_mode in wanted:
            mode = "_shared" if in_shared_mode else ""
            taken = raw.execute(f"SELECT pg_try_advisory_lock{mode}(%s)", [key]).fetchone()
            if taken != (True,):
                if waiting is not None:
                    waiting()
                raw.execute(f"SELECT pg_advisory_lock{mode}(%s)", [key])
        # The holder's `query_start` is now: the moment it took the locks. The note goes in the
        # statement's text (`pg_stat_activity.query`), dollar-quoted: JSON without a `$` in it.
        said = json.dumps(note[:_NOTE_CHARS]).replace("$", "\\u0024")
        raw.execute(
            sql.SQL("SELECT set_config('application_name', {}, false), {} AS {}").format(
                sql.Literal(who), sql.SQL(f"$${said}$$"), sql.Identifier(_NOTE_MARK)
            )
        )
    except BaseException:
        raw.close()
        raise
    try:
        yield
    finally:
        try:  # released now, not when the server has ended the session after `close`
            raw.execute("SELECT pg_advisory_unlock_all()")
        except psycopg.Error:
            log.warning(
                "%s lost its lock(s) during the run (its session was ended: a restart of the"
                " database, or an administrator); another run of the same work may have run"
                " beside it",
                holder,
            )
        raw.close()


def lock_holders(url: str, name: str) -> list[LockHolder]:
    """The sessions that hold the lock `name` of the database (shared or not), oldest first; a
    session still waiting for another of its locks is not one of them."""
    key = lock_key(name) & 0xFFFF_FFFF_FFFF_FFFF
    with psycopg.connect(url, autocommit=True) as raw:
        rows = raw.execute(
            "SELECT a.application_name, a.query_start, a.query, l.mode, l.pid FROM pg_locks l"
            " JOIN pg_stat_activity a ON a.pid = l.pid"
            " WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1"
            " AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())"
            " AND l.classid::bigint = %s AND l.objid::bigint = %s"
            " AND NOT EXISTS (SELECT 1 FROM pg_locks w"
            " WHERE w.pid = l.pid AND w.locktype = 'advisory' AND NOT w.granted)"
            " ORDER BY a.query_start NULLS LAST, l.pid",
            [key >> 32, key & 0xFFFF_FFFF],
        ).fetchall()
    holders = []
    for name_of, since, query, mode, session in rows:
        first, _, holder = (name_of or "").partition(" ")
        pid, _, host = first.partition("@")
        said = _NOTE.search(query or "")
        holders.append(
            LockHolder(
                holder,
                int(pid) if pid.isdigit() else 0,
                host or "an unknown host",
                since,
                mode == "ShareLock",
                json.loads(said.group(1)) if said else None,
                session,
            )
        )
    return holders


def sessions_holding(url: str, names: Sequence[str]) -> set[int]:
    """The sessions (ids in the database) that hold any of the locks `names`."""
    keys = [lock_key(n) for n in names]
    with psycopg.connect(url, autocommit=True) as raw:
        rows = raw.execute(
            "SELECT DISTINCT l.pid FROM pg_locks l"
            " WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1"
            " AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())"
            # The two halves of the key as the signed bigint it is (the shift wraps).
            " AND ((l.classid::bigint << 32) | l.objid::bigint) = ANY(%s)",
            [keys],
        ).fetchall()
    return {r[0] for r in rows}

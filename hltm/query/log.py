"""The query log: every question asked, with who asked, what was retrieved, and what it cost.

Table `query_log` in its own DuckDB file beside the derived one (`log_path`; insert-only from the
query path). It is the input of query-pattern mining (recurring templates, frequently asked
attributes, support counted over distinct identities) and the record of per-query cost:

    query_id PK, asked_at, channel ('python' | 'cli' | 'http'), identity_level, identity_id,
    scope_root (node id), question, intent, pairs JSON [{field, value}],
    retrieved JSON {"facet": [node ids], "qa": [...], "summary": [...]},
    answer, rationale, citations JSON [node ids], dropped_citations JSON [ids not in context],
    no_memory, status ('answered' | 'not_in_memory' | 'no_memory' | 'unsupported' | 'failed':
    the ask raised, its error in `rationale`),
    mapped_citations JSON {document id: [context node ids it counted for]},
    llm_calls, prompt_tokens, completion_tokens (o200k_base),
    embed_ms, retrieval_ms, parse_ms, answer_ms, llm_ms, total_ms,
    backend, model, prompt_versions JSON, retrieval_config JSON

Why a file of its own: a server inserts every few seconds, and in the derived file each insert
took that file's one writer lock from every reader and made the tree's and the tokens' readers
re-check it. Measured with `bench/serve` (2 workers, 50 clients), flushes every 5 s into the
derived file gave 258 req/s at p95 340 ms, against 300 at p95 275 with none.

The log is never on the answer's path (`QueryLogWriter`): an answer only queues its row, and a
background thread inserts it (opening the file costs ~25 ms of CPU: measured, a logged question
took 90 ms more than an unlogged one when it inserted its own row). A short-lived process inserts
what is queued at exit, after its answer is printed. A busy or unwritable file keeps the rows in
memory for the next attempt, said once; a damaged file is replaced by an empty one (the log is a
convenience); neither ever fails an answer.

A deletion wins over any row still queued or in flight, in every process: it records the nodes
it forgets (table `query_log_forgotten`: a hash of the node id and the moment) in the same file
and transaction in which it deletes their rows, and every insert drops the rows that record
forgets (`forget_queries`).
"""

from __future__ import annotations

import atexit
import hashlib
import json
import logging
import os
import threading
import weakref
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from hltm.errors import DAMAGED, StoreError
from hltm.warehouse import (
    connect,
    insert_rows,
    rewrite_live_rows,
    serialize_writers,
    store_exists,
)

if TYPE_CHECKING:
    from hltm.query.engine import QueryResult

QUERY_LOG_TABLE = "query_log"
FORGOTTEN_TABLE = "query_log_forgotten"
QUERY_LOG_FILE = "query_log.duckdb"
MAX_PENDING_ROWS = 10_000  # rows kept while the file is busy; the oldest go first past it
# How long a deletion's record is kept; a row queued longer than this is dropped, not inserted.
FORGET_WINDOW = timedelta(hours=24)
ALL_NODES = "*"  # the record of a replaced log: every row asked before it is forgotten
_FLUSH_WAIT_S = 2.0  # a background insert waits this long for a busy file, then tries later
_RETRY_S = 1.0  # after a failed background insert, the next try comes this much later at least
_EXIT_WAIT_S = 10.0  # the insert at a process's exit waits this long for a busy file
_LIVE_WRITERS: weakref.WeakSet[QueryLogWriter] = weakref.WeakSet()
_FILE_LOCKS: dict[Path, threading.Lock] = {}
_FILE_LOCKS_GUARD = threading.Lock()
T = TypeVar("T")
log = logging.getLogger(__name__)

_COLUMNS = (
    ("query_id", "VARCHAR PRIMARY KEY"),
    ("asked_at", "TIMESTAMP NOT NULL"),
    ("channel", "VARCHAR NOT NULL"),
    ("identity_level", "VARCHAR NOT NULL"),
    ("identity_id", "VARCHAR NOT NULL"),
    ("scope_root", "VARCHAR NOT NULL"),
    ("question", "VARCHAR NOT NULL"),
    ("intent", "VARCHAR"),
    ("pairs", "VARCHAR NOT NULL"),
    ("retrieved", "VARCHAR NOT NULL"),
    ("answer", "VARCHAR NOT NULL"),
    ("rationale", "VARCHAR NOT NULL"),
    ("citations", "VARCHAR NOT NULL"),
    ("dropped_citations", "VARCHAR NOT NULL"),
    ("no_memory", "BOOLEAN NOT NULL"),
    ("status", "VARCHAR"),
    ("mapped_citations", "VARCHAR"),
    ("llm_calls", "INTEGER NOT NULL"),
    ("prompt_tokens", "INTEGER NOT NULL"),
    ("completion_tokens", "INTEGER NOT NULL"),
    ("embed_ms", "DOUBLE NOT NULL"),
    ("retrieval_ms", "DOUBLE NOT NULL"),
    ("parse_ms", "DOUBLE NOT NULL"),
    ("answer_ms", "DOUBLE NOT NULL"),
    ("llm_ms", "DOUBLE NOT NULL"),
    ("total_ms", "DOUBLE NOT NULL"),
    ("backend", "VARCHAR NOT NULL"),
    ("model", "VARCHAR NOT NULL"),
    ("prompt_versions", "VARCHAR NOT NULL"),
    ("retrieval_config", "VARCHAR NOT NULL"),
)
COLUMN_NAMES = tuple(name for name, _ in _COLUMNS)
# Columns an older file may lack, added to it on open: a new column must be nullable and go here.
_ADDED_LATER = ("status", "mapped_citations")


def ensure_query_log(con: Any) -> None:
    columns = ", ".join(f"{name} {kind}" for name, kind in _COLUMNS)
    con.execute(f"CREATE TABLE IF NOT EXISTS {QUERY_LOG_TABLE} ({columns})")
    # Logs written before these columns existed gain them (NULL on their old rows). Only a
    # missing one is altered: in PostgreSQL an ALTER locks out the log's readers.
    present = {
        row[0]
        for row in con.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = ?"
            " AND table_schema = current_schema()",
            [QUERY_LOG_TABLE],
        ).fetchall()
    }
    for name in _ADDED_LATER:
        if name not in present:
            kind = dict(_COLUMNS)[name]
            con.execute(f"ALTER TABLE {QUERY_LOG_TABLE} ADD COLUMN IF NOT EXISTS {name} {kind}")
    con.execute(
        f"CREATE TABLE IF NOT EXISTS {FORGOTTEN_TABLE}"
        " (node_key VARCHAR NOT NULL, forgotten_at TIMESTAMP NOT NULL)"
    )


def log_path(derived_db: Path | str) -> Path:
    """The query log's file: beside the derived file, so one data dir holds both."""
    return Path(derived_db).with_name(QUERY_LOG_FILE)


def _dump(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def query_log_row(
    result: QueryResult, backend: str, model: str, extra: dict[str, Any]
) -> dict[str, Any]:
    cost = result.cost
    return {
        "query_id": result.query_id,
        "asked_at": result.asked_at,
        "channel": result.channel,
        "identity_level": result.identity.split(":", 1)[0],
        "identity_id": result.identity.split(":", 1)[1],
        "scope_root": result.scope_root,
        "question": result.question,
        "intent": result.intent,
        "pairs": _dump(result.pairs),
        "retrieved": _dump(result.retrieved),
        "answer": result.answer,
        "rationale": result.rationale,
        "citations": _dump(result.citations),
        "dropped_citations": _dump(result.dropped_citations),
        "no_memory": result.no_memory,
        "status": result.status,
        "mapped_citations": _dump(result.mapped_citations),
        "llm_calls": cost.llm_calls,
        "prompt_tokens": cost.prompt_tokens,
        "completion_tokens": cost.completion_tokens,
        "embed_ms": cost.embed_ms,
        "retrieval_ms": cost.retrieval_ms,
        "parse_ms": cost.parse_ms,
        "answer_ms": cost.answer_ms,
        "llm_ms": cost.llm_ms,
        "total_ms": cost.total_ms,
        "backend": backend,
        "model": model,
        "prompt_versions": _dump(extra.get("prompt_versions", {})),
        "retrieval_config": _dump(extra.get("retrieval_config", {})),
    }


def _node_key(node_id: str) -> str:
    """How a forgotten node is named in the log file: its hash, so the deleted id itself is in
    no byte of the file."""
    return hashlib.sha256(node_id.encode()).hexdigest()


def _named_nodes(scope: str, retrieved: str, citations: str, dropped: str) -> set[str]:
    """The memory nodes a logged row names (its scope, retrieved items, citations)."""
    ids = {scope, *json.loads(citations), *json.loads(dropped)}
    ids |= {i for kind in json.loads(retrieved).values() for i in kind}
    return {str(i).split("#", 1)[0] for i in ids}  # item ids start with their node id


def _now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


def _file_lock(path: Path) -> threading.Lock:
    """One writer of a log file at a time in this process (two threads' transactions on one
    DuckDB file conflict); other processes wait on the file's own lock."""
    with _FILE_LOCKS_GUARD:
        return _FILE_LOCKS.setdefault(path.resolve(), threading.Lock())


def _with_log(path: Path, wait_s: float | None, work: Callable[[Any], T]) -> T:
    """`work(con)` on the log's file. A damaged file is replaced by an empty one (the log is a
    convenience, rebuilt by use), said once in the log, and `work` runs again on it."""
    with _file_lock(path):
        try:
            with connect(path, wait_s=wait_s) as con:
                ensure_query_log(con)
                return work(con)
        except StoreError as err:
            if err.kind != DAMAGED:
                raise
            _replace_damaged(path, err)
        with connect(path, wait_s=wait_s) as con:
            return work(con)


def _replace_damaged(path: Path, fault: StoreError) -> None:
    """An empty log in place of a damaged one. Deletions recorded in the old file are lost with
    it, so the new file forgets everything asked before now (`ALL_NODES`): a row still waiting
    in some process's memory could name a deleted node."""
    fresh = path.with_name(f"{path.name}.fresh")
    for stale in (fresh, fresh.with_name(f"{fresh.name}.wal")):
        stale.unlink(missing_ok=True)
    with connect(fresh) as con:
        ensure_query_log(con)
        con.execute(f"INSERT INTO {FORGOTTEN_TABLE} VALUES (?, ?)", [ALL_NODES, _now()])
    path.with_name(f"{path.name}.wal").unlink(missing_ok=True)  # never replayed onto the new one
    os.replace(fresh, path)
    log.warning(
        "query log: %s: %s; replaced it with an empty log (the questions it held, and any not"
        " yet written, are lost: the log only feeds pattern mining and the cost record)",
        path,
        fault.problem,
    )


def _forgetting(con: Any) -> dict[str, datetime]:
    """The forgotten nodes (by key) with when they were forgotten; expired ones are purged."""
    con.execute(f"DELETE FROM {FORGOTTEN_TABLE} WHERE forgotten_at < ?", [_now() - FORGET_WINDOW])
    out: dict[str, datetime] = {}
    for key, at in con.execute(f"SELECT node_key, forgotten_at FROM {FORGOTTEN_TABLE}").fetchall():
        out[key] = max(at, out.get(key, at))
    return out


def _is_forgotten(row: dict[str, Any], forgotten: dict[str, datetime], oldest: datetime) -> bool:
    """A row asked before a deletion of a node it names (or before the log was replaced), or
    asked so long ago that the deletions it could miss have expired."""
    asked = row["asked_at"]
    if asked < oldest:
        return True
    names = _named_nodes(
        row["scope_root"], row["retrieved"], row["citations"], row["dropped_citations"]
    )
    keys = {ALL_NODES, *(_node_key(n) for n in names)}
    return any(key in forgotten and asked <= forgotten[key] for key in keys)


def insert_query_rows(
    derived_db: Path | str, rows: list[dict[str, Any]], wait_s: float | None = None
) -> int:
    """Insert logged rows in one transaction, except those a deletion forgot meanwhile (see
    `forget_queries`); how many were inserted. `DatabaseBusy` past `wait_s`."""

    def insert(con: Any) -> int:
        con.execute("BEGIN TRANSACTION")
        serialize_writers(con, FORGOTTEN_TABLE)
        forgotten = _forgetting(con)
        oldest = _now() - FORGET_WINDOW
        kept = [r for r in rows if not _is_forgotten(r, forgotten, oldest)]
        insert_rows(
            con,
            f"INSERT OR IGNORE INTO {QUERY_LOG_TABLE}",
            [[row.get(name) for name in COLUMN_NAMES] for row in kept],
            COLUMN_NAMES,
        )
        con.execute("COMMIT")
        return len(kept)

    return _with_log(log_path(derived_db), wait_s, insert)


class QueryLogWriter:
    """Logs answered questions off the answer's path: `write` only queues the row (no file is
    opened, nothing can fail), and a background thread inserts the queue, at once
    (`interval_s` 0, the CLI and the Python API) or every `interval_s` (`hltm serve`). What is
    still queued when the process exits is inserted then (`flush_at_exit`). A file that cannot
    be written keeps the rows in memory (the newest `MAX_PENDING_ROWS`) for the next attempt and
    is reported once, until it can be written again; a damaged file is replaced; the thread
    never stops on an error."""

    def __init__(self, derived_db: Path | str, interval_s: float = 0.0) -> None:
        self.derived_db = derived_db
        self.interval_s = interval_s
        self._pending: list[dict[str, Any]] = []
        self._cond = threading.Condition()
        self._flushing = threading.Lock()  # one flush of this writer at a time
        self._thread: threading.Thread | None = None
        self._stop = False
        self._reported: str | None = None  # the problem said last, said again once it changes
        _LIVE_WRITERS.add(self)

    @property
    def pending(self) -> int:
        return len(self._pending)

    def write(
        self,
        result: QueryResult,
        backend: str,
        model: str,
        extra: dict[str, Any],
        wait_s: float | None = None,
    ) -> bool:
        """Queue one answered query (`wait_s` is unused: nothing here waits). Always True."""
        self.write_row(query_log_row(result, backend, model, extra))
        return True

    def write_row(self, row: dict[str, Any]) -> None:
        """Queue one row of the log (a dict by column name; a column it lacks is NULL)."""
        with self._cond:
            self._pending.append(row)
            del self._pending[:-MAX_PENDING_ROWS]
            if self._thread is None:
                self._stop = False
                self._thread = threading.Thread(
                    target=self._run, name="query-log-flush", daemon=True
                )
                self._thread.start()
            # The thread waits for a first row, then for its interval: waking it for every
            # other row only made it take the GIL from the request threads to sleep again.
            if len(self._pending) == 1 or not self.interval_s:
                self._cond.notify_all()

    def start_flushing(self, interval_s: float = 1.0) -> None:
        """Insert the queue every `interval_s` from now on (one insert per interval, not one
        per query: opening the file costs ~25 ms of CPU)."""
        with self._cond:
            self.interval_s = interval_s
            self._cond.notify_all()

    def stop_flushing(self, wait_s: float | None = None) -> None:
        """Stop the background thread and insert what is queued (never raises: a row that
        cannot be written is reported)."""
        with self._cond:
            thread, self._thread = self._thread, None
            self._stop = True
            self._cond.notify_all()
        if thread is not None:
            thread.join()
        self._flush_reporting(wait_s, final=True)

    def flush(self, wait_s: float | None = None) -> int:
        """Insert the queue now; how many rows were inserted (a `StoreError` when the file
        cannot be written, the rows kept)."""
        with self._flushing:
            with self._cond:
                rows, self._pending = self._pending, []
            if not rows:
                return 0
            try:
                written = insert_query_rows(self.derived_db, rows, wait_s)
            except Exception:
                with self._cond:
                    self._pending[:0] = rows
                    del self._pending[:-MAX_PENDING_ROWS]
                raise
        if self._reported is not None:
            log.warning("query log: %s can be written again", log_path(self.derived_db))
            self._reported = None
        return written

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._stop or bool(self._pending))
                if self._stop:
                    return
                if self.interval_s:  # rows come in batches: one insert per interval
                    self._cond.wait_for(lambda: self._stop, timeout=self.interval_s)
                    if self._stop:
                        return
            if not self._flush_reporting(_FLUSH_WAIT_S):
                with self._cond:  # the file is busy or unwritable: try again later
                    self._cond.wait_for(lambda: self._stop, timeout=max(self.interval_s, _RETRY_S))

    def _flush_reporting(self, wait_s: float | None, final: bool = False) -> bool:
        """`flush`, with whatever goes wrong reported (once per problem) instead of raised;
        whether the queue was written. The last attempt says how many rows are lost."""
        try:
            self.flush(wait_s)
            return True
        except StoreError as err:
            problem = str(err)
        except Exception as err:  # noqa: BLE001 - the log must never stop the process
            with self._cond:
                dropped, self._pending = len(self._pending), []
            problem = f"{type(err).__name__}: {err} ({dropped} row(s) dropped)"
        if final and self._pending:
            log.warning("query log: %s; %d question(s) were not logged", problem, self.pending)
        elif problem != self._reported:
            log.warning(
                "query log: %s; %d row(s) kept in memory until it can be written",
                problem,
                self.pending,
            )
        self._reported = problem
        return False


def flush_pending(derived_db: Path | str | None = None) -> None:
    """Insert what this process's writers have queued (of one log, or all), so a reader in the
    same process sees every answered question."""
    for writer in list(_LIVE_WRITERS):
        if derived_db is None or log_path(writer.derived_db) == log_path(derived_db):
            writer._flush_reporting(None)


@atexit.register
def flush_at_exit() -> None:
    """A short-lived process (`hltm ask`) still logs its questions: the queue is inserted at
    exit, after the answer was printed, waiting at most `_EXIT_WAIT_S` for the file."""
    for writer in list(_LIVE_WRITERS):
        writer.stop_flushing(_EXIT_WAIT_S)


def read_query_log(derived_db: Path | str, limit: int | None = None) -> list[dict[str, Any]]:
    """Logged queries, newest first, JSON columns decoded (for pattern mining and the CLI);
    this process's queued rows are inserted first."""
    flush_pending(derived_db)
    if not store_exists(log_path(derived_db)):
        return []
    sql = f"SELECT {', '.join(COLUMN_NAMES)} FROM {QUERY_LOG_TABLE} ORDER BY asked_at DESC"
    if limit:
        sql += f" LIMIT {int(limit)}"
    rows = _with_log(log_path(derived_db), None, lambda con: con.execute(sql).fetchall())
    out = []
    for row in rows:
        item = dict(zip(COLUMN_NAMES, row, strict=True))
        for key in (
            "pairs",
            "retrieved",
            "citations",
            "dropped_citations",
            "prompt_versions",
            "retrieval_config",
        ):
            item[key] = json.loads(item[key])
        item["mapped_citations"] = json.loads(item["mapped_citations"] or "{}")
        out.append(item)
    return out


def forget_queries(derived_db: Path | str, nodes: set[str]) -> int:
    """Delete the logged queries whose scope, retrieved items or citations name one of `nodes`
    (a deleted source's memory); how many.

    A deletion wins over every write still on its way, in any process: in the same transaction
    the nodes are recorded as forgotten (by hash, with the moment), and every insert reads that
    record in its own transaction and drops the rows asked before it that name them
    (`insert_query_rows`). The file's lock (on the server profile, an advisory lock:
    `serialize_writers`) orders the two, so a row is either in the log when the deletion deletes
    it, or checked against the record when it is inserted. The record outlives any queued row: a row older than `FORGET_WINDOW` is dropped, not inserted."""
    if not nodes:
        return 0

    def forget(con: Any) -> int:
        con.execute("BEGIN TRANSACTION")
        serialize_writers(con, FORGOTTEN_TABLE)
        _forgetting(con)  # expired records go
        now = _now()
        insert_rows(
            con,
            f"INSERT INTO {FORGOTTEN_TABLE}",
            [(_node_key(n), now) for n in sorted(nodes)],
        )
        rows = con.execute(
            f"SELECT query_id, scope_root, retrieved, citations, dropped_citations"
            f" FROM {QUERY_LOG_TABLE}"
        ).fetchall()
        gone = [r[0] for r in rows if _named_nodes(*r[1:]) & nodes]
        if gone:
            con.execute(
                f"DELETE FROM {QUERY_LOG_TABLE} WHERE query_id IN (SELECT unnest(?::VARCHAR[]))",
                [gone],
            )
        con.execute("COMMIT")
        return len(gone)

    return _with_log(log_path(derived_db), None, forget)


def compact_query_log(derived_db: Path | str) -> bool:
    """Rewrite the log's file so no deleted row stays in its free blocks, with this process's
    inserts held meanwhile (`hltm.warehouse.rewrite_live_rows`); False when it is open
    elsewhere in this process. A missing file needs nothing."""
    path = log_path(derived_db)
    with _file_lock(path):
        return not store_exists(path) or rewrite_live_rows(path)

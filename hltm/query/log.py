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
derived file gave 258 req/s at p95 340 ms, against 300 at p95 275 with none. An older data
dir's `query_log` table is moved here on the next read or deletion (`adopt_legacy_log`).

A row is inserted in its own short connection. When another process holds the file past the
caller's wait, the row is kept in memory and inserted with the next one (never lost while the
process lives, never holding up the answer). A server defers every insert to a background flush
(`start_flushing`): opening the file costs ~25 ms of CPU, so one insert a second, not one a query.
"""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hltm.warehouse import DatabaseBusy, connect, insert_rows, table_exists

if TYPE_CHECKING:
    from hltm.query.engine import QueryResult

QUERY_LOG_TABLE = "query_log"
QUERY_LOG_FILE = "query_log.duckdb"
MAX_PENDING_ROWS = 10_000  # rows kept while the file is busy; the oldest go first past it
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


def ensure_query_log(con: Any) -> None:
    columns = ", ".join(f"{name} {kind}" for name, kind in _COLUMNS)
    con.execute(f"CREATE TABLE IF NOT EXISTS {QUERY_LOG_TABLE} ({columns})")
    # Logs written before these columns existed gain them (NULL on their old rows).
    for name in ("status", "mapped_citations"):
        con.execute(f"ALTER TABLE {QUERY_LOG_TABLE} ADD COLUMN IF NOT EXISTS {name} VARCHAR")


def log_path(derived_db: Path | str) -> Path:
    """The query log's file: beside the derived file, so one data dir holds both."""
    return Path(derived_db).with_name(QUERY_LOG_FILE)


def adopt_legacy_log(derived_db: Path | str, wait_s: float | None = None) -> int:
    """Move the rows of a `query_log` table that an older version kept in the derived file into
    the log's own file; how many. Copied first, dropped after: a crash between leaves both, and
    the next call copies nothing twice (query ids are the key)."""
    derived_db = Path(derived_db)
    if not derived_db.exists():
        return 0
    with connect(derived_db, wait_s=wait_s) as con:
        if not table_exists(con, QUERY_LOG_TABLE):
            return 0
        ensure_query_log(con)  # a table older than `status` gains it
        rows = con.execute(f"SELECT {', '.join(COLUMN_NAMES)} FROM {QUERY_LOG_TABLE}").fetchall()
        with connect(log_path(derived_db), wait_s=wait_s) as log_con:
            ensure_query_log(log_con)
            insert_rows(log_con, f"INSERT OR IGNORE INTO {QUERY_LOG_TABLE}", rows, COLUMN_NAMES)
        con.execute(f"DROP TABLE {QUERY_LOG_TABLE}")
    log.info(
        "query log: %d row(s) moved from %s to %s", len(rows), derived_db, log_path(derived_db)
    )
    return len(rows)


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


def insert_query_rows(
    derived_db: Path | str, rows: list[dict[str, Any]], wait_s: float | None = None
) -> None:
    """Insert logged rows in one short connection (`DatabaseBusy` past `wait_s`)."""
    with connect(log_path(derived_db), wait_s=wait_s) as con:
        ensure_query_log(con)
        insert_rows(
            con,
            f"INSERT INTO {QUERY_LOG_TABLE}",
            [[row[name] for name in COLUMN_NAMES] for row in rows],
            COLUMN_NAMES,
        )


class QueryLogWriter:
    """Inserts query-log rows; rows that meet a busy file wait in memory for the next insert."""

    def __init__(self, derived_db: Path | str) -> None:
        self.derived_db = derived_db
        self._pending: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        # One insert at a time per process: concurrent schema creation or inserts on one DuckDB
        # file from two threads conflict ("write-write conflict"), and the file has one writer.
        self._insert_lock = threading.Lock()
        self._flusher: threading.Thread | None = None
        self._stop = threading.Event()

    def start_flushing(self, interval_s: float = 1.0) -> None:
        """From now on `write` only queues; a daemon thread inserts the queue every interval."""
        if self._flusher is not None:
            return

        def loop() -> None:
            while not self._stop.wait(interval_s):
                try:
                    self.flush(wait_s=interval_s)
                except DatabaseBusy as err:
                    log.warning("query log: %s; %d row(s) kept", err, self.pending)

        self._stop.clear()
        self._flusher = threading.Thread(target=loop, name="query-log-flush", daemon=True)
        self._flusher.start()

    def stop_flushing(self, wait_s: float | None = None) -> None:
        """Stop the background flush and insert what is queued."""
        if self._flusher is not None:
            self._stop.set()
            self._flusher.join()
            self._flusher = None
        self.flush(wait_s)

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
        """Log one query (or queue it, when flushing in the background); False when the file
        was busy and the row is kept for later."""
        with self._lock:
            self._pending.append(query_log_row(result, backend, model, extra))
            del self._pending[:-MAX_PENDING_ROWS]
            if self._flusher is not None:
                return True
            rows, self._pending = self._pending, []
        try:
            self._insert(rows, wait_s)
        except DatabaseBusy as err:
            with self._lock:
                self._pending[:0] = rows
            log.warning("query log: %s; %d row(s) kept for the next insert", err, len(rows))
            return False
        return True

    def _insert(self, rows: list[dict[str, Any]], wait_s: float | None) -> None:
        with self._insert_lock:
            insert_query_rows(self.derived_db, rows, wait_s)

    def flush(self, wait_s: float | None = None) -> None:
        """Insert the rows kept from busy moments (`DatabaseBusy` if the file is still busy)."""
        with self._lock:
            rows, self._pending = self._pending, []
        if rows:
            try:
                self._insert(rows, wait_s)
            except DatabaseBusy:
                with self._lock:
                    self._pending[:0] = rows
                raise


def read_query_log(derived_db: Path | str, limit: int | None = None) -> list[dict[str, Any]]:
    """Logged queries, newest first, JSON columns decoded (for pattern mining and the CLI)."""
    adopt_legacy_log(derived_db)
    if not log_path(derived_db).exists():
        return []
    with connect(log_path(derived_db)) as con:
        if not table_exists(con, QUERY_LOG_TABLE):
            return []
        ensure_query_log(con)
        sql = f"SELECT {', '.join(COLUMN_NAMES)} FROM {QUERY_LOG_TABLE} ORDER BY asked_at DESC"
        if limit:
            sql += f" LIMIT {int(limit)}"
        rows = con.execute(sql).fetchall()
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
    (a deleted source's memory); how many."""
    adopt_legacy_log(derived_db)
    if not nodes or not log_path(derived_db).exists():
        return 0
    with connect(log_path(derived_db)) as con:
        if not table_exists(con, QUERY_LOG_TABLE):
            return 0
        rows = con.execute(
            f"SELECT query_id, scope_root, retrieved, citations, dropped_citations"
            f" FROM {QUERY_LOG_TABLE}"
        ).fetchall()
        gone = [r[0] for r in rows if _referenced_nodes(r) & nodes]
        if gone:
            con.execute(
                f"DELETE FROM {QUERY_LOG_TABLE} WHERE query_id IN (SELECT unnest(?::VARCHAR[]))",
                [gone],
            )
    return len(gone)


def _referenced_nodes(row: tuple[Any, ...]) -> set[str]:
    scope, retrieved, citations, dropped = row[1:]
    ids = {scope, *json.loads(citations), *json.loads(dropped)}
    ids |= {i for kind in json.loads(retrieved).values() for i in kind}
    return {str(i).split("#", 1)[0] for i in ids}  # item ids start with their node id

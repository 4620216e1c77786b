"""What deleting a project, document or resume means in every store, and the code that does it.

`hltm delete …` calls `delete_everywhere`: it records what the deletion removes (the row and its
children: a project's documents, vacancies and recruiter actions; a resume's actions), deletes
the source rows, then purges what was derived from them:

* **sources DuckDB** — the rows are deleted, children first (`hltm.sources.ingest`).
* **memory tree** (``memory_nodes`` + the ``mem-*`` Chroma collections) — the ``source_changes``
  sensor's next refresh drops the project's node and rebuilds its ancestors without it.
* **judge** — ``judge_pools``, ``judge_scores`` (verdicts quote the resume and the vacancy) and
  ``judge_failures`` rows of a deleted vacancy or resume are deleted; the ranking journal
  *redacts* them, keeping its hash chain verifiable (`hltm.judge.journal.redact`), and
  ``rankings`` is re-derived, so `hltm judge show` no longer serves a deleted vacancy.
* **vector caches** — the cached embeddings of a deleted resume's passage, a deleted vacancy's
  query and the deleted project node's items (keyed by text hash) are deleted.
* **query log** — every logged query whose scope, retrieved context or citations touched a
  node built from the deleted rows (the project's node, and each ancestor whose stored
  provenance names them) is forgotten.
* **Chroma ``resumes``** — a deleted resume's vector is removed at once, not at the next sync.
* **Chroma's write-ahead log** (embedded Chroma) — Chroma keeps every add in ``embeddings_queue``
  until its vector segment persists (every ``sync_threshold`` writes), so the text of a deleted
  item outlives the delete. `compact_chroma_log` drops the log records of items whose latest
  record is a delete (replaying the log gives the same state) and vacuums the file; only the
  delete record, which holds the id and nothing else, stays. A Chroma server owns its log.

Every purge is idempotent and also sweeps rows whose vacancy or resume no longer exists in the
sources, so a crash between the source delete and the purge is healed by running any later
delete (or `purge_orphans`).
"""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb

from hltm.embeddings import text_hash
from hltm.judge.candidates import RESUMES_COLLECTION
from hltm.judge.data import load_resumes, load_vacancies
from hltm.judge.journal import redact
from hltm.judge.store import ensure_judge_schema
from hltm.memory.models import node_id_for
from hltm.memory.store import MEMORY_TABLE
from hltm.query.log import QUERY_LOG_TABLE, forget_queries
from hltm.settings import Settings
from hltm.sources.ingest import delete_document, delete_project, delete_resume
from hltm.warehouse import connect, table_exists

__all__ = ["Deleted", "PurgeReport", "compact_chroma_log", "delete_everywhere", "purge_orphans"]

log = logging.getLogger(__name__)

_DELETERS: dict[str, Callable[[Path, str], None]] = {
    "project": delete_project,
    "document": delete_document,
    "resume": delete_resume,
}
_DELETE_OPERATION = 3  # chromadb's Operation.DELETE in embeddings_queue


@dataclass
class Deleted:
    """The source rows one deletion removes, gathered before they are gone."""

    projects: set[str] = field(default_factory=set)
    documents: set[str] = field(default_factory=set)
    vacancies: set[str] = field(default_factory=set)
    resumes: set[str] = field(default_factory=set)
    actions: set[str] = field(default_factory=set)
    embedded_texts: set[str] = field(default_factory=set)  # whose cached vectors go too

    @property
    def source_ids(self) -> set[str]:
        return self.projects | self.documents | self.vacancies | self.resumes | self.actions


@dataclass
class PurgeReport:
    purged: dict[str, int] = field(default_factory=dict)  # store → rows or items removed

    def summary(self) -> str:
        done = [f"{n} {store}" for store, n in self.purged.items() if n]
        return "purged " + (", ".join(done) if done else "nothing derived")


def _ids(con: duckdb.DuckDBPyConnection, sql: str, value: str) -> set[str]:
    return {str(r[0]) for r in con.execute(sql, [value]).fetchall()}


def gather(settings: Settings, kind: str, row_id: str) -> Deleted:
    """What deleting ``kind`` ``row_id`` will remove from the sources."""
    deleted = Deleted()
    with connect(settings.sources_db, read_only=True) as con:
        if kind == "project":
            deleted.projects = {row_id}
            deleted.documents = _ids(
                con, "SELECT document_id FROM project_documents WHERE project_id = ?", row_id
            )
            deleted.vacancies = _ids(
                con, "SELECT vacancy_id FROM vacancies WHERE project_id = ?", row_id
            )
            deleted.actions = _ids(
                con, "SELECT action_id FROM recruiter_actions WHERE project_id = ?", row_id
            )
        elif kind == "document":
            deleted.documents = {row_id}
        elif kind == "resume":
            deleted.resumes = {row_id}
            deleted.actions = _ids(
                con, "SELECT action_id FROM recruiter_actions WHERE resume_id = ?", row_id
            )
        else:
            raise ValueError(f"cannot delete a {kind!r}; expected one of {', '.join(_DELETERS)}")
    deleted.embedded_texts |= {
        v.vector_query() for v in load_vacancies(settings.sources_db, sorted(deleted.vacancies))
    }
    if deleted.resumes:
        deleted.embedded_texts |= {
            r.passage() for r in load_resumes(settings.sources_db, ids=sorted(deleted.resumes))
        }
    return deleted


def delete_everywhere(settings: Settings, kind: str, row_id: str) -> PurgeReport:
    """Delete a source row with its children, then everything derived from them."""
    deleted = gather(settings, kind, row_id)
    _DELETERS[kind](settings.sources_db, row_id)
    return purge(settings, deleted)


def purge_orphans(settings: Settings) -> PurgeReport:
    """Purge judge rows whose vacancy or resume is no longer in the sources (crash recovery)."""
    return purge(settings, Deleted())


def purge(settings: Settings, deleted: Deleted) -> PurgeReport:
    report = PurgeReport()
    vacancies = deleted.vacancies | _orphans(settings, "vacancy")
    resumes = deleted.resumes | _orphans(settings, "resume")
    item_texts = _node_item_texts(settings, {node_id_for("project", p) for p in deleted.projects})
    with connect(settings.derived_db) as con:
        tainted = _tainted_nodes(con, deleted)
    # The log is its own file, so it cannot join the transaction below: it goes first, and a
    # crash after it leaves only derived rows, which the next orphan sweep purges.
    report.purged[QUERY_LOG_TABLE] = forget_queries(settings.derived_db, tainted)
    with connect(settings.derived_db) as con:
        ensure_judge_schema(con)
        con.execute("BEGIN TRANSACTION")
        for table in ("judge_pools", "judge_scores", "judge_failures"):
            report.purged[table] = _delete_where(con, table, vacancies, resumes)
        report.purged["ranking_journal rows redacted"] = redact(con, vacancies, resumes)
        report.purged["cached vectors"] = _forget_vectors(con, deleted.embedded_texts | item_texts)
        con.execute("COMMIT")
    report.purged["resume vectors"] = _drop_resume_vectors(settings, resumes)
    if not settings.chroma_host:
        report.purged["chroma log records"] = compact_chroma_log(settings.chroma_path)
    return report


def _orphans(settings: Settings, kind: str) -> set[str]:
    """Vacancy or resume ids the live judge pipeline pooled or ranked that the sources no longer
    have (the golden evaluation scores its own frozen set, never pooled: it is left alone)."""
    if not settings.derived_db.exists() or not settings.sources_db.exists():
        return set()
    column, table = ("vacancy_id", "vacancies") if kind == "vacancy" else ("resume_id", "resumes")
    with connect(settings.sources_db, read_only=True) as con:
        live = {r[0] for r in con.execute(f"SELECT {column} FROM {table}").fetchall()}
    with connect(settings.derived_db) as con:
        ensure_judge_schema(con)
        held = {
            r[0]
            for t in ("judge_pools", "rankings")
            for r in con.execute(f"SELECT DISTINCT {column} FROM {t}").fetchall()
        }
    return held - live


def _delete_where(
    con: duckdb.DuckDBPyConnection, table: str, vacancies: set[str], resumes: set[str]
) -> int:
    row = con.execute(
        f"DELETE FROM {table} WHERE vacancy_id IN (SELECT unnest(?::VARCHAR[]))"
        " OR resume_id IN (SELECT unnest(?::VARCHAR[]))",
        [sorted(vacancies), sorted(resumes)],
    ).fetchone()
    return int(row[0]) if row else 0


def _provenance(row: dict[str, Any]) -> set[str]:
    """The source ids a stored memory node says its facets and answers came from."""
    ids = {s for f in json.loads(row["facets"]) for s in f.get("sources", [])}
    return ids | {q["source"] for q in json.loads(row["qa"]) if q.get("source")}


def _tainted_nodes(con: duckdb.DuckDBPyConnection, deleted: Deleted) -> set[str]:
    """Memory nodes built from the deleted rows: the project's own node, and every stored node
    whose provenance names one of them (ancestors that carried a detail up)."""
    nodes = {node_id_for("project", p) for p in deleted.projects}
    if not table_exists(con, MEMORY_TABLE) or not deleted.source_ids:
        return nodes
    cursor = con.execute(f"SELECT node_id, facets, qa FROM {MEMORY_TABLE}")
    columns = [d[0] for d in cursor.description]
    for values in cursor.fetchall():
        row = dict(zip(columns, values, strict=True))
        if _provenance(row) & deleted.source_ids:
            nodes.add(row["node_id"])
    return nodes


def _forget_vectors(con: duckdb.DuckDBPyConnection, texts: Iterable[str]) -> int:
    hashes = sorted({text_hash(t) for t in texts})
    removed = 0
    for table in ("embedding_cache", "judge_query_vectors"):
        if hashes and table_exists(con, table):
            row = con.execute(
                f"DELETE FROM {table} WHERE text_hash IN (SELECT unnest(?::VARCHAR[]))", [hashes]
            ).fetchone()
            removed += int(row[0]) if row else 0
    return removed


def _chroma(settings: Settings) -> Any:
    from hltm.vectors import _client

    return _client(settings)


def _node_item_texts(settings: Settings, node_ids: set[str]) -> set[str]:
    """The embedded strings of the given memory nodes' items (to drop their cached vectors)."""
    if not node_ids or not (settings.chroma_host or settings.chroma_path.exists()):
        return set()
    client = _chroma(settings)
    texts: set[str] = set()
    for collection in client.list_collections():
        got = client.get_collection(collection.name).get(
            where={"node_id": {"$in": sorted(node_ids)}}, include=["documents"]
        )
        texts |= {d for d in got["documents"] or [] if d}
    return texts


def _drop_resume_vectors(settings: Settings, resumes: set[str]) -> int:
    if not resumes or not (settings.chroma_host or settings.chroma_path.exists()):
        return 0
    client = _chroma(settings)
    if RESUMES_COLLECTION not in {c.name for c in client.list_collections()}:
        return 0
    collection = client.get_collection(RESUMES_COLLECTION)
    present = collection.get(ids=sorted(resumes), include=[])["ids"]
    if present:
        collection.delete(ids=present)
    return len(present)


def compact_chroma_log(chroma_path: Path) -> int:
    """Drop the write-ahead-log records of deleted items from an embedded Chroma, then vacuum.

    For every item whose latest record is a delete, its earlier records (adds and upserts, with
    document, metadata and vector) go; the delete record stays, so replaying the log still ends
    with the item deleted whether or not the vector segment had persisted it. ``secure_delete``
    and ``VACUUM`` leave no copy in free pages. Returns the number of records dropped.
    """
    path = Path(chroma_path) / "chroma.sqlite3"
    if not path.exists():
        return 0
    con = sqlite3.connect(path, timeout=30)
    try:
        con.execute("PRAGMA secure_delete = ON")
        with con:
            # One sort by item (window functions), not a correlated scan per record: the
            # log has no index on (topic, id), so that was quadratic (4 s at 2,000 records).
            dropped = con.execute(
                "DELETE FROM embeddings_queue WHERE seq_id IN ("
                " SELECT seq_id FROM (SELECT seq_id, row_number() OVER latest AS nth,"
                "  first_value(operation) OVER latest AS last_operation FROM embeddings_queue"
                "  WINDOW latest AS (PARTITION BY topic, id ORDER BY seq_id DESC))"
                " WHERE nth > 1 AND last_operation = ?)",
                [_DELETE_OPERATION],
            ).rowcount
        if dropped:
            con.execute("VACUUM")  # rewrites the file: its cost grows with the collections
    except sqlite3.OperationalError as err:  # busy, or a layout this Chroma version lacks
        log.warning("could not compact Chroma's log at %s: %s", path, err)
        return 0
    finally:
        con.close()
    return dropped

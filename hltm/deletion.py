"""Deleting a project, document or resume from every store: `delete_everywhere`.

`hltm delete …` records what the deletion removes (the row and its children), deletes the source
rows, then purges what was derived from them — memory tree, judge tables and journal, vector
caches, query log, tokens, calibrations, Chroma's items, log and segments, and the freed bytes of
every file — before it returns: a delete is judged on the files, not on what the API still
answers. Every purge is idempotent and also sweeps rows whose vacancy or resume no longer exists,
so a crash between the source delete and the purge is healed by any later delete (or
`purge_orphans`). What each store does and why: docs/reliability.md, "What a delete removes".
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import sqlite3
import struct
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb

from hltm.embeddings import make_embedder, short_key, text_hash
from hltm.judge.calibration import (
    CALIBRATION_TABLE,
    calibrate_vacancies,
    load_calibrations,
    store_calibrations,
)
from hltm.judge.candidates import RESUMES_COLLECTION
from hltm.judge.data import load_resumes, load_vacancies
from hltm.judge.journal import redact, write_head
from hltm.judge.store import ensure_judge_schema
from hltm.memory.models import LEVELS, node_id_for
from hltm.memory.store import (
    MEMORY_TABLE,
    MemoryStore,
    memory_collection_name,
    read_built,
    read_nodes,
)
from hltm.memory.tree import Plan
from hltm.query.access import TOKENS_TABLE
from hltm.query.log import QUERY_LOG_TABLE, compact_query_log, forget_queries, log_path
from hltm.runlock import JUDGE_RUN, MEMORY_REFRESH, run_lock
from hltm.settings import Settings
from hltm.sources.ingest import delete_document, delete_project, delete_resume
from hltm.warehouse import connect, rewrite_live_rows, store_exists, table_exists

__all__ = [
    "Deleted",
    "PurgeReport",
    "compact_chroma_log",
    "compact_stores",
    "delete_everywhere",
    "purge_orphans",
    "remove_dropped_segments",
    "zero_unused_slots",
]

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
    # Projects whose memory held deleted rows: the deleted ones and a deleted document's.
    touched_projects: set[str] = field(default_factory=set)

    @property
    def source_ids(self) -> set[str]:
        return self.projects | self.documents | self.vacancies | self.resumes | self.actions


@dataclass
class PurgeReport:
    purged: dict[str, int] = field(default_factory=dict)  # store → rows or items removed
    # Purged memory nodes still in the sources: to rebuild (a refresh of their contracts).
    memory_to_rebuild: Plan = field(default_factory=Plan)

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
            deleted.touched_projects = _ids(
                con, "SELECT project_id FROM project_documents WHERE document_id = ?", row_id
            )
        elif kind == "resume":
            deleted.resumes = {row_id}
            deleted.actions = _ids(
                con, "SELECT action_id FROM recruiter_actions WHERE resume_id = ?", row_id
            )
        else:
            raise ValueError(f"cannot delete a {kind!r}; expected one of {', '.join(_DELETERS)}")
    deleted.touched_projects |= deleted.projects
    deleted.embedded_texts |= {
        v.vector_query() for v in load_vacancies(settings.sources_db, sorted(deleted.vacancies))
    }
    if deleted.resumes:
        deleted.embedded_texts |= {
            r.passage() for r in load_resumes(settings.sources_db, ids=sorted(deleted.resumes))
        }
    return deleted


def delete_everywhere(
    settings: Settings,
    kind: str,
    row_id: str,
    waiting: Callable[[str], None] | None = None,
) -> PurgeReport:
    """Delete a source row with its children, then everything derived from them.

    The purge holds the memory refresh's and the judge run's locks (`hltm.runlock`; `waiting` is
    told what it waits for): a refresh or a judge run under way read the rows before they went
    and would store what it derived from them after the purge, where nothing removes it."""
    deleted = gather(settings, kind, row_id)
    _DELETERS[kind](settings.sources_db, row_id)
    holder = f"hltm delete {kind} {row_id}"
    with (
        run_lock(settings.data_dir, MEMORY_REFRESH, holder, waiting),
        run_lock(settings.data_dir, JUDGE_RUN, holder, waiting),
    ):
        return purge(settings, deleted)


def purge_orphans(settings: Settings) -> PurgeReport:
    """Purge judge rows whose vacancy or resume is no longer in the sources (crash recovery)."""
    return purge(settings, Deleted())


def purge(settings: Settings, deleted: Deleted) -> PurgeReport:
    report = PurgeReport()
    vacancies = deleted.vacancies | _orphans(settings, "vacancy")
    resumes = deleted.resumes | _orphans(settings, "resume")
    with connect(settings.derived_db) as con:
        tainted = _tainted_nodes(con, deleted) | _memory_chains(con, deleted.touched_projects)
        statements = {
            short_key(s) for node in read_nodes(con, tainted).values() for s in node.statements()
        }
    item_texts = _node_item_texts(settings, tainted) | statements
    # The log is its own file, so it cannot join the transaction below: it goes first, and a
    # crash after it leaves only derived rows, which the next orphan sweep purges. It is told
    # again once the memory is purged (below): a question answered from that memory in between
    # is forgotten too, whichever process still holds its row.
    report.purged[QUERY_LOG_TABLE] = forget_queries(settings.derived_db, tainted)
    with connect(settings.derived_db) as con:
        ensure_judge_schema(con)
        con.execute("BEGIN TRANSACTION")
        for table in ("judge_pools", "judge_scores", "judge_failures"):
            report.purged[table] = _delete_where(con, table, vacancies, resumes)
        report.purged["ranking_journal rows redacted"] = redact(con, vacancies, resumes)
        report.purged["cached vectors"] = _forget_vectors(con, deleted.embedded_texts | item_texts)
        report.purged[TOKENS_TABLE] = _delete_tokens(con, deleted.projects)
        con.execute("COMMIT")
        write_head(con, settings.derived_db)  # the redactions' deletion record, anchored
    touched = _memory_store(settings).delete(tainted)
    report.purged["memory nodes"] = len(touched)
    report.purged[QUERY_LOG_TABLE] += forget_queries(settings.derived_db, tainted)
    gone = {node_id_for("project", p) for p in deleted.projects}
    report.memory_to_rebuild = Plan(
        *(sorted(n for n in tainted - gone if n.startswith(f"{level}:")) for level in LEVELS),
        deletes=sorted(gone & set(touched)),
    )
    report.purged[CALIBRATION_TABLE] = _recalibrate(settings, deleted, vacancies)
    report.purged["resume vectors"] = _drop_resume_vectors(settings, resumes)
    # The collections items were deleted from: their index still holds the deleted vectors.
    collections = {memory_collection_name(b.contract_id) for b in touched.values()}
    if report.purged["resume vectors"]:
        collections.add(RESUMES_COLLECTION)
    report.purged.update(compact_stores(settings, collections))
    return report


def _orphans(settings: Settings, kind: str) -> set[str]:
    """Vacancy or resume ids the live judge pipeline pooled or ranked that the sources no longer
    have (the golden evaluation scores its own frozen set, never pooled: it is left alone)."""
    if not store_exists(settings.derived_db) or not store_exists(settings.sources_db):
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


def _memory_chains(con: duckdb.DuckDBPyConnection, projects: set[str]) -> set[str]:
    """The stored nodes of these projects and their stored seats and contracts."""
    if not projects:
        return set()
    built = read_built(con, [node_id_for("project", p) for p in projects])
    seats = {b.parent_id for b in built.values() if b.parent_id}
    return set(built) | seats | {node_id_for("contract", b.contract_id) for b in built.values()}


def _memory_store(settings: Settings) -> MemoryStore:
    from hltm.vectors import VectorStore

    return MemoryStore(settings.derived_db, VectorStore(settings, make_embedder(settings)))


def _delete_tokens(con: duckdb.DuckDBPyConnection, projects: set[str]) -> int:
    """A deleted project's API tokens go (revoked, and its id with them)."""
    if not projects or not table_exists(con, TOKENS_TABLE):
        return 0
    row = con.execute(
        f"DELETE FROM {TOKENS_TABLE} WHERE identity_level = 'project'"
        " AND identity_id IN (SELECT unnest(?::VARCHAR[]))",
        [sorted(projects)],
    ).fetchone()
    return int(row[0]) if row else 0


def _recalibrate(settings: Settings, deleted: Deleted, vacancies: set[str]) -> int:
    """Deleted vacancies' calibrations go; the others that cite a deleted row are recomputed
    (from the memory without the purged nodes). How many rows changed."""
    stored = load_calibrations(settings.derived_db)
    cited = {
        vid
        for vid, cal in stored.items()
        if vid not in vacancies and _holds_any(cal.as_row(), deleted.source_ids)
    }
    with connect(settings.derived_db) as con:
        if table_exists(con, CALIBRATION_TABLE):
            con.execute(
                f"DELETE FROM {CALIBRATION_TABLE} WHERE vacancy_id IN (SELECT unnest(?::VARCHAR[]))",
                [sorted(vacancies | cited)],
            )
    fresh = calibrate_vacancies(
        settings.sources_db, settings.derived_db, load_vacancies(settings.sources_db, sorted(cited))
    )
    store_calibrations(settings.derived_db, fresh)
    return len((vacancies & set(stored)) | cited)


def _holds_any(row: Iterable[Any], ids: set[str]) -> bool:
    """Whether any of the ids occurs in the row as a whole token."""
    text = json.dumps([str(v) for v in row], ensure_ascii=False)
    return any(re.search(rf"(?<![\w-]){re.escape(i)}(?![\w-])", text) for i in ids)


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


def compact_stores(settings: Settings, collections: set[str]) -> dict[str, int]:
    """Leave no deleted value in the stores' bytes (see the module docstring): `collections`
    rebuilt, the HNSW files of dropped collections removed and every segment's unused slots
    zeroed, Chroma's SQLite compacted, every DuckDB file rewritten."""
    done = {}
    if not settings.chroma_host:
        vectors = _memory_store(settings).vectors
        rebuilt = [n for n in sorted(collections) if vectors.rebuild(n) is not None]
        done["Chroma collections rebuilt"] = len(rebuilt)
        done["HNSW segments of dropped collections removed"] = remove_dropped_segments(
            settings.chroma_path
        )
        done["HNSW segments with unused slots zeroed"] = zero_unused_slots(settings.chroma_path)
        done["chroma log records"] = compact_chroma_log(settings.chroma_path, full=True)
    files = [settings.sources_db, settings.derived_db]
    busy = [path for path in files if store_exists(path) and not rewrite_live_rows(path)]
    if not compact_query_log(settings.derived_db):
        busy.append(log_path(settings.derived_db))
    done["DuckDB files left uncompacted (open elsewhere in this process)"] = len(busy)
    for path in busy:
        log.warning(
            "%s is open elsewhere in this process: its free blocks were not rewritten", path
        )
    return done


def _segment_dirs(chroma_path: Path) -> list[Path]:
    """The embedded Chroma's HNSW segment directories (named by the segment's UUID)."""
    if not chroma_path.is_dir():
        return []
    out = []
    for path in sorted(chroma_path.iterdir()):
        try:
            uuid.UUID(path.name)
        except ValueError:
            continue
        if path.is_dir():
            out.append(path)
    return out


def remove_dropped_segments(chroma_path: Path) -> int:
    """Remove the HNSW directories of segments Chroma no longer has: the embedded client leaves
    a dropped collection's files on disk (vectors and id map). The directories are listed before
    the catalogue is read, so one created meanwhile is in the catalogue already. Returns how
    many were removed."""
    dirs = _segment_dirs(Path(chroma_path))
    if not dirs:
        return 0
    con = sqlite3.connect(Path(chroma_path) / "chroma.sqlite3", timeout=30)
    try:
        live = {str(r[0]) for r in con.execute("SELECT id FROM segments").fetchall()}
    except sqlite3.OperationalError as err:  # busy, or a layout this Chroma version lacks
        log.warning("could not read Chroma's segments at %s: %s", chroma_path, err)
        return 0
    finally:
        con.close()
    gone = [d for d in dirs if d.name not in live]
    for directory in gone:
        shutil.rmtree(directory, ignore_errors=True)
    return len(gone)


# header.bin of Chroma's hnswlib (persistence version 1): int32 version, then size_t
# offsetLevel0, max_elements, cur_element_count, size_data_per_element, ...
_HNSW_HEADER = struct.Struct("<i4Q")
_HNSW_VERSION = 1
_CHUNK = 1 << 20


def zero_unused_slots(chroma_path: Path) -> int:
    """Zero every HNSW segment's slots past its element count, in ``data_level0.bin`` and
    ``length.bin``.

    A new segment writes both files for its whole initial capacity straight from uninitialised
    memory, so the slots past the element count hold whatever the writing process had freed
    there (text it had read, deleted text included). Chroma never reads those slots (an added
    element's slot is cleared before it is filled, and only filled slots are written later), so
    zeroing them changes nothing it sees. The count is read again before each chunk is written,
    so a segment another process grows meanwhile keeps its new slots; a segment whose header is
    not the known layout is left alone with a warning. Returns how many segments had such
    bytes."""
    zeroed = 0
    for directory in _segment_dirs(Path(chroma_path)):
        header = directory / "header.bin"
        layout = _slot_layout(header)
        if layout is None:
            continue
        touched = False
        for name, size in (("data_level0.bin", layout[1]), ("length.bin", 4)):
            if (directory / name).exists():
                touched |= _zero_unused(directory / name, header, size)
        zeroed += touched
    return zeroed


def _slot_layout(header: Path) -> tuple[int, int] | None:
    """(element count, bytes per slot) of a segment's header; None if absent or unknown."""
    try:
        data = header.read_bytes()[: _HNSW_HEADER.size]
    except FileNotFoundError:
        return None
    if len(data) < _HNSW_HEADER.size:
        return None
    version, _, capacity, count, slot = _HNSW_HEADER.unpack(data)
    if version != _HNSW_VERSION or not 0 < slot < 1 << 24 or count > capacity:
        log.warning("unknown HNSW header %s: its segment's unused slots were not zeroed", header)
        return None
    return count, slot


def _zero_unused(path: Path, header: Path, size: int) -> bool:
    """Overwrite the non-zero chunks of a segment file past its element count (slots of `size`
    bytes) with zeros, its size unchanged; whether any was."""

    def first_unused() -> int | None:
        layout = _slot_layout(header)
        return None if layout is None else layout[0] * size

    wrote = False
    with open(path, "r+b") as f:
        at = first_unused()
        while at is not None:
            f.seek(at)
            chunk = f.read(_CHUNK)
            if not chunk:
                break
            if chunk.count(0) != len(chunk):
                start = first_unused()  # an element added meanwhile keeps its slot
                if start is None:
                    break
                if start < at + len(chunk):
                    f.seek(max(start, at))
                    f.write(bytes(at + len(chunk) - max(start, at)))
                    wrote = True
            at += len(chunk)
        if wrote:
            f.flush()
            os.fsync(f.fileno())
    return wrote


def compact_chroma_log(chroma_path: Path, full: bool = False) -> int:
    """Drop the write-ahead-log records of deleted items from an embedded Chroma, then vacuum.

    For every item whose latest record is a delete, its earlier records (adds and upserts, with
    document, metadata and vector) go; the delete record stays, so replaying the log still ends
    with the item deleted whether or not the vector segment had persisted it. ``secure_delete``
    and ``VACUUM`` leave no copy in free pages. `full` (after a deletion) also merges the
    full-text index (a deleted document's terms stay in its segments until then) and vacuums
    even when no record was dropped (deleted metadata rows sit in free pages). Returns the
    number of records dropped.
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
        if full:
            with con:
                con.execute(
                    "INSERT INTO embedding_fulltext_search(embedding_fulltext_search)"
                    " VALUES ('optimize')"
                )
        if dropped or full:
            con.execute("VACUUM")  # rewrites the file: its cost grows with the collections
    except sqlite3.OperationalError as err:  # busy, or a layout this Chroma version lacks
        log.warning("could not compact Chroma's log at %s: %s", path, err)
        return 0
    finally:
        con.close()
    return dropped

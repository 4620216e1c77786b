"""The server profile: the stores in PostgreSQL (this machine's, started by the `postgres_server`
fixture), through the same statements as the embedded DuckDB files.

* the query log keeps, reads and forgets rows there, and a forgotten node's id is in no byte of
  the log's table files once the compaction of a deletion returned (`VACUUM FULL`);
* a token's identity is read there, and a revoke is seen from the next request on;
* a reader never waits on a writer: a token is resolved while another connection holds an open
  write transaction on the same table;
* the refresh planner's join of the sources with the memory store (an ATTACH) reads the store's
  schema;
* the same statements answer alike on both profiles, on a database whose default collation is
  not byte order: text sorts as in DuckDB, a FLOAT keeps 4 bytes, and a project's fingerprint
  (hence its memory node's version) is the one DuckDB computes.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import psycopg
import pytest

from hltm import postgres
from hltm.memory import changes
from hltm.memory.changes import contracts_to_diff
from hltm.memory.inputs import read_tree
from hltm.memory.store import ensure_memory_schema
from hltm.query.access import TokenCache, create_token, identity_for_token, revoke_token
from hltm.query.log import (
    COLUMN_NAMES,
    compact_query_log,
    forget_queries,
    insert_query_rows,
    log_path,
    read_query_log,
)
from hltm.query.scope import Identity
from hltm.settings import DATABASE_URL_ENV, Settings
from hltm.sources.ingest import ingest_directory
from hltm.warehouse import connect, store_exists
from hltm_devkit.postgres import LocalPostgres

pytestmark = pytest.mark.xdist_group("postgres")


def _row(query_id: str, scope: str) -> dict[str, object]:
    row: dict[str, object] = dict.fromkeys(COLUMN_NAMES, "")
    row.update(
        query_id=query_id,
        asked_at=datetime.now(UTC).replace(tzinfo=None),
        channel="http",
        identity_level="project",
        identity_id=scope.split(":", 1)[1],
        scope_root=scope,
        question="Where is this role based?",
        pairs="[]",
        retrieved='{"facet": ["' + scope + '#f1"], "qa": [], "summary": []}',
        citations="[]",
        dropped_citations="[]",
        no_memory=False,
        status="answered",
        mapped_citations="{}",
        prompt_versions="{}",
        retrieval_config="{}",
    )
    for name in ("llm_calls", "prompt_tokens", "completion_tokens"):
        row[name] = 1
    for name in ("embed_ms", "retrieval_ms", "parse_ms", "answer_ms", "llm_ms", "total_ms"):
        row[name] = 1.5
    return row


def _table_files(server: LocalPostgres, settings: Settings, schema: str) -> list[Path]:
    """The files of every table and index of one store's schema (heap, TOAST, indexes), and of
    the planner's statistics, which keep sampled column values."""
    assert settings.database_url and server.root is not None
    with psycopg.connect(settings.database_url) as con:
        paths = con.execute(
            "SELECT pg_relation_filepath(c.oid) FROM pg_class c JOIN pg_namespace n"
            " ON n.oid = c.relnamespace WHERE (n.nspname IN (%s, 'pg_toast')"
            " OR c.relname = 'pg_statistic') AND pg_relation_filepath(c.oid) IS NOT NULL",
            [schema],
        ).fetchall()
    data = server.root / "data"
    return [f for (p,) in paths for f in data.glob(p + "*") if f.is_file()]


def test_the_query_log_keeps_reads_and_forgets_down_to_the_bytes(
    server_profile: Settings, postgres_server: LocalPostgres
) -> None:
    derived = server_profile.derived_db
    assert not store_exists(log_path(derived))
    kept, gone = "project:c1-s1-p1", "project:c1-s1-p2-deleted"
    rows = [_row("q1", kept), _row("q2", gone), _row("q3", gone)]
    assert insert_query_rows(derived, rows) == 3
    assert insert_query_rows(derived, rows[:1]) == 1  # the same row again: ignored, as in DuckDB
    logged = {r["query_id"]: r for r in read_query_log(derived)}
    assert sorted(logged) == ["q1", "q2", "q3"]
    assert logged["q1"]["retrieved"]["facet"] == [f"{kept}#f1"]

    with psycopg.connect(server_profile.database_url or "", autocommit=True) as con:
        con.execute("ANALYZE query_log.query_log")  # as autovacuum does: values sampled
        assert _sampled(con, "c1-s1-p2-deleted")
    late = _row("q4", gone)  # asked before the deletion, still queued somewhere
    assert forget_queries(derived, {gone}) == 2
    assert insert_query_rows(derived, [late]) == 0
    assert [r["query_id"] for r in read_query_log(derived)] == ["q1"]
    assert not (server_profile.data_dir / "query_log.duckdb").exists()

    with psycopg.connect(server_profile.database_url or "", autocommit=True) as con:
        con.execute("CHECKPOINT")  # the dead rows' pages are on disk before the compaction
    assert compact_query_log(derived)
    with psycopg.connect(server_profile.database_url or "", autocommit=True) as con:
        assert not _sampled(con, "c1-s1-p2-deleted")
        con.execute("CHECKPOINT")
    files = _table_files(postgres_server, server_profile, "query_log")
    assert files
    id_bytes = re.compile(re.escape(b"c1-s1-p2-deleted"))
    assert not [f for f in files if id_bytes.search(f.read_bytes())]
    assert any(b"c1-s1-p1" in f.read_bytes() for f in files)  # the live row is where we look


def _sampled(con: psycopg.Connection, value: str) -> bool:
    """Whether the planner's statistics of the query log hold `value`."""
    row = con.execute(
        "SELECT count(*) FROM pg_stats WHERE schemaname = 'query_log' AND"
        " (most_common_vals::text LIKE %s OR histogram_bounds::text LIKE %s)",
        [f"%{value}%"] * 2,
    ).fetchone()
    return bool(row and row[0])


def test_tokens_resolve_and_a_revoke_is_seen_at_the_next_request(
    server_profile: Settings,
) -> None:
    derived = server_profile.derived_db
    token_id, token = create_token(derived, Identity("seat", "c1-s1"), "recruiter")
    _, other = create_token(derived, Identity("seat", "c2-s1"))
    cache = TokenCache(derived)
    assert cache.identity(token) == Identity("seat", "c1-s1")
    assert cache.identity(other) == Identity("seat", "c2-s1")
    assert cache.identity(token + "x") is None
    assert revoke_token(derived, token_id)
    assert cache.identity(token) is None
    assert cache.identity(other) == Identity("seat", "c2-s1")


def test_a_reader_never_waits_on_a_writer(server_profile: Settings) -> None:
    """A write held open on the tokens' table (a DuckDB file would answer `DatabaseBusy` to
    every other process meanwhile): the reader gets its answer within its bound."""
    derived = server_profile.derived_db
    _, token = create_token(derived, Identity("contract", "c1"))
    with psycopg.connect(server_profile.database_url or "") as writer:
        writer.execute("UPDATE derived.api_tokens SET label = 'renamed'")  # held, uncommitted
        assert identity_for_token(derived, token, wait_s=0.2) == Identity("contract", "c1")
        assert TokenCache(derived).identity(token, wait_s=0.2) == Identity("contract", "c1")


def test_the_sources_read_the_memory_store_through_an_attach(
    server_profile: Settings, world_files: Path
) -> None:
    """The refresh's planner joins the sources with the memory store (`ATTACH` of its file on
    DuckDB): on PostgreSQL the alias names the store's schema in the same database."""
    ingest_directory(world_files, server_profile.sources_db)
    with connect(server_profile.derived_db) as con:
        ensure_memory_schema(con)
    with connect(server_profile.sources_db) as sources:
        every = {r[0] for r in sources.execute("SELECT contract_id FROM contracts").fetchall()}
        assert contracts_to_diff(sources, server_profile.derived_db, 0, set()) == every
        assert not sources.attached  # detached again


def test_the_contracts_of_deleted_rows_are_found_by_anti_joins(
    server_profile: Settings, world_files: Path
) -> None:
    """`NOT IN (SELECT …)` is a scan of the subquery per stored node on PostgreSQL once the set
    outgrows work_mem (a changed tick at 1M projects ran for more than 12 minutes); an anti-join
    reads each side once."""
    ingest_directory(world_files, server_profile.sources_db)
    with connect(server_profile.derived_db) as con:
        ensure_memory_schema(con)
    with connect(server_profile.sources_db) as sources:
        sources.execute(f"ATTACH '{server_profile.derived_db}' AS {changes._STORE} (READ_ONLY)")
        explained = sources.execute(f"EXPLAIN {changes._CONTRACTS_OF_GONE}").fetchall()
        plan = "\n".join(r[0] for r in explained)
        sources.execute(f"DETACH {changes._STORE}")
    assert "SubPlan" not in plan and plan.count("Anti Join") == 3, plan


# Statements whose answers differ between DuckDB and a PostgreSQL of another default collation
# or other type widths, unless the connection says otherwise: text in byte order (ids and names
# sorted, min/max, a sorted aggregate), FLOAT as 4 bytes, and a digest over a NULL's marker.
_PARITY_TABLE = (
    "CREATE TABLE ids (id VARCHAR PRIMARY KEY, tags VARCHAR[], score FLOAT, vector FLOAT[])"
)
_PARITY_ROWS = (
    ("a1", ["b"], 0.1, [0.1, 0.3]),
    ("B", ["a"], 0.2, [0.2]),
    ("_x", None, None, None),
    ("a-1", ["Z", "a"], 0.3, [0.7]),
    ("Zeta", ["c"], 0.4, [0.4]),
)
_PARITY_QUERIES = (
    "SELECT id FROM ids ORDER BY id",
    "SELECT min(id), max(id) FROM ids",
    "SELECT string_agg(id, ',' ORDER BY id) FROM ids",
    "SELECT id FROM ids WHERE id > 'a' ORDER BY id",
    "SELECT score, vector, tags FROM ids ORDER BY id",
    "SELECT md5(concat_ws(chr(31), id, coalesce(NULL, chr(0)))) FROM ids ORDER BY id",
)


def test_the_same_statements_answer_alike_on_both_profiles(postgres_server: LocalPostgres) -> None:
    """On a database created with ICU's English collation (a managed PostgreSQL's usual
    default), where 'B' sorts after 'a'."""
    with psycopg.connect(postgres_server.url, autocommit=True) as admin:
        admin.execute("DROP DATABASE IF EXISTS parity_icu WITH (FORCE)")
        admin.execute(
            "CREATE DATABASE parity_icu TEMPLATE template0 LOCALE_PROVIDER icu"
            " ICU_LOCALE 'en-US' LOCALE 'C.UTF-8'"
        )
    url = postgres_server.url.rsplit("/", 1)[0] + "/parity_icu"
    server, embedded = postgres.connection(url, "parity"), duckdb.connect()
    try:
        for con in (server, embedded):
            con.execute(_PARITY_TABLE)
            con.executemany("INSERT INTO ids VALUES (?, ?, ?, ?)", _PARITY_ROWS)
        for query in _PARITY_QUERIES:
            expected = embedded.execute(query).fetchall()
            assert server.execute(query).fetchall() == expected, query
    finally:
        server.raw.close()
        embedded.close()
        postgres_server.drop_database("parity_icu")


def test_a_project_fingerprints_as_on_the_embedded_profile(
    server_profile: Settings, world_files: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A project's fingerprint is its memory node's version: the same on both profiles, so a
    data dir moved by `hltm migrate-to-server` rebuilds nothing (a recruiter action without a
    reason hashes a NUL, which PostgreSQL's text cannot hold)."""
    ingest_directory(world_files, server_profile.sources_db)
    with connect(server_profile.sources_db) as con:
        server = read_tree(con)
    monkeypatch.delenv(DATABASE_URL_ENV)
    ingest_directory(world_files, tmp_path / "sources.duckdb")
    with connect(tmp_path / "sources.duckdb") as con:
        embedded = read_tree(con)
        without_reason = con.execute("SELECT count(*) FROM recruiter_actions WHERE reason IS NULL")
        assert without_reason.fetchone() > (0,)  # the NUL marker is hashed
    assert server.nodes == embedded.nodes

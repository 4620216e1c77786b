"""The query log is never on the answer's path and never outlives a delete:

* a server's flush thread holding rows while a project is deleted: once the delete returned and
  the thread flushed, no row names the project and no byte of the log's file holds its id;
* a damaged log file never fails an answer: it is replaced, said once, and logging goes on;
* the flush thread survives any error of the file, reports it once and writes when it can;
* a short-lived process still logs its question, inserted at exit after the answer.
"""

from __future__ import annotations

import json
import logging
import re
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from hltm.deletion import delete_everywhere
from hltm.errors import disk_full
from hltm.query import log as query_log
from hltm.query.engine import QueryEngine, QueryResult
from hltm.query.log import log_path, read_query_log
from hltm.query.scope import Identity
from tests.support.query import BuiltWorld, built_world, private_copy  # noqa: F401

ROOT = Path(__file__).resolve().parents[2]


def _names(row: dict, node: str) -> bool:
    named = {row["scope_root"], *row["citations"], *row["dropped_citations"]}
    named |= {i.split("#", 1)[0] for ids in row["retrieved"].values() for i in ids}
    return node in named


def test_a_delete_wins_over_the_rows_a_server_still_holds(
    built_world: BuiltWorld,  # noqa: F811
    tmp_path: Path,
) -> None:
    settings = private_copy(built_world, tmp_path)
    project = built_world.projects()[0]
    seat = next(s for s in built_world.seats() if project.startswith(s))
    engine = QueryEngine(settings)
    engine.query_log.start_flushing(0.05)  # a server's flush thread, every 50 ms
    for _ in range(3):  # rows the server holds when the delete starts
        engine.ask(Identity("project", project), "Where is this role based?")
    engine.query_log.start_flushing(3600)  # ... and holds them until the delete is done
    engine.ask(Identity("seat", seat), "Where do I usually hire?")
    asked = threading.Event()
    deleting = threading.Event()

    def keep_asking() -> None:  # questions in flight while the delete runs
        while not deleting.is_set():
            engine.ask(Identity("seat", seat), "Where do I usually hire?")
            asked.set()

    asker = threading.Thread(target=keep_asking)
    asker.start()
    asked.wait(timeout=60)
    engine.query_log.start_flushing(0.05)
    try:
        delete_everywhere(settings, "project", project)
    finally:
        deleting.set()
        asker.join(timeout=60)
    engine.query_log.stop_flushing()

    node = f"project:{project}"
    rows = read_query_log(settings.derived_db)
    assert rows and not [r for r in rows if _names(r, node)]
    id_bytes = re.compile(rb"(?<![\w-])" + re.escape(project.encode()) + rb"(?![\w-])")
    for path in settings.data_dir.glob("query_log*"):
        assert not id_bytes.search(path.read_bytes()), path


def test_a_damaged_log_never_fails_an_answer(
    built_world: BuiltWorld,  # noqa: F811
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    settings = private_copy(built_world, tmp_path)
    engine = QueryEngine(settings)
    seat = Identity("seat", built_world.seats()[0])
    engine.ask(seat, "Where do I usually hire?")
    read_query_log(settings.derived_db)
    path = log_path(settings.derived_db)
    with path.open("r+b") as f:  # half the file, as a full disk or a crash may leave it
        f.truncate(path.stat().st_size // 2)

    with caplog.at_level(logging.WARNING, logger="hltm.query.log"):
        first = engine.ask(seat, "Where do I usually hire?")
        engine.query_log.flush()
        second = engine.ask(seat, "Which roles do I usually hire for?")
    assert first.citations and second.citations
    logged = {r["query_id"] for r in read_query_log(settings.derived_db)}
    assert second.query_id in logged  # the replaced file logs again
    said = [r.getMessage() for r in caplog.records if "query log" in r.getMessage()]
    assert len(said) == 1 and str(path) in said[0] and "replaced it" in said[0], said


def test_the_flush_thread_survives_errors_and_reports_each_once(
    built_world: BuiltWorld,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    settings = private_copy(built_world, tmp_path)
    engine = QueryEngine(settings)
    seat = Identity("seat", built_world.seats()[0])
    full = disk_full(log_path(settings.derived_db))
    failures = iter([full, full, full, None, RuntimeError("boom")])
    real_insert = query_log.insert_query_rows
    attempts = threading.Semaphore(0)

    def failing_insert(*args, **kwargs):  # type: ignore[no-untyped-def]
        try:
            failure = next(failures, None)
            if failure is not None:
                raise failure
            return real_insert(*args, **kwargs)
        finally:
            attempts.release()

    monkeypatch.setattr(query_log, "insert_query_rows", failing_insert)
    monkeypatch.setattr(query_log, "_RETRY_S", 0.01)
    engine.query_log.start_flushing(0.01)
    with caplog.at_level(logging.WARNING, logger="hltm.query.log"):
        first = engine.ask(seat, "Where do I usually hire?")  # kept through three full disks
        for _ in range(4):
            assert attempts.acquire(timeout=30)
        lost = engine.ask(seat, "Which roles do I usually hire for?")  # dropped by `boom`
        assert attempts.acquire(timeout=30)
        written = engine.ask(seat, "Where do I usually hire?")
        assert attempts.acquire(timeout=30)
        assert engine.query_log._thread is not None and engine.query_log._thread.is_alive()
        engine.query_log.stop_flushing()
    logged = {r["query_id"] for r in read_query_log(settings.derived_db)}
    assert {first.query_id, written.query_id} <= logged and lost.query_id not in logged
    said = [r.getMessage() for r in caplog.records]
    assert sum("no space left" in m for m in said) == 1, said  # reported once, not per try
    assert sum("boom" in m for m in said) == 1, said
    assert sum("written again" in m for m in said) == 2, said


def test_a_short_lived_process_logs_its_question_at_exit(
    built_world: BuiltWorld,  # noqa: F811
    tmp_path: Path,
) -> None:
    """`hltm ask` queues its row and exits right after printing: the row is inserted at exit."""
    settings = private_copy(built_world, tmp_path)
    result = QueryEngine(settings).ask(
        Identity("seat", built_world.seats()[0]), "Where?", log=False
    )
    row = query_log.query_log_row(result, "offline", "offline", {})
    code = """
        import json, sys
        from datetime import datetime
        from hltm.query.log import QueryLogWriter
        row = json.loads(sys.argv[2])
        row["asked_at"] = datetime.fromisoformat(row["asked_at"])
        QueryLogWriter(sys.argv[1]).write_row(row)
    """
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), str(settings.derived_db),
         json.dumps(row, default=str)],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    logged = {r["query_id"] for r in read_query_log(settings.derived_db)}
    assert result.query_id in logged


def test_a_server_writer_wakes_its_thread_for_a_first_row_not_for_every_row(
    tmp_path: Path,
) -> None:
    """Under a flush interval the thread sleeps until its interval ends: a row queued meanwhile
    does not wake it (each wake took the GIL from the request threads for nothing), and every
    row is still inserted."""
    from datetime import datetime

    writer = query_log.QueryLogWriter(tmp_path / "derived.duckdb")
    writer.start_flushing(3600)
    wakes = 0
    notify_all = writer._cond.notify_all

    def counted() -> None:
        nonlocal wakes
        wakes += 1
        notify_all()

    writer._cond.notify_all = counted  # type: ignore[method-assign]
    for i in range(50):
        seat = "seat:c01-s01"
        result = QueryResult(
            query_id=f"q{i:02d}", asked_at=datetime.now(), channel="http", identity=seat,
            scope_root=seat, question="?", intent="", pairs=[], retrieved={}, context_ids=[],
            answer="", rationale="", citations=[], dropped_citations=[], sources=[],
            no_memory=False,
        )  # fmt: skip
        writer.write_row(query_log.query_log_row(result, "offline", "offline", {}))
    assert wakes == 1 and writer.pending == 50
    writer.stop_flushing()
    logged = sorted(r["query_id"] for r in read_query_log(tmp_path / "derived.duckdb"))
    assert logged == [f"q{i:02d}" for i in range(50)]

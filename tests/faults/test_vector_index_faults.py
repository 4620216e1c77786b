"""The embedded Chroma index on a full disk, and damaged for good: every refresh heals it.

Before: a full disk during `hltm refresh` left the index failing every later refresh ("Error in
compaction: Failed to apply logs …") and `hltm ask` with a traceback, until `data/chroma` was
moved away by hand. The index is derived data: the memory's items are rebuilt from the stored
nodes, the resumes from the sources, with their cached vectors and no LLM call."""

from __future__ import annotations

import random
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path

import chromadb
import dagster as dg
import pytest
from chromadb.api.models.Collection import Collection
from click.testing import CliRunner

from hltm.embeddings import make_embedder
from hltm.memory.store import memory_collection_name
from hltm.settings import Settings
from hltm.sources.ingest import ingest_directory
from hltm.vectors import VectorStore, _client
from hltm_cli import main
from hltm_cli.dagster_runs import dagster_home
from hltm_cli.demo import build_memory
from hltm_devkit.scenarios import change_project
from tests.support.memory import make_harness, one_project_per_contract

DISK_FULL = (
    "Query error: Database error: error returned from database: (code: 13) database or disk is full"
)


def _tear_the_log(settings: Settings, collection: str) -> None:
    """What a write cut off by a full disk can leave: a record in Chroma's write-ahead log that
    its compactor can never apply, so every later use of the collection fails."""
    con = sqlite3.connect(settings.chroma_path / "chroma.sqlite3")
    with con:
        (topic,) = con.execute(
            "SELECT topic FROM embeddings_queue q JOIN collections c ON q.topic LIKE '%' || c.id"
            " WHERE c.name = ? LIMIT 1",
            [collection],
        ).fetchone()
        con.execute(
            "INSERT INTO embeddings_queue (seq_id, operation, topic, id, vector, encoding,"
            " metadata) SELECT max(seq_id) + 1, 0, ?, 'torn', zeroblob(1536), 'FLOAT32',"
            ' \'{"node_id": "tor\' FROM embeddings_queue',
            [topic],
        )
    con.close()
    old = _client(settings)  # this process reads the index anew, as a new command would
    _client.cache_clear()
    old.close()


def test_a_full_disk_then_a_damaged_index_are_said_in_one_line_and_healed_by_refresh(
    settings: Settings,
    tmp_path: Path,
    cli_jobs_from: Callable[[dg.Definitions], None],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    contract = "c1"
    export = one_project_per_contract(tmp_path / "export", [contract, "c2"])
    assert ingest_directory(export, settings.sources_db).quarantined == 0
    cli_jobs_from(make_harness(settings).defs)
    dagster_home()
    assert "built" in build_memory()
    runner = CliRunner()
    asked = ["ask", "--contract", contract, "Which roles do we usually hire for?"]

    # A full disk while a refresh writes the changed project's items.
    change_project(settings.sources_db, random.Random(3), project_id="p0", kind="edit")
    real_add = Collection.add

    def full_disk(self: Collection, *args, **kwargs):  # type: ignore[no-untyped-def]
        raise chromadb.errors.InternalError(DISK_FULL)

    monkeypatch.setattr(Collection, "add", full_disk)
    with pytest.raises(SystemExit):
        build_memory()
    said = capsys.readouterr().err
    assert f"{settings.chroma_path}: no space left on the disk; free space" in said, said
    monkeypatch.setattr(Collection, "add", real_add)

    # ... and the index it left: broken for good.
    _tear_the_log(settings, memory_collection_name(contract))
    failed = runner.invoke(main, asked)
    assert failed.exit_code == 1 and isinstance(failed.exception, SystemExit)
    assert f"error: the embedded Chroma index at {settings.chroma_path}: damaged" in failed.output
    assert "run `hltm refresh`" in failed.output and "Traceback" not in failed.output

    healed = build_memory()
    assert f"repaired: collection {memory_collection_name(contract)} of the embedded" in healed
    assert "dropped it, to be rebuilt from the stored data" in healed
    assert "re-indexed" in healed and "built 1 project" in healed
    again = runner.invoke(main, asked)
    assert again.exit_code == 0 and "citations: " in again.output, again.output


def test_threads_that_open_the_embedded_index_at_once_all_get_it(tmp_path: Path) -> None:
    """A serving process's threads start the client of a path together (the first requests
    after start): chromadb's registry of shared systems raised a KeyError in some of them."""
    failures: list[str] = []

    def open_index(store: VectorStore, start: threading.Barrier) -> None:
        start.wait()
        try:
            store.client.heartbeat()
        except Exception as err:  # noqa: BLE001 - every failure is the finding
            failures.append(repr(err))

    for trial in range(3):
        settings = Settings(data_dir=tmp_path / str(trial))
        store, start = VectorStore(settings, make_embedder(settings)), threading.Barrier(8)
        threads = [threading.Thread(target=open_index, args=(store, start)) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert failures == []

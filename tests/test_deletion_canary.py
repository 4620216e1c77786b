"""Deletion reaches every store: a canary in a project's document, its vacancy and a resume goes
through the memory build, a query, an API token, the calibrations and the judge; once `hltm
delete project` and `hltm delete resume` have returned (no daemon, no sensor tick), no byte of
any file of the data dir — DuckDB files with their free blocks, Chroma's SQLite with its free
pages and full-text index, its HNSW segment files — holds the canary text or the ids, no table,
collection or log record either, and the project's token is refused.

Before: the project's text survived in `rankings`, `judge_pools`, `judge_scores.verdict`,
`query_log` and Chroma's log, and `hltm judge show` still served its vacancy's ranking. Later, in
7 of 10 runs, an HNSW segment's `data_level0.bin` held the canary or the project id in the slots
past its element count (freed memory of the writing process), and the deleted items' vectors
stayed in deleted-marked slots."""

from __future__ import annotations

import json
import re
import sqlite3
import struct
from collections.abc import Callable
from pathlib import Path

import dagster as dg
import numpy as np
import pytest
from click.testing import CliRunner

from hltm.deletion import zero_unused_slots
from hltm.judge.calibration import calibrate_vacancies, store_calibrations
from hltm.judge.data import load_vacancies
from hltm.judge.service import JudgeEnv, judge_all
from hltm.query.access import create_token, identity_for_token
from hltm.query.engine import ask
from hltm.query.scope import Identity
from hltm.settings import Settings
from hltm.sources.ingest import delete_project, ingest_directory
from hltm.vectors import _client
from hltm.warehouse import connect
from hltm_cli import main
from hltm_devkit.scenarios import _ingest
from tests.support.memory import make_harness

CANARY = "ZQX9-CANARY-TEXT"
PROJECT, VACANCY, SEAT = "c01-s02-p002", "v001", "c01-s02"
DOCUMENT, RESUME = f"doc-{PROJECT}-canary", "r0099"
IDS = (PROJECT, VACANCY, DOCUMENT, RESUME)


def _plant(settings: Settings) -> None:
    with connect(settings.sources_db, read_only=True) as con:
        vacancy = con.execute(
            "SELECT vacancy_id, version, project_id, title, text FROM vacancies"
            " WHERE vacancy_id = ?",
            [VACANCY],
        ).fetchone()
    _ingest(
        settings.sources_db,
        {
            "project_documents": [
                {
                    "document_id": DOCUMENT, "project_id": PROJECT, "kind": "intake_notes",
                    "text": f"Intake addendum: the hiring manager named the programme {CANARY}."
                    f"\nProgramme code: {CANARY}\nThe team works hybrid from Berlin.",
                }
            ],
            "vacancies": [
                dict(zip(("vacancy_id", "version", "project_id", "title", "text"), vacancy, strict=True))
                | {"version": vacancy[1] + 1, "text": f"{vacancy[4]}\nProgramme: {CANARY}."}
            ],
            "vacancy_requirements": [
                {"requirement_id": f"{VACANCY}-canary", "vacancy_id": VACANCY,
                 "text": f"Knows the {CANARY} programme", "mandatory": False}
            ],
            "resumes": [
                {"resume_id": RESUME, "language": "en", "layer": "active",
                 "headline": "Solution Architect",
                 "text": f"Alex Canary\nSolution Architect\n\nExperience\nLead Architect —"
                 f" {CANARY} programme\n2015-01 – present\n• Owned the target architecture.\n"
                 "\nSkills: solution architecture, TOGAF, cloud\n"}
            ],
        },
    )  # fmt: skip


def _holds(value: object) -> set[str]:
    """Which of the canary text and ids a stored value holds (ids as whole tokens only)."""
    text = value if isinstance(value, str) else json.dumps(value, default=str, ensure_ascii=False)
    found = {CANARY} if CANARY in text else set()
    return found | {i for i in IDS if re.search(rf"(?<![\w-]){re.escape(i)}(?![\w-])", text)}


def _duckdb_hits(db: Path) -> dict[str, set[str]]:
    """table → canary text / ids found in any of its cells."""
    hits: dict[str, set[str]] = {}
    with connect(db, read_only=True) as con:
        tables = [r[0] for r in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()]
        for table in tables:
            for row in con.execute(f'SELECT * FROM "{table}"').fetchall():
                if found := _holds([str(v) for v in row]):
                    hits.setdefault(table, set()).update(found)
    return hits


def _derived_files(settings: Settings) -> list[Path]:
    """Every DuckDB file of the data dir but the sources: a store added later is checked too."""
    return sorted(p for p in settings.data_dir.glob("*.duckdb") if p != settings.sources_db)


def _chroma_hits(settings: Settings) -> dict[str, set[str]]:
    client = _client(settings)
    hits: dict[str, set[str]] = {}
    for col in client.list_collections():
        got = client.get_collection(col.name).get(include=["documents", "metadatas"])
        for item in zip(got["ids"], got["documents"] or [], got["metadatas"] or [], strict=True):
            if found := _holds(list(item)):
                hits.setdefault(col.name, set()).update(found)
    return hits


def _log_records_with_text(settings: Settings) -> int:
    """Records of Chroma's write-ahead log still holding the canary text."""
    con = sqlite3.connect(settings.chroma_path / "chroma.sqlite3")
    try:
        rows = con.execute("SELECT metadata FROM embeddings_queue").fetchall()
    finally:
        con.close()
    return sum(CANARY in (m or "") for (m,) in rows)


def _canary_vectors(settings: Settings) -> np.ndarray:
    """The vectors of the Chroma items that hold the canary (the resume's, and the memory items
    whose string quotes it): unique to deleted rows, unlike a facet any project may share."""
    client = _client(settings)
    found = []
    for col in client.list_collections():
        got = client.get_collection(col.name).get(include=["documents", "embeddings"])
        for iid, doc, vector in zip(
            got["ids"], got["documents"] or [], got["embeddings"], strict=True
        ):
            if iid == RESUME or CANARY in (doc or ""):
                found.append(np.asarray(vector, dtype=np.float32))
    return np.stack(found)


def _segment_vectors(settings: Settings) -> np.ndarray:
    """Every vector the HNSW segment files hold in their element slots, deleted-marked ones
    included (hnswlib's header: int32 version, then size_t offsetLevel0, capacity, element
    count, bytes per slot, label offset, vector offset)."""
    rows = [np.zeros((0, 384), dtype=np.float32)]
    for header in settings.chroma_path.glob("*/header.bin"):
        _, _, _, count, slot, label_at, data_at = struct.unpack_from("<i6Q", header.read_bytes())
        data = (header.parent / "data_level0.bin").read_bytes()
        for i in range(count):
            at = i * slot + data_at
            rows.append(np.frombuffer(data[at : i * slot + label_at], dtype=np.float32)[None])
    return np.concatenate(rows)


def _raw_hits(settings: Settings) -> dict[str, set[str]]:
    """Every file of the data dir (DuckDB files with their free blocks, Chroma's SQLite with its
    free pages and full-text index, its HNSW segments' binary files and id maps) → the canary
    text / ids in its bytes."""
    needles = {CANARY: re.compile(re.escape(CANARY.encode()))} | {
        i: re.compile(rb"(?<![\w-])" + re.escape(i.encode()) + rb"(?![\w-])") for i in IDS
    }
    hits: dict[str, set[str]] = {}
    for path in sorted(p for p in settings.data_dir.rglob("*") if p.is_file()):
        data = path.read_bytes()
        if found := {name for name, pattern in needles.items() if pattern.search(data)}:
            hits[str(path.relative_to(settings.data_dir))] = found
    return hits


def test_a_deleted_project_and_resume_leave_no_trace(
    tiny_world: Path,
    settings: Settings,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    cli_jobs_from: Callable[[dg.Definitions], None],
) -> None:
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    assert ingest_directory(tiny_world, settings.sources_db).quarantined == 0
    for other in ("c01-s01-p001", "c01-s01-p002"):  # a smaller tree: a faster memory build
        delete_project(settings.sources_db, other)
    _plant(settings)
    harness = make_harness(settings, support_threshold=0.0, min_support=1)
    # The runs `hltm delete` starts, on this test's stores (`definitions` binds the first's).
    cli_jobs_from(harness.defs)
    _, runs = harness.tick_and_run()
    assert runs and all(r.success for r in runs)
    ask(settings, f"seat:{SEAT}", "Which programme did the hiring manager name?")
    summary = judge_all(JudgeEnv.from_settings(settings), budget=None, workers=2)
    assert VACANCY in summary.published
    _, token = create_token(settings.derived_db, Identity("project", PROJECT))
    vacancies = load_vacancies(settings.sources_db)
    store_calibrations(
        settings.derived_db,
        calibrate_vacancies(settings.sources_db, settings.derived_db, vacancies),
    )
    assert {db.name for db in _derived_files(settings)} == {"derived.duckdb", "query_log.duckdb"}
    before = {t: ids for db in _derived_files(settings) for t, ids in _duckdb_hits(db).items()}
    for table in ("memory_nodes", "judge_scores"):
        assert CANARY in before.get(table, set()), (table, before)
    assert PROJECT in before.get("query_log", set())  # the answer used the project's memory
    for table in ("judge_pools", "rankings", "ranking_journal"):
        assert {VACANCY, RESUME} <= before.get(table, set()), (table, before)
    assert _chroma_hits(settings) and _log_records_with_text(settings)
    assert PROJECT in before.get("vacancy_calibrations", set())  # a sibling's proposal cites it
    raw = _raw_hits(settings)
    assert CANARY in raw["derived.duckdb"] and CANARY in raw["chroma/chroma.sqlite3"], raw
    canary_vectors = _canary_vectors(settings)

    runner = CliRunner()
    for kind, row_id in (("project", PROJECT), ("resume", RESUME)):
        deleted = runner.invoke(main, ["delete", kind, row_id])
        assert deleted.exit_code == 0 and "purged" in deleted.output, deleted.output
    shown = runner.invoke(main, ["judge", "show", VACANCY])  # no source or journal names it
    assert shown.exit_code == 1 and f"unknown vacancy {VACANCY!r}" in shown.output

    # Complete when the commands return: no daemon, no sensor tick.
    assert _raw_hits(settings) == {}
    # Whatever a writer's freed memory held (the canary is there in some runs only), no HNSW
    # segment has a non-zero byte past its element count left to zero.
    assert zero_unused_slots(settings.chroma_path) == 0
    # Nor does any segment keep the deleted items' vectors (hnswlib only marks them deleted).
    stored = _segment_vectors(settings)
    assert not (stored @ canary_vectors.T > 0.999).any()
    assert identity_for_token(settings.derived_db, token) is None
    assert _duckdb_hits(settings.sources_db) == {}
    assert all(_duckdb_hits(db) == {} for db in _derived_files(settings))
    assert _chroma_hits(settings) == {}
    assert _log_records_with_text(settings) == 0
    verify = runner.invoke(main, ["judge", "verify"])
    assert verify.exit_code == 0, verify.output  # redacted, still a valid chain
    assert runner.invoke(main, ["judge", "show", "v002"]).exit_code == 0


def test_a_purge_interrupted_by_a_crash_is_finished_by_the_orphan_sweep(
    settings: Settings,
) -> None:
    """The source delete committed, the process died before the purge: the next sweep (any
    later `hltm delete`, or `purge_orphans`) removes the pooled, scored and ranked rows."""
    from hltm.deletion import purge_orphans
    from hltm.judge.journal import config_gate, journal_entries, publish_ranking
    from hltm.judge.pipeline import judge_config, judge_pool
    from hltm.llm import DETERMINISTIC_MODEL, LLM, DeterministicBackend
    from hltm.sources.ingest import delete_resume
    from tests.support.judge import POOL
    from tests.support.judge import VACANCY as JUDGED

    _ingest(
        settings.sources_db,
        {
            "resumes": [
                {"resume_id": r.resume_id, "text": r.text, "language": "en", "layer": "active"}
                for r in POOL[:3]
            ]
        },
    )
    db, llm = settings.derived_db, LLM(DeterministicBackend(), DETERMINISTIC_MODEL)
    judge_pool(db, llm, JUDGED, POOL[:3])
    with connect(db) as con:
        con.execute(
            "INSERT INTO judge_pools (vacancy_id, position, resume_id) VALUES (?, 0, ?)",
            [JUDGED.vacancy_id, POOL[0].resume_id],
        )
        gate = config_gate(con, judge_config(llm))
    publish_ranking(db, JUDGED, POOL[:3], judge_config(llm), gate)
    delete_resume(settings.sources_db, POOL[0].resume_id)  # ... and the purge never ran

    report = purge_orphans(settings)
    # the vacancy of this hand-made pool is not in the sources either: it goes as well
    assert report.purged["judge_scores"] == 3 and report.purged["judge_pools"] == 1
    with connect(db) as con:
        assert con.execute("SELECT count(*) FROM rankings").fetchone() == (0,)
    assert journal_entries(db, JUDGED.vacancy_id) == []

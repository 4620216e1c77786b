"""Ingest of a user's own directory: good rows load, each bad row is quarantined with its reason,
and a second ingest of the same files changes nothing."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from hltm.settings import Settings
from hltm.sources.ingest import (
    delete_project,
    delete_resume,
    ensure_sources_schema,
    ingest_directory,
    table_counts,
)
from hltm.warehouse import connect
from hltm_cli import main
from tests.support import FIXTURES


def _jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))


@pytest.fixture
def crafted_dir(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    src.mkdir()
    # CSV: one good contract, one duplicated id (both copies are ambiguous).
    (src / "contracts.csv").write_text(
        "contract_id,name,updated_at\nc1,Acme,2026-01-01T00:00:00\nc2,Dup A,\nc2,Dup B,\n"
    )
    pl.DataFrame(
        {
            "seat_id": ["s1", "s2"],
            "contract_id": ["c1", "c-missing"],
            "recruiter_name": ["Ann", "Bob"],
        }
    ).write_parquet(src / "seats.parquet")
    _jsonl(
        src / "projects.jsonl",
        [
            {"project_id": "p1", "seat_id": "s1", "title": "Backend", "status": "open"},
            {"project_id": "p2", "seat_id": "s1", "title": "Data", "status": "archived"},
            {"project_id": "p3", "seat_id": "s1", "title": "  ", "status": "open"},
            {
                "project_id": "p4",
                "seat_id": "s1",
                "title": "QA",
                "status": "open",
                "created_at": "yesterday",
            },
        ],
    )
    _jsonl(
        src / "project_documents.jsonl",
        [
            {
                "document_id": "d1",
                "project_id": "p1",
                "kind": "job_description",
                "text": "Senior backend engineer, Berlin, hybrid.",
            },
            {"document_id": "d2", "project_id": "p1", "kind": "job_description", "text": ""},
            {"document_id": "d3", "project_id": "p2", "kind": "intake_notes", "text": "x"},
        ],
    )
    _jsonl(
        src / "resumes.jsonl",
        [
            {"resume_id": "r1", "text": "Python developer", "language": "en", "layer": "active"},
            {"resume_id": "r2", "text": "Разработчик", "language": "ru", "layer": "cold"},
            {"resume_id": "r3", "text": "Go developer", "language": "en", "layer": "archive"},
        ],
    )
    _jsonl(
        src / "vacancies.jsonl",
        [{"vacancy_id": "v1", "project_id": "p1", "title": "Backend", "text": "We need Go"}],
    )
    (src / "notes.jsonl").write_text("{}\n")
    return src


def test_bad_rows_are_quarantined_with_reasons_and_good_rows_load(crafted_dir, tmp_path):
    db = tmp_path / "sources.duckdb"
    report = ingest_directory(crafted_dir, db)
    by_table = {t.table: t for t in report.tables}

    assert (by_table["contracts"].inserted, by_table["contracts"].quarantined) == (1, 2)
    assert (by_table["seats"].inserted, by_table["seats"].quarantined) == (1, 1)
    assert (by_table["projects"].inserted, by_table["projects"].quarantined) == (1, 3)
    assert (by_table["project_documents"].inserted, by_table["project_documents"].quarantined) == (
        1,
        2,
    )
    assert (by_table["resumes"].inserted, by_table["resumes"].quarantined) == (2, 1)
    assert by_table["vacancies"].quarantined == 1  # the required `version` column is missing
    assert report.unknown_files == ["notes.jsonl"]

    with connect(db, read_only=True) as con:
        reasons = dict(con.execute("SELECT row_key, reason FROM quarantine").fetchall())
        counts = table_counts(con)
    assert reasons["c2"].startswith("duplicate id")
    assert "unknown reference: contract_id 'c-missing'" in reasons["s2"]
    assert "unknown status 'archived'" in reasons["p2"]
    assert "empty" in reasons["p3"]
    assert "bad timestamp in column 'created_at'" in reasons["p4"]
    assert "empty value for required column 'text'" in reasons["d2"]
    assert "unknown reference: project_id 'p2'" in reasons["d3"]
    assert "unknown layer 'cold'" in reasons["r2"]
    assert "missing required column: version" in reasons["v1"]
    assert counts["projects"] == 1 and counts["resumes"] == 2


def test_second_ingest_of_same_files_changes_nothing(crafted_dir, tmp_path):
    db = tmp_path / "sources.duckdb"
    ingest_directory(crafted_dir, db)
    with connect(db, read_only=True) as con:
        before = con.execute("SELECT * FROM projects ORDER BY project_id").fetchall()
        quarantined = con.execute("SELECT count(*) FROM quarantine").fetchone()
    again = ingest_directory(crafted_dir, db)
    assert again.changed == 0 and again.loaded > 0
    with connect(db, read_only=True) as con:
        assert con.execute("SELECT * FROM projects ORDER BY project_id").fetchall() == before
        assert con.execute("SELECT count(*) FROM quarantine").fetchone() == quarantined


def test_changed_row_is_updated_and_deletes_cascade(crafted_dir, tmp_path):
    db = tmp_path / "sources.duckdb"
    ingest_directory(crafted_dir, db)
    _jsonl(
        crafted_dir / "project_documents.jsonl",
        [
            {
                "document_id": "d1",
                "project_id": "p1",
                "kind": "job_description",
                "text": "Senior backend engineer, Munich, onsite.",
            }
        ],
    )
    report = ingest_directory(crafted_dir, db)
    docs = next(t for t in report.tables if t.table == "project_documents")
    assert docs.updated == 1 and docs.inserted == 0

    delete_project(db, "p1")
    delete_resume(db, "r1")
    with connect(db, read_only=True) as con:
        counts = table_counts(con)
    assert counts["projects"] == 0 and counts["project_documents"] == 0
    assert counts["resumes"] == 1
    with pytest.raises(KeyError, match="no project with id 'p1'"):
        delete_project(db, "p1")


def test_missing_directory_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="is not a directory"):
        ingest_directory(tmp_path / "nope", tmp_path / "s.duckdb")


def test_ingest_and_delete_record_a_fresh_observation(crafted_dir, settings, tmp_path, monkeypatch):
    """The UI's row counts follow the CLI: each ingest or delete observes the
    source tables in the Dagster instance."""
    import dagster as dg
    from click.testing import CliRunner

    from hltm_cli import main

    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    runner = CliRunner()

    def projects_observed() -> int:
        with dg.DagsterInstance.get() as instance:
            records = instance.fetch_observations(dg.AssetKey(["sources", "projects"]), limit=1)
            return records.records[0].asset_observation.metadata["dagster/row_count"].value

    result = runner.invoke(main, ["ingest", str(crafted_dir)])
    assert result.exit_code == 0, result.output
    assert projects_observed() == 1
    result = runner.invoke(main, ["delete", "project", "p1"])
    assert result.exit_code == 0, result.output
    assert projects_observed() == 0


def test_deleting_an_unknown_id_names_it_whole(settings: Settings) -> None:
    with connect(settings.sources_db) as con:
        ensure_sources_schema(con)
    result = CliRunner().invoke(main, ["delete", "project", "does-not-exist"])
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [
        f"data: {settings.data_dir}",
        "error: no project with id 'does-not-exist'",
    ]


def _real_resumes_without_language(src: Path) -> None:
    """The livecareer rows (no language column) and one Russian resume text beside them."""
    real = pl.read_csv(FIXTURES / "ingest/resumes_livecareer.csv")
    russian = pl.read_csv(FIXTURES / "ingest/vacancies_hh_ru.csv")
    extra = pl.DataFrame(
        {
            "ID": ["ru-1", "digits"],
            "Category": ["IT", "IT"],
            "Resume_text": [russian["snippet_requirement"][0], "2019 2020 2021"],
        }
    )
    pl.concat([real.cast(pl.Utf8), extra]).write_csv(src / "resumes.csv")


def test_resume_language_is_detected_when_the_export_has_no_such_column(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    _real_resumes_without_language(src)
    report = ingest_directory(src, tmp_path / "sources.duckdb")
    with connect(tmp_path / "sources.duckdb") as con:
        languages = dict(con.execute("SELECT resume_id, language FROM resumes").fetchall())
        held = con.execute("SELECT row_key, reason FROM quarantine").fetchall()
    assert languages == {"10554236": "en", "10674770": "en", "11163645": "en", "ru-1": "ru"}
    # a text with no letters tells no language: held with its reason, never guessed
    assert held == [("digits", "bad value: missing value for required column 'language'")]
    (notes,) = [t.notes for t in report.tables]
    assert any(
        "no language column, detected from text: en 3, ru 1, undetectable 1" in n for n in notes
    )


def test_a_given_language_fills_a_missing_column(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    _real_resumes_without_language(src)
    report = ingest_directory(src, tmp_path / "sources.duckdb", defaults={"language": "en"})
    with connect(tmp_path / "sources.duckdb") as con:
        languages = {r[0] for r in con.execute("SELECT language FROM resumes").fetchall()}
    assert report.quarantined == 0 and report.loaded == 5 and languages == {"en"}
    assert "every row gets 'en'" in " ".join(report.tables[0].notes)

"""Ingest on files as they come: every good row loads, every bad one is quarantined with its
reason and line, one bad file never stops the others, and the summary always says what
happened."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from hltm.sources.ingest import MAX_RAW_CHARS, ingest_directory, quarantine_counts, table_counts
from hltm.sources.schema import MAX_DOCUMENT_CHARS
from hltm.warehouse import connect

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "ingest"


def _jsonl(path: Path, rows: list[object]) -> None:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))


def _tree(src: Path) -> None:
    """One contract, seat and project for the child tables to reference."""
    _jsonl(src / "contracts.jsonl", [{"contract_id": "c1", "name": "Acme"}])
    _jsonl(src / "seats.jsonl", [{"seat_id": "s1", "contract_id": "c1", "recruiter_name": "Ann"}])
    _jsonl(
        src / "projects.jsonl",
        [{"project_id": "p1", "seat_id": "s1", "title": "Backend", "status": "open"}],
    )


def _quarantine(db: Path) -> list[tuple]:
    with connect(db, read_only=True) as con:
        return con.execute(
            "SELECT table_name, row_key, reason, source_file, line FROM quarantine ORDER BY line"
        ).fetchall()


def _hh_documents() -> list[dict[str, str]]:
    with (FIXTURES / "vacancies_hh_ru.csv").open(newline="") as f:
        return [
            {
                "document_id": f"hh{row['id']}",
                "project_id": "p1",
                "kind": "job_description",
                "text": f"{row['name']}. {row['snippet_requirement']}",
            }
            for row in csv.DictReader(f)
        ]


def _write_csv(path: Path, rows: list[dict[str, str]], encoding: str) -> None:
    with path.open("w", newline="", encoding=encoding) as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def test_cp1251_file_loads_its_good_lines_and_names_the_bad_ones(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    _tree(src)
    ascii_row = {"document_id": "d-ascii", "project_id": "p1", "kind": "intake_notes", "text": "Go"}
    _write_csv(src / "project_documents.csv", [ascii_row, *_hh_documents()], "cp1251")
    db = tmp_path / "sources.duckdb"
    report = ingest_directory(src, db)
    docs = next(t for t in report.tables if t.table == "project_documents")
    assert (docs.inserted, docs.quarantined) == (1, 3)
    bad = [r for r in _quarantine(db) if r[0] == "project_documents"]
    assert [r[4] for r in bad] == [3, 4, 5]
    assert all(r[2].startswith(f"undecodable bytes: line {r[4]} is not valid utf-8") for r in bad)
    assert [r[1] for r in bad] == [d["document_id"] for d in _hh_documents()]  # ids still known
    assert "undecodable bytes" in report.summary() and "--encoding cp1251" in report.summary()
    # Told the encoding, the same file loads whole, Cyrillic intact.
    again = ingest_directory(src, db, encoding="cp1251")
    docs = next(t for t in again.tables if t.table == "project_documents")
    assert docs.inserted == 3
    with connect(db, read_only=True) as con:
        text = con.execute("SELECT text FROM project_documents WHERE document_id = 'hh128001310'")
        assert "горутины" in text.fetchone()[0]


def test_bad_jsonl_lines_are_quarantined_with_their_line_and_the_rest_loads(tmp_path: Path):
    src = tmp_path / "src"
    src.mkdir()
    _tree(src)
    good = {"resume_id": "r1", "text": "Python developer", "language": "en", "layer": "active"}
    lines = [
        json.dumps(good),
        "",  # a blank line is no row
        json.dumps(["r2", "not an object"]),
        json.dumps({**good, "resume_id": "r3", "text": {"nested": True}}),
        json.dumps({**good, "resume_id": "r4"}),
        '{"resume_id": "r5", "text": "cut off',  # the truncated last line of an interrupted export
    ]
    (src / "resumes.jsonl").write_text("\n".join(lines))
    (src / "vacancies.jsonl").write_text("")  # empty file
    db = tmp_path / "sources.duckdb"
    report = ingest_directory(src, db)
    resumes = next(t for t in report.tables if t.table == "resumes")
    assert (resumes.inserted, resumes.quarantined) == (2, 3)
    reasons = {line: reason for table, _, reason, _, line in _quarantine(db) if table == "resumes"}
    assert reasons[3].startswith("not a JSON object: line 3 holds a list")
    assert "holds a JSON array or object" in reasons[4]
    assert reasons[6].startswith("unparsable JSON") and "line 6" in reasons[6]
    vacancies = next(t for t in report.tables if t.table == "vacancies")
    assert (vacancies.read, vacancies.loaded, vacancies.error) == (0, 0, None)


def test_one_unreadable_file_never_stops_the_others(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    _tree(src)
    (src / "seats.jsonl").unlink()
    (src / "seats.parquet").write_bytes(b"PAR1 this is not parquet")
    _jsonl(
        src / "resumes.jsonl",
        [{"resume_id": "r1", "text": "Go developer", "language": "en", "layer": "active"}],
    )
    db = tmp_path / "sources.duckdb"
    report = ingest_directory(src, db)
    summary = report.summary()
    assert "unreadable file" in summary
    with connect(db, read_only=True) as con:
        counts = table_counts(con)
    # Tables after the broken one still load; projects lose only their (now unknown) seat.
    assert counts["contracts"] == 1 and counts["resumes"] == 1 and counts["seats"] == 0
    assert counts["projects"] == 0
    reasons = {r[1]: r[2] for r in _quarantine(db)}
    assert reasons["p1"] == "unknown reference: seat_id 's1' not in seats"


def test_two_files_for_one_table_are_both_read_and_any_case_suffix_counts(tmp_path: Path):
    src = tmp_path / "src"
    src.mkdir()
    _tree(src)
    (src / "Resumes.CSV").write_text(
        "resume_id,text,language,layer\nr1,Java developer,en,active\nr2,QA engineer,en,active\n"
    )
    _jsonl(
        src / "resumes.jsonl",
        [
            {"resume_id": "r2", "text": "QA lead", "language": "en", "layer": "active"},
            {"resume_id": "r3", "text": "Data engineer", "language": "en", "layer": "active"},
        ],
    )
    db = tmp_path / "sources.duckdb"
    report = ingest_directory(src, db)
    resumes = next(t for t in report.tables if t.table == "resumes")
    assert resumes.files == ["Resumes.CSV", "resumes.jsonl"]
    assert (resumes.inserted, resumes.quarantined) == (2, 2)
    assert "2 files for resumes" in report.summary()
    dup = [r for r in _quarantine(db) if r[1] == "r2"]
    assert {r[3] for r in dup} == {"Resumes.CSV", "resumes.jsonl"}
    assert all("duplicate id: r2" in r[2] for r in dup)


def test_oversized_document_is_quarantined_not_truncated(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    _tree(src)
    huge = "word " * (MAX_DOCUMENT_CHARS // 5 + 1)
    _jsonl(
        src / "project_documents.jsonl",
        [
            {"document_id": "d1", "project_id": "p1", "kind": "intake_notes", "text": "Berlin"},
            {"document_id": "d2", "project_id": "p1", "kind": "intake_notes", "text": huge},
        ],
    )
    db = tmp_path / "sources.duckdb"
    ingest_directory(src, db)
    (row,) = [r for r in _quarantine(db) if r[1] == "d2"]
    assert row[2].startswith("too long: column 'text' has") and f"{MAX_DOCUMENT_CHARS:,}" in row[2]
    with connect(db, read_only=True) as con:
        assert table_counts(con)["project_documents"] == 1


def test_a_real_export_is_mapped_and_the_summary_names_what_it_lacked(tmp_path: Path):
    """The livecareer export as it comes (`ID, Category, Resume_text`): the id and text columns
    are recognised; `language`, which it lacks, is detected from each resume's text, and the
    summary says so. With a `language` column added, that column is read instead."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "resumes.csv").write_bytes((FIXTURES / "resumes_livecareer.csv").read_bytes())
    db = tmp_path / "sources.duckdb"
    report = ingest_directory(src, db)
    summary = report.summary()
    assert report.tables[0].inserted == 3
    assert "no language column, detected from text: en 3" in summary
    assert "'ID' as resume_id" in summary and "'Resume_text' as text" in summary
    assert "ignored column(s) Category" in summary
    with (FIXTURES / "resumes_livecareer.csv").open(newline="") as f:
        rows = [{**row, "Language": "ru"} for row in csv.DictReader(f)]
    _write_csv(src / "resumes.csv", rows, "utf-8")
    report = ingest_directory(src, db)
    assert report.tables[0].updated == 3 and "detected" not in report.summary()
    with connect(db, read_only=True) as con:
        assert con.execute("SELECT DISTINCT layer, language FROM resumes").fetchall() == [
            ("active", "ru")
        ]


@pytest.mark.parametrize("separator", [";", "\t"])
def test_semicolon_and_tab_separated_csv(tmp_path: Path, separator: str) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "contracts.csv").write_text(
        "\ufeff" + separator.join(["Contract ID", "Name"]) + "\n" + separator.join(["c1", "A"])
    )
    report = ingest_directory(src, tmp_path / "sources.duckdb")
    assert report.tables[0].inserted == 1


def test_a_binary_file_named_csv_is_one_file_level_rejection(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    _tree(src)
    # a spreadsheet saved under a CSV name: a zip archive, NUL bytes from its first header on
    blob = b"PK\x03\x04\x14\x00\x06\x00\x08\x00\x00\x00!\x00" + bytes(range(256)) * 400
    (src / "resumes.csv").write_bytes(blob + b"\n".join(bytes(range(1, 256)) for _ in range(50)))
    db = tmp_path / "sources.duckdb"
    report = ingest_directory(src, db)
    resumes = next(t for t in report.tables if t.table == "resumes")
    assert (resumes.read, resumes.quarantined, resumes.loaded) == (0, 1, 0)
    ((table, key, reason, file, line),) = [r for r in _quarantine(db) if r[0] == "resumes"]
    assert (table, key, file, line) == ("resumes", None, "resumes.csv", None)
    assert "binary content" in reason and "binary content" in report.summary()
    assert report.loaded == 3  # the other files still load


def test_a_huge_bad_row_keeps_a_bounded_prefix_in_quarantine(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    _tree(src)
    huge = '{"resume_id": "r1", "text": "' + "x" * 5_000_000  # one cut-off 5 MB line
    (src / "resumes.jsonl").write_text(huge)
    db = tmp_path / "sources.duckdb"
    ingest_directory(src, db)
    with connect(db, read_only=True) as con:
        ((raw, reason),) = con.execute(
            "SELECT raw, reason FROM quarantine WHERE table_name = 'resumes'"
        ).fetchall()
    assert reason.startswith("unparsable JSON")
    assert raw.startswith(huge[:MAX_RAW_CHARS]) and len(raw) < MAX_RAW_CHARS + 100
    assert f"{len(huge)} characters in all" in raw


def test_quarantine_of_a_file_that_later_loads_cleanly_is_resolved(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    _tree(src)
    _write_csv(src / "project_documents.csv", _hh_documents(), "cp1251")
    db = tmp_path / "sources.duckdb"
    first = ingest_directory(src, db)
    assert next(t for t in first.tables if t.table == "project_documents").quarantined == 3
    with connect(db, read_only=True) as con:
        assert quarantine_counts(con) == {"project_documents": 3}
    again = ingest_directory(src, db, encoding="cp1251")
    assert next(t for t in again.tables if t.table == "project_documents").inserted == 3
    with connect(db, read_only=True) as con:
        assert quarantine_counts(con) == {}  # nothing open: the file loaded whole
        resolved = con.execute(
            "SELECT count(*) FROM quarantine WHERE resolved_at IS NOT NULL"
        ).fetchone()
    assert resolved == (3,)  # kept, marked resolved
    # the file broken again: its rows are open again, not duplicated
    ingest_directory(src, db)
    with connect(db, read_only=True) as con:
        assert quarantine_counts(con) == {"project_documents": 3}
        assert con.execute("SELECT count(*) FROM quarantine").fetchone() == (3,)


def test_an_empty_file_says_it_is_empty(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    _tree(src)
    (src / "resumes.jsonl").write_text("\n\n")
    (src / "vacancies.csv").write_text("vacancy_id,project_id,title\n")
    report = ingest_directory(src, tmp_path / "sources.duckdb")
    summary = report.summary()
    assert "resumes.jsonl: empty file, no rows to load" in summary
    assert "vacancies.csv: a header and no rows to load" in summary


def test_quarantine_is_resolved_by_the_row_not_by_a_file_of_the_same_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A `projects.csv` without `status` quarantined its row; a different `projects.csv` from
    another folder marked it resolved though it was never loaded. A quarantined row is the
    row's content: a good row with its id resolves it, a file of the same name does not.
    `hltm quarantine` lists what is open, why, and what resolves it."""
    from click.testing import CliRunner

    from hltm_cli import main

    first, other, fixed = (tmp_path / name for name in ("first", "other", "fixed"))
    for folder in (first, other, fixed):
        folder.mkdir()
        _tree(folder)
        (folder / "projects.jsonl").unlink()
    (first / "projects.csv").write_text("project_id,seat_id,title\np-lost,s1,Backend\n")
    (other / "projects.csv").write_text("project_id,seat_id,title,status\np-other,s1,QA,open\n")
    (fixed / "projects.csv").write_text("project_id,seat_id,title,status\np-lost,s1,Backend,open\n")
    monkeypatch.setenv("HLTM_DATA_DIR", str(tmp_path / "data"))
    runner = CliRunner()
    assert runner.invoke(main, ["ingest", str(first)]).exit_code == 0
    assert runner.invoke(main, ["ingest", str(other)]).exit_code == 0
    listed = runner.invoke(main, ["quarantine"])
    assert listed.exit_code == 0, listed.output
    (row,) = [line for line in listed.stdout.splitlines() if "p-lost" in line]
    assert "projects.csv line 2" in row and "missing required column: status" in row
    assert "resolves it" in listed.stdout and "p-other" not in listed.stdout

    assert runner.invoke(main, ["ingest", str(fixed)]).exit_code == 0
    assert "nothing is quarantined" in runner.invoke(main, ["quarantine"]).stdout
    every = runner.invoke(main, ["quarantine", "--all"]).stdout
    assert "p-lost" in every and "resolved" in every


def test_the_ingest_summary_gives_each_reason_and_what_to_do(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    _tree(src)
    _jsonl(
        src / "vacancies.jsonl",
        [
            {
                "vacancy_id": f"v{i}",
                "project_id": project,
                "title": "Go",
                "text": "Go",
                "version": 1,
            }
            for i, project in enumerate(["p1", "p-gone", "p-away"])
        ],
    )
    _write_csv(src / "project_documents.csv", _hh_documents(), "cp1251")
    summary = ingest_directory(src, tmp_path / "sources.duckdb").summary()
    assert "unknown reference: project_id 'p-gone' not in projects (line 2)" in summary
    assert "project_id 'p-away' not in projects (line 3)" in summary
    assert "undecodable bytes: line 2 is not valid utf-8" in summary
    assert "--encoding" in summary and "hltm quarantine" in summary

"""A store that cannot be used ends a command with one line: which file, what is wrong, what to
do. Before: a damaged `derived.duckdb` gave tracebacks from `judge show` and `judge verify`, a
full disk a traceback from `ingest` (ending in "cannot rollback - no transaction is active"),
and a read-only disk tracebacks from every command."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

from hltm import warehouse
from hltm.errors import READ_ONLY, StoreError
from hltm.settings import Settings
from hltm.sources import ingest
from hltm.sources.ingest import ingest_directory
from hltm.warehouse import connect
from hltm_cli import main


def _one_line_error(args: list[str], *expected: str) -> str:
    out = CliRunner().invoke(main, args)
    assert out.exit_code == 1 and isinstance(out.exception, SystemExit), (args, out.output)
    # every command names its data dir first (`data: …`); the error is the one line after it
    lines = [line for line in out.output.strip().splitlines() if not line.startswith("data: ")]
    assert len(lines) == 1 and lines[0].startswith("error: "), out.output
    for text in expected:
        assert text in lines[0], (text, lines[0])
    return lines[0]


def _sources(folder: Path) -> Path:
    folder.mkdir()
    rows = {
        "contracts": [{"contract_id": "c1", "name": "Acme"}],
        "seats": [{"seat_id": "s1", "contract_id": "c1", "recruiter_name": "Ann"}],
    }
    for table, items in rows.items():
        (folder / f"{table}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in items))
    return folder


def test_a_damaged_derived_file_is_one_line_naming_it_and_what_to_do(settings: Settings) -> None:
    with connect(settings.derived_db) as con:
        con.execute(
            "CREATE TABLE filler AS SELECT range AS n, repeat('x', 200) AS t FROM range(20000)"
        )
    with settings.derived_db.open("r+b") as f:  # a block whose checksum no longer matches
        f.seek(8192)
        f.write(b"\xff" * 4096)
    for args in (["judge", "show", "v1"], ["judge", "journal"], ["token", "list"]):
        _one_line_error(
            args,
            f"{settings.derived_db}: the file is damaged",
            "move it aside with derived.journal-head.json and run `hltm refresh`",
        )


def test_a_full_disk_stops_an_ingest_with_one_line_and_keeps_what_was_loaded(
    settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    export = _sources(tmp_path / "export")
    assert ingest_directory(export, settings.sources_db).quarantined == 0

    def full_disk(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise duckdb.IOException(
            f'IO Error: Could not write file "{settings.sources_db}.wal": No space left on device'
        )

    monkeypatch.setattr(ingest, "_load_table", full_disk)
    _one_line_error(
        ["ingest", str(export)],
        f"{settings.sources_db}: no space left on the disk",
        "free space on the disk that holds",
    )
    with connect(settings.sources_db, read_only=True) as con:
        assert con.execute("SELECT contract_id FROM contracts").fetchall() == [("c1",)]


def test_a_read_only_data_dir_is_read_and_a_write_says_why_it_cannot_be_done(
    settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert ingest_directory(_sources(tmp_path / "export"), settings.sources_db).quarantined == 0
    real_connect = duckdb.connect

    def read_only_disk(database: str, read_only: bool = False, **kwargs):  # type: ignore[no-untyped-def]
        if not read_only:
            raise duckdb.IOException(
                f'IO Error: Cannot open file "{database}": Read-only file system'
            )
        return real_connect(database, read_only=read_only, **kwargs)

    monkeypatch.setattr(warehouse.duckdb, "connect", read_only_disk)
    with connect(settings.sources_db) as con:  # a reader goes on
        assert con.execute("SELECT count(*) FROM seats").fetchone() == (1,)
    with pytest.raises(StoreError) as raised, connect(settings.sources_db) as con:
        con.execute("DELETE FROM seats")
    assert raised.value.kind == READ_ONLY
    _one_line_error(
        ["ingest", str(tmp_path / "export")],
        f"{settings.sources_db}: cannot be written (a read-only disk, or no permission)",
        "point HLTM_DATA_DIR at a writable folder",
    )

"""One world per data directory: the walkthrough's export and `make demo`'s sample world never
mix. An ingest that brings only contracts a data dir does not hold refuses and says how to
proceed; every command that reads or writes data names its data dir; the Dagster instance goes
with its data dir; the `next:` hint names the world just ingested."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from hltm.sources.ingest import ingest_directory
from hltm.warehouse import connect
from hltm_cli import main


def _export(folder: Path, contract: str, seat: str, title: str = "Backend") -> Path:
    folder.mkdir(parents=True)
    rows = {
        "contracts": [{"contract_id": contract, "name": contract.title()}],
        "seats": [{"seat_id": seat, "contract_id": contract, "recruiter_name": "Ann"}],
        "projects": [{"project_id": f"{seat}-p1", "seat_id": seat, "title": title, "status": "open"}],
        "vacancies": [{"vacancy_id": f"{seat}-v1", "project_id": f"{seat}-p1", "title": title,
                       "text": f"{title} engineer", "version": 1}],
    }  # fmt: skip
    for table, items in rows.items():
        (folder / f"{table}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in items))
    return folder


@pytest.fixture
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HLTM_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("DAGSTER_HOME", "")  # recorded, so what the commands set is undone too
    monkeypatch.delenv("DAGSTER_HOME")
    return tmp_path / "data"


def test_an_ingest_of_another_world_refuses_and_says_how_to_proceed(
    tmp_path: Path, data_dir: Path
) -> None:
    runner = CliRunner()
    sample = _export(tmp_path / "sample", "c01", "c01-s01")
    assert runner.invoke(main, ["ingest", str(sample)]).exit_code == 0
    mine = _export(tmp_path / "mine", "northwind", "nw-s01")
    refused = runner.invoke(main, ["ingest", str(mine)])
    assert refused.exit_code == 1
    said = refused.stderr
    assert f"{data_dir} holds contract c01" in said
    assert "brings only contract it does not hold (northwind)" in said
    assert "HLTM_DATA_DIR=" in said and "--add-contracts" in said
    with connect(data_dir / "sources.duckdb", read_only=True) as con:
        assert con.execute("SELECT contract_id FROM contracts").fetchall() == [("c01",)]

    update = _export(tmp_path / "update", "c01", "c01-s01", title="Platform")  # same world
    assert runner.invoke(main, ["ingest", str(update)]).exit_code == 0
    added = runner.invoke(main, ["ingest", str(mine), "--add-contracts"])
    assert added.exit_code == 0, added.output
    with connect(data_dir / "sources.duckdb", read_only=True) as con:
        assert con.execute("SELECT count(*) FROM contracts").fetchone() == (2,)


def test_the_next_hint_names_the_world_just_ingested(tmp_path: Path, data_dir: Path) -> None:
    from hltm_cli.refresh import next_steps

    sources = data_dir / "sources.duckdb"
    ingest_directory(_export(tmp_path / "a", "c01", "c01-s01"), sources)
    ingest_directory(_export(tmp_path / "b", "northwind", "nw-s01"), sources, add_contracts=True)
    hint = next_steps(sources)
    assert "judge show nw-s01-v1" in hint and "--contract northwind" in hint


def test_every_command_that_reads_or_writes_data_names_its_data_dir(
    tmp_path: Path, data_dir: Path
) -> None:
    runner = CliRunner()
    folder = _export(tmp_path / "sample", "c01", "c01-s01")
    for args in (
        ["ingest", str(folder)],
        ["quarantine"],
        ["queries"],
        ["token", "list"],
        ["judge", "journal"],
        ["judge", "show", "c01-s01-v1"],
        ["delete", "resume", "no-such-resume"],
        ["ask", "--contract", "c01", "Where do we hire?"],
        ["refresh", "--help"],
    ):
        out = runner.invoke(main, args)
        if args[-1] == "--help":
            assert "data" not in out.stderr  # help reads nothing
            continue
        assert out.stderr.startswith(f"data: {data_dir}\n"), (args, out.stderr)


def test_the_dagster_instance_goes_with_its_data_dir(
    tmp_path: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runner = CliRunner()
    home = runner.invoke(main, ["dagster-home"])
    assert home.exit_code == 0 and home.stdout.strip() == f"{data_dir}.dagster"
    monkeypatch.setenv("DAGSTER_HOME", home.stdout.strip())
    monkeypatch.setenv("HLTM_DATA_DIR", str(tmp_path / "other"))
    mixed = runner.invoke(main, ["dagster-home"])
    assert mixed.exit_code == 1
    assert f"keeps the Dagster history of {data_dir}" in mixed.stderr
    assert "unset DAGSTER_HOME" in mixed.stderr

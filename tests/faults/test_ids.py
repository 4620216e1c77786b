"""Ids are identifiers: one canonical form, anything outside it quarantined
with its reason at ingest, and two distinct ids never share a memory collection, so one odd
contract never fails the nodes of another."""

from __future__ import annotations

import json
import unicodedata
from pathlib import Path

import pytest
from chromadb.api.segment import check_index_name

from hltm.memory import builder_from_settings
from hltm.memory.store import memory_collection_name
from hltm.settings import Settings
from hltm.sources.ingest import ingest_directory
from hltm.sources.schema import id_problem
from hltm.vectors import VectorStore, collection_name
from hltm.warehouse import connect
from tests.support.memory import one_project_per_contract

ODD_IDS = {
    "c01\t": "leading or trailing whitespace",
    "c0\t1": "control or invisible character U+0009",
    "c01 ": "leading or trailing whitespace",
    " c01": "leading or trailing whitespace",
    "c\x0001": "NUL character",
    "c0\u200b1": "control or invisible character U+200B",  # zero-width space
    "c01\u00a0": "leading or trailing whitespace",  # no-break space
    unicodedata.normalize("NFD", "Zürich"): "not in Unicode NFC form",
    "acme...eu": "three periods in a row",
    "": "empty value for required column",
}


def _jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))


@pytest.mark.parametrize(
    "value", ["c01", "urn:li:seat:42", "Zürich", "acme 1", "7", "acme..eu", "acme/eu", "..x"]
)
def test_canonical_ids_pass(value: str) -> None:
    assert id_problem(value) is None


def test_odd_ids_are_quarantined_with_their_reason(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    _jsonl(
        src / "contracts.jsonl",
        [{"contract_id": "c01", "name": "Good"}]
        + [{"contract_id": odd, "name": f"odd {i}"} for i, odd in enumerate(ODD_IDS)],
    )
    # A reference spelled oddly is quarantined for its spelling, not merely as unknown.
    _jsonl(
        src / "seats.jsonl",
        [
            {"seat_id": "s1", "contract_id": "c01", "recruiter_name": "Ann"},
            {"seat_id": "s2", "contract_id": "c01\t", "recruiter_name": "Bob"},
        ],
    )
    db = tmp_path / "sources.duckdb"
    report = ingest_directory(src, db)
    with connect(db, read_only=True) as con:
        contracts = [r[0] for r in con.execute("SELECT contract_id FROM contracts").fetchall()]
        seats = [r[0] for r in con.execute("SELECT seat_id FROM seats").fetchall()]
        reasons = con.execute("SELECT table_name, raw, reason FROM quarantine").fetchall()
    assert contracts == ["c01"] and seats == ["s1"]
    by_name = {
        json.loads(raw)["name"]: reason for table, raw, reason in reasons if table == "contracts"
    }
    for i, expected in enumerate(ODD_IDS.values()):
        reason = by_name[f"odd {i}"]
        assert expected in reason, reason
    (seat_reason,) = [reason for table, _, reason in reasons if table == "seats"]
    assert seat_reason.startswith("bad id in column 'contract_id': leading or trailing")
    assert report.tables[0].quarantined == len(ODD_IDS)


def test_distinct_ids_never_share_a_collection_and_every_name_is_valid() -> None:
    keys = ("acme 1", "acme-1", "acme/1", "acme.1.", "acme:1", "acme..1", "acme...1", "é" * 80)
    names = {collection_name("mem", key) for key in keys}
    assert len(names) == len(keys)
    for name in names | {f"rebuild.{n}" for n in names}:
        check_index_name(name)  # Chroma's rules, as strict as a server's: 3-63 chars, no ".."
    assert collection_name("mem", "c01") == "mem-c01"  # clean ids keep their readable name


def test_odd_but_canonical_contract_ids_each_build_their_own_tree(
    settings: Settings, tmp_path: Path
) -> None:
    """Ids whose collection names would collapse onto one (`acme 1`, `acme-1`), or that Chroma
    refuses as they are (`acme..eu`, `acme/eu`): every tree builds, each in its own collection."""
    contracts = ["acme 1", "acme-1", "acme..eu", "acme/eu"]
    one_project_per_contract(tmp_path / "src", contracts)
    assert ingest_directory(tmp_path / "src", settings.sources_db).quarantined == 0
    report = builder_from_settings(settings).full_build()
    assert not report.failures, report.failures
    builder = builder_from_settings(settings)
    assert {f"contract:{c}" for c in contracts} <= set(builder.store.built())
    assert builder.store.check().clean
    assert len({memory_collection_name(c) for c in contracts}) == len(contracts)


def test_a_contract_whose_index_fails_never_stops_the_others(
    settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One contract's collection refuses its items: its nodes fail, keep no half-built memory and
    are marked incomplete (answers over them say so); every other contract is built."""
    contracts = ["c1", "c2", "c3"]
    one_project_per_contract(tmp_path / "src", contracts)
    assert ingest_directory(tmp_path / "src", settings.sources_db).quarantined == 0
    refused = memory_collection_name("c2")
    real = VectorStore.collection

    def collection(self: VectorStore, name: str):  # type: ignore[no-untyped-def]
        if name == refused:
            raise ValueError(f"Chroma refuses the collection name {name!r}")
        return real(self, name)

    monkeypatch.setattr(VectorStore, "collection", collection)
    report = builder_from_settings(settings).full_build()
    failed = {r.node_id for r in report.failures}
    assert failed == {"project:p1", "seat:s1", "contract:c2"}
    assert all("refuses the collection name" in r.error for r in report.failures)
    built = builder_from_settings(settings).store.built()
    assert {"contract:c1", "contract:c3", "project:p0", "project:p2"} <= set(built)
    assert not failed & set(built)
    with connect(settings.derived_db, read_only=True) as con:
        marked = {r[0] for r in con.execute("SELECT node_id FROM memory_incomplete").fetchall()}
    assert marked == failed

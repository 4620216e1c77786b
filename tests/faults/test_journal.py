"""The ranking journal notices a deleted tail and a forged `rankings` table.

Before: deleting the last 1, 5 or all journal rows passed `hltm judge verify` and the asset
check, and an edited `rankings` row was served by `hltm judge show`. Now the chain's head is
anchored outside the table (a head file, and the Dagster materialisation of each publish) and
`rankings` is verified against the journal it is derived from."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

import dagster as dg
import pytest
from click.testing import CliRunner

from hltm.judge.journal import (
    Publication,
    _derive_rankings,
    _record_redaction,
    config_gate,
    head_path,
    journal_entries,
    publish_ranking,
    redact,
    verify_chain,
    write_head,
)
from hltm.judge.pipeline import judge_config, judge_pool
from hltm.llm import DETERMINISTIC_MODEL, LLM, DeterministicBackend
from hltm.query.scope import Identity
from hltm.serving import rankings
from hltm.serving.rankings import RankingNotServed, VacancyOwner
from hltm.settings import Settings
from hltm.warehouse import connect
from hltm_cli import main
from hltm_dagster.defs.judge.assets import (
    RANKINGS_KEY,
    chain_check,
    ranking_metadata,
    record_redactions,
)
from hltm_dagster.instance import ensure_dagster_home
from tests.support.judge import POOL, VACANCY

ROWS = 6


def _publish_rows(db: Path, n: int = ROWS) -> list[Publication]:
    """``n`` publications of one vacancy, each pool one resume larger (so each is complete)."""
    llm = LLM(backend=DeterministicBackend(), model=DETERMINISTIC_MODEL)
    config = judge_config(llm)
    pools = [POOL[: 2 + i] for i in range(n)]
    judge_pool(db, llm, VACANCY, pools[-1], workers=2)
    with connect(db) as con:
        gate = config_gate(con, config)
    t0 = datetime(2026, 2, 1, 3, 0)
    return [
        publish_ranking(db, VACANCY, pool, config, gate, now=t0 + timedelta(days=i))
        for i, pool in enumerate(pools)
    ]


def _delete_tail(db: Path, rows: int) -> None:
    with connect(db) as con:
        con.execute("DELETE FROM ranking_journal WHERE seq > ?", [ROWS - rows])


@pytest.mark.parametrize("deleted", [1, 5, ROWS])
def test_a_deleted_tail_is_detected(tmp_path: Path, deleted: int) -> None:
    db = tmp_path / "derived.duckdb"
    _publish_rows(db)
    assert verify_chain(db).ok
    _delete_tail(db, deleted)
    report = verify_chain(db)
    assert not report.ok
    assert f"the last {deleted} row(s) were deleted" in report.reason, report.reason


def test_the_dagster_anchor_catches_a_tail_deleted_with_the_head_file(tmp_path: Path) -> None:
    db = tmp_path / "derived.duckdb"
    last = _publish_rows(db)[-1]
    with dg.DagsterInstance.ephemeral() as instance:
        instance.report_runless_asset_event(
            dg.AssetMaterialization(
                RANKINGS_KEY, partition="vac-1", metadata=ranking_metadata(last)
            )
        )
        assert chain_check(instance, db).ok
        _delete_tail(db, 2)
        head_path(db).unlink()
        # without any anchor a deleted tail cannot be told from a short journal: refused
        assert "head anchor" in verify_chain(db).reason
        # the head file is rewritten by the next publish in real life; here only Dagster knows
        head_path(db).write_text('{"seq": 0, "row_hash": ""}')
        report = chain_check(instance, db)
    assert not report.ok
    assert "Dagster materialisation" in report.reason and "last 2 row(s)" in report.reason


def test_a_forged_rankings_row_is_detected_and_not_served(settings: Settings) -> None:
    db = settings.derived_db
    _publish_rows(db, 2)
    runner = CliRunner()
    assert runner.invoke(main, ["judge", "show", "vac-1"]).exit_code == 0
    with connect(db) as con:  # change the last candidate's overall
        con.execute(
            "UPDATE rankings SET overall = CASE WHEN overall = 100 THEN 1 ELSE 100 END"
            " WHERE vacancy_id = 'vac-1' AND rank = 3"
        )
    report = verify_chain(db)
    assert not report.ok and "rankings of vac-1 do not match the journal" in report.reason
    verify = runner.invoke(main, ["judge", "verify"])
    assert verify.exit_code == 1 and "do not match the journal" in verify.output
    shown = runner.invoke(main, ["judge", "show", "vac-1"])
    assert shown.exit_code == 1 and "not served" in shown.output
    assert "#1" not in shown.output


def test_rankings_rows_added_or_removed_are_detected(tmp_path: Path) -> None:
    db = tmp_path / "derived.duckdb"
    _publish_rows(db, 2)
    with connect(db) as con:
        con.execute("DELETE FROM rankings WHERE rank = 1")
    assert "do not match the journal" in verify_chain(db).reason
    with connect(db) as con:
        con.execute("INSERT INTO rankings SELECT * REPLACE (99 AS rank) FROM rankings LIMIT 1")
    assert not verify_chain(db).ok


def test_redaction_keeps_the_chain_valid_and_removes_the_ids(tmp_path: Path) -> None:
    db = tmp_path / "derived.duckdb"
    _publish_rows(db, 3)
    gone = POOL[1].resume_id
    with connect(db) as con:
        assert redact(con, [], [gone]) == 3
        text = " ".join(str(r) for r in con.execute("SELECT * FROM ranking_journal").fetchall())
    assert gone not in text
    assert verify_chain(db).ok
    entries = journal_entries(db)
    assert all(gone not in {r.resume_id for r in e.ranking} and e.redacted == 1 for e in entries)
    with connect(db) as con:
        redact(con, [VACANCY.vacancy_id], [])
        assert con.execute("SELECT count(*) FROM rankings").fetchone() == (0,)
    assert verify_chain(db).ok and journal_entries(db, VACANCY.vacancy_id) == []
    # a redacted item cannot be put back with other content: the commitment no longer matches
    with connect(db) as con:
        con.execute("UPDATE ranking_journal SET vacancy_id = 'vac-9' WHERE seq = 1")
    assert "redacted vacancy" in verify_chain(db).reason


def test_judge_verify_checks_the_dagster_anchor_too(settings: Settings) -> None:
    """A tail deleted together with a rewritten head file: only Dagster's anchor knows, and the
    CLI must ask it as the asset check does."""
    db = settings.derived_db
    last = _publish_rows(db)[-1]
    runner = CliRunner()
    ensure_dagster_home()
    with dg.DagsterInstance.get() as instance:  # the CLI's instance: $DAGSTER_HOME
        instance.report_runless_asset_event(
            dg.AssetMaterialization(
                RANKINGS_KEY, partition="vac-1", metadata=ranking_metadata(last)
            )
        )
    assert runner.invoke(main, ["judge", "verify"]).exit_code == 0
    _delete_tail(db, 2)
    head_path(db).write_text('{"seq": 0, "row_hash": ""}')
    with connect(db) as con:  # the forger re-derives what is served from the shortened journal
        _derive_rankings(con, None)
    assert verify_chain(db).ok  # the head file alone is fooled
    verify = runner.invoke(main, ["judge", "verify"])
    assert verify.exit_code == 1, verify.output
    assert "Dagster materialisation" in verify.output and "last 2 row(s)" in verify.output


def _forge(db: Path, sql: str) -> None:
    """An edit of the journal by hand, with `rankings` re-derived from it as a forger would."""
    with connect(db) as con:
        con.execute(sql)
        _derive_rankings(con, None)


def test_a_forged_redaction_is_detected_and_not_served(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Blanking a live ranking's top candidate to what a redaction looks like, and dropping it
    from `rankings`: before, `judge verify` said intact and `judge show` served the new order."""
    db = settings.derived_db
    _publish_rows(db, 3)
    with connect(db) as con:
        (ranking,) = con.execute("SELECT ranking FROM ranking_journal WHERE seq = 3").fetchone()
    items = json.loads(ranking)
    items[0] = {"commit": items[0]["commit"]}
    _forge(db, f"UPDATE ranking_journal SET ranking = '{json.dumps(items)}' WHERE seq = 3")
    report = verify_chain(db)
    assert not report.ok and report.first_bad_seq == 3
    assert "ranking item 1 of row 3 is redacted, but no deletion record names it" in report.reason
    shown = CliRunner().invoke(main, ["judge", "show", "vac-1"])
    assert shown.exit_code == 1 and "not served" in shown.output and "#1" not in shown.output
    assert "ranking item 1 of row 3 is redacted, but no deletion record" in shown.output
    # …and what `judge show` refuses, the HTTP API's rankings route refuses too (409), to the
    # vacancy's own seat (these stores hold no sources: its ownership path is given).
    owner = VacancyOwner("vac-1", "Vacancy", "v1", "c1", "c1-s1", "c1-s1-p1")
    monkeypatch.setattr(rankings, "vacancy_owner", lambda *_: owner)
    with pytest.raises(RankingNotServed, match="redacted, but no deletion record"):
        rankings.scoped_ranking(settings.sources_db, db, Identity("seat", "c1-s1"), "vac-1")


def test_a_blanked_vacancy_is_detected_and_its_older_ranking_not_served(
    settings: Settings,
) -> None:
    """Nulling the live row's vacancy fields made the row before it the live ranking."""
    db = settings.derived_db
    _publish_rows(db, 3)
    _forge(
        db,
        "UPDATE ranking_journal SET vacancy_id = NULL, vacancy_version = NULL,"
        " vacancy_nonce = NULL WHERE seq = 3",
    )
    report = verify_chain(db)
    assert not report.ok and "its vacancy is redacted, but no deletion record" in report.reason
    shown = CliRunner().invoke(main, ["judge", "show", "vac-1"])
    assert shown.exit_code == 1 and "not served" in shown.output


def test_legitimate_redactions_are_proved_and_a_forged_proof_is_caught_by_dagster(
    tmp_path: Path,
) -> None:
    """A deletion's redactions verify (each named by a chained deletion record, anchored in the
    head file and in Dagster). A forger who blanks an item and writes its "proof" into the
    deletion records, rehashed, with the head file rewritten, fools the data dir alone; the
    instance's anchor catches the rewritten record, and shows an appended one."""
    db = tmp_path / "derived.duckdb"
    _publish_rows(db, 3)
    with connect(db) as con:
        redact(con, [], [POOL[1].resume_id])
        write_head(con, db)
    assert verify_chain(db).ok
    with dg.DagsterInstance.ephemeral() as instance:
        record_redactions(instance, db)
        assert chain_check(instance, db).ok
        with connect(db) as con:
            (ranking,) = con.execute("SELECT ranking FROM ranking_journal WHERE seq = 3").fetchone()
            items = json.loads(ranking)
            items[0] = {"commit": items[0]["commit"]}
            con.execute("UPDATE ranking_journal SET ranking = ? WHERE seq = 3", [json.dumps(items)])
            (proof,) = con.execute("SELECT commits FROM ranking_redactions").fetchone()
            con.execute("DELETE FROM ranking_redactions")
            _record_redaction(con, [*json.loads(proof), items[0]["commit"]])
            _derive_rankings(con, None)
            write_head(con, db)
        assert verify_chain(db).ok  # the data dir alone is fooled
        report = chain_check(instance, db)
        assert not report.ok, report.summary()
        assert "deletion record 1 differs from the one in the latest Dagster" in report.reason
        with connect(db) as con:  # an appended "proof" instead: shown beside the anchor
            con.execute("DELETE FROM ranking_redactions")
            _record_redaction(con, json.loads(proof))
            write_head(con, db)
        record_redactions(instance, db)
        with connect(db) as con:
            _record_redaction(con, [items[0]["commit"]])
            write_head(con, db)
        report = chain_check(instance, db)
    assert "1 deletion record(s) after the latest Dagster observation" in report.summary()


def test_a_damaged_head_file_is_one_clear_line_and_can_be_written_anew(
    settings: Settings,
) -> None:
    db = settings.derived_db
    _publish_rows(db, 2)
    head_path(db).write_text("")  # what a crash on a full disk can leave
    report = verify_chain(db)
    assert not report.ok and f"the head file {head_path(db)} cannot be read" in report.reason
    runner = CliRunner()
    verify = runner.invoke(main, ["judge", "verify"])
    assert verify.exit_code == 1 and "--reanchor" in verify.output, verify.output
    assert verify.exception is None or isinstance(verify.exception, SystemExit)
    fixed = runner.invoke(main, ["judge", "verify", "--reanchor"])
    assert fixed.exit_code == 0 and "intact" in fixed.output, fixed.output
    assert verify_chain(db).ok

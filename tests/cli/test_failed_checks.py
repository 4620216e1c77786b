"""A check that fails without failing its run (severity WARN, or ERROR and not blocking) is said
by the command whose run evaluated it, once per check, not only in the UI; a blocking check that
stops a run is its one error line."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import dagster as dg
import pytest

from hltm.settings import Settings
from hltm.sources.ingest import ingest_directory
from hltm_dagster.defs.sources.assets import VACANCIES


def test_the_command_that_ran_a_failed_check_says_so(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    cli_jobs_from: Callable[[dg.Definitions], None],
) -> None:
    from hltm_cli.dagster_runs import dagster_home, run_job

    @dg.op
    def builds_seats(context) -> None:  # type: ignore[no-untyped-def]
        for seat, passed in (("c01-s01", True), ("c01-s02", False), ("c02-s01", False)):
            context.log_event(
                dg.AssetCheckEvaluation(
                    asset_key=dg.AssetKey("seat_memory"),
                    check_name="seat_memories_not_degraded",
                    passed=passed,
                    severity=dg.AssetCheckSeverity.WARN,
                    description="no degraded seat node"
                    if passed
                    else f"1 degraded seat node(s); first: seat:{seat} summary dropped",
                )
            )

    @dg.job(name="seats")
    def seats() -> None:
        builds_seats()

    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster"))
    monkeypatch.setenv("HLTM_DATA_DIR", str(tmp_path / "data"))
    cli_jobs_from(dg.Definitions(jobs=[seats]))
    dagster_home()
    assert run_job("seats").success
    err = capsys.readouterr().err
    warnings = [line for line in err.splitlines() if "seat_memories_not_degraded" in line]
    assert len(warnings) == 1, err
    assert re.fullmatch(
        r"warning: check seat_memories_not_degraded on seat_memory failed \(2 of 3 evaluations,"
        r" run [0-9a-f]{8}\): 1 degraded seat node\(s\); first: seat:c01-s02 summary dropped",
        warnings[0],
    ), warnings[0]


def test_a_judge_gate_failure_is_one_line_with_the_totals(
    tiny_world: Path,
    settings: Settings,
    capsys: pytest.CaptureFixture[str],
    cli_jobs_from: Callable[[dg.Definitions], None],
) -> None:
    """The blocking quote gate stops `judge_refresh` before `rankings`: `hltm judge run` says
    why and what clears it, with what the run did before it stopped, in one line."""
    from hltm.judge.gate import gate_decision
    from hltm.judge.pipeline import JudgeConfig
    from hltm_cli import judge as judge_cli
    from hltm_dagster.defs.judge.assets import gate_failure, gate_metadata

    unmeasured = gate_decision(0, 0)
    assert gate_metadata(unmeasured, JudgeConfig("m", "p"))["survival_rate"] == "not measured"
    assert gate_metadata(gate_decision(10, 9), JudgeConfig("m", "p"))["survival_rate"] == 0.9

    @dg.asset(
        partitions_def=VACANCIES,
        backfill_policy=dg.BackfillPolicy.single_run(),
        name="judge_scores",
    )
    def judge_scores(context) -> dg.MaterializeResult:  # type: ignore[no-untyped-def]
        for vacancy in context.partition_keys:
            judged = {"pool": 2, "judged_now": 0, "llm_calls": 2, "prompt_tokens": 2500}
            context.add_asset_metadata(judged, partition_key=vacancy)
        return dg.MaterializeResult(metadata={"completion_tokens": 60})

    @dg.asset_check(asset=judge_scores, name="judge_quote_gate", blocking=True)
    def judge_quote_gate() -> dg.AssetCheckResult:
        return dg.AssetCheckResult(
            passed=False, severity=dg.AssetCheckSeverity.ERROR, description=gate_failure(unmeasured)
        )

    @dg.asset(
        partitions_def=VACANCIES,
        backfill_policy=dg.BackfillPolicy.single_run(),
        deps=[judge_scores],
        name="rankings",
    )
    def rankings() -> None:
        raise AssertionError("a blocked gate publishes nothing")

    assert ingest_directory(tiny_world, settings.sources_db).quarantined == 0
    job = dg.define_asset_job("judge_refresh", selection=[judge_scores, rankings])
    cli_jobs_from(
        dg.Definitions(assets=[judge_scores, rankings], asset_checks=[judge_quote_gate], jobs=[job])
    )
    with pytest.raises(SystemExit):
        judge_cli.run_judge()
    printed = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert gate_failure(unmeasured).startswith(
        "rankings not published: quote gate no quotes on mandatory requirements to measure"
    )
    assert printed == [
        "error: Dagster job 'judge_refresh' failed: judge_scores_judge_quote_gate:"
        f" {gate_failure(unmeasured)} (vacancies 3, pool_pairs 6, cached 0, judged 0, failed 0,"
        " deferred 0, rejudged 0, llm_calls 6, tokens 7680, published 0, unchanged 0, held 0,"
        " blocked 0, budget 0)"
    ]

"""A check that fails without failing its run (severity WARN, or ERROR and not blocking) is said
by the command whose run evaluated it, once per check, not only in the UI."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import dagster as dg
import pytest
from click.testing import CliRunner

from hltm_cli import main


def test_the_command_that_ran_a_failed_check_says_so(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    cli_jobs_from: Callable[[dg.Definitions], None],
) -> None:
    @dg.op(name="judge_all_vacancies", config_schema=dict)
    def judge_all_vacancies(context) -> dict:  # type: ignore[no-untyped-def]
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
        return {"vacancies": 0, "held_reasons": {}, "blocked_reasons": {}}

    @dg.job(name="judge_refresh")
    def judge_refresh() -> None:
        judge_all_vacancies()

    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster"))
    monkeypatch.setenv("HLTM_DATA_DIR", str(tmp_path / "data"))
    cli_jobs_from(dg.Definitions(jobs=[judge_refresh]))
    out = CliRunner().invoke(main, ["judge", "run"])
    assert out.exit_code == 0, out.output
    warnings = [line for line in out.stderr.splitlines() if "seat_memories_not_degraded" in line]
    assert len(warnings) == 1, out.stderr
    assert re.fullmatch(
        r"warning: check seat_memories_not_degraded on seat_memory failed \(2 of 3 evaluations,"
        r" run [0-9a-f]{8}\): 1 degraded seat node\(s\); first: seat:c01-s02 summary dropped",
        warnings[0],
    ), warnings[0]

"""One memory refresh and one judge run at a time per data dir, however they were started.

`hltm refresh` runs its jobs in its own process, outside Dagster's run queue: before, a second
`hltm refresh` started while one was running built the same nodes again (every LLM call paid
twice), and two `hltm judge run`s judged the same pairs twice. Now the second one says what is
running, waits for it to end, and then finds current what the first one built."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from hltm.deletion import delete_everywhere
from hltm.memory import builder_from_settings
from hltm.runlock import JUDGE_RUN, MEMORY_REFRESH, run_lock, running
from hltm.settings import Settings
from hltm.sources.ingest import ingest_directory
from hltm_cli.dagster_runs import dagster_home, refresh_memory
from tests.support.memory import make_harness, one_project_per_contract, rebuilt

ROOT = Path(__file__).resolve().parents[2]


def _wait_until(condition: Callable[[], object], what: str, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"never {what}"
        time.sleep(0.05)


HOLD = """
import sys
from pathlib import Path
from hltm.runlock import run_lock
with run_lock(Path(sys.argv[1]), sys.argv[2], sys.argv[3], contracts=sys.argv[4:] or None):
    print("held", flush=True)
    sys.stdin.readline()
"""


def _holder(
    data_dir: Path, work: str, who: str, contracts: list[str] | None = None
) -> subprocess.Popen[str]:
    """Another process at `work` (as `who`, on `contracts` or every one) until a line reaches
    its stdin."""
    process = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(HOLD), str(data_dir), work, who, *(contracts or [])],
        cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert process.stdout is not None and process.stdout.readline().strip() == "held"
    return process


def _release(process: subprocess.Popen[str]) -> None:
    assert process.stdin is not None
    process.stdin.write("done\n")
    process.stdin.flush()
    process.wait(timeout=30)


def test_a_second_refresh_waits_for_the_first_and_builds_nothing_twice(
    settings: Settings,
    tmp_path: Path,
    cli_jobs_from: Callable[[dg.Definitions], None],
    capsys: pytest.CaptureFixture[str],
) -> None:
    export = one_project_per_contract(tmp_path / "export", ["c1", "c2"])
    assert ingest_directory(export, settings.sources_db).quarantined == 0
    cli_jobs_from(make_harness(settings).defs)
    dagster_home()
    first = _holder(settings.data_dir, MEMORY_REFRESH, "run 1a2b3c4d (refresh_memory_tree)")
    second: list[Any] = []
    # `hltm refresh` while the first one runs: it says what runs, then waits in its run.
    thread = threading.Thread(target=lambda: second.extend(refresh_memory()))
    try:
        thread.start()
        _wait_until(lambda: "waiting:" in capsys.readouterr().err, "told what runs")
        builder_from_settings(settings).full_build().raise_for_failures()  # the first one's work
        assert thread.is_alive() and not second
    finally:
        _release(first)
        thread.join(timeout=300)
    assert [r.success for r in second] == [True]  # one run over both contracts
    assert rebuilt(second[0]) == []  # it found the tree current


def test_the_lock_is_held_across_processes_and_says_who_holds_it(tmp_path: Path) -> None:
    """A judge run in another process: this one is told what runs, and waits for it."""
    what, _ = second_is_told_and_waits(
        tmp_path, tmp_path, JUDGE_RUN, "run 0badc0de (judge_refresh)"
    )
    assert what.startswith("a judge run is running: run 0badc0de (judge_refresh), process")


def second_is_told_and_waits(holder_dir: Path, here: Path, work: str, who: str) -> tuple[str, int]:
    """`who` holds `work` in another process, on the data dir `holder_dir`; a second one, here
    on `here`, is told what runs and waits until it ends. What it was told, and the holder's
    process id."""
    holder = _holder(holder_dir, work, who)
    told: list[str] = []
    entered = threading.Event()

    def second() -> None:
        with run_lock(here, work, "run 2", told.append):
            entered.set()

    thread = threading.Thread(target=second)
    try:
        what = running(here, work)
        assert what is not None
        thread.start()
        _wait_until(lambda: told, "told what runs", timeout_s=30)
        assert told == [what] and not entered.is_set()
    finally:
        _release(holder)
    thread.join(timeout=30)
    assert entered.is_set() and running(here, work) is None
    return what, holder.pid


@pytest.mark.parametrize("work", [MEMORY_REFRESH, JUDGE_RUN])
def test_a_delete_purges_after_the_refresh_or_judge_run_under_way(
    settings: Settings, tmp_path: Path, work: str
) -> None:
    """A refresh or a judge run under way read the rows before the delete removed them, and would
    store what it derived from them after the purge: the purge waits for it, told what it is."""
    export = one_project_per_contract(tmp_path / "export", ["c1"])
    assert ingest_directory(export, settings.sources_db).quarantined == 0
    holder = _holder(settings.data_dir, work, "run 1a2b3c4d (under way)")
    told: list[str] = []
    done = threading.Event()

    def delete() -> None:
        delete_everywhere(settings, "project", "p0", told.append)
        done.set()

    deleting = threading.Thread(target=delete)
    try:
        deleting.start()
        _wait_until(lambda: told, "told what the delete waits for")
        assert "run 1a2b3c4d (under way)" in told[0]
        assert not done.is_set()
    finally:
        _release(holder)
        deleting.join(timeout=60)
    assert done.is_set()

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

import dagster as dg
import pytest

from hltm.cli.dagster_runs import dagster_home, run_job
from hltm.runlock import JUDGE_RUN, MEMORY_REFRESH, run_lock, running
from hltm.settings import Settings
from hltm.sources.ingest import ingest_directory
from tests.support.memory import make_harness

ROOT = Path(__file__).resolve().parents[2]
ALL_STALE = {"ops": {"plan_memory_refresh": {"config": {"all_stale": True}}}}


def _wait_until(condition: Callable[[], object], what: str, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"never {what}"
        time.sleep(0.05)


FIRST_REFRESH = """
import dagster as dg
from definitions import defs
with dg.DagsterInstance.get() as instance:
    result = defs.resolve_job_def("rebuild_memory_tree").execute_in_process(instance=instance)
    print(len(result.get_asset_materialization_events()), flush=True)
"""


def test_a_second_refresh_waits_for_the_first_and_builds_nothing_twice(
    tiny_world: Path,
    settings: Settings,
    cli_jobs_from: Callable[[dg.Definitions], None],
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert ingest_directory(tiny_world, settings.sources_db).quarantined == 0
    cli_jobs_from(make_harness(settings).defs)
    dagster_home()
    first = subprocess.Popen(  # `hltm refresh &`: the code location's job, in its own process
        [sys.executable, "-c", textwrap.dedent(FIRST_REFRESH)],
        cwd=ROOT, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        _wait_until(lambda: running(settings.data_dir, MEMORY_REFRESH), "started")
        second = run_job("refresh_memory_tree", ALL_STALE)  # `hltm refresh` meanwhile
        built = int(first.communicate(timeout=300)[0].split()[-1])
    finally:
        first.kill()
    said = capsys.readouterr().err
    assert "waiting: a memory refresh is running: run " in said and "rebuild_memory_tree" in said
    assert first.returncode == 0 and second.success
    assert built  # the first one built the tree ...
    assert not second.get_asset_materialization_events()  # ... the second found it current
    assert running(settings.data_dir, MEMORY_REFRESH) is None


HOLD = """
import sys
from pathlib import Path
from hltm.runlock import run_lock
with run_lock(Path(sys.argv[1]), sys.argv[2], "run 0badc0de (judge_refresh)"):
    print("held", flush=True)
    sys.stdin.readline()
"""


def test_the_lock_is_held_across_processes_and_says_who_holds_it(tmp_path: Path) -> None:
    """A judge run in another process: this one is told what runs, and waits for it."""
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(HOLD), str(tmp_path), JUDGE_RUN],
        cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert holder.stdout is not None and holder.stdin is not None
    try:
        assert holder.stdout.readline().strip() == "held"
        what = running(tmp_path, JUDGE_RUN)
        assert what is not None
        assert what.startswith("a judge run is running: run 0badc0de (judge_refresh), process")
        told: list[str] = []
        entered = threading.Event()

        def second() -> None:
            with run_lock(tmp_path, JUDGE_RUN, "run 2", told.append):
                entered.set()

        thread = threading.Thread(target=second)
        thread.start()
        _wait_until(lambda: told, "told what runs")
        assert told == [what] and not entered.is_set()
        holder.stdin.write("done\n")
        holder.stdin.flush()
        thread.join(timeout=30)
        assert entered.is_set()
    finally:
        holder.kill()
        holder.wait()
    assert running(tmp_path, JUDGE_RUN) is None

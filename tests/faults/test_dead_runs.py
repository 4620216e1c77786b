"""A killed run never leaves the automation stuck.

A memory refresh executing in its own process is killed with SIGKILL mid-run. Dagster cannot
record its end, so it stays STARTED, holding the one `hltm/memory_refresh` slot. The run
monitoring the instance's `dagster.yaml` switches on asks the instance's run launcher about the
worker, learns its process is gone, and fails the run; the next sensor refresh then runs to
completion. The daemon's per-run monitoring step (`monitor_started_run`) is called directly, on
the same instance the daemon would load."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import pytest
from dagster._daemon.monitoring.run_monitoring import monitor_started_run

from hltm.settings import Settings
from hltm.sources.ingest import ingest_directory
from hltm_cli.dagster_runs import dagster_home
from hltm_dagster.defs.memory.assets import REFRESH_TAG
from hltm_dagster.instance import LocalRunLauncher, fail_dead_runs, run_worker_pid
from hltm_dagster.worker_host import WORKER_HOST_TAG, this_host
from hltm_devkit.scenarios import read_world
from tests.support.memory import make_harness

ROOT = Path(__file__).resolve().parents[2]

RUN_JOB = """
import sys
import dagster as dg
from hltm_dagster.definitions import defs
job, partitions, partition = sys.argv[1:4]
with dg.DagsterInstance.get() as instance:
    instance.add_dynamic_partitions(partitions, [partition])
    defs.resolve_job_def(job).execute_in_process(instance=instance, partition_key=partition)
"""


@pytest.fixture
def memory_world(tiny_world: Path, settings: Settings) -> Settings:
    """The tiny world's sources: the refresh after the kill builds a four-project tree (the
    mechanism is the same for any size)."""
    assert ingest_directory(tiny_world, settings.sources_db).quarantined == 0
    return settings


@pytest.fixture
def instance(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    dagster_home()
    with dg.DagsterInstance.get() as persistent:
        yield persistent


def _start_and_kill(
    instance: dg.DagsterInstance, job: str, partitions: str, partition: str
) -> dg.DagsterRun:
    """Start `job` on one `partition` (of the dynamic partitions `partitions`) in its own
    process and SIGKILL it once it is executing."""
    command = [sys.executable, "-c", RUN_JOB, job, partitions, partition]
    # A session of its own: the kill reaches the `tail -F` Dagster's compute log manager starts.
    worker = subprocess.Popen(command, cwd=ROOT, env=dict(os.environ), start_new_session=True)
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            started = instance.get_runs(dg.RunsFilter(statuses=[dg.DagsterRunStatus.STARTED]))
            if started and run_worker_pid(instance, started[0].run_id):
                os.killpg(worker.pid, signal.SIGKILL)
                worker.wait()
                return started[0]
            assert worker.poll() is None, f"{job} ended before it could be killed"
            time.sleep(0.2)
    finally:
        if worker.poll() is None:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait()
    raise AssertionError(f"{job} never started")


def test_killed_refresh_is_failed_and_the_next_sensor_refresh_completes(
    memory_world: Settings, instance: dg.DagsterInstance
) -> None:
    assert isinstance(instance.run_launcher, LocalRunLauncher)
    assert instance.run_monitoring_enabled
    contract = read_world(memory_world.sources_db).contracts[0]
    killed = _start_and_kill(instance, "refresh_memory_tree", "contracts", contract)
    record = instance.get_run_record_by_id(killed.run_id)
    assert record and record.dagster_run.status == dg.DagsterRunStatus.STARTED  # what a kill leaves
    assert record.dagster_run.tags.get(REFRESH_TAG) == "refresh"  # …holding the refresh slot

    monitor_started_run(instance, None, record, logging.getLogger("run_monitoring"))  # type: ignore[arg-type]

    after = instance.get_run_by_id(killed.run_id)
    assert after and after.status == dg.DagsterRunStatus.FAILURE
    messages = [e.message for e in instance.all_logs(killed.run_id) if e.dagster_event]
    assert any("is gone" in (m or "") for m in messages)
    blocking = instance.get_runs(
        dg.RunsFilter(
            statuses=[dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.STARTING],
            tags={REFRESH_TAG: ["refresh", "sensor"]},
        )
    )
    assert not blocking  # the queue's one refresh slot is free again

    harness = make_harness(memory_world)
    harness.instance = instance
    result, runs = harness.tick_and_run()
    assert isinstance(result, dg.SensorResult) and runs, result
    assert all(r.success for r in runs)
    assert fail_dead_runs(instance) == []  # nothing else was left STARTED


def test_killed_judge_run_is_failed_before_the_next_command_starts(
    memory_world: Settings, instance: dg.DagsterInstance
) -> None:
    """The same liveness check covers every job: a judge run killed mid-way is failed by what
    each `hltm` command (and the sensors) call before they start a run."""
    killed = _start_and_kill(instance, "judge_refresh", "vacancies", "v001")
    assert instance.get_run_by_id(killed.run_id).status == dg.DagsterRunStatus.STARTED  # type: ignore[union-attr]
    started = instance.get_run_by_id(killed.run_id)
    assert started and started.tags[WORKER_HOST_TAG] == this_host()  # said by its worker
    # Seen from another build host sharing the instance, the process id means nothing there.
    instance.add_run_tags(killed.run_id, {WORKER_HOST_TAG: "build-2"})
    assert fail_dead_runs(instance) == []
    instance.add_run_tags(killed.run_id, {WORKER_HOST_TAG: this_host()})
    assert fail_dead_runs(instance) == [killed.run_id]
    assert instance.get_run_by_id(killed.run_id).status == dg.DagsterRunStatus.FAILURE  # type: ignore[union-attr]
    assert fail_dead_runs(instance) == []

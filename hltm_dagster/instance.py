"""The persistent Dagster instance this project writes, and how it notices dead runs.

The instance's `dagster.yaml` loads the run launcher from this module by its path in every
process (webserver, daemon, CLI), before any code location. It is also the one home of the private
Dagster API the project needs.

Why it is needed: runs execute in one process (in-process executor), and the instance allows one
`hltm/memory_refresh` run at a time. A run killed by `kill -9` or the OOM killer never reports
its end, so it would stay STARTED forever and every later refresh would wait in the queue. Dagster's
run monitoring (daemon, every `poll_interval_seconds`) asks the run launcher whether a STARTED
run's worker is alive; Dagster's default local launcher cannot answer, so monitoring would only
enforce a maximum runtime. `LocalRunLauncher` answers from the run worker's process id, which every
run logs ("Executing steps in process (pid: …)"), and the monitoring daemon then marks a run whose
process is gone as failed, freeing the slot. `fail_dead_runs` is the same check for whatever
starts runs without the daemon (the CLI calls it before it executes a job).

The check is local: a process id means something on its own host only. Every run's worker tags
the run with its host as its resources start (`hltm_dagster.worker_host`), and a run tagged with
another host is never judged here, so a command or a sensor on one build host cannot fail a run
alive on another one sharing the instance. Run workers on other machines need a launcher that
can see them (Docker, Kubernetes, ECS launchers all implement the health check), together with
Postgres for the instance; a run not tagged yet is judged here only under a launcher that starts
its workers on this host (Dagster's default one and `LocalRunLauncher`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import dagster as dg

# Dagster's private API, used here and nowhere else (tests/shell/test_private_api.py pins each
# name, so an upgrade that moves one fails there first). No public equivalent exists for: the run
# launcher's health check (what makes a killed run FAILED), the tags Dagster itself reads (a
# runless observation's data version; the partition range of a single-run
# backfill, which a run of many partitions carries), and executing a run of the code
# location in this process (`located_job`, `execute_located`).
from dagster._core.definitions.data_version import DATA_VERSION_TAG as DATA_VERSION_TAG
from dagster._core.launcher import CheckRunHealthResult, WorkerStatus
from dagster._core.storage.tags import (
    ASSET_PARTITION_RANGE_END_TAG as ASSET_PARTITION_RANGE_END_TAG,
)
from dagster._core.storage.tags import (
    ASSET_PARTITION_RANGE_START_TAG as ASSET_PARTITION_RANGE_START_TAG,
)
from dagster._core.storage.tags import PARTITION_NAME_TAG
from dagster._serdes.config_class import ConfigurableClassData

from hltm.settings import Settings
from hltm_dagster.worker_host import WORKER_HOST_TAG, this_host

_MARKER = "# written by `hltm dagster-home`"
# Telemetry off (no network calls of our own accord); one memory refresh run at a time (DuckDB has
# one writer, embedded Chroma one process). This is what `hltm dagster-home` wrote before it knew
# about dead runs (upgraded in place); the current file adds run monitoring and the launcher.
_LEGACY_YAML = """\
telemetry:
  enabled: false
concurrency:
  runs:
    tag_concurrency_limits:
      - key: hltm/memory_refresh
        limit: 1
"""
DAGSTER_YAML = f"""\
{_MARKER}: delete this line to keep your own edits when hltm's defaults change
{_LEGACY_YAML}run_launcher:
  module: hltm_dagster.instance
  class: LocalRunLauncher
run_monitoring:
  enabled: true
  poll_interval_seconds: 30
  start_timeout_seconds: 180
  cancel_timeout_seconds: 180
  max_resume_run_attempts: 0
"""


# In every instance this project writes: the data dir whose history it keeps.
WORLD_FILE = "hltm-data-dir"


class OtherWorld(RuntimeError):
    """$DAGSTER_HOME keeps the history of another data dir than $HLTM_DATA_DIR's."""


def ensure_dagster_home() -> tuple[Path, str | None]:
    """The data dir's Dagster instance (`Settings.dagster_home`, exported as $DAGSTER_HOME for
    Dagster) with this project's `dagster.yaml`, and a warning when a user's own `dagster.yaml`
    leaves run monitoring off. An instance that keeps another data dir's history is refused
    (`OtherWorld`): its runs and partitions would mix two worlds in the UI."""
    settings = Settings.from_env()
    home = settings.dagster_home
    world = home / WORLD_FILE
    kept = world.read_text().strip() if world.exists() else None
    if kept is not None and Path(kept) != settings.data_dir:
        raise OtherWorld(
            f"DAGSTER_HOME={home} keeps the Dagster history of {kept}, not of {settings.data_dir}"
            f" (HLTM_DATA_DIR): unset DAGSTER_HOME (each data dir's instance is then"
            f" <data dir>.dagster beside it), or point it at a folder of this data dir's own"
        )
    os.environ["DAGSTER_HOME"] = str(home)
    home.mkdir(parents=True, exist_ok=True)
    if kept is None:
        world.write_text(f"{settings.data_dir}\n")
    config = home / "dagster.yaml"
    current = config.read_text() if config.exists() else None
    if current is None or current == _LEGACY_YAML or current.startswith(_MARKER):
        if current != DAGSTER_YAML:
            config.write_text(DAGSTER_YAML)
        return home, None
    if "run_monitoring" not in current:
        return home, (
            f"{config} has no run_monitoring section: a killed run would stay STARTED and block"
            " the memory refresh queue (see hltm_dagster/instance.py for the settings)"
        )
    return home, None


def _boot_time() -> float | None:
    try:
        for line in Path("/proc/stat").read_text().splitlines():
            if line.startswith("btime "):
                return float(line.split()[1])
    except OSError:
        return None
    return None


def process_alive(pid: int, existed_at: float | None = None) -> bool:
    """Whether process `pid` still runs (a zombie does not), and is the process that existed at
    `existed_at` (a younger process that reused the pid is not)."""
    stat = Path(f"/proc/{pid}/stat")
    if Path("/proc/self/stat").exists():
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            return False
        if fields[0] in ("Z", "X"):
            return False
        boot = _boot_time()
        if existed_at is not None and boot is not None:
            started = boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")
            if started > existed_at + 2:  # /proc start times are in clock ticks since boot
                return False
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def run_worker_pid(instance: dg.DagsterInstance, run_id: str) -> tuple[int, float] | None:
    """The run worker's process id and when it was logged: the first engine event of the run
    that names a pid (the run worker's start, or the in-process executor's)."""
    for record in instance.all_logs(run_id, of_type=dg.DagsterEventType.ENGINE_EVENT):
        event = record.dagster_event
        data = event.engine_event_data if event else None
        pid = (data.metadata or {}).get("pid") if data else None
        if pid is not None:
            return int(str(pid.value)), record.timestamp
    return None


# A STARTED run logs its process id within moments; one that never did is presumed dead after this.
_PID_GRACE_S = 600


def worker_health(instance: dg.DagsterInstance, run: dg.DagsterRun) -> CheckRunHealthResult:
    host = run.tags.get(WORKER_HOST_TAG)
    if host is None and not isinstance(instance.run_launcher, dg.DefaultRunLauncher):
        return CheckRunHealthResult(
            WorkerStatus.UNKNOWN, "its worker has not said its host yet: its launcher tells"
        )
    if host is not None and host != this_host():
        return CheckRunHealthResult(WorkerStatus.UNKNOWN, f"its worker runs on host {host}")
    found = run_worker_pid(instance, run.run_id)
    if found is None:
        record = instance.get_run_record_by_id(run.run_id)
        started = record.start_time if record else None
        if started is not None and time.time() - started > _PID_GRACE_S:
            return CheckRunHealthResult(
                WorkerStatus.FAILED, f"the run never logged a process id in {_PID_GRACE_S}s"
            )
        return CheckRunHealthResult(WorkerStatus.RUNNING, "no process id logged yet")
    pid, logged_at = found
    if process_alive(pid, logged_at):
        return CheckRunHealthResult(WorkerStatus.RUNNING, f"process {pid} is alive")
    return CheckRunHealthResult(
        WorkerStatus.FAILED,
        f"run worker process {pid} is gone (killed, e.g. by kill -9 or the OOM killer)",
    )


def fail_dead_runs(instance: dg.DagsterInstance, tag: str | None = None) -> list[str]:
    """Mark every STARTED run (with tag `tag`, if given) whose worker process is gone as failed;
    the ids of those runs."""
    failed = []
    started = dg.RunsFilter(statuses=[dg.DagsterRunStatus.STARTED])
    for run in instance.get_runs(filters=started):
        if tag is not None and tag not in run.tags:
            continue
        health = worker_health(instance, run)
        if health.status == WorkerStatus.FAILED:
            instance.report_run_failed(run, f"Marked failed: {health.msg}.")
            failed.append(run.run_id)
    return failed


class LocalRunLauncher(dg.DefaultRunLauncher):
    """Dagster's default launcher, plus the worker health check run monitoring needs to fail a
    run whose process was killed."""

    @classmethod
    def from_config_value(
        cls, inst_data: ConfigurableClassData, config_value: Mapping[str, Any]
    ) -> LocalRunLauncher:
        return cls(inst_data=inst_data)

    @property
    def supports_check_run_worker_health(self) -> bool:
        return True

    def check_run_worker_health(self, run: dg.DagsterRun) -> CheckRunHealthResult:
        return worker_health(self._instance, run)


# ---- runs of the code location, started outside the webserver ----------------------------------

# The code location: its module, its `Definitions` variable and its name, as `dg dev` loads it
# (pyproject's [tool.dg.project]) and as `workspace.yaml` names it for `dagster dev`.
LOCATION_MODULE, LOCATION_DEFS, LOCATION_NAME = "hltm_dagster.definitions", "defs", "definitions"


def partition_range_tags(start: str, end: str) -> dict[str, str]:
    """The tags of one run over the partitions `start`…`end` of an asset whose backfill policy
    is a single run (what a backfill of that range launches)."""
    return {ASSET_PARTITION_RANGE_START_TAG: start, ASSET_PARTITION_RANGE_END_TAG: end}


def run_partitions(run: dg.DagsterRun, order: Callable[[], list[str]]) -> set[str] | None:
    """The partition keys a run covers, from its tags (`order`: the partitions' order, read
    only for a range); None when its tags name none or a key no longer there."""
    if key := run.tags.get(PARTITION_NAME_TAG):
        return {key}
    start = run.tags.get(ASSET_PARTITION_RANGE_START_TAG)
    end = run.tags.get(ASSET_PARTITION_RANGE_END_TAG)
    if start is None or end is None:
        return None
    keys = order()
    if start not in keys or end not in keys:
        return None
    return set(keys[keys.index(start) : keys.index(end) + 1])


def added_ranges(instance: Any, name: str, wanted: set[str]) -> list[tuple[str, str]]:
    """The partitions `wanted` of the dynamic partition set `name` (the missing ones added
    first), as contiguous ranges of its order: a run each of an asset job whose backfill policy
    is a single run (one run, unless partitions were deleted in between)."""
    known = set(instance.get_dynamic_partitions(name))
    if missing := sorted(wanted - known):
        instance.add_dynamic_partitions(name, missing)
    return partition_ranges(list(instance.get_dynamic_partitions(name)), wanted)


def partition_ranges(order: list[str], wanted: set[str]) -> list[tuple[str, str]]:
    """The wanted keys as contiguous ranges of the partitions' order (one run each)."""
    ranges: list[tuple[str, str]] = []
    start: str | None = None
    for previous, key in zip([None, *order], [*order, None], strict=True):
        if key in wanted and start is None:
            start = key
        elif key not in wanted and start is not None and previous is not None:
            ranges.append((start, previous))
            start = None
    return ranges


def located_job(job_name: str) -> tuple[Any, Any]:
    """The job `job_name` of the installed code location, reconstructable (so a run of it can be
    re-executed), and its origin as the webserver knows it: a run created with that origin is
    listed under its job, in the timeline and in its assets' history. The location is found by
    its module, not by a working directory, so an installed wheel runs it from anywhere."""
    from dagster._core.definitions.reconstruct import ReconstructableRepository
    from dagster._core.definitions.repository_definition.valid_definitions import (
        SINGLETON_REPOSITORY_NAME,
    )
    from dagster._core.remote_origin import RemoteJobOrigin, RemoteRepositoryOrigin
    from dagster._core.workspace.load_target import ModuleTarget

    repository = ReconstructableRepository.for_module(LOCATION_MODULE, LOCATION_DEFS)
    target = ModuleTarget(LOCATION_MODULE, LOCATION_DEFS, None, LOCATION_NAME)
    (location,) = target.create_origins()
    origin = RemoteJobOrigin(RemoteRepositoryOrigin(location, SINGLETON_REPOSITORY_NAME), job_name)
    return repository.get_reconstructable_job(job_name), origin


def execute_located(
    instance: dg.DagsterInstance,
    job: Any,
    origin: Any,
    run_config: Mapping[str, Any],
    tags: Mapping[str, str],
    asset_selection: list[dg.AssetKey] | None = None,
) -> Any:
    """Create a run of `job` with the code location's `origin` on `instance` and execute it in
    this process, as Dagster's own run worker (`dagster api execute_run`) does: the run is the
    code location's, without the cost of a code server and a worker process."""
    from dagster._core.execution.api import execute_run

    if asset_selection:
        job = job.get_subset(asset_selection=set(asset_selection))
    definition = job.get_definition()
    run = instance.create_run_for_job(
        job_def=definition,
        run_config=run_config,
        tags={**definition.tags, **tags},
        asset_selection=frozenset(asset_selection) if asset_selection else None,
        remote_job_origin=origin,
        job_code_origin=job.get_python_origin(),
    )
    return execute_run(job, run, instance)

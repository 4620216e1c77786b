"""One run at a time of each kind of work that must not overlap on a data dir: a memory refresh
(`MEMORY_REFRESH`), a judge run (`JUDGE_RUN`).

Two refreshes at once build the same nodes twice, each paying for every LLM call; two judge runs
judge the same pairs twice. Dagster's run queue holds back only the runs it launches itself, and
`hltm refresh`, `hltm judge run` and `hltm delete` execute their runs in their own process. So
the work itself takes a lock file in the data dir (`<data dir>/.locks/<work>.lock`, through the
`filelock` library: an OS lock, released by the OS when its process dies, so a killed run never
leaves it held), whoever started it: the CLI, the daemon's run worker, a sensor's run, the UI.
A second one waits for the first to finish, after saying once what it waits for (the holder
writes who it is beside the lock); it then finds current what the first one built, and spends
nothing on it.

On the server profile (`HLTM_DATABASE_URL`) the builds of one deployment may run on several hosts,
each with its own data dir, so the lock is the database's instead: a session-level advisory lock
named by the work (`hltm.postgres.advisory_lock`), held on a connection of its own for the run.
PostgreSQL releases it when that connection ends, so a killed run leaves nothing to clean up, and
the connection's name says who holds it, on which host.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

from filelock import FileLock, Timeout

from hltm import postgres
from hltm.errors import UNAVAILABLE, StoreError
from hltm.settings import database_url, without_password

MEMORY_REFRESH = "memory-refresh"
JUDGE_RUN = "judge-run"
_WHAT = {MEMORY_REFRESH: "a memory refresh", JUDGE_RUN: "a judge run"}


def _paths(data_dir: Path, work: str) -> tuple[Path, Path]:
    folder = Path(data_dir) / ".locks"
    return folder / f"{work}.lock", folder / f"{work}.holder.json"


@contextmanager
def run_lock(
    data_dir: Path, work: str, holder: str, waiting: Callable[[str], None] | None = None
) -> Iterator[None]:
    """Hold `work`'s lock for the block; if another process holds it, call `waiting` with what
    is running, then wait for it. `holder` says who this is (e.g. "run 1a2b3c4d
    (refresh_memory_tree)")."""

    def told() -> None:
        if waiting is not None:
            waiting(running(data_dir, work) or _what(work))

    url = database_url()
    if url:
        with contextlib.ExitStack() as held:
            with _unreachable(url):
                held.enter_context(postgres.advisory_lock(url, work, holder, told))
            yield
        return
    lock_path, holder_path = _paths(data_dir, work)
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(lock_path)
    try:
        lock.acquire(timeout=0)
    except Timeout:
        told()
        lock.acquire()
    try:
        since = datetime.now().astimezone().isoformat(timespec="seconds")
        # Who holds it, for the message of the next one: worth no failure (a full disk).
        with contextlib.suppress(OSError):
            holder_path.write_text(
                json.dumps({"holder": holder, "pid": os.getpid(), "since": since})
            )
        yield
    finally:
        holder_path.unlink(missing_ok=True)
        lock.release()


def running(data_dir: Path, work: str) -> str | None:
    """What holds `work`'s lock now ("a memory refresh is running: run 1a2b3c4d
    (refresh_memory_tree), process 4242, since …"; on the server profile "…, process 4242 on
    host build-2, since …"), or None when nothing does."""
    url = database_url()
    if url:
        with _unreachable(url):
            held = postgres.lock_holder(url, work)
        if held is None:
            return None
        holder, pid, host, since = held
        when = since.astimezone().isoformat(timespec="seconds") if since else "unknown"
        return f"{_what(work)}: {holder}, process {pid} on host {host}, since {when}"
    lock_path, holder_path = _paths(data_dir, work)
    if not lock_path.exists():
        return None
    probe = FileLock(lock_path)
    try:
        probe.acquire(timeout=0)
    except Timeout:
        pass
    else:
        probe.release()
        return None
    what = _what(work)
    try:
        info = json.loads(holder_path.read_text())
    except (OSError, ValueError):
        return what
    return f"{what}: {info['holder']}, process {info['pid']}, since {info['since']}"


def _what(work: str) -> str:
    return f"{_WHAT.get(work, work)} is running"


@contextmanager
def _unreachable(url: str) -> Iterator[None]:
    """A database that cannot be reached for a run lock, as a `StoreError` saying so."""
    try:
        yield
    except postgres.OPERATIONAL as err:
        raise StoreError(
            f"the run locks at {without_password(url)}",
            f"PostgreSQL failed ({str(err).strip().splitlines()[0][:160]})",
            "check that it is running and that HLTM_DATABASE_URL names it",
            UNAVAILABLE,
        ) from err

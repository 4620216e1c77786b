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
    lock_path, holder_path = _paths(data_dir, work)
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(lock_path)
    try:
        lock.acquire(timeout=0)
    except Timeout:
        if waiting is not None:
            waiting(running(data_dir, work) or f"{_WHAT.get(work, work)} is running")
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
    (refresh_memory_tree), process 4242, since …"), or None when nothing does."""
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
    what = f"{_WHAT.get(work, work)} is running"
    try:
        info = json.loads(holder_path.read_text())
    except (OSError, ValueError):
        return what
    return f"{what}: {info['holder']}, process {info['pid']}, since {info['since']}"

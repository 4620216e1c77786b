"""On the server profile, the run locks are the deployment's, not the data dir's: two build hosts
share the database but each has its own data dir, so the locks are the database's (session-level
advisory locks), and a killed holder leaves nothing held. (A refresh per contract:
`test_contract_locks.py`.)

Before, the lock was a file of the data dir alone: a second host's refresh of the same database
found nothing running and built the same nodes again."""

from __future__ import annotations

import os
import signal
import socket
import time
from pathlib import Path

import psycopg
import pytest

from hltm.errors import StoreError
from hltm.runlock import JUDGE_RUN, MEMORY_REFRESH, run_lock, running
from hltm.settings import Settings
from tests.faults.test_one_run_at_a_time import _holder, _wait_until, second_is_told_and_waits

pytestmark = pytest.mark.xdist_group("postgres")


def test_a_second_host_is_refused_and_told_who_holds_it_where(
    server_profile: Settings, tmp_path: Path
) -> None:
    """The holder runs in another process with its own data dir (another build host)."""
    who = "run 1a2b3c4d (refresh_memory_tree)"
    here = tmp_path / "host-2"
    what, pid = second_is_told_and_waits(tmp_path / "host-1", here, MEMORY_REFRESH, who)
    assert what.startswith(
        f"a memory refresh is running: {who}, process {pid} on host {socket.gethostname()}, since "
    )
    assert not (here / ".locks").exists() and not (tmp_path / "host-1" / ".locks").exists()


def test_a_killed_holder_leaves_the_lock_free_at_once(
    server_profile: Settings, tmp_path: Path
) -> None:
    holder = _holder(tmp_path / "host-1", JUDGE_RUN, "run 0badc0de (judge_refresh)")
    assert running(tmp_path, JUDGE_RUN) is not None
    assert running(tmp_path, MEMORY_REFRESH) is None  # another work's lock is another key
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait(timeout=10)
    # PostgreSQL ends the session when its client's socket closes: no stale lock to clean up.
    _wait_until(lambda: running(tmp_path, JUDGE_RUN) is None, "freed", timeout_s=2)
    told: list[str] = []
    began = time.monotonic()
    with run_lock(tmp_path, JUDGE_RUN, "run 2", told.append):
        assert not told
    assert time.monotonic() - began < 2


def test_an_unreachable_database_is_said_plainly(
    settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # nothing listens there once it is closed
    monkeypatch.setenv("HLTM_DATABASE_URL", f"postgresql://hltm:secret@127.0.0.1:{port}/x")
    lock = run_lock(tmp_path, MEMORY_REFRESH, "run 1")
    with pytest.raises(StoreError, match="the run locks at .*PostgreSQL failed") as caught:
        lock.__enter__()
    assert "secret" not in str(caught.value)


def test_a_run_that_lost_its_lock_says_so_when_it_ends(
    server_profile: Settings, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A restart of the database ends the lock's session: the run cannot be stopped by it, but
    its end says that another run may have run beside it."""
    with run_lock(tmp_path, MEMORY_REFRESH, "run 1a2b3c4d (refresh_memory_tree)"):
        with psycopg.connect(server_profile.database_url or "", autocommit=True) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory'"
                " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
            )
        _wait_until(lambda: running(tmp_path, MEMORY_REFRESH) is None, "ended", timeout_s=2)
    assert "lost its lock" in caplog.text and "run 1a2b3c4d (refresh_memory_tree)" in caplog.text

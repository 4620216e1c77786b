"""On the server profile, memory refreshes of different contracts run at once, and one contract
is never refreshed twice at once, across processes and hosts: a refresh holds the deployment's
lock shared and one lock per contract it covers; work on every contract holds the deployment's
lock alone. Before, every refresh held the one deployment lock, so a refresh of one contract
waited for a refresh of any other."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from hltm import postgres
from hltm.runlock import JUDGE_RUN, MAX_CONTRACT_LOCKS, MEMORY_REFRESH, run_lock, running
from hltm.settings import Settings
from tests.faults.test_one_run_at_a_time import _holder, _release, _wait_until

pytestmark = pytest.mark.xdist_group("postgres")


@pytest.fixture
def fleet(server_profile: Settings, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """The server profile with a Chroma server named (the locks never connect to it)."""
    monkeypatch.setenv("CHROMA_HOST", "chroma.invalid")
    return server_profile


class _Run:
    """A refresh in a thread of its own (its own connection): what it was told while it
    waited, whether it holds its locks, and the event that ends it."""

    def __init__(self, data_dir: Path, who: str, contracts: Collection[str] | None) -> None:
        self.told: list[str] = []
        self.held: list[frozenset[str] | None] = []
        self.entered, self.done = threading.Event(), threading.Event()

        def work() -> None:
            with run_lock(data_dir, MEMORY_REFRESH, who, self.told.append, contracts) as held:
                self.held.append(held)
                self.entered.set()
                self.done.wait(30)

        self.thread = threading.Thread(target=work)
        self.thread.start()

    def end(self) -> None:
        self.done.set()
        self.thread.join(30)
        assert not self.thread.is_alive()


@contextmanager
def _running(data_dir: Path, who: str, contracts: Collection[str] | None) -> Iterator[_Run]:
    run = _Run(data_dir, who, contracts)
    try:
        yield run
    finally:
        run.end()


def test_different_contracts_at_once_one_contract_in_turn(fleet: Settings, tmp_path: Path) -> None:
    with _running(tmp_path, "run A", ["c2", "c1"]) as first:
        assert first.entered.wait(10) and first.held == [{"c1", "c2"}]
        with _running(tmp_path, "run B", ["c3"]) as other:
            assert other.entered.wait(10) and not other.told  # no wait: another contract
            now = running(tmp_path, MEMORY_REFRESH) or ""
            assert now.startswith("a memory refresh is running: run A, process ")
            assert now.endswith(", over contract c3") and ", over contracts c1, c2; run B" in now
            # A refresh is told only of the runs it would wait for.
            assert running(tmp_path, MEMORY_REFRESH, ["c4"]) is None
            mine = running(tmp_path, MEMORY_REFRESH, ["c4", "c1"]) or ""
            assert "run A" in mine and "run B" not in mine
        # c2 is run A's: this one is told who holds it, and waits until run A ends.
        with _running(tmp_path, "run C", ["c3", "c2"]) as same:
            _wait_until(lambda: same.told, "told what runs", timeout_s=10)
            assert "run A, process" in same.told[0] and "over contracts c1, c2" in same.told[0]
            assert not same.entered.wait(0.3)
            first.end()
            assert same.entered.wait(10) and same.held == [{"c2", "c3"}]
    assert running(tmp_path, MEMORY_REFRESH) is None


def test_work_on_every_contract_excludes_every_refresh(fleet: Settings, tmp_path: Path) -> None:
    with _running(tmp_path, "run A", ["c1"]) as refresh:
        assert refresh.entered.wait(10)
        with _running(tmp_path, "repair", None) as whole:  # waits for the refresh of c1
            _wait_until(lambda: whole.told, "told what runs", timeout_s=10)
            assert "run A" in whole.told[0] and not whole.entered.wait(0.3)
            refresh.end()
            assert whole.entered.wait(10) and whole.held == [None]
            with _running(tmp_path, "run B", ["c9"]) as later:  # waits for the whole one
                _wait_until(lambda: later.told, "told what runs", timeout_s=10)
                assert later.told[0].startswith("a memory refresh is running: repair, ")
                assert later.told[0].endswith(", over every contract")
                assert not later.entered.wait(0.3)
                whole.end()
                assert later.entered.wait(10)


def test_a_killed_holder_frees_its_contracts_at_once(fleet: Settings, tmp_path: Path) -> None:
    odd = "c$2 'ü$$"  # quotes and dollars pass through the holder's note as they are
    holder = _holder(tmp_path / "host-1", MEMORY_REFRESH, "run 0badc0de", ["c1", odd])
    assert (running(tmp_path, MEMORY_REFRESH) or "").endswith(f", over contracts {odd}, c1")
    assert running(tmp_path, JUDGE_RUN) is None
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait(timeout=10)
    _wait_until(lambda: running(tmp_path, MEMORY_REFRESH) is None, "freed", timeout_s=2)
    with run_lock(tmp_path, MEMORY_REFRESH, "run 2", contracts=[odd]) as held:
        assert held == {odd}


def test_the_whole_deployment_where_contracts_cannot_run_at_once(
    server_profile: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Beside the data dir's embedded Chroma (one writing process), and for more contracts than
    the database's lock table should hold, a refresh holds every contract."""
    holder = _holder(tmp_path, MEMORY_REFRESH, "run 1", ["c1"])
    try:
        assert (running(tmp_path, MEMORY_REFRESH) or "").endswith(", over every contract")
    finally:
        _release(holder)
    monkeypatch.setenv("CHROMA_HOST", "chroma.invalid")
    many = [f"c{i}" for i in range(MAX_CONTRACT_LOCKS + 1)]
    with run_lock(tmp_path, MEMORY_REFRESH, "run 2", contracts=many) as held:
        assert held is None


def test_two_first_writes_make_one_table_at_once(server_profile: Settings) -> None:
    """Two refreshes' first writes on a new database: both connect to a new schema (which makes
    its functions) and create the same table at the same moment. Before, one of them failed
    ("duplicate key value violates unique constraint pg_type_typname_nsp_index")."""
    url = server_profile.database_url or ""
    failures: list[str] = []
    for attempt in range(8):
        at_once = threading.Barrier(2)

        def first_write(
            schema: str = f"race{attempt}", at_once: threading.Barrier = at_once
        ) -> None:
            at_once.wait(10)
            try:
                con = postgres.connection(url, schema)
                con.execute("CREATE TABLE IF NOT EXISTS nodes (node_id VARCHAR PRIMARY KEY)")
            except Exception as err:  # noqa: BLE001 - collected, asserted below
                failures.append(f"{type(err).__name__}: {err}")

        both = [threading.Thread(target=first_write) for _ in range(2)]
        for thread in both:
            thread.start()
        for thread in both:
            thread.join(30)
    assert failures == []

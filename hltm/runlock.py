"""One run at a time of each kind of work that must not overlap: a memory refresh of a contract
(`MEMORY_REFRESH`), a judge run (`JUDGE_RUN`).

Two refreshes of one contract at once build the same nodes twice, each paying for every LLM
call; two judge runs judge the same pairs twice. Dagster's run queue holds back only the runs it
launches itself, and `hltm refresh`, `hltm judge run` and `hltm delete` execute their runs in
their own process. So the work itself takes a lock, whoever started it: the CLI, the daemon's
run worker, a sensor's run, the UI. A second one waits for the first to finish, after saying once
what it waits for; it then finds current what the first one built, and spends nothing on it.

On the embedded profile the lock is a file of the data dir (`<data dir>/.locks/<work>.lock`,
through the `filelock` library: an OS lock, released by the OS when its process dies, so a killed
run never leaves it held; the holder writes who it is beside it). It is one per work: DuckDB's
file has one writer and embedded Chroma one process, so refreshes take turns whatever contracts
they cover.

On the server profile (`HLTM_DATABASE_URL`) the builds of one deployment may run on several hosts,
each with its own data dir, so the locks are the database's: session-level advisory locks, held on
a connection of their own for the run (`hltm.postgres.advisory_locks`). PostgreSQL releases them
when that connection ends, so a killed run leaves nothing to clean up, and the connection's name
says who holds them, on which host. A memory refresh there holds the deployment's
`memory-refresh` lock in shared mode and one exclusive lock per contract it covers, so refreshes
of different contracts run at once and one contract is never refreshed twice at once; work that
touches every contract (no contracts given) holds the deployment's lock exclusively. With the
data dir's embedded Chroma (no `CHROMA_HOST`) every refresh holds it exclusively, as on the
embedded profile: that index has one writing process.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

from filelock import FileLock, Timeout

from hltm import postgres
from hltm.errors import UNAVAILABLE, StoreError
from hltm.settings import chroma_host, database_url, without_password

MEMORY_REFRESH = "memory-refresh"
JUDGE_RUN = "judge-run"
_WHAT = {MEMORY_REFRESH: "a memory refresh", JUDGE_RUN: "a judge run"}
# PostgreSQL keeps every advisory lock in its shared lock table (`max_locks_per_transaction` x
# `max_connections` slots: 6,400 by default): a refresh of more contracts than this (a first
# build) holds the whole deployment instead of one lock each.
MAX_CONTRACT_LOCKS = 500


def _paths(data_dir: Path, work: str) -> tuple[Path, Path]:
    folder = Path(data_dir) / ".locks"
    return folder / f"{work}.lock", folder / f"{work}.holder.json"


@contextmanager
def run_lock(
    data_dir: Path,
    work: str,
    holder: str,
    waiting: Callable[[str], None] | None = None,
    contracts: Collection[str] | None = None,
) -> Iterator[frozenset[str] | None]:
    """Hold `work`'s lock for the block; if another process holds it, call `waiting` with what
    is running, then wait for it. `holder` says who this is (e.g. "run 1a2b3c4d
    (refresh_memory_tree)"). A memory refresh names the `contracts` it covers (None: work on
    every contract). The block gets the contracts held for it alone, or None when it holds the
    whole work (every contract)."""

    def told() -> None:
        if waiting is not None:
            waiting(running(data_dir, work, contracts) or _what(work))

    url = database_url()
    if url:
        mine = _per_contract(work, contracts)
        exclusive = [work] if mine is None else [_contract_lock(c) for c in mine]
        shared = None if mine is None else work
        note = "" if mine is None else _some(mine)
        with contextlib.ExitStack() as held:
            with _unreachable(url):
                held.enter_context(
                    postgres.advisory_locks(url, holder, exclusive, shared, told, note)
                )
            yield mine
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
        yield None
    finally:
        holder_path.unlink(missing_ok=True)
        lock.release()


def _per_contract(work: str, contracts: Collection[str] | None) -> frozenset[str] | None:
    """The contracts a refresh locks one by one, or None when it locks the whole work: any work
    but a refresh, a refresh of every contract or of more than `MAX_CONTRACT_LOCKS`, and every
    refresh beside an embedded Chroma."""
    if work != MEMORY_REFRESH or contracts is None or not chroma_host():
        return None
    mine = frozenset(contracts)
    return mine if len(mine) <= MAX_CONTRACT_LOCKS else None


def _contract_lock(contract: str) -> str:
    return f"{MEMORY_REFRESH} of contract {contract}"


def _some(contracts: Collection[str], shown: int = 8) -> str:
    """What a holder says it holds, kept short: `contracts c1, c2, … (40 contracts)`."""
    names = sorted(contracts)
    listed = ", ".join(names[:shown]) + (f", … ({len(names)} contracts)" if names[shown:] else "")
    return f"contract{'s' if len(names) > 1 else ''} {listed}"


def running(data_dir: Path, work: str, contracts: Collection[str] | None = None) -> str | None:
    """What holds `work`'s lock now ("a memory refresh is running: run 1a2b3c4d
    (refresh_memory_tree), process 4242, since …"; on the server profile "…, process 4242 on
    host build-2, since …, over contracts c1, c2", one such part per run), or None when nothing
    does. A refresh of `contracts` is told only of the runs it would wait for."""
    url = database_url()
    if url:
        mine = _per_contract(work, contracts)
        with _unreachable(url):
            holders = postgres.lock_holders(url, work)
            if mine is not None and holders:
                at = postgres.sessions_holding(url, [_contract_lock(c) for c in mine])
                holders = [h for h in holders if not h.shared or h.session in at]
        if not holders:
            return None
        return f"{_what(work)}: " + "; ".join(_holding(work, h) for h in holders)
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


def _holding(work: str, held: postgres.LockHolder) -> str:
    when = held.since.astimezone().isoformat(timespec="seconds") if held.since else "unknown"
    said = f"{held.holder}, process {held.pid} on host {held.host}, since {when}"
    if work != MEMORY_REFRESH:
        return said
    if not held.shared:
        return f"{said}, over every contract"
    return f"{said}, over {held.note or 'some contracts (another role cannot see which)'}"


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

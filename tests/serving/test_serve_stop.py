"""A serving worker stopped with SIGTERM (how `hltm serve` stops its workers, and `kill`) exits as
a normal exit, so multiprocessing's finalizers release what it holds: before, uvicorn raised the
signal again after its graceful shutdown, the default handler killed the process there, and the
resource tracker reported the semaphores as leaked ("2 leaked semaphore objects"). A worker
stopped while it warms up exits normally too: before, the stop came back out of a DuckDB query as
"Query interrupted", a traceback and a failed worker. And a worker whose `hltm serve` was killed
outright stops: before, it kept serving the port as an orphan."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from pathlib import Path
from typing import Any

SPAWN = multiprocessing.get_context("spawn")


def _worker(started: Any, in_pool: bool = False) -> None:
    """A uvicorn server as `hltm serve`'s worker runs it, holding a semaphore."""
    import uvicorn

    from hltm.serving.http import stop_cleanly_on_sigterm, stop_with_parent

    held = SPAWN.Lock()  # a named semaphore, registered with the resource tracker  # noqa: F841
    stop_cleanly_on_sigterm()
    if in_pool:
        stop_with_parent(poll_s=0.1)

    async def app(scope: dict, receive: Any, send: Any) -> None:
        while scope["type"] == "lifespan":
            message = await receive()
            if message["type"] == "lifespan.startup":
                started.set()
                await send({"type": "lifespan.startup.complete"})
            else:
                await send({"type": "lifespan.shutdown.complete"})
                return

    uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning")).run()


def _exit_code_on_sigterm(target: Any, at: str, pause_s: float = 0.0) -> int | None:
    """The exit code of a process running `target(event)`, sent SIGTERM (as serve's stop and
    `kill` send it) `pause_s` after it sets the event (it is then `at` that point)."""
    event = SPAWN.Event()
    worker = SPAWN.Process(target=target, args=(event,))
    worker.start()
    try:
        assert event.wait(timeout=60), f"the worker never got {at}"
        time.sleep(pause_s)
        worker.terminate()
        worker.join(timeout=60)
    finally:
        if worker.is_alive():
            worker.kill()
            worker.join()
    return worker.exitcode


def test_a_worker_stopped_with_sigterm_exits_normally() -> None:
    code = _exit_code_on_sigterm(_worker, "its server started")
    assert code == 0, f"exit code {code} (-{signal.SIGTERM}: killed by it)"


class _WarmingEngine:
    """An engine whose warm-up is one long DuckDB query, as a real one reading a large tree.

    Bounded (about 1.5 s on an idle core): DuckDB does not always act on a signal while it runs,
    and then the stop lands once the query is done."""

    warming: Any = None

    def __init__(self, settings: Any, db_wait_s: float) -> None:
        pass

    def warm_up(self) -> None:
        import duckdb

        self.warming.set()
        con = duckdb.connect()
        con.execute("SET enable_progress_bar = false")
        con.execute("SELECT sum(i) FROM range(1500000000) t(i)").fetchall()


def _warming_worker(warming: Any) -> None:
    """A serving worker's start, up to the end of its warm-up."""
    from hltm.serving import http

    http.stop_cleanly_on_sigterm()
    _WarmingEngine.warming = warming
    http.QueryEngine = _WarmingEngine  # type: ignore[misc,assignment]
    http.start_engine(None, http.ServeLimits())  # type: ignore[arg-type]


def test_a_worker_stopped_while_it_warms_up_exits_normally() -> None:
    code = _exit_code_on_sigterm(_warming_worker, "into its warm-up's query", pause_s=0.2)
    assert code == 0, f"exit code {code}"


def _serve(started: Any, worker_pid: Any) -> None:
    """`hltm serve` with one pool worker: it starts the worker, then waits on it."""
    worker = SPAWN.Process(target=_worker, args=(started, True))
    worker.start()
    worker_pid.value = worker.pid
    worker.join()


def _gone(pid: int) -> bool:
    """Exited: no such process, or a zombie its new parent has not reaped yet."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_a_pool_worker_stops_when_its_serve_is_killed_outright() -> None:
    started, worker_pid = SPAWN.Event(), SPAWN.Value("i", 0)
    serve = SPAWN.Process(target=_serve, args=(started, worker_pid))
    serve.start()
    try:
        assert started.wait(timeout=60), "the worker's server did not start"
        serve.kill()  # SIGKILL: serve cannot stop its workers
        serve.join()
        deadline = time.monotonic() + 30
        while not _gone(worker_pid.value) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _gone(worker_pid.value), "the worker kept serving after its serve was killed"
    finally:
        if worker_pid.value and not _gone(worker_pid.value):
            os.kill(worker_pid.value, signal.SIGKILL)

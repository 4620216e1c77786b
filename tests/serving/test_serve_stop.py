"""A serving worker stopped with SIGTERM (how `hltm serve` stops its workers, and `kill`) exits as
a normal exit, so multiprocessing's finalizers release what it holds: before, uvicorn raised the
signal again after its graceful shutdown, the default handler killed the process there, and the
resource tracker reported the semaphores as leaked ("2 leaked semaphore objects")."""

from __future__ import annotations

import multiprocessing
import signal
from typing import Any

SPAWN = multiprocessing.get_context("spawn")


def _worker(started: Any) -> None:
    """A uvicorn server as `hltm serve`'s worker runs it, holding a semaphore."""
    import uvicorn

    from hltm.serving.http import stop_cleanly_on_sigterm

    held = SPAWN.Lock()  # a named semaphore, registered with the resource tracker  # noqa: F841
    stop_cleanly_on_sigterm()

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


def test_a_worker_stopped_with_sigterm_exits_normally() -> None:
    started = SPAWN.Event()
    worker = SPAWN.Process(target=_worker, args=(started,))
    worker.start()
    try:
        assert started.wait(timeout=60), "the worker's server did not start"
        worker.terminate()  # SIGTERM, as serve's stop and `kill` send it
        worker.join(timeout=30)
    finally:
        if worker.is_alive():
            worker.kill()
            worker.join()
    assert worker.exitcode == 0, f"exit code {worker.exitcode} (-{signal.SIGTERM}: killed by it)"

"""Real `hltm serve` processes on loopback for the tests that talk HTTP to them: free ports,
waiting for /healthz, and processes that are always stopped, even when the test fails."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import httpx

from hltm.settings import DATABASE_URL_ENV, E5_ONNX_BACKEND, Settings
from hltm_devkit.postgres import free_port


def wait_until_healthy(base: str, timeout_s: float = 120) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if _answers(f"{base}/healthz"):
            return True
        time.sleep(0.1)
    return False


@contextmanager
def serve_processes(settings: Settings, count: int, timeout_s: float = 120) -> Iterator[list[str]]:
    """`count` separate `hltm serve --workers 1` processes on these settings' stores (offline
    backend; the server profile when they name a database, the Chroma server when they name
    one), each on a free port; their base URLs, once each answers /healthz. Stopped (SIGTERM,
    then SIGKILL) on the way out."""
    env = {
        **os.environ,
        "HLTM_DATA_DIR": str(settings.data_dir),
        "HLTM_LLM_BACKEND": "offline",
        "HLTM_EMBEDDINGS": E5_ONNX_BACKEND,
    }
    for name in ("CHROMA_HOST", "CHROMA_PORT", DATABASE_URL_ENV):
        env.pop(name, None)
    if settings.database_url:
        env[DATABASE_URL_ENV] = settings.database_url
    if settings.chroma_host:
        env |= {"CHROMA_HOST": settings.chroma_host, "CHROMA_PORT": str(settings.chroma_port)}
    hltm = str(Path(sys.executable).parent / "hltm")
    ports = [free_port() for _ in range(count)]
    bases = [f"http://127.0.0.1:{port}" for port in ports]
    with ExitStack() as stack:
        servers: list[subprocess.Popen[bytes]] = []
        stack.callback(_stop, servers)
        logs = [stack.enter_context(tempfile.TemporaryFile()) for _ in ports]  # not a pipe:
        for port, log in zip(ports, logs, strict=True):  # one left unread would block the server
            command = [hltm, "serve", "--workers", "1", "--host", "127.0.0.1", "--port", str(port)]
            servers.append(
                subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=log)
            )
        for base, log in zip(bases, logs, strict=True):
            if not wait_until_healthy(base, timeout_s):
                log.seek(0)
                said = log.read().decode(errors="replace")
                raise AssertionError(f"hltm serve on {base} did not answer /healthz:\n{said}")
        yield bases


@contextmanager
def chroma_server(path: Path, timeout_s: float = 60) -> Iterator[int]:
    """A Chroma server (`chroma run`) over the index files at `path`, as `hltm stack up` starts
    it; its port, once it answers its heartbeat. Stopped on the way out."""
    port = free_port()
    command = [str(Path(sys.executable).parent / "chroma"), "run", "--path", str(path)]
    command += ["--host", "127.0.0.1", "--port", str(port)]
    with ExitStack() as stack:
        log = stack.enter_context(tempfile.TemporaryFile())
        server = subprocess.Popen(command, stdout=log, stderr=log)
        stack.callback(_stop, [server])
        deadline = time.monotonic() + timeout_s
        while not _answers(f"http://127.0.0.1:{port}/api/v2/heartbeat"):
            if server.poll() is not None or time.monotonic() > deadline:
                log.seek(0)
                said = log.read().decode(errors="replace")[-2000:]
                raise AssertionError(f"chroma run on port {port} did not start:\n{said}")
            time.sleep(0.1)
        yield port


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def _stop(servers: list[subprocess.Popen[bytes]]) -> None:
    for server in servers:
        server.terminate()
    for server in servers:
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()

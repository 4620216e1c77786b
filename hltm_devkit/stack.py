"""The server profile's topology on one machine (`hltm stack up` / `make stack`): PostgreSQL,
the Chroma server, the Dagster code server, daemon and webserver on an instance kept in
PostgreSQL with the queued run coordinator, and two `hltm serve` processes — each its own
process, talking over 127.0.0.1.

Everything lives beside the data dir, in `<data dir>.stack/`: the PostgreSQL cluster, Chroma's
files, the Dagster instance (`dagster/dagster.yaml`, `dagster/workspace.yaml`), each process's
log, and `stack.json` (what runs, its process id and address), which `down` and `status` read.
A second `up` starts what is not running and keeps the data.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from hltm.settings import Settings
from hltm_devkit.postgres import LocalPostgres, free_port

STORES_DATABASE = "hltm"
DAGSTER_DATABASE = "dagster"
SERVE_PROCESSES = 2
_READY_S = 120.0


@dataclass(frozen=True)
class Service:
    name: str
    argv: list[str]
    port: int

    @property
    def address(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def stack_dir(settings: Settings) -> Path:
    return settings.data_dir.with_name(f"{settings.data_dir.name}.stack")


def _bin(name: str) -> str:
    return str(Path(sys.executable).with_name(name))


def _dagster_yaml(pg: LocalPostgres) -> str:
    """The instance: all its storage in PostgreSQL, runs queued by the daemon and launched by
    Dagster's default launcher through the code server."""
    return f"""\
telemetry:
  enabled: false
storage:
  postgres:
    postgres_db:
      hostname: 127.0.0.1
      port: {pg.port}
      username: hltm
      db_name: {DAGSTER_DATABASE}
      # dagster-postgres is written for psycopg2, SQLAlchemy 2.1's default driver is psycopg 3
      scheme: postgresql+psycopg2
run_coordinator:
  module: dagster.core.run_coordinator
  class: QueuedRunCoordinator
concurrency:
  runs:
    max_concurrent_runs: 4
    # Memory refreshes of different contracts run at once, each holding its contracts' locks
    # (hltm.runlock). A run of one contract carries it in its partition tag, so a second run of
    # that contract waits here rather than in a run slot; a run of a range of contracts is
    # tagged only with its ends, and the locks alone keep it off the others' contracts.
    tag_concurrency_limits:
      - key: dagster/partition
        value:
          applyLimitPerUniqueValue: true
        limit: 1
run_launcher:
  module: dagster.core.launcher
  class: DefaultRunLauncher
run_monitoring:
  enabled: true
  start_timeout_seconds: 180
"""


def _workspace_yaml(code_port: int) -> str:
    return f"""\
load_from:
  - grpc_server:
      host: 127.0.0.1
      port: {code_port}
      location_name: definitions
"""


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def _wait_for_port(name: str, port: int, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + _READY_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{name} exited ({process.returncode}); see {log}")
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.5)
    raise RuntimeError(f"{name} is not listening on {port} after {_READY_S:.0f} s; see {log}")


def _state(root: Path) -> dict[str, dict[str, object]]:
    path = root / "stack.json"
    return json.loads(path.read_text()) if path.exists() else {}


def up(settings: Settings) -> dict[str, dict[str, object]]:
    """Start every process of the topology not running yet; what runs, by name."""
    root = stack_dir(settings)
    (root / "logs").mkdir(parents=True, exist_ok=True)
    state = _state(root)
    pg_port = int(state.get("postgresql", {}).get("port", 0))  # type: ignore[call-overload]
    pg = LocalPostgres(root=root / "postgres", port=pg_port)
    if not pg_port or not (pg.data_dir / "postmaster.pid").exists():
        pg.start()
    stores_url = pg.ensure_database(STORES_DATABASE)
    pg.ensure_database(DAGSTER_DATABASE)
    state["postgresql"] = {"port": pg.port, "url": stores_url, "pid": _postmaster_pid(pg)}

    def port_of(name: str) -> int:
        return int(state.get(name, {}).get("port", 0)) or free_port()  # type: ignore[call-overload]

    chroma_port, code_port = port_of("chroma"), port_of("code-server")
    home = root / "dagster"
    home.mkdir(exist_ok=True)
    (home / "dagster.yaml").write_text(_dagster_yaml(pg))
    workspace = home / "workspace.yaml"
    workspace.write_text(_workspace_yaml(code_port))
    env = {
        **os.environ,
        "HLTM_DATA_DIR": str(settings.data_dir),
        "HLTM_DATABASE_URL": stores_url,
        "CHROMA_HOST": "127.0.0.1",
        "CHROMA_PORT": str(chroma_port),
        "DAGSTER_HOME": str(home),
    }
    webserver_port = port_of("dagster-webserver")
    services = [
        Service(
            "chroma",
            [_bin("chroma"), "run", "--path", str(root / "chroma"), "--host", "127.0.0.1",
             "--port", str(chroma_port)],
            chroma_port,
        ),
        Service(
            "code-server",
            [_bin("dagster"), "api", "grpc", "-m", "hltm_dagster.definitions", "-h", "127.0.0.1",
             "-p", str(code_port)],
            code_port,
        ),
        Service(
            "dagster-webserver",
            [_bin("dagster-webserver"), "-h", "127.0.0.1", "-p", str(webserver_port), "-w",
             str(workspace)],
            webserver_port,
        ),
        Service("dagster-daemon", [_bin("dagster-daemon"), "run", "-w", str(workspace)], 0),
    ]  # fmt: skip
    for i in range(1, SERVE_PROCESSES + 1):
        port = port_of(f"serve-{i}")
        services.append(
            Service(
                f"serve-{i}",
                [_bin("hltm"), "serve", "--host", "127.0.0.1", "--port", str(port),
                 "--workers", "1"],
                port,
            )
        )  # fmt: skip
    for service in services:
        known = state.get(service.name, {})
        if known and _running(int(known["pid"])):  # type: ignore[call-overload]
            continue
        log = root / "logs" / f"{service.name}.log"
        process = subprocess.Popen(
            service.argv,
            env=env,
            stdout=log.open("ab"),
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # outlives this command; `down` stops it
        )
        state[service.name] = {"pid": process.pid, "port": service.port, "log": str(log)}
        if service.port:
            state[service.name]["url"] = service.address
            _wait_for_port(service.name, service.port, process, log)
        (root / "stack.json").write_text(json.dumps(state, indent=2))
    state["env"] = {k: env[k] for k in ("HLTM_DATABASE_URL", "CHROMA_HOST", "CHROMA_PORT")}
    state["env"]["DAGSTER_HOME"] = str(home)
    (root / "stack.json").write_text(json.dumps(state, indent=2))
    return state


def _postmaster_pid(pg: LocalPostgres) -> int:
    return int((pg.data_dir / "postmaster.pid").read_text().split()[0])


def status(settings: Settings) -> dict[str, bool]:
    """Each process of the stack: whether it runs."""
    state = _state(stack_dir(settings))
    return {
        name: _running(int(item["pid"]))  # type: ignore[call-overload]
        for name, item in state.items()
        if "pid" in item
    }


def down(settings: Settings) -> list[str]:
    """Stop every process of the stack (the servers first, PostgreSQL last); their names. The
    data stays for the next `up`."""
    root = stack_dir(settings)
    state = _state(root)
    stopped = []
    for name, item in reversed(list(state.items())):
        if name in ("postgresql", "env") or "pid" not in item:
            continue
        pid = int(item["pid"])  # type: ignore[call-overload]
        if _running(pid):
            os.killpg(pid, signal.SIGTERM)
            deadline = time.monotonic() + 30
            while _running(pid) and time.monotonic() < deadline:
                time.sleep(0.2)
            if _running(pid):
                os.killpg(pid, signal.SIGKILL)
            stopped.append(name)
    pg = LocalPostgres(root=root / "postgres")
    if (pg.data_dir / "postmaster.pid").exists():
        pg.stop()
        stopped.append("postgresql")
    (root / "stack.json").unlink(missing_ok=True)
    return stopped

"""A PostgreSQL server of this machine's own binaries, for the server profile's tests and the
one-machine stack: one home for how it is found, initialised, started and stopped.

PostgreSQL refuses to run as root, and the tests and CI run as root: the cluster then belongs to
the `postgres` system user (Debian's package creates it), else to `nobody`, and every server
command runs as that user. The cluster lives in a directory of its own under the system's
temporary folder (a folder any user can reach: pytest's own temporary folders are root's alone),
listens on 127.0.0.1 at a free port, and lets local connections in without a password; it is
for one machine, never a network.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

INSTALL_HINT = (
    "install PostgreSQL's server binaries (Debian: `apt-get install -y postgresql-15`), or put"
    " the folder holding `initdb` and `pg_ctl` on PATH"
)
SUPERUSER = "hltm"
_SERVICE_USERS = ("postgres", "nobody")  # who runs the server when we are root


class PostgresUnavailable(RuntimeError):
    """The server cannot be started here; the message says why and what to do."""


def server_binaries() -> Path:
    """The folder of `initdb`, `pg_ctl` and `postgres`: PATH first, then Debian's layout."""
    found = shutil.which("pg_ctl")
    if found and shutil.which("initdb"):
        return Path(os.path.realpath(found)).parent
    for folder in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if (Path(folder) / "initdb").is_file() and (Path(folder) / "pg_ctl").is_file():
            return Path(folder)
    raise PostgresUnavailable(f"PostgreSQL is not installed here: {INSTALL_HINT}")


def _service_user() -> str | None:
    """The user the server runs as: None (ourselves) unless we are root."""
    if os.geteuid() != 0:
        return None
    for name in _SERVICE_USERS:
        try:
            pwd.getpwnam(name)
        except KeyError:
            continue
        return name
    raise PostgresUnavailable(
        "running as root and no `postgres` or `nobody` user to run PostgreSQL as: create one"
        " (`useradd --system postgres`)"
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class LocalPostgres:
    """One cluster: `start()` initialises it on first use and returns its URL; `stop()` stops
    it; `create_database` makes an empty database of it for one test or one world."""

    root: Path | None = None  # the cluster's folder; None: a new one under the temp folder
    port: int = 0  # 0: a free one
    durable: bool = True  # False (tests): no fsync, commits not flushed
    user: str | None = field(default=None, init=False)

    @property
    def data_dir(self) -> Path:
        assert self.root is not None
        return self.root / "data"

    @property
    def url(self) -> str:
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/postgres"

    def _run(self, *argv: str) -> subprocess.CompletedProcess[str]:
        command = [str(server_binaries() / argv[0]), *argv[1:]]
        if self.user is not None:
            command = ["runuser", "-u", self.user, "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            log = self.root / "server.log" if self.root else None
            tail = log.read_text()[-2000:] if log and log.exists() else ""
            raise PostgresUnavailable(
                f"`{' '.join(argv[:2])}` failed ({done.returncode}): {done.stderr.strip()}"
                f"{done.stdout.strip()} {tail}".strip()
            )
        return done

    def start(self) -> str:
        """Start the server (initialising the cluster the first time); its URL."""
        server_binaries()
        self.user = _service_user()
        if self.root is None:
            self.root = Path(tempfile.mkdtemp(prefix="hltm-postgres-"))
        self.root.mkdir(parents=True, exist_ok=True)
        if self.user is not None:
            os.chmod(self.root, 0o755)
            shutil.chown(self.root, self.user)
        if not (self.data_dir / "PG_VERSION").exists():
            self._run(
                "initdb",
                "-D",
                str(self.data_dir),
                "-U",
                SUPERUSER,
                "--auth=trust",
                "--encoding=UTF8",
                "--locale=C",
                "--no-sync",
            )
        self.port = self.port or free_port()
        options = f"-p {self.port} -h 127.0.0.1 -k {self.root}"
        if not self.durable:
            options += " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        self._run(
            "pg_ctl",
            "start",
            "-D",
            str(self.data_dir),
            "-l",
            str(self.root / "server.log"),
            "-w",
            "-t",
            "60",
            "-o",
            options,
        )
        return self.url

    def stop(self) -> None:
        self.user = self.user or _service_user()
        if self.root is not None and (self.data_dir / "postmaster.pid").exists():
            self._run("pg_ctl", "stop", "-D", str(self.data_dir), "-m", "fast", "-w")

    def create_database(self, name: str) -> str:
        """A new, empty database `name` (dropped first if it exists); its URL."""
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as con:
            con.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            con.execute(f'CREATE DATABASE "{name}"')
        return self.url.rsplit("/", 1)[0] + f"/{name}"

    def ensure_database(self, name: str) -> str:
        """Database `name`, created if missing (its data kept otherwise); its URL."""
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as con:
            found = con.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()
            if not found:
                con.execute(f'CREATE DATABASE "{name}"')
        return self.url.rsplit("/", 1)[0] + f"/{name}"

    def drop_database(self, name: str) -> None:
        """Drop database `name`, ending the connections still open to it."""
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as con:
            con.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

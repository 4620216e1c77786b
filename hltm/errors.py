"""The one error a store raises when it cannot be used: which file or index, what is wrong with
it, and what to do about it.

Every `hltm` command prints a `StoreError` as one line (`hltm_cli`), the HTTP server answers 503
with it, and raising one never loses what was stored before. The stores translate what their
libraries raise into it where they open and use their files: DuckDB files
(`hltm.warehouse`), the Chroma index (`hltm.vectors`), the journal's head file
(`hltm.judge.journal`); the query log recovers by itself (`hltm.query.log`).

A full disk and a read-only one reach Python in three spellings: an `OSError` with its errno,
and the texts DuckDB and SQLite (under Chroma) put in their messages. `disk_fault` reads all of
them, so each store names the same two problems the same way.
"""

from __future__ import annotations

import errno
from pathlib import Path

_FULL_ERRNOS = {errno.ENOSPC, errno.EDQUOT}
_READ_ONLY_ERRNOS = {errno.EROFS, errno.EACCES, errno.EPERM}
# How DuckDB, SQLite and the OS word the same two problems in a message.
_FULL_TEXTS = ("no space left on device", "disk is full", "disk quota exceeded")
_READ_ONLY_TEXTS = (
    "read-only file system",
    "attempt to write a readonly database",
    "permission denied",
    "attached in read-only mode",
)


# What is wrong, in the words a caller decides by (`StoreError.kind`).
FULL, READ_ONLY, DAMAGED, BUSY, UNAVAILABLE = "full", "read-only", "damaged", "busy", "unavailable"


class StoreError(RuntimeError):
    """A store that cannot be used: `store` (a path, or a description such as "the Chroma server
    at host:port"), `problem` (what is wrong), `remedy` (what to do) and `kind` (one of `FULL`,
    `READ_ONLY`, `DAMAGED`, `BUSY`, `UNAVAILABLE`)."""

    def __init__(self, store: Path | str, problem: str, remedy: str, kind: str) -> None:
        self.store = str(store)
        self.problem = problem
        self.remedy = remedy
        self.kind = kind
        super().__init__(f"{self.store}: {problem}; {remedy}")

    @property
    def retryable(self) -> bool:
        """Busy rather than broken: the same call may succeed a moment later."""
        return self.kind == BUSY


def _folder(store: Path | str) -> str:
    return str(Path(store).parent) if isinstance(store, Path) else str(store)


def disk_full(store: Path | str) -> StoreError:
    return StoreError(
        store,
        "no space left on the disk",
        f"free space on the disk that holds {_folder(store)} and run the command again (what"
        " was stored before is kept)",
        FULL,
    )


def not_writable(store: Path | str) -> StoreError:
    return StoreError(
        store,
        "cannot be written (a read-only disk, or no permission)",
        f"make {_folder(store)} writable, or point HLTM_DATA_DIR at a writable folder",
        READ_ONLY,
    )


def disk_fault(store: Path | str, err: BaseException) -> StoreError | None:
    """A full or read-only disk behind `err` (an OSError, or a library's message), else None."""
    code = err.errno if isinstance(err, OSError) else None
    text = str(err).lower()
    if code in _FULL_ERRNOS or any(t in text for t in _FULL_TEXTS):
        return disk_full(store)
    if code in _READ_ONLY_ERRNOS or any(t in text for t in _READ_ONLY_TEXTS):
        return not_writable(store)
    return None

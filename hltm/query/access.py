"""Bearer tokens for the HTTP endpoint: each token maps to exactly one identity.

Table `api_tokens` in `settings.derived_db`. Only the SHA-256 of a token is stored; the token
itself (`hltm_<43 url-safe chars>`) is shown once, when created. A token's identity is the widest
scope its holder can ever read: a request may narrow it (a seat token asking about one of its
projects) but never widen it. Tokens are created, listed and revoked with `hltm token …`.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import duckdb

from hltm.query.scope import MEMORY_TABLE, Identity
from hltm.warehouse import ChangeToken, change_token, connect, store_exists, table_exists

TOKENS_TABLE = "api_tokens"
TOKEN_PREFIX = "hltm_"
_SOURCE_TABLE = {"contract": "contracts", "seat": "seats", "project": "projects"}


@dataclass(frozen=True)
class TokenInfo:
    token_id: str
    identity: Identity
    label: str
    created_at: datetime
    revoked_at: datetime | None

    @property
    def active(self) -> bool:
        return self.revoked_at is None


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def _ensure(con) -> None:  # type: ignore[no-untyped-def]
    con.execute(
        f"CREATE TABLE IF NOT EXISTS {TOKENS_TABLE} (token_id VARCHAR PRIMARY KEY,"
        " token_hash VARCHAR NOT NULL UNIQUE, identity_level VARCHAR NOT NULL,"
        " identity_id VARCHAR NOT NULL, label VARCHAR NOT NULL, created_at TIMESTAMP NOT NULL,"
        " revoked_at TIMESTAMP)"
    )


def known_ids(level: str, derived_db: Path | str, sources_db: Path | str | None = None) -> set[str]:
    """The ids of every contract / seat / project (`level`) the memory or the sources hold."""
    ids: set[str] = set()
    if store_exists(derived_db):
        with connect(derived_db) as con:
            if table_exists(con, MEMORY_TABLE):
                rows = con.execute(
                    f"SELECT node_id FROM {MEMORY_TABLE} WHERE level = ?", [level]
                ).fetchall()
                ids |= {str(r[0]).split(":", 1)[1] for r in rows}
    if sources_db is not None and store_exists(sources_db):
        table = _SOURCE_TABLE[level]
        with connect(sources_db) as con:
            if table_exists(con, table):
                ids |= {
                    str(r[0]) for r in con.execute(f"SELECT {level}_id FROM {table}").fetchall()
                }
    return ids


def create_token(db: Path | str, identity: Identity, label: str = "") -> tuple[str, str]:
    """A new token for `identity`: returns (token id, the token — shown only now)."""
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    digest = _digest(token)
    token_id = digest[:12]
    with connect(db) as con:
        _ensure(con)
        con.execute(
            f"INSERT INTO {TOKENS_TABLE} VALUES (?, ?, ?, ?, ?, ?, NULL)",
            [
                token_id,
                digest,
                identity.level,
                identity.id,
                label,
                datetime.now(UTC).replace(tzinfo=None),
            ],
        )
    return token_id, token


def identity_for_token(
    db: Path | str, token: str | None, wait_s: float | None = None
) -> Identity | None:
    """The identity of an active token, or None (unknown, revoked, malformed or missing).
    `wait_s` bounds the wait for a file another process holds (`DatabaseBusy` past it)."""
    if not token or not token.startswith(TOKEN_PREFIX) or len(token) > 200:
        return None
    digest = _digest(token)
    with connect(db, wait_s=wait_s) as con:
        try:
            row = con.execute(
                f"SELECT token_hash, identity_level, identity_id FROM {TOKENS_TABLE}"
                " WHERE token_id = ? AND revoked_at IS NULL",
                [digest[:12]],
            ).fetchone()
        except duckdb.CatalogException:  # no token table yet (information_schema costs more)
            return None
    if not row or not hmac.compare_digest(row[0], digest):
        return None
    return Identity(row[1], row[2])


def active_digests(db: Path | str, digests: list[str], wait_s: float | None = None) -> set[str]:
    """Which of these token hashes are of active tokens, in one read."""
    if not digests:
        return set()
    with connect(db, wait_s=wait_s) as con:
        try:
            rows = con.execute(
                f"SELECT token_hash FROM {TOKENS_TABLE} WHERE revoked_at IS NULL"
                " AND token_hash IN (SELECT unnest(?::VARCHAR[]))",
                [digests],
            ).fetchall()
        except duckdb.CatalogException:  # no token table: no active token
            return set()
    return {row[0] for row in rows}


class TokenCache:
    """Active tokens already looked up, checked again whenever the tokens' file changes (a create
    or revoke in any process writes it), so a revoked token is refused from its next request on.

    Most writes to the file are not to the tokens (the memory build, the judge), so a
    change re-checks every known token in ONE read instead of forgetting them all, and requests
    arriving during that read are answered from the known tokens without waiting: profiled under
    50 clients, one DuckDB connection per token and request after each write was 28% of the
    server's time."""

    def __init__(self, db: Path | str, max_entries: int = 10_000) -> None:
        self.db = Path(db)
        self.max_entries = max_entries
        self._known: dict[str, Identity] = {}
        self._token: ChangeToken | None = None
        self._lock = threading.Lock()
        self._recheck_lock = threading.Lock()  # one re-check at a time

    def identity(self, token: str | None, wait_s: float | None = None) -> Identity | None:
        if not token:
            return None
        digest = _digest(token)
        seen = change_token(self.db)
        if seen != self._token and not self._recheck(seen, wait_s):
            # Another request is re-checking the known tokens against this change: answer as of
            # the state before it, as if this request had come a moment earlier.
            with self._lock:
                if digest in self._known:
                    return self._known[digest]
        with self._lock:
            if digest in self._known and self._token == seen:
                return self._known[digest]
        identity = identity_for_token(self.db, token, wait_s)
        with self._lock:
            if identity is not None and self._token == seen:
                if len(self._known) >= self.max_entries:
                    self._known.clear()
                self._known[digest] = identity
        return identity

    def _recheck(self, seen: ChangeToken, wait_s: float | None) -> bool:
        """Keep the known tokens still active as of (at least) the file state `seen`; False,
        without waiting, if another request is re-checking them now."""
        if not self._recheck_lock.acquire(blocking=self._token is None):
            return False
        try:
            if self._token != seen:
                with self._lock:
                    known = dict(self._known)
                active = active_digests(self.db, sorted(known), wait_s)
                with self._lock:
                    self._known = {d: i for d, i in known.items() if d in active}
                    self._token = seen
            return True
        finally:
            self._recheck_lock.release()


def list_tokens(db: Path | str) -> list[TokenInfo]:
    with connect(db) as con:
        if not table_exists(con, TOKENS_TABLE):
            return []
        rows = con.execute(
            f"SELECT token_id, identity_level, identity_id, label, created_at, revoked_at"
            f" FROM {TOKENS_TABLE} ORDER BY created_at, token_id"
        ).fetchall()
    return [TokenInfo(r[0], Identity(r[1], r[2]), r[3], r[4], r[5]) for r in rows]


def revoke_token(db: Path | str, token_id: str) -> bool:
    with connect(db) as con:
        if not table_exists(con, TOKENS_TABLE):
            return False
        row = con.execute(
            f"UPDATE {TOKENS_TABLE} SET revoked_at = ? WHERE token_id = ? AND revoked_at IS NULL"
            " RETURNING token_id",
            [datetime.now(UTC).replace(tzinfo=None), token_id],
        ).fetchone()
    return row is not None

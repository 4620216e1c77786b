"""Rankings: sort by `overall`, gate on quote survival and coverage, publish into a journal.

* **Ranking**: the pool's judged candidates sorted by the judge's single ``overall`` score, high
  to low — no weights (the weight study in `hltm.evaluation.judge.stats` shows they do not pay). Ties keep
  pool order (vector rank, then BM25 rank): a stable sort, not a second score.
* **Gate**: a configuration (model id + prompt version) publishes only if at least 90% of the
  quotes it gave on mandatory requirements survived validation, counted over its latest
  `GATE_WINDOW` evaluations in the score cache (`config_gate`): a fixed recent sample, so a
  bad spell of the model ages out as healthy evaluations come in, and is cleared at once by
  judging its evaluations again (`judge_pool(rejudge_failed=True)`).
* **Coverage**: a new ranking replaces the live one only when it is complete (every pool member
  judged) or at least as complete as the live one (`replaces`). A judge outage or a model
  change with a small budget therefore keeps the last good ranking, and says why.
* **Journal**: every publication is a new row of ``ranking_journal``. Each row stores the
  SHA-256 of the previous row's hash plus its own canonical content, so editing or deleting any
  row breaks the chain from that row on. The chain's head (seq + hash) is also written to a file
  beside the DuckDB (`head_path`) and into the Dagster materialisation of each publication, so
  deleting the *last* rows is detected too (`verify_chain`).
* **Redaction** (deletion of a vacancy or resume, `redact`): the vacancy and each ranked
  candidate enter the hash only through a salted commitment ``sha256(canonical(value + nonce))``.
  Redaction deletes the value and its nonce and keeps the commitment, so the chain stays
  verifiable and the deleted id can no longer be confirmed by guessing. Each redaction is
  proved by a **deletion record** (``ranking_redactions``): the commitments it redacted and the
  journal head it saw, chained to the record before by SHA-256 and anchored beside the
  journal's head. A redacted item or vacancy that no record names (what a forger who blanks a
  row's top candidate, or its vacancy fields, leaves) fails verification.
* ``rankings`` is derived: the latest journal row per vacancy, re-derived after every write and
  compared on every read (`ranking_problems`, which also checks that row and the proofs of its
  redactions), so an edit of either is refused, never served.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb

from hltm.errors import disk_fault
from hltm.judge.data import Resume, Vacancy
from hltm.judge.gate import GATE_MIN_SURVIVAL, GATE_WINDOW, GateDecision, gate_decision
from hltm.judge.pipeline import JudgeConfig, cached_scores
from hltm.judge.store import ensure_judge_schema
from hltm.warehouse import connect, insert_rows

__all__ = [
    "GENESIS_HASH",
    "JOURNAL",
    "REDACTIONS",
    "REDACTIONS_TABLE",
    "Anchor",
    "ChainReport",
    "JournalEntry",
    "Publication",
    "Ranked",
    "config_gate",
    "head_path",
    "journal_entries",
    "publish_ranking",
    "rank_pool",
    "ranking_as_of",
    "ranking_problems",
    "reanchor",
    "redactions_head",
    "redact",
    "replaces",
    "verify_chain",
    "write_head",
]

GENESIS_HASH = "0" * 64
_APPEND_LOCK = threading.Lock()


@dataclass(frozen=True)
class Ranked:
    resume_id: str
    overall: int
    role: int
    level: int
    skills: int
    experience: int

    def as_json(self) -> dict[str, Any]:
        return {
            "resume_id": self.resume_id, "overall": self.overall, "role": self.role,
            "level": self.level, "skills": self.skills, "experience": self.experience,
        }  # fmt: skip


def rank_pool(pool: Sequence[Resume], scores: Mapping[str, Mapping[str, Any]]) -> list[Ranked]:
    """Judged pool members by ``overall`` (high first); a tie breaks on the evidence in the
    rubric's order (role, level, skills, experience), never on pool order alone."""
    judged = [
        Ranked(
            r.resume_id,
            int(scores[r.resume_id]["overall"]),
            int(scores[r.resume_id]["role"]),
            int(scores[r.resume_id]["level"]),
            int(scores[r.resume_id]["skills"]),
            int(scores[r.resume_id]["experience"]),
        )
        for r in pool
        if r.resume_id in scores
    ]
    return sorted(judged, key=evidence_order)


def evidence_order(r: Ranked) -> tuple[int, ...]:
    """Sort key: overall first, then the rubric's order of evidence (high first)."""
    return (-r.overall, -r.role, -r.level, -r.skills, -r.experience)


def config_gate(
    con: duckdb.DuckDBPyConnection,
    config: JudgeConfig,
    min_survival: float = GATE_MIN_SURVIVAL,
    window: int = GATE_WINDOW,
) -> GateDecision:
    """The ship gate for a configuration, over its latest `window` evaluations in the score
    cache (newest first; ties in a fixed order)."""
    ensure_judge_schema(con)
    quotes, survived = con.execute(
        "SELECT coalesce(sum(mandatory_quotes), 0), coalesce(sum(mandatory_survived), 0) FROM"
        " (SELECT mandatory_quotes, mandatory_survived FROM judge_scores"
        "  WHERE model = ? AND prompt_version = ?"
        "  ORDER BY created_at DESC, vacancy_id, resume_id, resume_hash LIMIT ?)",
        [config.model, config.prompt_version, window],
    ).fetchone()  # type: ignore[misc]
    return gate_decision(int(quotes), int(survived), min_survival)


# ------------------------------------------------------------------------------ hashing


def _canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode()


def row_hash(content: Mapping[str, Any]) -> str:
    return hashlib.sha256(_canonical(content)).hexdigest()


def _commitment(value: Mapping[str, Any], nonce: str) -> str:
    """A salted hash of ``value``: binds it, and reveals nothing once the nonce is gone."""
    return row_hash({**value, "nonce": nonce})


def _seal(value: Mapping[str, Any]) -> dict[str, Any]:
    nonce = secrets.token_hex(16)
    return {**value, "nonce": nonce, "commit": _commitment(value, nonce)}


def _opened(sealed: Mapping[str, Any]) -> dict[str, Any] | None:
    """The value of a sealed item, None when redacted; ValueError when it does not match."""
    if set(sealed) == {"commit"}:
        return None
    value = {k: v for k, v in sealed.items() if k not in ("nonce", "commit")}
    if _commitment(value, str(sealed.get("nonce"))) != sealed.get("commit"):
        raise ValueError("does not match its hashed commitment")
    return value


# ------------------------------------------------------------------------------ entries


@dataclass(frozen=True)
class JournalEntry:
    """One journal row as read (a redacted vacancy has an empty id; redacted candidates are
    left out of ``ranking`` and counted in ``redacted``)."""

    seq: int
    vacancy_id: str
    vacancy_version: str
    computed_at: datetime
    run_id: str
    model: str
    prompt_version: str
    gate_rate: float
    pool_size: int
    judged: int
    pending: int
    failed: int
    ranking: tuple[Ranked, ...]
    prev_hash: str
    row_hash: str
    redacted: int = 0

    def top(self, n: int = 10) -> list[Ranked]:
        return list(self.ranking[:n])


_COLUMNS = (
    "seq, vacancy_id, vacancy_version, vacancy_nonce, vacancy_commit, computed_at, run_id,"
    " model, prompt_version, gate_rate, pool_size, judged, pending, failed, ranking, prev_hash,"
    " row_hash"
)


def _hashed_content(row: Sequence[Any], commits: Sequence[str]) -> dict[str, Any]:
    """What the row hash covers: every column, the vacancy and candidates as commitments."""
    (seq, _, _, _, vcommit, at, run_id, model, pv, rate, pool, judged, pending, failed, _,
     prev, _) = row  # fmt: skip
    return {
        "seq": int(seq), "vacancy": vcommit,
        "computed_at": at.isoformat(timespec="microseconds"), "run_id": run_id or "",
        "model": model, "prompt_version": pv, "gate_rate": round(float(rate), 6),
        "pool_size": int(pool), "judged": int(judged), "pending": int(pending),
        "failed": int(failed), "ranking": list(commits), "prev_hash": prev,
    }  # fmt: skip


def _checked_entry(row: Sequence[Any]) -> JournalEntry:
    """Parse a journal row and check it against its own hash; ValueError names what is wrong."""
    (seq, vid, vver, vnonce, vcommit, at, run_id, model, pv, rate, pool, judged, pending,
     failed, ranking, prev, digest) = row  # fmt: skip
    if vnonce is None:
        if vid is not None or vver is not None:
            raise ValueError("a redacted vacancy still names an id")
    elif _commitment({"vacancy_id": vid, "vacancy_version": vver}, vnonce) != vcommit:
        raise ValueError("vacancy id does not match its hashed commitment")
    items = json.loads(ranking)
    visible: list[Ranked] = []
    for position, sealed in enumerate(items, start=1):
        try:
            value = _opened(sealed)
        except (ValueError, AttributeError) as err:
            raise ValueError(f"ranking item {position} {err}") from None
        if value is not None:
            visible.append(Ranked(**value))
    if row_hash(_hashed_content(row, [i["commit"] for i in items])) != digest:
        raise ValueError("row content does not match its hash")
    redacted = len(items) - len(visible) + (vnonce is None)
    return JournalEntry(
        int(seq), vid or "", vver or "", at, run_id or "", model, pv, float(rate), int(pool),
        int(judged), int(pending), int(failed), tuple(visible), prev, digest, redacted,
    )  # fmt: skip


def _entry(row: Sequence[Any]) -> JournalEntry:
    """A journal row for reading; a row that fails its own check is still shown, as stored."""
    try:
        return _checked_entry(row)
    except (ValueError, TypeError, KeyError):
        fields = set(Ranked.__dataclass_fields__)
        items = [i for i in json.loads(row[14]) if isinstance(i, dict) and fields <= set(i)]
        ranking = tuple(Ranked(**{k: i[k] for k in Ranked.__dataclass_fields__}) for i in items)
        return JournalEntry(
            int(row[0]), row[1] or "", row[2] or "", row[5], row[6] or "", row[7], row[8],
            float(row[9]), int(row[10]), int(row[11]), int(row[12]), int(row[13]), ranking,
            row[15], row[16],
        )  # fmt: skip


# ------------------------------------------------------------------------- the head anchor


JOURNAL, REDACTIONS = "journal", "redactions"
REDACTIONS_TABLE = "ranking_redactions"


@dataclass(frozen=True)
class Anchor:
    """A head recorded outside the table: the row ``seq`` of the journal (or of the deletion
    records, `chain`) must exist with ``row_hash``."""

    seq: int
    row_hash: str
    source: str
    chain: str = JOURNAL


def head_path(derived_db: Path | str) -> Path:
    """The head file beside the derived DuckDB (another store than the table it anchors)."""
    db = Path(derived_db)
    return db.with_name(f"{db.stem}.journal-head.json")


def write_head(con: duckdb.DuckDBPyConnection, derived_db: Path | str) -> None:
    """Anchor the journal's head and the deletion records' head in the head file, as the tables
    hold them now (after a publish or a redaction commits, the file still held). Atomically
    replaced: write, fsync, rename."""
    _ensure_redactions(con)
    heads = {}
    for name, table in (("journal", "ranking_journal"), ("redactions", REDACTIONS_TABLE)):
        last = con.execute(
            f"SELECT seq, row_hash FROM {table} ORDER BY seq DESC LIMIT 1"
        ).fetchone()
        heads[name] = {"seq": int(last[0]), "row_hash": str(last[1])} if last else None
    journal = heads["journal"] or {"seq": 0, "row_hash": ""}
    path = head_path(derived_db)
    tmp = path.with_suffix(".tmp")
    try:
        with tmp.open("w", encoding="utf-8") as fh:
            json.dump({**journal, "redactions": heads["redactions"]}, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as err:
        raise (disk_fault(path, err) or err) from err


def _read_head(derived_db: Path | str) -> tuple[list[Anchor], str]:
    """The anchors of the head file (the journal's, and the deletion records' when it names
    them), or why the file cannot be read."""
    path = head_path(derived_db)
    if not path.exists():
        return [], ""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        anchors = [Anchor(int(data["seq"]), str(data["row_hash"]), f"head file {path.name}")]
        if data.get("redactions"):
            done = data["redactions"]
            anchors.append(
                Anchor(
                    int(done["seq"]), str(done["row_hash"]), f"head file {path.name}", REDACTIONS
                )
            )
    except (OSError, ValueError, TypeError, KeyError) as err:
        return [], (
            f"the head file {path} cannot be read ({type(err).__name__}: {str(err)[:80] or 'empty'})"
            ": a deleted tail would go unnoticed; if the rest of the journal is intact,"
            " `hltm judge verify --reanchor` writes it anew"
        )
    return anchors, ""


# ------------------------------------------------------------------------ deletion records


def _ensure_redactions(con: duckdb.DuckDBPyConnection) -> None:
    con.execute(
        f"CREATE TABLE IF NOT EXISTS {REDACTIONS_TABLE} (seq BIGINT PRIMARY KEY,"
        " redacted_at TIMESTAMP, journal_seq BIGINT, journal_hash VARCHAR, commits VARCHAR,"
        " prev_hash VARCHAR, row_hash VARCHAR)"
    )


def redactions_head(derived_db: Path | str) -> Anchor | None:
    """The last deletion record (None: nothing was ever redacted)."""
    with connect(derived_db) as con:
        _ensure_redactions(con)
        last = con.execute(
            f"SELECT seq, row_hash FROM {REDACTIONS_TABLE} ORDER BY seq DESC LIMIT 1"
        ).fetchone()
    return Anchor(int(last[0]), str(last[1]), REDACTIONS_TABLE, REDACTIONS) if last else None


def _record_hash(row: Sequence[Any]) -> str:
    seq, at, journal_seq, journal_hash, commits, prev, _ = row
    return row_hash(
        {
            "seq": int(seq), "redacted_at": at.isoformat(timespec="microseconds"),
            "journal_seq": int(journal_seq), "journal_hash": journal_hash,
            "commits": json.loads(commits), "prev_hash": prev,
        }
    )  # fmt: skip


def _record_redaction(con: duckdb.DuckDBPyConnection, commits: list[str]) -> None:
    """Append the deletion record proving these redactions, chained to the one before and bound
    to the journal's head as it is."""
    _ensure_redactions(con)
    last = con.execute(
        f"SELECT seq, row_hash FROM {REDACTIONS_TABLE} ORDER BY seq DESC LIMIT 1"
    ).fetchone()
    head = con.execute(
        "SELECT seq, row_hash FROM ranking_journal ORDER BY seq DESC LIMIT 1"
    ).fetchone()
    row: list[Any] = [
        int(last[0]) + 1 if last else 1, datetime.now(UTC).replace(tzinfo=None),
        int(head[0]) if head else 0, str(head[1]) if head else GENESIS_HASH,
        json.dumps(sorted(commits)), str(last[1]) if last else GENESIS_HASH,
    ]  # fmt: skip
    row.append(_record_hash([*row, ""]))
    con.execute(f"INSERT INTO {REDACTIONS_TABLE} VALUES (?, ?, ?, ?, ?, ?, ?)", row)


def _redaction_proofs(
    con: duckdb.DuckDBPyConnection, anchors: Sequence[Anchor] = (), notes: list[str] | None = None
) -> tuple[dict[str, int], str]:
    """Every redacted commitment with the journal seq its deletion record saw (a redaction can
    only cover rows up to it), after checking the records' chain and anchors; or the problem.
    Records after an anchor are added to `notes`."""
    _ensure_redactions(con)
    rows = con.execute(f"SELECT * FROM {REDACTIONS_TABLE} ORDER BY seq").fetchall()
    proofs: dict[str, int] = {}
    prev = GENESIS_HASH
    hashes: dict[int, str] = {}
    for expected, row in enumerate(rows, start=1):
        if int(row[0]) != expected:
            return {}, f"deletion record {expected} is missing (deleted?)"
        if row[5] != prev or _record_hash(row) != row[6]:
            return {}, f"deletion record {expected} does not match its hash chain"
        for commit in json.loads(row[4]):
            proofs.setdefault(commit, int(row[2]))
        prev = hashes[expected] = row[6]
    for anchor in (a for a in anchors if a.chain == REDACTIONS):
        if anchor.seq > len(rows):
            return {}, (
                f"the deletion records end at {len(rows)} but the {anchor.source} says"
                f" {anchor.seq}: the last {anchor.seq - len(rows)} record(s) were deleted"
            )
        if anchor.seq and hashes[anchor.seq] != anchor.row_hash:
            return {}, f"deletion record {anchor.seq} differs from the one in the {anchor.source}"
        if anchor.seq < len(rows) and notes is not None:
            notes.append(f"{len(rows) - anchor.seq} deletion record(s) after the {anchor.source}")
    return proofs, ""


def _unproved_redaction(row: Sequence[Any], proofs: Mapping[str, int]) -> str:
    """What in a journal row is redacted without a deletion record naming it ("" if nothing)."""
    seq = int(row[0])
    if row[3] is None and proofs.get(row[4], -1) < seq:
        return f"its vacancy is redacted, but no deletion record names it (row {seq})"
    for position, item in enumerate(json.loads(row[14]), start=1):
        redacted = isinstance(item, dict) and set(item) == {"commit"}
        if redacted and proofs.get(item["commit"], -1) < seq:
            return (
                f"ranking item {position} of row {seq} is redacted, but no deletion record names it"
            )
    return ""


# ---------------------------------------------------------------------------- publishing


@dataclass(frozen=True)
class Publication:
    """What a publish did: ``live`` is the ranking served afterwards (the new one when
    ``published``, else the one kept), ``reason`` says why in either case; ``unchanged``: the
    live one is this very ranking, so nothing was appended."""

    published: bool
    live: JournalEntry | None
    reason: str
    judged: int
    pool: int
    unchanged: bool = False


def same_ranking(
    live: JournalEntry,
    vacancy: Vacancy,
    config: JudgeConfig,
    ranking: Sequence[Ranked],
    pool: int,
    failed: int,
) -> bool:
    """Whether the live journal row already states this ranking: same vacancy version, judge
    configuration, pool size, candidates with the same scores in the same order, and failures
    (its time, run and gate rate aside)."""
    return (
        (live.vacancy_version, live.model, live.prompt_version)
        == (vacancy.version_key, config.model, config.prompt_version)
        and (live.pool_size, live.failed, live.redacted) == (pool, failed, 0)
        and live.ranking == tuple(ranking)
    )


def replaces(judged: int, pool: int, live: JournalEntry | None) -> tuple[bool, str]:
    """May a ranking covering ``judged`` of ``pool`` candidates replace the ``live`` one?

    Complete rankings always may; otherwise only one at least as complete (as a share of its
    pool) as the live ranking. With nothing live, any non-empty ranking may.
    """
    new = f"{judged}/{pool} judged"
    if pool and judged == pool:
        return True, f"complete: {new}"
    if live is None:
        if judged == 0:
            return False, f"not published: {new}, and no ranking was published before"
        return True, f"first ranking, partial: {new}, {pool - judged} pending"
    old = f"{live.judged}/{live.pool_size} judged (journal #{live.seq})"
    if pool == 0:
        return False, f"kept the live ranking, {old}: the new pool is empty"
    if judged * max(live.pool_size, 1) >= live.judged * pool:
        return True, f"{new}, at least as complete as the live ranking ({old})"
    return False, f"kept the live ranking, {old}: the new one has only {new}"


def _live(con: duckdb.DuckDBPyConnection, vacancy_id: str) -> JournalEntry | None:
    row = con.execute(
        f"SELECT {_COLUMNS} FROM ranking_journal WHERE vacancy_id = ? ORDER BY seq DESC LIMIT 1",
        [vacancy_id],
    ).fetchone()
    return _entry(row) if row else None


def publish_ranking(
    derived_db: Path | str,
    vacancy: Vacancy,
    pool: Sequence[Resume],
    config: JudgeConfig,
    gate: GateDecision,
    *,
    failed: int = 0,
    run_id: str = "",
    now: datetime | None = None,
) -> Publication:
    """Rank the pool from the score cache and append it to the journal, when the quote gate
    passes (else PermissionError) and the coverage rule allows it (else the live one stays)."""
    if not gate.passed:
        raise PermissionError(f"ranking not published, quote gate {gate.reason}")
    scores = cached_scores(derived_db, vacancy, pool, config)
    ranking = rank_pool(pool, scores)
    computed_at = now or datetime.now(UTC).replace(tzinfo=None)
    with _APPEND_LOCK, connect(derived_db) as con:
        ensure_judge_schema(con)
        live = _live(con, vacancy.vacancy_id)
        if live is not None and same_ranking(live, vacancy, config, ranking, len(pool), failed):
            reason = f"unchanged: the live ranking (journal #{live.seq}) is this one"
            return Publication(False, live, reason, len(ranking), len(pool), unchanged=True)
        allowed, reason = replaces(len(ranking), len(pool), live)
        if not allowed:
            return Publication(False, live, reason, len(ranking), len(pool))
        con.execute("BEGIN TRANSACTION")
        last = con.execute(
            "SELECT seq, row_hash FROM ranking_journal ORDER BY seq DESC LIMIT 1"
        ).fetchone()
        seq = int(last[0]) + 1 if last else 1
        prev = str(last[1]) if last else GENESIS_HASH
        vacancy_seal = _seal(
            {"vacancy_id": vacancy.vacancy_id, "vacancy_version": vacancy.version_key}
        )
        items = [_seal(r.as_json()) for r in ranking]
        row = [
            seq, vacancy.vacancy_id, vacancy.version_key, vacancy_seal["nonce"],
            vacancy_seal["commit"], computed_at, run_id, config.model, config.prompt_version,
            round(float(gate.rate), 6), len(pool), len(ranking), len(pool) - len(ranking),
            failed, json.dumps(items, ensure_ascii=False), prev,
        ]  # fmt: skip
        row.append(row_hash(_hashed_content([*row, ""], [i["commit"] for i in items])))
        con.execute(
            f"INSERT INTO ranking_journal ({_COLUMNS}) VALUES ({', '.join('?' for _ in row)})",
            row,
        )
        _derive_rankings(con, [vacancy.vacancy_id])
        con.execute("COMMIT")
        # Still holding the file: no other process can append between the commit and this.
        write_head(con, derived_db)
    return Publication(True, _entry(row), reason, len(ranking), len(pool))


# ----------------------------------------------------------------- derived `rankings` table


def _derived(entry: JournalEntry) -> list[tuple[Any, ...]]:
    return [
        (entry.vacancy_id, i, r.resume_id, r.overall, r.role, r.level, r.skills, r.experience,
         entry.seq, entry.computed_at)
        for i, r in enumerate(entry.ranking, start=1)
    ]  # fmt: skip


def _latest_rows(
    con: duckdb.DuckDBPyConnection, vacancy_ids: Iterable[str] | None
) -> list[tuple[Any, ...]]:
    """The live journal row of each vacancy (or of the given ones), as stored."""
    sql = (
        f"SELECT {_COLUMNS} FROM ranking_journal WHERE vacancy_id IS NOT NULL"
        " QUALIFY row_number() OVER (PARTITION BY vacancy_id ORDER BY seq DESC) = 1"
    )
    params: list[Any] = []
    if vacancy_ids is not None:
        sql = sql.replace("IS NOT NULL", "IN (SELECT unnest(?::VARCHAR[]))")
        params.append(sorted(set(vacancy_ids)))
    return con.execute(sql, params).fetchall()


def _latest_entries(
    con: duckdb.DuckDBPyConnection, vacancy_ids: Iterable[str] | None
) -> dict[str, JournalEntry]:
    return {e.vacancy_id: e for e in map(_entry, _latest_rows(con, vacancy_ids))}


def _derive_rankings(con: duckdb.DuckDBPyConnection, vacancy_ids: Iterable[str] | None) -> None:
    """Rewrite ``rankings`` (all vacancies, or the given ones) from the journal."""
    ids = None if vacancy_ids is None else sorted(set(vacancy_ids))
    if ids is None:
        con.execute("DELETE FROM rankings")
    else:
        con.execute("DELETE FROM rankings WHERE vacancy_id IN (SELECT unnest(?::VARCHAR[]))", [ids])
    rows = [row for e in _latest_entries(con, ids).values() for row in _derived(e)]
    insert_rows(con, "INSERT INTO rankings", rows)


def ranking_problems(derived_db: Path | str, vacancy_id: str | None = None) -> list[str]:
    """What stands between the journal and serving ``rankings`` (empty: serve them): the
    live journal row of each vacancy (or of the one given) that fails its own hash, a redaction
    no deletion record proves (of a candidate of a live row, or of any row's vacancy: a vacancy
    blanked by hand would let an older row pass for the live one), and rows of ``rankings``
    that differ from what the journal says."""
    with connect(derived_db) as con:
        ensure_judge_schema(con)
        ids = None if vacancy_id is None else [vacancy_id]
        live = _latest_rows(con, ids)
        blanked = con.execute(
            f"SELECT {_COLUMNS} FROM ranking_journal WHERE vacancy_nonce IS NULL ORDER BY seq"
        ).fetchall()
        proofs, broken = _redaction_proofs(con)
        expected = {row for r in live for row in _derived(_entry(r))}
        sql = "SELECT * FROM rankings" + ("" if ids is None else " WHERE vacancy_id = ?")
        stored = set(con.execute(sql, ids or []).fetchall())
    problems = [broken] if broken else []
    for row in live:
        try:
            _checked_entry(row)
        except (TypeError, ValueError, KeyError, AttributeError) as err:
            problems.append(f"the journal row {row[0]} of {row[1]} fails its hash: {err}")
    problems += [why for row in [*live, *blanked] if (why := _unproved_redaction(row, proofs))]
    for vid in sorted({r[0] for r in expected ^ stored}):
        extra = sorted(r[1] for r in stored - expected if r[0] == vid)
        missing = sorted(r[1] for r in expected - stored if r[0] == vid)
        problems.append(
            f"rankings of {vid} do not match the journal (ranks not in the journal: {extra},"
            f" journal ranks missing or changed: {missing})"
        )
    return problems


# ------------------------------------------------------------------------------ verifying


@dataclass(frozen=True)
class ChainReport:
    ok: bool
    rows: int
    first_bad_seq: int | None = None
    reason: str = ""
    note: str = ""

    def summary(self) -> str:
        if self.ok:
            return f"journal chain intact: {self.rows} rows" + (
                f" ({self.note})" if self.note else ""
            )
        return f"journal chain BROKEN at seq {self.first_bad_seq}: {self.reason}"


def verify_chain(
    derived_db: Path | str, anchors: Sequence[Anchor] = (), head_file: bool = True
) -> ChainReport:
    """Re-hash every journal row in order, check that a deletion record proves each of its
    redactions, check the head anchors (the head file unless `head_file` is False, and any
    given, e.g. from Dagster) and the ``rankings`` table; the first problem is reported."""
    head, unreadable = _read_head(derived_db) if head_file else ([], "")
    anchors = [*head, *anchors]
    with connect(derived_db) as con:
        ensure_judge_schema(con)
        rows = con.execute(f"SELECT {_COLUMNS} FROM ranking_journal ORDER BY seq").fetchall()
        notes: list[str] = []
        proofs, broken = _redaction_proofs(con, anchors, notes)
    if broken:
        return ChainReport(False, len(rows), None, broken)
    prev = GENESIS_HASH
    hashes: dict[int, str] = {}
    for expected_seq, row in enumerate(rows, start=1):
        seq = int(row[0])
        if seq != expected_seq:
            return ChainReport(
                False, len(rows), seq, f"sequence gap: expected {expected_seq} (row deleted?)"
            )
        if row[15] != prev:
            return ChainReport(False, len(rows), seq, "prev_hash does not match the row before")
        try:
            _checked_entry(row)
        except (TypeError, ValueError, KeyError, AttributeError) as err:
            return ChainReport(False, len(rows), seq, str(err))
        if why := _unproved_redaction(row, proofs):
            return ChainReport(False, len(rows), seq, why)
        prev = hashes[seq] = row[16]
    if unreadable:
        return ChainReport(False, len(rows), len(rows), unreadable)
    if head_file and not head and rows:
        return ChainReport(
            False, len(rows), len(rows),
            f"head anchor {head_path(derived_db).name} is missing: a deleted tail would go"
            " unnoticed",
        )  # fmt: skip
    for anchor in (a for a in anchors if a.chain == JOURNAL):
        if anchor.seq > len(rows):
            lost = anchor.seq - len(rows)
            return ChainReport(
                False, len(rows), len(rows) + 1,
                f"the journal ends at seq {len(rows)} but the {anchor.source} says seq"
                f" {anchor.seq}: the last {lost} row(s) were deleted",
            )  # fmt: skip
        if anchor.seq and hashes[anchor.seq] != anchor.row_hash:
            return ChainReport(
                False, len(rows), anchor.seq,
                f"row hash differs from the one in the {anchor.source}",
            )  # fmt: skip
        if anchor.seq < len(rows):
            notes.append(f"{len(rows) - anchor.seq} row(s) after the {anchor.source}")
    problems = ranking_problems(derived_db)
    if problems:
        return ChainReport(False, len(rows), None, "; ".join(problems))
    return ChainReport(True, len(rows), note="; ".join(notes))


def reanchor(derived_db: Path | str, anchors: Sequence[Anchor] = ()) -> ChainReport:
    """Write the head file anew from the tables, once the journal verifies without it (the file
    was lost or damaged), against the other anchors given; the report after that."""
    report = verify_chain(derived_db, anchors, head_file=False)
    if not report.ok:
        return report
    with connect(derived_db) as con:
        ensure_judge_schema(con)
        write_head(con, derived_db)
    return verify_chain(derived_db, anchors)


# ------------------------------------------------------------------------------ reading


def ranking_as_of(derived_db: Path | str, vacancy_id: str, at: datetime) -> JournalEntry | None:
    """The ranking of ``vacancy_id`` as published at moment ``at`` (latest row not after it)."""
    with connect(derived_db) as con:
        ensure_judge_schema(con)
        row = con.execute(
            f"SELECT {_COLUMNS} FROM ranking_journal WHERE vacancy_id = ? AND computed_at <= ?"
            " ORDER BY seq DESC LIMIT 1",
            [vacancy_id, at],
        ).fetchone()
    return _entry(row) if row else None


def journal_entries(derived_db: Path | str, vacancy_id: str | None = None) -> list[JournalEntry]:
    with connect(derived_db) as con:
        ensure_judge_schema(con)
        sql = f"SELECT {_COLUMNS} FROM ranking_journal"
        params: list[Any] = []
        if vacancy_id is not None:
            sql += " WHERE vacancy_id = ?"
            params.append(vacancy_id)
        return [_entry(r) for r in con.execute(sql + " ORDER BY seq", params).fetchall()]


# ------------------------------------------------------------------------------ redaction


def redact(
    con: duckdb.DuckDBPyConnection, vacancy_ids: Iterable[str], resume_ids: Iterable[str]
) -> int:
    """Remove deleted vacancies and resumes from the journal, keeping it verifiable.

    A deleted vacancy loses its id and its whole ranking; a deleted resume leaves every
    ranking it was in. Only values and nonces go; the commitments the hashes cover stay, and a
    deletion record names every one redacted here (`ranking_redactions`). The ``rankings``
    table is re-derived. Returns how many rows changed. Runs inside the caller's transaction;
    the caller anchors the new heads once it commits (`write_head`).
    """
    ensure_judge_schema(con)
    vacancies, resumes = set(vacancy_ids), set(resume_ids)
    changed = 0
    commits: list[str] = []
    for seq, vid, vcommit, ranking in con.execute(
        "SELECT seq, vacancy_id, vacancy_commit, ranking FROM ranking_journal ORDER BY seq"
    ).fetchall():
        items = json.loads(ranking)
        gone = vid in vacancies
        kept = []
        for item in items:
            if "resume_id" in item and (gone or item["resume_id"] in resumes):
                commits.append(item["commit"])
                item = {"commit": item["commit"]}
            kept.append(item)
        if kept == items and not gone:
            continue
        changed += 1
        commits += [vcommit] if gone else []
        con.execute(
            "UPDATE ranking_journal SET ranking = ?"
            + (", vacancy_id = NULL, vacancy_version = NULL, vacancy_nonce = NULL" if gone else "")
            + " WHERE seq = ?",
            [json.dumps(kept, ensure_ascii=False), seq],
        )
    if commits:
        _record_redaction(con, commits)
    _derive_rankings(con, None)
    return changed

"""Rankings: sort by `overall`, gate on quote survival, publish into a hash-chained journal.

* **Ranking**: the pool's judged candidates sorted by the judge's single ``overall`` score, high
  to low — no weights (the weight study in `hltm.judge.stats` shows they do not pay). Ties keep
  pool order (vector rank, then BM25 rank): a stable sort, not a second score.
* **Gate**: a configuration (model id + prompt version) publishes only if at least 90% of the
  quotes it gave on mandatory requirements survived validation, counted over every evaluation
  of that configuration in the score cache (`config_gate`).
* **Journal**: every publication is a new row of ``ranking_journal`` — INSERT only. Each row
  stores the SHA-256 of the previous row's hash plus its own canonical content, so editing or
  deleting any row breaks the chain from that row on (`verify_chain`). `ranking_as_of`
  reconstructs the ranking of any vacancy at any past moment from the journal alone.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb

from hltm.judge.data import Resume, Vacancy
from hltm.judge.gate import GATE_MIN_SURVIVAL, GateDecision, gate_decision
from hltm.judge.pipeline import JudgeConfig, cached_scores
from hltm.judge.store import ensure_judge_schema
from hltm.warehouse import connect

__all__ = [
    "GENESIS_HASH",
    "ChainReport",
    "JournalEntry",
    "Ranked",
    "config_gate",
    "publish_ranking",
    "rank_pool",
    "ranking_as_of",
    "verify_chain",
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
    """Judged pool members by ``overall`` (high first); ties keep pool order."""
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
    return sorted(judged, key=lambda x: -x.overall)  # stable: ties stay in pool order


def config_gate(
    con: duckdb.DuckDBPyConnection,
    config: JudgeConfig,
    min_survival: float = GATE_MIN_SURVIVAL,
) -> GateDecision:
    """The ship gate for a configuration, over every evaluation of it in the score cache."""
    ensure_judge_schema(con)
    quotes, survived = con.execute(
        "SELECT coalesce(sum(mandatory_quotes), 0), coalesce(sum(mandatory_survived), 0)"
        " FROM judge_scores WHERE model = ? AND prompt_version = ?",
        [config.model, config.prompt_version],
    ).fetchone()  # type: ignore[misc]
    return gate_decision(int(quotes), int(survived), min_survival)


@dataclass(frozen=True)
class JournalEntry:
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

    def content(self) -> dict[str, Any]:
        """Everything the row hash covers (all columns but the hash itself)."""
        return {
            "seq": self.seq,
            "vacancy_id": self.vacancy_id,
            "vacancy_version": self.vacancy_version,
            "computed_at": self.computed_at.isoformat(timespec="microseconds"),
            "run_id": self.run_id,
            "model": self.model,
            "prompt_version": self.prompt_version,
            "gate_rate": round(float(self.gate_rate), 6),
            "pool_size": self.pool_size,
            "judged": self.judged,
            "pending": self.pending,
            "failed": self.failed,
            "ranking": [r.as_json() for r in self.ranking],
            "prev_hash": self.prev_hash,
        }

    def expected_hash(self) -> str:
        return row_hash(self.content())

    def top(self, n: int = 10) -> list[Ranked]:
        return list(self.ranking[:n])


def row_hash(content: Mapping[str, Any]) -> str:
    canonical = json.dumps(content, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


_COLUMNS = (
    "seq, vacancy_id, vacancy_version, computed_at, run_id, model, prompt_version, gate_rate,"
    " pool_size, judged, pending, failed, ranking, prev_hash, row_hash"
)


def _entry(row: Sequence[Any]) -> JournalEntry:
    (seq, vid, vver, at, run_id, model, pv, rate, pool, judged, pending, failed, ranking,
     prev, digest) = row  # fmt: skip
    items = tuple(Ranked(**item) for item in json.loads(ranking))
    return JournalEntry(
        int(seq), vid, vver, at, run_id or "", model, pv, float(rate), int(pool), int(judged),
        int(pending), int(failed), items, prev, digest,
    )  # fmt: skip


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
) -> JournalEntry:
    """Rank the pool from the score cache and append it to the journal (gate must pass)."""
    if not gate.passed:
        raise PermissionError(f"ranking not published, quote gate {gate.reason}")
    scores = cached_scores(derived_db, vacancy, pool, config)
    ranking = rank_pool(pool, scores)
    computed_at = now or datetime.now(UTC).replace(tzinfo=None)
    with _APPEND_LOCK, connect(derived_db) as con:
        ensure_judge_schema(con)
        con.execute("BEGIN TRANSACTION")
        last = con.execute(
            "SELECT seq, row_hash FROM ranking_journal ORDER BY seq DESC LIMIT 1"
        ).fetchone()
        seq = int(last[0]) + 1 if last else 1
        prev = str(last[1]) if last else GENESIS_HASH
        entry = JournalEntry(
            seq, vacancy.vacancy_id, vacancy.version_key, computed_at, run_id, config.model,
            config.prompt_version, gate.rate, len(pool), len(ranking), len(pool) - len(ranking),
            failed, tuple(ranking), prev, "",
        )  # fmt: skip
        digest = entry.expected_hash()
        content = entry.content()
        con.execute(
            f"INSERT INTO ranking_journal ({_COLUMNS}) VALUES"
            " (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                seq, vacancy.vacancy_id, vacancy.version_key, computed_at, run_id,
                config.model, config.prompt_version, content["gate_rate"], len(pool),
                len(ranking), len(pool) - len(ranking), failed,
                json.dumps(content["ranking"], ensure_ascii=False), prev, digest,
            ],
        )  # fmt: skip
        con.execute("DELETE FROM rankings WHERE vacancy_id = ?", [vacancy.vacancy_id])
        if ranking:
            con.executemany(
                "INSERT INTO rankings VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    [vacancy.vacancy_id, i, r.resume_id, r.overall, r.role, r.level, r.skills,
                     r.experience, seq, computed_at]
                    for i, r in enumerate(ranking, start=1)
                ],
            )  # fmt: skip
        con.execute("COMMIT")
    return JournalEntry(**{**entry.__dict__, "gate_rate": content["gate_rate"], "row_hash": digest})


@dataclass(frozen=True)
class ChainReport:
    ok: bool
    rows: int
    first_bad_seq: int | None = None
    reason: str = ""

    def summary(self) -> str:
        if self.ok:
            return f"journal chain intact: {self.rows} rows"
        return f"journal chain BROKEN at seq {self.first_bad_seq}: {self.reason}"


def verify_chain(derived_db: Path | str) -> ChainReport:
    """Re-hash every journal row in order; the first mismatch names the tampered row."""
    with connect(derived_db) as con:
        ensure_judge_schema(con)
        rows = con.execute(f"SELECT {_COLUMNS} FROM ranking_journal ORDER BY seq").fetchall()
    prev = GENESIS_HASH
    expected_seq = 1
    for row in rows:
        try:
            entry = _entry(row)
        except (TypeError, ValueError, KeyError) as err:
            return ChainReport(False, len(rows), int(row[0]), f"unreadable row: {err}")
        if entry.seq != expected_seq:
            return ChainReport(
                False, len(rows), entry.seq, f"sequence gap: expected {expected_seq} (row deleted?)"
            )
        if entry.prev_hash != prev:
            return ChainReport(
                False, len(rows), entry.seq, "prev_hash does not match the row before"
            )
        if entry.expected_hash() != entry.row_hash:
            return ChainReport(False, len(rows), entry.seq, "row content does not match its hash")
        prev = entry.row_hash
        expected_seq += 1
    return ChainReport(True, len(rows))


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

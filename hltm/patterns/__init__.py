"""Query-pattern mining: the query log → recurring templates and asked attributes → (approval) →
memory hints. Dagster-free; `hltm_dagster/defs/patterns/assets.py` and `hltm patterns …` wire it up.

    records ──mine()──▶ patterns (support = distinct identities ≥ min_support)
            ──record_mining()──▶ query_patterns (proposed | approved by auto)
            ──decide() (a person) ──▶ approved
            ──release()──▶ save_hints(Hints) ──▶ next memory build uses them
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from hltm.patterns.mining import Pattern, QueryRecord, as_record, mine
from hltm.patterns.store import (
    APPROVED,
    PROPOSED,
    REJECTED,
    RELEASED,
    MiningRecord,
    Release,
    StoredPattern,
    decide,
    known_values,
    list_patterns,
    record_mining,
    release,
    resolve_ids,
)
from hltm.patterns.templates import MiningConfig, Templated, templatize
from hltm.settings import PATTERNS_ENV, read_env
from hltm.warehouse import connect

__all__ = [
    "APPROVED",
    "PROPOSED",
    "REJECTED",
    "RELEASED",
    "MiningConfig",
    "MiningOutcome",
    "MiningRecord",
    "Pattern",
    "PatternSettings",
    "QueryRecord",
    "Release",
    "StoredPattern",
    "Templated",
    "decide",
    "known_values",
    "list_patterns",
    "mine",
    "mine_query_log",
    "record_mining",
    "release",
    "resolve_ids",
    "templatize",
]


@dataclass(frozen=True)
class PatternSettings:
    """Mining settings, from the environment (`HLTM_PATTERNS_*`)."""

    min_support: int = 3
    auto_approve: bool = False
    window_days: int = 0  # only queries of the last N days (0: the whole log)
    merge_cosine: float = 0.98  # near-identical templates merged (needs an embedder)
    cron: str = "0 3 * * 1"  # the mining schedule (Mondays 03:00)

    @classmethod
    def from_env(cls, **overrides: Any) -> PatternSettings:
        settings = cls(**{**read_env(PATTERNS_ENV), **overrides})
        if settings.min_support < 1:
            raise ValueError("min_support must be at least 1")
        return settings

    def mining_config(self) -> MiningConfig:
        return MiningConfig(min_support=self.min_support, merge_cosine=self.merge_cosine)


@dataclass
class MiningOutcome:
    queries: int
    identities: int
    patterns: list[Pattern]
    record: MiningRecord
    release: Release | None
    stored: list[StoredPattern] = field(default_factory=list)
    unanswered: int = 0  # mined queries whose answer was that the memory does not say

    def summary(self) -> dict[str, Any]:
        by_status: dict[str, int] = {}
        for p in self.stored:
            by_status[p.status] = by_status.get(p.status, 0) + 1
        return {
            "queries": self.queries,
            "unanswered": self.unanswered,
            "identities": self.identities,
            "patterns": len(self.patterns),
            "templates": sum(p.kind == "template" for p in self.patterns),
            "attributes": sum(p.kind == "attribute" for p in self.patterns),
            "new": len(self.record.new),
            "auto_approved": len(self.record.auto_approved),
            "no_longer_current": len(self.record.no_longer_current),
            "by_status": by_status,
            **(self.release.as_metadata() if self.release else {}),
        }


def read_records(derived_db: Path | str, window_days: int = 0) -> list[dict[str, Any]]:
    """Query-log rows to mine (the whole log, or the last `window_days`)."""
    from hltm.query.log import read_query_log

    rows = read_query_log(derived_db)
    if window_days > 0:
        since = datetime.now(UTC).replace(tzinfo=None) - timedelta(days=window_days)
        rows = [r for r in rows if r.get("asked_at") is None or r["asked_at"] >= since]
    return rows


def mine_query_log(
    derived_db: Path | str,
    settings: PatternSettings | None = None,
    embedder: Any = None,
    do_release: bool = True,
    records: list[Any] | None = None,
) -> MiningOutcome:
    """Mine the query log, store the patterns, and release the approved ones as hints."""
    settings = settings or PatternSettings.from_env()
    rows = records if records is not None else read_records(derived_db, settings.window_days)
    with connect(derived_db) as con:
        values = known_values(con)
    patterns = mine(rows, settings.mining_config(), known_values=values, embedder=embedder)
    identities = {as_record(r).identity for r in rows}
    with connect(derived_db) as con:
        record = record_mining(con, patterns, settings.min_support, settings.auto_approve)
        released = release(con, actor="mining") if do_release else None
        stored = list_patterns(con)
    unanswered = sum(as_record(r).unanswered for r in rows)
    return MiningOutcome(len(rows), len(identities), patterns, record, released, stored, unanswered)

"""The query log: every answered question with who asked, what was retrieved, and what it cost.

Table `query_log` in `settings.derived_db` (insert-only from the query path). It is the input of
query-pattern mining (recurring templates, frequently asked attributes, support counted over
distinct identities) and the record of per-query cost:

    query_id PK, asked_at, channel ('python' | 'cli' | 'http'), identity_level, identity_id,
    scope_root (node id), question, intent, pairs JSON [{field, value}],
    retrieved JSON {"facet": [node ids], "qa": [...], "summary": [...]},
    answer, rationale, citations JSON [node ids], dropped_citations JSON [ids not in context],
    no_memory, llm_calls, prompt_tokens, completion_tokens (o200k_base),
    embed_ms, retrieval_ms, parse_ms, answer_ms, llm_ms, total_ms,
    backend, model, prompt_versions JSON, retrieval_config JSON
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hltm.warehouse import connect, table_exists

if TYPE_CHECKING:
    from hltm.query.engine import QueryResult

QUERY_LOG_TABLE = "query_log"

_COLUMNS = (
    ("query_id", "VARCHAR PRIMARY KEY"),
    ("asked_at", "TIMESTAMP NOT NULL"),
    ("channel", "VARCHAR NOT NULL"),
    ("identity_level", "VARCHAR NOT NULL"),
    ("identity_id", "VARCHAR NOT NULL"),
    ("scope_root", "VARCHAR NOT NULL"),
    ("question", "VARCHAR NOT NULL"),
    ("intent", "VARCHAR"),
    ("pairs", "VARCHAR NOT NULL"),
    ("retrieved", "VARCHAR NOT NULL"),
    ("answer", "VARCHAR NOT NULL"),
    ("rationale", "VARCHAR NOT NULL"),
    ("citations", "VARCHAR NOT NULL"),
    ("dropped_citations", "VARCHAR NOT NULL"),
    ("no_memory", "BOOLEAN NOT NULL"),
    ("llm_calls", "INTEGER NOT NULL"),
    ("prompt_tokens", "INTEGER NOT NULL"),
    ("completion_tokens", "INTEGER NOT NULL"),
    ("embed_ms", "DOUBLE NOT NULL"),
    ("retrieval_ms", "DOUBLE NOT NULL"),
    ("parse_ms", "DOUBLE NOT NULL"),
    ("answer_ms", "DOUBLE NOT NULL"),
    ("llm_ms", "DOUBLE NOT NULL"),
    ("total_ms", "DOUBLE NOT NULL"),
    ("backend", "VARCHAR NOT NULL"),
    ("model", "VARCHAR NOT NULL"),
    ("prompt_versions", "VARCHAR NOT NULL"),
    ("retrieval_config", "VARCHAR NOT NULL"),
)
COLUMN_NAMES = tuple(name for name, _ in _COLUMNS)


def ensure_query_log(con: Any) -> None:
    columns = ", ".join(f"{name} {kind}" for name, kind in _COLUMNS)
    con.execute(f"CREATE TABLE IF NOT EXISTS {QUERY_LOG_TABLE} ({columns})")


def _dump(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def log_query(
    derived_db: Path | str, result: QueryResult, backend: str, model: str, extra: dict[str, Any]
) -> None:
    cost = result.cost
    row = {
        "query_id": result.query_id,
        "asked_at": result.asked_at,
        "channel": result.channel,
        "identity_level": result.identity.split(":", 1)[0],
        "identity_id": result.identity.split(":", 1)[1],
        "scope_root": result.scope_root,
        "question": result.question,
        "intent": result.intent,
        "pairs": _dump(result.pairs),
        "retrieved": _dump(result.retrieved),
        "answer": result.answer,
        "rationale": result.rationale,
        "citations": _dump(result.citations),
        "dropped_citations": _dump(result.dropped_citations),
        "no_memory": result.no_memory,
        "llm_calls": cost.llm_calls,
        "prompt_tokens": cost.prompt_tokens,
        "completion_tokens": cost.completion_tokens,
        "embed_ms": cost.embed_ms,
        "retrieval_ms": cost.retrieval_ms,
        "parse_ms": cost.parse_ms,
        "answer_ms": cost.answer_ms,
        "llm_ms": cost.llm_ms,
        "total_ms": cost.total_ms,
        "backend": backend,
        "model": model,
        "prompt_versions": _dump(extra.get("prompt_versions", {})),
        "retrieval_config": _dump(extra.get("retrieval_config", {})),
    }
    with connect(derived_db) as con:
        ensure_query_log(con)
        con.execute(
            f"INSERT INTO {QUERY_LOG_TABLE} ({', '.join(COLUMN_NAMES)})"
            f" VALUES ({', '.join('?' for _ in COLUMN_NAMES)})",
            [row[name] for name in COLUMN_NAMES],
        )


def read_query_log(derived_db: Path | str, limit: int | None = None) -> list[dict[str, Any]]:
    """Logged queries, newest first, JSON columns decoded (for pattern mining and the CLI)."""
    with connect(derived_db) as con:
        if not table_exists(con, QUERY_LOG_TABLE):
            return []
        sql = f"SELECT {', '.join(COLUMN_NAMES)} FROM {QUERY_LOG_TABLE} ORDER BY asked_at DESC"
        if limit:
            sql += f" LIMIT {int(limit)}"
        rows = con.execute(sql).fetchall()
    out = []
    for row in rows:
        item = dict(zip(COLUMN_NAMES, row, strict=True))
        for key in (
            "pairs",
            "retrieved",
            "citations",
            "dropped_citations",
            "prompt_versions",
            "retrieval_config",
        ):
            item[key] = json.loads(item[key])
        out.append(item)
    return out

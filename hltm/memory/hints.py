"""Approved query patterns that steer the extractors: the adaptation loop's output.

A later step mines the query log for recurring question templates and frequently asked attribute
names, keeps those with enough support, and (optionally after manual approval) saves them here.
The memory build only reads them:

* attribute names → the facet extractor looks for them, the summariser mentions them;
* QA templates → the QA generator adds a pair for a template whenever the node's data answers it.

A template is a question with `{slot}` placeholders naming facet fields (plus `{node}`, the node's
own label) and the facet field that answers it, e.g.
`QATemplate("Which work mode does {node} prefer?", "work_mode")`.

The hints version is part of every node's version, so releasing new hints refreshes the tree.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Any

import duckdb

from hltm.memory.models import canonical_json
from hltm.warehouse import table_exists

HINTS_TABLE = "memory_hints"
_SLOT = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


@dataclass(frozen=True)
class QATemplate:
    template: str
    answer_field: str

    @property
    def slots(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(_SLOT.findall(self.template)))

    def as_dict(self) -> dict[str, str]:
        return {"template": self.template, "answer_field": self.answer_field}


@dataclass(frozen=True)
class Hints:
    attributes: tuple[str, ...] = ()
    qa_templates: tuple[QATemplate, ...] = ()
    version: str = field(default="")

    def __post_init__(self) -> None:
        # Sorted and de-duplicated, so the same hints always give the same version and payloads.
        object.__setattr__(self, "attributes", tuple(sorted(set(self.attributes))))
        templates = {(t.template, t.answer_field): t for t in self.qa_templates}
        object.__setattr__(self, "qa_templates", tuple(templates[k] for k in sorted(templates)))
        if not self.version:
            object.__setattr__(self, "version", self.content_hash())

    def content_hash(self) -> str:
        if not self.attributes and not self.qa_templates:
            return "none"
        body = canonical_json(self.as_payload())
        return hashlib.sha1(body.encode()).hexdigest()[:12]

    @property
    def empty(self) -> bool:
        return not self.attributes and not self.qa_templates

    def as_payload(self) -> dict[str, Any]:
        return {
            "attributes": list(self.attributes),
            "qa_templates": [t.as_dict() for t in self.qa_templates],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Hints:
        return cls(
            attributes=tuple(str(a) for a in data.get("attributes", [])),
            qa_templates=tuple(
                QATemplate(str(t["template"]), str(t["answer_field"]))
                for t in data.get("qa_templates", [])
            ),
            version=str(data.get("version", "")),
        )


NO_HINTS = Hints()


def ensure_hints_table(con: duckdb.DuckDBPyConnection) -> None:
    con.execute(
        f"CREATE TABLE IF NOT EXISTS {HINTS_TABLE} (version VARCHAR PRIMARY KEY,"
        " payload VARCHAR NOT NULL, released_at TIMESTAMP NOT NULL)"
    )


def save_hints(con: duckdb.DuckDBPyConnection, hints: Hints) -> None:
    """Release `hints` (the newest release is the one every build uses)."""
    ensure_hints_table(con)
    con.execute(
        f"INSERT OR REPLACE INTO {HINTS_TABLE} VALUES (?, ?, now())",
        [hints.version, canonical_json(hints.as_payload())],
    )


def load_hints(con: duckdb.DuckDBPyConnection) -> Hints:
    """The newest released hints, or none."""
    if not table_exists(con, HINTS_TABLE):
        return NO_HINTS
    row = con.execute(
        f"SELECT version, payload FROM {HINTS_TABLE} ORDER BY released_at DESC, version DESC"
        " LIMIT 1"
    ).fetchone()
    if not row:
        return NO_HINTS
    import json

    return Hints.from_dict({**json.loads(row[1]), "version": row[0]})

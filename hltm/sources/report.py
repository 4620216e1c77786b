"""One table's and one ingest's outcome, which reading, mapping and loading all add to, and what
resolves each kind of quarantined row (the one home of that advice: the ingest summary and
`hltm quarantine` both print it)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from hltm.sources.schema import LOAD_ORDER, TABLES_BY_NAME

# What resolves a quarantined row, by its reason's kind (the words before the first colon). A
# row is resolved when a later ingest stores a good row with its id, or reads the same file
# (the same bytes) without it.
_FIX_AND_INGEST = "correct the row in its file and ingest the folder again"
REMEDIES = {
    "undecodable bytes": "re-save the file as UTF-8, or ingest the folder again with --encoding"
    " (e.g. --encoding cp1251)",
    "unknown reference": "put the row it references in the folder (its table's file) or correct"
    " the id, and ingest the folder again",
    "missing required column": "add the column and ingest the folder again",
    "duplicate id": "keep one row per id and ingest the folder again",
    "too long": "split or shorten the value and ingest the folder again",
    "unreadable file": "export the table again as CSV, JSON Lines or Parquet and ingest the folder"
    " again",
}
_EXAMPLES = 3  # reasons shown per kind in the ingest summary


def reason_kind(reason: str) -> str:
    """ "unknown reference: seat_id 's9' not in seats" → "unknown reference"."""
    return reason.split(":")[0]


def remedy(reason: str, table: str | None = None) -> str:
    """What resolves a row of `table` quarantined for `reason`."""
    advice = REMEDIES.get(reason_kind(reason), _FIX_AND_INGEST)
    schema = TABLES_BY_NAME.get(table or "")
    if reason_kind(reason) == "missing required column" and schema is not None:
        missing = {name.strip() for name in reason.split(":", 1)[1].split(",")}
        names = [
            f"{c.name} ({' / '.join((c.name, *c.aliases))})"
            for c in schema.columns
            if c.name in missing
        ]
        advice += f"; the names it accepts: {', '.join(names)}"
    return advice


def _example(reason: str, line: int | None) -> str:
    """The reason's own words after its kind, with the line when they do not name it."""
    detail = reason.split(":", 1)[-1].strip() or reason
    if line is not None and not re.search(rf"\bline {line}\b", detail):
        detail += f" (line {line})"
    return detail


@dataclass
class TableReport:
    table: str
    files: list[str] = field(default_factory=list)
    read: int = 0
    inserted: int = 0
    updated: int = 0
    unchanged: int = 0
    quarantined: int = 0
    reasons: dict[str, int] = field(default_factory=dict)
    # The first few (reason, line) of each kind
    examples: dict[str, list[tuple[str, int | None]]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    error: str | None = None

    @property
    def file(self) -> str:
        return ", ".join(self.files)

    @property
    def loaded(self) -> int:
        return self.inserted + self.updated + self.unchanged

    def count(self, reason: str, line: int | None = None) -> None:
        kind = reason_kind(reason)
        self.quarantined += 1
        self.reasons[kind] = self.reasons.get(kind, 0) + 1
        shown = self.examples.setdefault(kind, [])
        if len(shown) < _EXAMPLES:
            shown.append((reason, line))


@dataclass
class IngestReport:
    tables: list[TableReport] = field(default_factory=list)
    unknown_files: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def loaded(self) -> int:
        return sum(t.loaded for t in self.tables)

    @property
    def quarantined(self) -> int:
        return sum(t.quarantined for t in self.tables)

    @property
    def changed(self) -> int:
        return sum(t.inserted + t.updated for t in self.tables)

    @property
    def failed(self) -> list[TableReport]:
        return [t for t in self.tables if t.error]

    def summary(self) -> str:
        lines = [
            f"{'table':22} {'read':>6} {'new':>6} {'updated':>7} {'same':>6} {'bad':>5}  file",
        ]
        for t in self.tables:
            lines.append(
                f"{t.table:22} {t.read:6} {t.inserted:6} {t.updated:7} {t.unchanged:6}"
                f" {t.quarantined:5}  {t.file}"
            )
            lines += [f"{'':24}{note}" for note in t.notes]
            for kind, n in sorted(t.reasons.items()):
                shown = t.examples[kind]
                more = f"; … {n - len(shown)} more" if n > len(shown) else ""
                said = "; ".join(_example(reason, line) for reason, line in shown)
                lines.append(f"{'':24}quarantined {n} × {kind}: {said}{more}")
                lines.append(f"{'':26}→ {remedy(shown[0][0], t.table)}")
            if t.error:
                lines.append(f"{'':24}FAILED, nothing of this table was stored: {t.error}")
        for name in self.unknown_files:
            lines.append(
                f"ignored {name}: not a known table (expected one of {', '.join(LOAD_ORDER)})"
            )
        lines.append(
            f"loaded {self.loaded} rows ({self.changed} new or changed), "
            f"quarantined {self.quarantined}"
            + (" (`hltm quarantine` lists each and what resolves it)" if self.quarantined else "")
            + (f", in {self.seconds:.1f}s" if self.seconds else "")
        )
        return "\n".join(lines)

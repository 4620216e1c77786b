"""One table's and one ingest's outcome, which reading, mapping and loading all add to."""

from __future__ import annotations

from dataclasses import dataclass, field

from hltm.sources.schema import LOAD_ORDER


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
    notes: list[str] = field(default_factory=list)
    error: str | None = None

    @property
    def file(self) -> str:
        return ", ".join(self.files)

    @property
    def loaded(self) -> int:
        return self.inserted + self.updated + self.unchanged

    def count(self, reason: str, n: int = 1) -> None:
        kind = reason.split(":")[0]
        self.quarantined += n
        self.reasons[kind] = self.reasons.get(kind, 0) + n


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
            for reason, n in sorted(t.reasons.items()):
                lines.append(f"{'':24}quarantined {n} × {reason}")
            if t.error:
                lines.append(f"{'':24}FAILED, nothing of this table was stored: {t.error}")
        for name in self.unknown_files:
            lines.append(
                f"ignored {name}: not a known table (expected one of {', '.join(LOAD_ORDER)})"
            )
        lines.append(
            f"loaded {self.loaded} rows ({self.changed} new or changed), "
            f"quarantined {self.quarantined} (see the `quarantine` table)"
            + (f", in {self.seconds:.1f}s" if self.seconds else "")
        )
        return "\n".join(lines)

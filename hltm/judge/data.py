"""Vacancies and resumes as the judge sees them, read from the sources DuckDB or from files.

A vacancy's *version key* is its `version` column plus a hash of what the judge reads (title,
text, requirements): the score cache is keyed by it, so a vacancy whose requirements were edited
without a version bump is still re-judged, and an unchanged vacancy never is. A resume is keyed
by its `content_hash` from ingest (sha1 of its own columns).

A vacancy may also carry soft requirements proposed by its calibration from memory
(`hltm.judge.calibration`): they are `Requirement(origin="memory")`, never mandatory, judged
like the others, and the calibration's version is appended to the version key, so a memory
change that changes the proposals re-judges that vacancy and no other.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

import duckdb

from hltm.embeddings import leading_tokens
from hltm.judge.formal import is_formal
from hltm.warehouse import connect, table_exists

__all__ = [
    "Requirement",
    "Resume",
    "Vacancy",
    "load_resumes",
    "load_vacancies",
    "resume_content_hash",
    "vacancy_ids",
]


VACANCY_ORIGIN = "vacancy"
# The vector index reads a resume's opening (headline, summary, the most recent positions): the
# bundled e5's cost grows with every token, and `bench/passages.py` measured the first 128
# tokens against the whole resume on both golden sets within noise (cosine P@10 strict/soft:
# sample 120/201 against 117/203 of 240, real 47/65 against 47/67 of 100) at 40% of the CPU.
PASSAGE_TOKENS = 128
MEMORY_ORIGIN = "memory"


@dataclass(frozen=True)
class Requirement:
    requirement_id: str
    text: str
    mandatory: bool
    origin: str = VACANCY_ORIGIN  # or MEMORY_ORIGIN: proposed by the calibration, soft


@dataclass(frozen=True)
class Vacancy:
    vacancy_id: str
    version: int
    title: str
    text: str
    requirements: tuple[Requirement, ...] = ()
    project_id: str | None = None
    calibration_version: str = ""  # set with the memory items by `calibrated`

    @property
    def own_requirements(self) -> tuple[Requirement, ...]:
        """The requirements the vacancy itself states (not proposed by memory)."""
        return tuple(r for r in self.requirements if r.origin == VACANCY_ORIGIN)

    @property
    def memory_requirements(self) -> tuple[Requirement, ...]:
        return tuple(r for r in self.requirements if r.origin == MEMORY_ORIGIN)

    @property
    def own_version_key(self) -> str:
        """The version of what the vacancy itself says (the calibration is keyed by it)."""
        body = json.dumps(
            [
                self.title,
                self.text,
                [[r.requirement_id, r.text, r.mandatory] for r in self.own_requirements],
            ],
            ensure_ascii=False,
        )
        return f"{self.version}:{hashlib.sha1(body.encode('utf-8')).hexdigest()[:12]}"

    @property
    def version_key(self) -> str:
        """The version the judge's cache and the journal are keyed by: the vacancy's own, plus
        the calibration version when memory proposed items."""
        own = self.own_version_key
        return f"{own}+cal:{self.calibration_version}" if self.calibration_version else own

    def calibrated(self, items: Sequence[Requirement], version: str) -> Vacancy:
        """This vacancy with memory-proposed soft items (replacing any earlier ones)."""
        memory = tuple(replace(r, mandatory=False, origin=MEMORY_ORIGIN) for r in items)
        return replace(
            self,
            requirements=self.own_requirements + memory,
            calibration_version=version if memory else "",
        )

    def vector_query(self) -> str:
        """What the vector search embeds: the vacancy as posted."""
        return f"{self.title}\n{self.text}"

    def bm25_query(self) -> str:
        """What BM25 searches with: the title and the requirements (formalities left out), where
        the rare exact terms live — not the boilerplate about salary and interview steps."""
        reqs = [r.text for r in self.own_requirements if not is_formal(r.text)]
        return "\n".join([self.title, *reqs]) if reqs else self.vector_query()


@dataclass(frozen=True)
class Resume:
    resume_id: str
    text: str
    content_hash: str
    headline: str | None = None
    language: str | None = None
    layer: str = "active"
    updated_at: str | None = None  # ISO timestamp
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def as_of(self) -> str | None:
        """When "present" in the resume's dates is: the month it was last updated."""
        return self.updated_at[:7] if self.updated_at else None

    def passage(self, tokens: int | None = PASSAGE_TOKENS) -> str:
        """What the vector index embeds: the opening of the resume as written (headline
        included once), its first ``tokens`` tokens (None: all of it)."""
        text = self.text
        if self.headline and self.headline not in self.text:
            text = f"{self.headline}\n{self.text}"
        return text if tokens is None else leading_tokens(text, tokens)


def _iso(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        return value.isoformat(timespec="seconds")
    return str(value)


def _requirements(con: duckdb.DuckDBPyConnection, ids: Sequence[str] | None) -> dict[str, list]:
    sql = "SELECT vacancy_id, requirement_id, text, mandatory FROM vacancy_requirements"
    params: list[Any] = []
    if ids is not None:
        sql += f" WHERE vacancy_id IN ({', '.join('?' for _ in ids)})"
        params = list(ids)
    out: dict[str, list[Requirement]] = {}
    for vid, rid, text, mandatory in con.execute(
        sql + " ORDER BY requirement_id", params
    ).fetchall():
        out.setdefault(vid, []).append(Requirement(rid, text, bool(mandatory)))
    return out


def _vacancies(con: duckdb.DuckDBPyConnection, ids: Sequence[str] | None) -> list[Vacancy]:
    if not table_exists(con, "vacancies"):
        return []
    if ids is not None and not ids:
        return []
    sql = "SELECT vacancy_id, version, title, text, project_id FROM vacancies"
    params: list[Any] = []
    if ids is not None:
        sql += f" WHERE vacancy_id IN ({', '.join('?' for _ in ids)})"
        params = list(ids)
    rows = con.execute(sql + " ORDER BY vacancy_id", params).fetchall()
    reqs = _requirements(con, ids)
    return [
        Vacancy(vid, int(version), title, text, tuple(reqs.get(vid, ())), project_id)
        for vid, version, title, text, project_id in rows
    ]


def load_vacancies(sources_db: Path | str, ids: Sequence[str] | None = None) -> list[Vacancy]:
    """Vacancies (with requirements) from the sources, all or the given ids, by id, as written
    (`hltm.judge.calibration.calibrated_vacancies` adds what calibration proposed)."""
    with connect(sources_db, read_only=True) as con:
        return _vacancies(con, ids)


def vacancy_ids(sources_db: Path | str) -> dict[str, str]:
    """vacancy id → own version key, for every vacancy in the sources (sensors read this)."""
    return {v.vacancy_id: v.own_version_key for v in load_vacancies(sources_db)}


def load_resumes(
    sources_db: Path | str,
    layer: str | None = None,
    ids: Iterable[str] | None = None,
) -> list[Resume]:
    """Resumes from the sources (optionally one layer or some ids), by id."""
    sql = "SELECT resume_id, text, content_hash, headline, language, layer, updated_at FROM resumes"
    where: list[str] = []
    params: list[Any] = []
    if layer is not None:
        where.append("layer = ?")
        params.append(layer)
    wanted = list(ids) if ids is not None else None
    if wanted is not None:
        if not wanted:
            return []
        where.append(f"resume_id IN ({', '.join('?' for _ in wanted)})")
        params += wanted
    if where:
        sql += " WHERE " + " AND ".join(where)
    with connect(sources_db, read_only=True) as con:
        if not table_exists(con, "resumes"):
            return []
        rows = con.execute(sql + " ORDER BY resume_id", params).fetchall()
    return [
        Resume(rid, text, digest, headline, language, layer_, _iso(updated))
        for rid, text, digest, headline, language, layer_, updated in rows
    ]


def resume_content_hash(row: dict[str, Any]) -> str:
    """The content hash ingest would give this resume row (for files read outside ingest)."""
    from hltm.sources.ingest import content_hash
    from hltm.sources.schema import TABLES_BY_NAME

    table = TABLES_BY_NAME["resumes"]
    values = {c.name: row.get(c.name) for c in table.columns}
    return content_hash(table, values)

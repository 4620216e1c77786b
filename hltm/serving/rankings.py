"""A vacancy's current ranking, read only inside the caller's permitted subtree.

A vacancy belongs to a hiring project, the project to a seat, the seat to a contract (the
sources' ownership path). A caller whose identity is a contract, seat or project may read the
ranking of a vacancy only when that node lies on the vacancy's path: the same subtree rule as the
memory (`hltm.query.scope`), applied to rankings. A vacancy outside the subtree and one that does
not exist get the same refusal, so the answer never says whether another owner's vacancy exists.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from hltm.judge.calibration import calibrated_vacancies
from hltm.judge.data import load_vacancies
from hltm.judge.journal import JournalEntry, ranking_as_of, ranking_problems
from hltm.query.scope import Identity, ScopeError
from hltm.warehouse import connect, table_exists

_OWNERSHIP_SQL = (
    "SELECT p.project_id, s.seat_id, s.contract_id FROM vacancies v"
    " JOIN projects p ON p.project_id = v.project_id JOIN seats s ON s.seat_id = p.seat_id"
    " WHERE v.vacancy_id = ?"
)


class RankingNotServed(RuntimeError):
    """The journal or `rankings` fails verification for this vacancy: what `hltm judge show`
    refuses is refused over HTTP too."""


@dataclass(frozen=True)
class VacancyOwner:
    vacancy_id: str
    title: str
    version_key: str  # the vacancy's present version (`Vacancy.version_key`)
    contract_id: str
    seat_id: str
    project_id: str

    def readable_by(self, identity: Identity) -> bool:
        owner = {"contract": self.contract_id, "seat": self.seat_id, "project": self.project_id}
        return owner[identity.level] == identity.id


@dataclass(frozen=True)
class ScopedRanking:
    owner: VacancyOwner
    entry: JournalEntry

    @property
    def current(self) -> bool:
        """Whether the ranking was computed for the vacancy's present version."""
        return self.entry.vacancy_version == self.owner.version_key


def vacancy_owner(
    sources_db: Path | str, vacancy_id: str, derived_db: Path | str | None = None
) -> VacancyOwner | None:
    """The vacancy's ownership path from the sources (None: unknown vacancy or broken path).

    Its version key is the one the judge ranks under, calibration included: pass `derived_db`,
    or a calibrated vacancy's ranking never reads as current."""
    if not Path(sources_db).exists():
        return None
    with connect(sources_db, read_only=True) as con:
        if not all(table_exists(con, t) for t in ("vacancies", "projects", "seats")):
            return None
        row = con.execute(_OWNERSHIP_SQL, [vacancy_id]).fetchone()
    if row is None:
        return None
    vacancies = (
        calibrated_vacancies(sources_db, derived_db, [vacancy_id])
        if derived_db is not None
        else load_vacancies(sources_db, [vacancy_id])
    )
    if not vacancies:
        return None
    project_id, seat_id, contract_id = row
    vacancy = vacancies[0]
    return VacancyOwner(
        vacancy_id, vacancy.title, vacancy.version_key, contract_id, seat_id, project_id
    )


def scoped_ranking(
    sources_db: Path | str, derived_db: Path | str, identity: Identity, vacancy_id: str
) -> ScopedRanking:
    """The latest published ranking of `vacancy_id`, if `identity` may read it.

    `ScopeError` when the vacancy is outside the identity's subtree or unknown (one message for
    both); `RankingNotServed` when its journal fails verification; `LookupError` when it is the
    caller's own vacancy but no ranking is published yet.
    """
    owner = vacancy_owner(sources_db, vacancy_id, derived_db)
    if owner is None or not owner.readable_by(identity):
        raise ScopeError(f"vacancy {vacancy_id!r} is unknown or outside the scope of {identity}")
    problems = ranking_problems(derived_db, vacancy_id)
    if problems:
        raise RankingNotServed("; ".join(problems) + " — not served (run `hltm judge verify`)")
    entry = ranking_as_of(derived_db, vacancy_id, datetime.now(UTC).replace(tzinfo=None))
    if entry is None:
        raise LookupError(f"no ranking of vacancy {vacancy_id!r} is published yet")
    return ScopedRanking(owner, entry)

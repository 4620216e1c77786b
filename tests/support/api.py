"""Published rankings for two vacancies of different seats, on the query tests' built world.

Each vacancy gets a real (offline) judge run over a small pool and a journal entry, once per test
session, so the ranking lookup has something to show and something to refuse.
"""

from __future__ import annotations

from dataclasses import dataclass

from hltm.judge.data import load_resumes, load_vacancies
from hltm.judge.gate import GateDecision
from hltm.judge.journal import publish_ranking
from hltm.judge.pipeline import judge_config, judge_pool
from hltm.llm import make_llm
from hltm.serving.rankings import vacancy_owner
from tests.support.query import BuiltWorld

POOL_SIZE = 3
_PUBLISHED: dict[str, RankedVacancies] = {}


@dataclass(frozen=True)
class RankedVacancies:
    seat: str  # the asking seat ("A")
    other_seat: str  # another seat, of the same contract when there is one ("B")
    own_vacancy: str
    foreign_vacancy: str


def publish_two_rankings(world: BuiltWorld) -> RankedVacancies:
    if "ranked" in _PUBLISHED:
        return _PUBLISHED["ranked"]
    settings = world.settings
    vacancies = load_vacancies(settings.sources_db)
    owners = {v.vacancy_id: vacancy_owner(settings.sources_db, v.vacancy_id) for v in vacancies}
    first = owners[vacancies[0].vacancy_id]
    assert first is not None
    # Prefer a sibling seat (same contract): the closest neighbour a leak could reach.
    others = sorted(
        {(o.contract_id != first.contract_id, o.seat_id) for o in owners.values() if o}
        - {(False, first.seat_id)}
    )
    seat, other_seat = first.seat_id, others[0][1]
    own = next(v for v in vacancies if owners[v.vacancy_id].seat_id == seat)  # type: ignore[union-attr]
    foreign = next(v for v in vacancies if owners[v.vacancy_id].seat_id == other_seat)  # type: ignore[union-attr]
    pool = load_resumes(settings.sources_db, layer="active")[:POOL_SIZE]
    llm = make_llm(settings, model=settings.judge_model)
    for vacancy in (own, foreign):
        judge_pool(settings.derived_db, llm, vacancy, pool, workers=1)
        passed = GateDecision(True, 1.0, "test fixture")
        publish_ranking(settings.derived_db, vacancy, pool, judge_config(llm), passed)
    ranked = RankedVacancies(seat, other_seat, own.vacancy_id, foreign.vacancy_id)
    _PUBLISHED["ranked"] = ranked
    return ranked

"""How big a sample world is: the size knobs and the named sizes the CLI and benches use."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class WorldSize:
    contracts: int = 3
    seats_per_contract: int = 4
    projects_per_seat: int = 5
    resumes: int = 400  # ~85% active layer, ~15% archive
    vacancies: int = 24  # spread over projects; each belongs to a project


SIZES: dict[str, WorldSize] = {
    "demo": WorldSize(),
    "bench": WorldSize(
        contracts=10, seats_per_contract=10, projects_per_seat=10, resumes=1500, vacancies=40
    ),
}

"""The deterministic sample world: contracts → seats → projects with documents, resumes, recruiter
actions, vacancies with requirements, and the ground truth that grades everything built on them.

Plain Python, no Dagster. Every random choice comes from `random.Random` streams seeded by strings
derived from the seed and a stable entity id, so the same seed and sizes always give byte-identical
files, and an entity's content doesn't shift when unrelated sizes change. Timestamps are the fixed
base date 2026-01-05 minus deterministic offsets (never `now()`).

What the world contains, on purpose:

* Ownership with habits: a contract has organisation-wide tendencies (industry, region, default
  work mode and employment type, core role families); its seats lean towards those and have stable
  preferences of their own; projects follow their seat with noise (~80% per attribute). Some
  projects under different owners have near-identical titles (for access-leakage tests).
* Free-text project documents (4 kinds) stating each fact in several phrasings, some in Russian
  for Russia-based contracts; no machine markers.
* Resumes in English and Russian with a summary, the last positions with dates and concrete
  bullets, skills and education; an archive layer (~15%) that normal pools never see.
* Traps: keyword twins (wrong role, same keywords), headline/role mismatches in both directions,
  formal requirements ("ready to sign an NDA") in vacancies, some flagged mandatory.
* For every vacancy: true fits (some in the archive, some written with rare exact terms and little
  shared wording), borderlines, traps and many misses; labels come from `label_pair`.

Modules, in the order the world is built from them:

* `sizes` (`hltm_devkit.sizes`, apart so the CLI names the sizes without loading the generator):
  `WorldSize` and the named `SIZES`
* `vocabulary`  levels, work terms, cities, industries, company, team and people names, interview
  steps;  `families`: the role families and their skills
* `helpers`     seeded random streams, the fixed clock, bilingual formatting;  `roles`: titles,
  stacks, skill picks and level moves within a role family
* `labels`      `label_pair` and the selection of each vacancy's labelled pairs
* `tenancy`     contracts → seats → projects;  `vacancies`: vacancies and their requirements
* `resumes`     resume planning against the vacancies, then rendering
* `sentences`   free-text facts and reasons;  `documents`: recruiter actions, project documents
  and vacancy texts
* `world`       `generate_world`: assembles the parts and writes the files
"""

from __future__ import annotations

import argparse
from pathlib import Path

from hltm_devkit.generator.families import FAMILIES, FORMAL_REQUIREMENTS
from hltm_devkit.generator.helpers import BASE_DATE
from hltm_devkit.generator.labels import label_pair
from hltm_devkit.generator.vocabulary import CITIES, LEVEL_MONTHS
from hltm_devkit.generator.world import GENERATOR_VERSION, generate_world
from hltm_devkit.sizes import SIZES, WorldSize

__all__ = [
    "BASE_DATE",
    "CITIES",
    "FAMILIES",
    "FORMAL_REQUIREMENTS",
    "GENERATOR_VERSION",
    "LEVEL_MONTHS",
    "SIZES",
    "WorldSize",
    "generate_world",
    "label_pair",
    "main",
]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--size", choices=sorted(SIZES), default="demo")
    args = parser.parse_args(argv)
    counts = generate_world(args.out_dir, seed=args.seed, size=SIZES[args.size])
    print(", ".join(f"{n} {t}" for t, n in counts.items()))

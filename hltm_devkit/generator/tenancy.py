"""The ownership tree: contracts with habits, their recruiter seats, and the seats' projects."""

from __future__ import annotations

import random
from typing import Any

from hltm_devkit.generator.families import FAMILIES, FAMILY_NAMES, FAMILY_PRIORITY, STACK_DISPLAY
from hltm_devkit.generator.helpers import _days, _other, _person, _region_of, _rng, _weighted
from hltm_devkit.generator.roles import (
    _clamp_level,
    _family_title,
    _level_shift,
    _pick_skills,
    _stack_of,
)
from hltm_devkit.generator.vocabulary import (
    CONTRACT_NAMES,
    EMPLOYMENT_TYPES,
    INDUSTRY_KEYS,
    LEVEL_INDEX,
    LEVELS,
    PHYSICAL_CITIES,
    REGION_CITIES,
    STEP_ORDER,
    TEAMS,
    WORK_MODES,
)
from hltm_devkit.sizes import WorldSize


def _build_contracts(seed: int, size: WorldSize) -> list[dict[str, Any]]:
    n = size.contracts
    rng = _rng(seed, "contracts")
    regions = ["europe", "russia", "north_america", "europe", "cis", "russia", "north_america"]
    rng.shuffle(regions)
    regions = [regions[i % len(regions)] for i in range(n)]
    if n >= 2 and "russia" not in regions:
        regions[1] = "russia"
    if n >= 2 and all(r == "russia" for r in regions):
        regions[0] = "europe"
    order = list(FAMILY_PRIORITY[:2])
    rest = list(FAMILY_PRIORITY[2:])
    rng.shuffle(rest)
    order += rest
    industries = list(INDUSTRY_KEYS)
    rng.shuffle(industries)
    used_names: set[str] = set()
    contracts = []
    for i in range(n):
        cid = f"c{i + 1:02d}"
        crng = _rng(seed, "contract", cid)
        region = regions[i]
        core = order[i::n][:4] if n <= len(order) else [order[i % len(order)]]
        while len(core) < 3:
            extra = crng.choice(FAMILY_NAMES)
            if extra not in core:
                core.append(extra)
        names = [x for x in CONTRACT_NAMES[region] if x not in used_names]
        name = crng.choice(names) if names else f"{crng.choice(CONTRACT_NAMES[region])} {i + 1}"
        used_names.add(name)
        offices = crng.sample(
            [c for c in REGION_CITIES[region] if not c.startswith("Remote")],
            k=min(3, len([c for c in REGION_CITIES[region] if not c.startswith("Remote")])),
        )[: crng.randint(1, 3)]
        contracts.append(
            {
                "contract_id": cid,
                "name": name,
                "industry": industries[i % len(industries)],
                "region": region,
                "hq_city": offices[0],
                "office_cities": offices,
                "default_work_mode": _weighted(crng, WORK_MODES, (0.35, 0.45, 0.2)),
                "default_employment_type": _weighted(crng, EMPLOYMENT_TYPES, (0.75, 0.2, 0.05)),
                "core_families": core,
                "language": "ru" if region == "russia" else "en",
                "updated_minutes_before": _days(crng, 30, 400),
            }
        )
    return contracts


def _build_seats(seed: int, size: WorldSize, contracts: list[dict]) -> list[dict[str, Any]]:
    seats = []
    for c in contracts:
        for j in range(size.seats_per_contract):
            sid = f"{c['contract_id']}-s{j + 1:02d}"
            rng = _rng(seed, "seat", sid)
            core = c["core_families"]
            fam = core[j % len(core)] if rng.random() < 0.8 else rng.choice(FAMILY_NAMES)
            level = _clamp_level(fam, _weighted(rng, LEVELS, (0.1, 0.35, 0.4, 0.15)))
            mode = (
                c["default_work_mode"]
                if rng.random() < 0.7
                else _other(rng, WORK_MODES, c["default_work_mode"])
            )
            emp = (
                c["default_employment_type"]
                if rng.random() < 0.75
                else _other(rng, EMPLOYMENT_TYPES, c["default_employment_type"])
            )
            k = _weighted(rng, ("1", "2", "3"), (0.4, 0.4, 0.2))
            cities: list[str] = []
            region_physical = [x for x in REGION_CITIES[c["region"]] if not x.startswith("Remote")]
            while len(cities) < int(k):
                r = rng.random()
                if r < 0.55:
                    city = rng.choice(c["office_cities"])
                elif r < 0.8:
                    city = rng.choice(region_physical)
                else:
                    city = rng.choice(PHYSICAL_CITIES)
                if city not in cities:
                    cities.append(city)
            if (
                mode == "remote"
                and c["region"] in ("europe", "north_america")
                and rng.random() < 0.5
            ):
                remote = "Remote-EU" if c["region"] == "europe" else "Remote-US"
                cities = [*cities[:2], remote]
            lang = "ru" if c["language"] == "ru" and rng.random() < 0.8 else "en"
            seats.append(
                {
                    "seat_id": sid,
                    "contract_id": c["contract_id"],
                    "recruiter_name": _person(rng, lang),
                    "locations": cities,
                    "work_mode": mode,
                    "employment_type": emp,
                    "title_family": fam,
                    "seniority": level,
                    "updated_minutes_before": _days(rng, 5, 300),
                }
            )
    return seats


def _salary(rng: random.Random, region: str, level: str, employment: str) -> dict[str, Any]:
    i = LEVEL_INDEX[level]
    if employment in ("contract", "part-time"):
        table = {
            "russia": ("RUB", "hour", (1200, 2000, 3000, 4200), 100),
            "europe": ("EUR", "day", (250, 400, 600, 800), 50),
            "north_america": ("USD", "hour", (50, 75, 100, 140), 5),
            "cis": ("USD", "hour", (15, 25, 40, 55), 5),
        }
    else:
        table = {
            "russia": ("RUB", "month", (120_000, 250_000, 380_000, 520_000), 10_000),
            "europe": ("EUR", "year", (45_000, 65_000, 85_000, 110_000), 5_000),
            "north_america": ("USD", "year", (100_000, 140_000, 180_000, 230_000), 5_000),
            "cis": ("USD", "month", (1_800, 3_500, 5_000, 7_000), 250),
        }
    currency, period, mids, step = table[region]
    mid = mids[i] * rng.uniform(0.9, 1.1)
    lo = int(round(mid * 0.85 / step) * step)
    hi = int(round(mid * 1.15 / step) * step)
    return {"min": lo, "max": max(hi, lo + step), "currency": currency, "period": period}


def _interview_steps(rng: random.Random, fam: str) -> list[str]:
    pool = ["tech", "hm", "team", "cto", "takehome", "coding", "security"]
    if fam in ("solution_architect", "backend_engineer", "ml_engineer", "data_engineer"):
        pool.append("design")
    if fam in ("product_manager", "project_manager", "data_analyst"):
        pool = ["case", "hm", "team", "cto", "takehome", "security"]
    picked = rng.sample(pool, k=rng.randint(2, 3))
    steps = ["screen", *picked]
    return sorted(steps, key=STEP_ORDER.index)


def _project_title(
    rng: random.Random, fam: str, level: str, lang: str, stack: str | None, team: tuple[str, str]
) -> str:
    title = _family_title(fam, level, lang, rng, stack)
    r = rng.random()
    if r < 0.25:
        title += f" ({team[0] if lang == 'en' else team[1]})"
    elif r < 0.4 and stack and stack not in title and STACK_DISPLAY.get(stack, stack) not in title:
        title += f" ({stack})"
    return title


def _project_attrs(seed: int, pid: str, seat: dict, contract: dict) -> dict[str, Any]:
    rng = _rng(seed, "project", pid)
    fam = (
        seat["title_family"]
        if rng.random() < 0.8
        else rng.choice(contract["core_families"] + list(FAMILY_NAMES))
    )
    level = (
        seat["seniority"]
        if rng.random() < 0.8
        else (_level_shift(fam, seat["seniority"], rng.choice((-1, 1))) or seat["seniority"])
    )
    level = _clamp_level(fam, level)
    if rng.random() < 0.8:
        locs = rng.sample(seat["locations"], k=rng.randint(1, len(seat["locations"])))
        locs = sorted(locs, key=seat["locations"].index)
    elif rng.random() < 0.5:
        locs = [
            rng.choice([c for c in REGION_CITIES[contract["region"]] if not c.startswith("Remote")])
        ]
    else:
        locs = [rng.choice(PHYSICAL_CITIES)]
    mode = seat["work_mode"] if rng.random() < 0.8 else _other(rng, WORK_MODES, seat["work_mode"])
    if any(c.startswith("Remote") for c in locs):
        mode = "remote"
    emp = (
        seat["employment_type"]
        if rng.random() < 0.8
        else _other(rng, EMPLOYMENT_TYPES, seat["employment_type"])
    )
    skills = _pick_skills(rng, fam, rng.randint(4, 6))
    team = rng.choice(TEAMS)
    # projects of Russia-based contracts mostly work in Russian
    lang = "ru" if contract["language"] == "ru" and rng.random() < 0.6 else "en"
    stack = _stack_of(fam, skills)
    title = _project_title(rng, fam, level, lang if rng.random() < 0.5 else "en", stack, team)
    return {
        "project_id": pid,
        "seat_id": seat["seat_id"],
        "contract_id": contract["contract_id"],
        "title": title,
        "role_family": fam,
        "seniority": level,
        "locations": locs,
        "work_mode": mode,
        "employment_type": emp,
        "key_skills": skills,
        "team": team[0],
        "team_ru": team[1],
        "industry": contract["industry"],
        "salary": _salary(rng, _region_of(locs[0]), level, emp),
        "interview_steps": _interview_steps(rng, fam),
        "language": lang,
        "headcount": _weighted(rng, ("1", "2", "3"), (0.7, 0.2, 0.1)),
        "hiring_manager": _person(rng, lang),
        "contract_months": rng.choice((3, 6, 9, 12)),
        "part_time_hours": rng.choice((16, 20, 24)),
        "office_days": rng.choice((2, 3)),
    }


def _similar_title_groups(seed: int, projects: list[dict], contracts: list[dict]) -> list[dict]:
    """Give a few projects under different owners near-identical titles (leakage tests)."""
    rng = _rng(seed, "similar-titles")
    n_groups = max(1, min(8, len(projects) // 15))
    by_contract: dict[str, list[dict]] = {}
    for p in projects:
        by_contract.setdefault(p["contract_id"], []).append(p)
    taken: set[str] = set()
    groups = []
    fams = [f for f in FAMILY_PRIORITY[:6]]
    for g in range(n_groups):
        fam = fams[g % len(fams)]
        level = _clamp_level(fam, "senior")
        team = rng.choice(TEAMS)
        base = rng.choice([t for t in FAMILIES[fam]["en"] if "{stack}" not in t])
        stem = f"{'Senior' if level == 'senior' else 'Lead'} {base}"
        variants = [
            f"{stem} ({team[0]})",
            f"{stem}, {team[0]}",
            f"{stem} – {team[0]}",
            f"{stem} ({team[0]} team)",
        ]
        if len(by_contract) >= 2:
            owners = rng.sample(sorted(by_contract), k=min(3, len(by_contract)))
            pools = [by_contract[c] for c in owners]
        else:
            seats: dict[str, list[dict]] = {}
            for p in projects:
                seats.setdefault(p["seat_id"], []).append(p)
            if len(seats) < 2:
                break
            owners = rng.sample(sorted(seats), k=min(3, len(seats)))
            pools = [seats[s] for s in owners]
        members = []
        for pool in pools:
            free = [p for p in pool if p["project_id"] not in taken]
            if not free:
                continue
            same = [p for p in free if p["role_family"] == fam]
            p = rng.choice(same or free)
            taken.add(p["project_id"])
            prng = _rng(seed, "similar-title-member", p["project_id"])
            if p["role_family"] != fam or p["seniority"] != level:
                p["role_family"] = fam
                p["seniority"] = level
                p["key_skills"] = _pick_skills(prng, fam, prng.randint(4, 6))
                p["interview_steps"] = _interview_steps(prng, fam)
                p["salary"] = _salary(
                    prng, _region_of(p["locations"][0]), level, p["employment_type"]
                )
            p["title"] = variants[len(members) % len(variants)]
            p["team"], p["team_ru"] = team
            members.append(p["project_id"])
        if len(members) >= 2:
            groups.append({"title": f"{stem} ({team[0]})", "role_family": fam, "projects": members})
    return groups


def _project_timing(rng: random.Random, status: str) -> tuple[int, int]:
    """(created, updated) as minutes before the base date."""
    lo, hi = {"open": (4, 150), "paused": (30, 320), "closed": (60, 900)}[status]
    created = _days(rng, lo, hi)
    if status == "open":
        updated = rng.randint(0, min(created - 60, 3 * 1440))
    else:
        updated = created - rng.randint(1440, min(created - 60, 140 * 1440))
    return created, updated

"""Vacancies on chosen projects and their requirement lines (role, skills, nice-to-have, formal)."""

from __future__ import annotations

import random

from hltm_devkit.generator.families import FAMILIES, FAMILY_PRIORITY, FORMAL_REQUIREMENTS
from hltm_devkit.generator.helpers import _rng, _ru_from_years, _ru_years
from hltm_devkit.generator.roles import _family_title, _level_shift, _pick_skills, _stack_of
from hltm_devkit.generator.vocabulary import YEARS_REQUIRED


def _choose_vacancy_projects(seed: int, n: int, projects: list[dict]) -> list[dict]:
    rng = _rng(seed, "vacancy-projects")
    contracts = sorted({p["contract_id"] for p in projects})
    by_contract = {c: [p for p in projects if p["contract_id"] == c] for c in contracts}
    fam_count: dict[str, int] = {}
    chosen: list[dict] = []
    chosen_ids: set[str] = set()
    tiebreak = {p["project_id"]: rng.random() for p in projects}
    for i in range(n):
        cid = contracts[i % len(contracts)]
        cands = [p for p in by_contract[cid] if p["project_id"] not in chosen_ids]
        if not cands:
            cands = [p for p in projects if p["project_id"] not in chosen_ids] or list(projects)

        early = i < 6  # the first picks go to the priority families (architect, DS, ...)
        p = min(
            cands,
            key=lambda p: (
                fam_count.get(p["role_family"], 0),
                FAMILY_PRIORITY.index(p["role_family"]) if early else 0,
                tiebreak[p["project_id"]],
            ),
        )
        chosen.append(p)
        chosen_ids.add(p["project_id"])
        fam_count[p["role_family"]] = fam_count.get(p["role_family"], 0) + 1
    return chosen


def _req_role_years(rng: random.Random, lang: str, fam: str, years: int) -> str:
    f = FAMILIES[fam]
    if lang == "ru":
        return rng.choice(
            (
                f"Опыт {f['role_ru']} {_ru_from_years(years)}",
                f"Не менее {_ru_years(years)} коммерческого опыта {f['role_ru']}",
                f"Коммерческий опыт {f['role_ru']} — {_ru_from_years(years)}",
            )
        ).replace("Не менее 1 год ", "Не менее 1 года ")
    return rng.choice(
        (
            f"{years}+ years of commercial experience in {f['role_en']}",
            f"At least {years} years of hands-on {f['role_en']}",
            f"Proven experience in {f['role_en']} ({years}+ years)",
        )
    )


def _req_skill(rng: random.Random, lang: str, skill: str, avoid: set[int]) -> str:
    """One phrasing per skill, never the same phrasing twice in one vacancy."""
    if lang == "ru":
        options = (
            f"Уверенное владение {skill}",
            f"Коммерческий опыт с {skill}",
            f"Опыт работы с {skill} в продакшене",
            f"{skill} — обязательно",
        )
    else:
        options = (
            f"Strong hands-on experience with {skill}",
            f"Production experience with {skill}",
            f"{skill}: confident, commercial use",
            f"Solid {skill} skills",
        )
    fresh = [i for i in range(len(options)) if i not in avoid] or list(range(len(options)))
    i = rng.choice(fresh)
    avoid.add(i)
    return options[i]


def _req_nice(rng: random.Random, lang: str, term: str) -> str:
    if lang == "ru":
        return rng.choice(
            (f"{term} — будет плюсом", f"Опыт с {term} — преимущество", f"Знакомство с {term}")
        )
    return rng.choice(
        (
            f"Experience with {term} is a plus",
            f"Hands-on {term} would be an advantage",
            f"Familiarity with {term}",
        )
    )


def _build_vacancy(seed: int, vid: str, project: dict, repeat: int) -> dict:
    rng = _rng(seed, "vacancy", vid)
    fam = project["role_family"]
    level = project["seniority"]
    skills = list(project["key_skills"])
    if repeat:
        level = _level_shift(fam, level, rng.choice((-1, 1))) or level
        skills = _pick_skills(rng, fam, 5, required=skills[:1])
    lang = project["language"]
    k = 2 if rng.random() < 0.55 else 3
    musts = skills[:k]
    f = FAMILIES[fam]
    nice_pool = [s for s in (*skills[k:], *f["must"], *f["pool"]) if s not in musts]
    nice = list(dict.fromkeys(nice_pool))[:2]
    rare = rng.sample(f["rare"], k=1 if rng.random() < 0.6 else 2)
    years = YEARS_REQUIRED[level]
    items: list[tuple[str, str, bool]] = [("role", _req_role_years(rng, lang, fam, years), True)]
    avoid: set[int] = set()
    items += [("skill", _req_skill(rng, lang, s, avoid), True) for s in musts]
    items.append(("rare", _req_nice(rng, lang, rare[0]), False))
    if nice and rng.random() < 0.7:
        items.append(("nice", _req_nice(rng, lang, nice[0]), False))
    if rng.random() < 0.5:
        text = "English at B2 level or higher" if lang == "en" else "Английский не ниже B1"
        items.append(("language", text, rng.random() < 0.3))
    while len(items) < 5:
        extra = (
            nice[len([i for i in items if i[0] == "nice"])]
            if len([i for i in items if i[0] == "nice"]) < len(nice)
            else None
        )
        if extra:
            items.append(("nice", _req_nice(rng, lang, extra), False))
        else:
            items.append(("rare", _req_nice(rng, lang, rare[-1]), False))
    title = project["title"]
    if repeat and level != project["seniority"]:
        title = _family_title(fam, level, "en", rng, _stack_of(fam, skills))
    vac = {
        "vacancy_id": vid,
        "project_id": project["project_id"],
        "title": title,
        "language": lang,
        "role_family": fam,
        "level": level,
        "years_required": years,
        "must_have_skills": musts,
        "nice_to_have_skills": nice,
        "rare_terms": rare,
        "locations": project["locations"],
        "work_mode": project["work_mode"],
        "employment_type": project["employment_type"],
        "_items": items,
        "_formal": rng.random() < 0.5,
        "_formal_mandatory": rng.random() < 0.5,
    }
    return vac


def _finish_requirements(seed: int, vac: dict) -> list[dict]:
    rng = _rng(seed, "requirements", vac["vacancy_id"])
    items = list(vac.pop("_items"))
    formal = vac.pop("_formal")
    mandatory = vac.pop("_formal_mandatory")
    lang = vac["language"]
    if formal:
        texts = FORMAL_REQUIREMENTS[lang]
        nda = rng.choice([t for t in texts if "NDA" in t])
        interview = next(t for t in texts if "NDA" not in t)
        picks = rng.sample([nda, interview], k=rng.randint(1, 2))
        for t in picks:
            items.insert(rng.randint(1, len(items)), ("formal", t, mandatory))
    while len(items) > 8:
        drop = next((i for i, it in enumerate(items) if it[0] in ("language", "nice")), None)
        if drop is None:
            drop = max(i for i, it in enumerate(items) if it[0] == "rare")
        items.pop(drop)
    rows = []
    kinds = {}
    for i, (kind, text, mand) in enumerate(items, start=1):
        rid = f"{vac['vacancy_id']}-q{i}"
        rows.append(
            {
                "requirement_id": rid,
                "vacancy_id": vac["vacancy_id"],
                "text": text,
                "mandatory": bool(mand),
            }
        )
        kinds[rid] = kind
    vac["requirement_kinds"] = kinds
    vac["formal_requirement_ids"] = [r for r, k in kinds.items() if k == "formal"]
    return rows

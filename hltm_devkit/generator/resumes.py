"""Resumes planned against the vacancies (fits, borderlines, traps, misses), then rendered."""

from __future__ import annotations

import random
import re
from typing import Any

from hltm_devkit.generator.families import FAMILIES
from hltm_devkit.generator.helpers import (
    _city,
    _days,
    _fmt_month,
    _month_index,
    _person,
    _rng,
    _ru_years,
    _ru_years_gen,
    _ts,
    _weighted,
)
from hltm_devkit.generator.labels import label_pair
from hltm_devkit.generator.roles import (
    _clamp_level,
    _family_title,
    _fill,
    _level_shift,
    _pick_skills,
    _stack_of,
    _title_base,
)
from hltm_devkit.generator.vocabulary import (
    EMPLOYERS_EN,
    EMPLOYERS_RU,
    INDUSTRIES,
    INDUSTRY_KEYS,
    LEVEL_INDEX,
    LEVEL_MONTHS,
    LEVELS,
    PHYSICAL_CITIES,
    REGION_CITIES,
    UNIVERSITIES_EN,
    UNIVERSITIES_RU,
)
from hltm_devkit.sizes import WorldSize

# Per vacancy, in priority order (small worlds take a prefix, so every kind comes early).
SLOT_PLAN = (
    "fit",
    "borderline_level",
    "keyword_twin",
    "headline_miss",
    "archive_fit",
    "rare_fit",
    "headline_fit",
    "borderline_skill",
    "fit",
    "keyword_twin",
    "fit",
    "borderline_level",
    "fit",
    "borderline_skill",
)
BACKGROUND_FAMILY_WEIGHTS = {
    "backend_engineer": 3.0,
    "frontend_engineer": 2.0,
    "data_engineer": 1.5,
    "data_scientist": 1.5,
    "data_analyst": 1.5,
    "ml_engineer": 1.0,
    "devops_engineer": 1.5,
    "qa_engineer": 1.5,
    "product_manager": 1.0,
    "solution_architect": 1.0,
    "mobile_developer": 1.5,
    "project_manager": 1.0,
}


def _spec(rng: random.Random, fam: str, level: str, skills: list[str], **extra: Any) -> dict:
    spec = {
        "role_family": fam,
        "level": level,
        "months": rng.randint(*LEVEL_MONTHS[level]),
        "skills": skills,
        "language": "ru" if rng.random() < 0.3 else "en",
        "layer": "active",
        "trap": None,
        "headline_family": None,
        "style": "standard",
        "rare_terms": [],
        "twin_of": None,
        "targets": [],
        "slot": "background",
    }
    spec.update(extra)
    return spec


def _slot_spec(rng: random.Random, slot: str, v: dict) -> dict | None:
    fam, level, musts = v["role_family"], v["level"], v["must_have_skills"]
    twin = FAMILIES[fam]["twin"]
    n = rng.randint(5, 8)
    if slot in ("fit", "archive_fit", "rare_fit", "headline_fit"):
        spec = _spec(rng, fam, level, _pick_skills(rng, fam, n, required=musts))
        if slot == "archive_fit":
            spec["layer"] = "archive"
        elif slot == "rare_fit":
            spec["style"] = "terse"
            spec["rare_terms"] = list(v["rare_terms"])
        elif slot == "headline_fit":
            spec["trap"] = "headline_mismatch"
            spec["headline_family"] = twin
        return spec
    if slot == "borderline_level":
        order = (-1, 1) if rng.random() < 0.6 else (1, -1)
        other = _level_shift(fam, level, order[0]) or _level_shift(fam, level, order[1])
        if other is None:
            return None
        return _spec(rng, fam, other, _pick_skills(rng, fam, n, required=musts))
    if slot == "borderline_skill":
        drop = rng.choice(musts)
        kept = [s for s in musts if s != drop]
        return _spec(rng, fam, level, _pick_skills(rng, fam, n, required=kept, exclude=[drop]))
    if slot == "keyword_twin":
        tl = _clamp_level(twin, level)
        required = [*musts, *v["nice_to_have_skills"]]
        skills = _pick_skills(rng, twin, len(required) + rng.randint(2, 4), required=required)
        return _spec(rng, twin, tl, skills, trap="keyword_twin", twin_of=fam)
    if slot == "headline_miss":
        tl = _clamp_level(twin, level)
        skills = _pick_skills(rng, twin, n, required=musts)
        return _spec(
            rng, twin, tl, skills, trap="headline_mismatch", headline_family=fam, twin_of=fam
        )
    raise ValueError(slot)


def _plan_resumes(seed: int, size: WorldSize, vacancies: list[dict]) -> list[dict]:
    rng = _rng(seed, "resume-plan")
    total = size.resumes
    per_vacancy = min(len(SLOT_PLAN), int(0.85 * total / max(1, len(vacancies))))
    specs: list[dict] = []
    for v in vacancies:
        seen = {"fit": 0, "borderline": 0}
        for slot in SLOT_PLAN[:per_vacancy]:
            if len(specs) >= total:
                break
            group = "fit" if slot == "fit" else "borderline" if slot.startswith("border") else None
            if group:
                seen[group] += 1
                have = sum(
                    1
                    for s in specs
                    if s["layer"] == "active"
                    and s["trap"] is None
                    and s["style"] == "standard"
                    and label_pair(v, s) == group
                )
                if have >= seen[group]:
                    continue
            spec = _slot_spec(rng, slot, v)
            if spec is None:
                continue
            spec["targets"] = [v["vacancy_id"]]
            spec["slot"] = slot
            specs.append(spec)
    fams = tuple(BACKGROUND_FAMILY_WEIGHTS)
    weights = tuple(BACKGROUND_FAMILY_WEIGHTS.values())
    while len(specs) < total:
        fam = _weighted(rng, fams, weights)
        level = _clamp_level(fam, _weighted(rng, LEVELS, (0.15, 0.35, 0.35, 0.15)))
        skills = _pick_skills(rng, fam, rng.randint(4, 7), prefer_must=False)
        specs.append(_spec(rng, fam, level, skills))
    # the archive layer: ~15%, the planted archive fits first, then background resumes
    want = round(0.15 * total) - sum(1 for s in specs if s["layer"] == "archive")
    if want > 0:
        flexible = [s for s in specs if s["slot"] == "background"]
        if len(flexible) < want:
            flexible += [s for s in specs if s["slot"].startswith("borderline")]
        for s in rng.sample(flexible, k=min(want, len(flexible))):
            s["layer"] = "archive"
    rng.shuffle(specs)
    return specs


_CYRILLIC = re.compile(r"[А-Яа-яЁё]")


def _alt_titles(fam: str, lang: str) -> list[str]:
    alts = list(FAMILIES[fam]["alt"])
    return [a for a in alts if bool(_CYRILLIC.search(a)) == (lang == "ru")] or alts


def _positions(rng: random.Random, spec: dict, ref_idx: int) -> tuple[list[dict], tuple | None]:
    months = spec["months"]
    gap = 0 if rng.random() < 0.85 else rng.randint(1, 4)
    end = ref_idx - gap
    n = 3 if months >= 36 else 2 if months >= 12 else 1
    listed = months if n < 3 else min(months, rng.randint(54, 100))
    weights = [rng.uniform(0.7, 1.3) for _ in range(n)]
    parts = [max(5, int(listed * w / sum(weights))) for w in weights]
    parts[-1] = max(4, listed - sum(parts[:-1]))
    if 0 < months - sum(parts) < 12:  # too short for an "earlier" line: extend the oldest job
        parts[-1] += months - sum(parts)
    listed = sum(parts)
    fam, level = spec["role_family"], spec["level"]
    origin = {
        "solution_architect": "backend_engineer",
        "product_manager": "data_analyst",
        "project_manager": "qa_engineer",
    }.get(fam, fam)
    levels = [level]
    for i in range(1, n):
        prev = levels[-1]
        down = rng.random() < (0.5 if i == 1 else 0.6)
        levels.append(LEVELS[max(0, LEVEL_INDEX[prev] - 1)] if down else prev)
    positions = []
    cursor = end
    for i, part in enumerate(parts):
        pos_fam, pos_level = fam, levels[i]
        if pos_level not in FAMILIES[fam]["levels"]:
            pos_fam = origin if i >= 2 else fam
            pos_level = _clamp_level(pos_fam, pos_level)
            if pos_fam == fam:
                pos_level = _clamp_level(fam, pos_level)
        if i == 2 and spec["trap"] == "headline_mismatch" and spec["slot"] == "headline_fit":
            pos_fam = spec["headline_family"]
            pos_level = _clamp_level(pos_fam, levels[i])
        positions.append(
            {
                "family": pos_fam,
                "level": pos_level,
                "start": cursor - part,
                "end": cursor,
                "current": i == 0 and gap == 0,
            }
        )
        cursor -= part
    earlier = (end - months, cursor) if listed < months else None
    spec["months"] = max(months, listed)
    return positions, earlier


def _bullets(
    rng: random.Random,
    fam: str,
    lang: str,
    skills: list[str],
    k: int,
    used_templates: set[str],
    used_skills: set[str],
) -> list[str]:
    templates = list(FAMILIES[fam][f"bullets_{lang}"])
    rng.shuffle(templates)
    out: list[str] = []
    for reuse in (False, True):
        for t in templates:
            if len(out) >= k or (reuse and len(out) >= 2):
                break
            if t in used_templates and not reuse:
                continue
            filled = _fill(t, skills, rng, lang, used_skills)
            if filled and filled not in out:
                out.append(filled)
                used_templates.add(t)
    return out


_TERSE_METRICS = {
    "en": (
        "p99 {ms} ms",
        "{rps} rps",
        "{vol}/day",
        "SLA 99.95%",
        "{svc} services",
        "-{pct}% cost",
        "{users} users",
        "{n} teams",
    ),
    "ru": (
        "p99 {ms} мс",
        "{rps} rps",
        "{vol}/сутки",
        "SLA 99,95%",
        "{svc} сервисов",
        "-{pct}% затрат",
        "{users} пользователей",
        "{n} команд",
    ),
}


def _terse_lines(
    rng: random.Random, lang: str, skills: list[str], rare: list[str], k: int, used: set[str]
) -> list[str]:
    lines = []
    for i in range(k):
        metric = _fill(rng.choice(_TERSE_METRICS[lang]), [], rng, lang, set())
        fresh = [s for s in skills if s not in used]
        if len(fresh) < 2:
            fresh = fresh + rng.sample(
                [s for s in skills if s not in fresh],
                k=min(2 - len(fresh), len(skills) - len(fresh)),
            )
        picks = fresh[:2]
        used.update(picks)
        tech = " + ".join(picks)
        if rare and i == 0:
            lines.append(f"{rare[0]}; {tech}; {metric}")
            rare = rare[1:] or rare
        else:
            lines.append(f"{tech}; {metric}")
    return lines


def _summary(rng: random.Random, spec: dict, title: str, lang: str, industry: str) -> str:
    f = FAMILIES[spec["role_family"]]
    years = max(1, round(spec["months"] / 12))
    top = [s for s in spec["skills"][:4]]
    s1, s2, s3 = (top + top + top)[:3] if top else ("", "", "")
    ind_en, ind_ru = INDUSTRIES[industry]
    if lang == "ru":
        text = rng.choice(
            (
                f"{title} с опытом {_ru_years(years)}. Основной стек: {s1}, {s2}, {s3}. "
                f"Специализация — {f['focus_ru']}.",
                f"Более {_ru_years_gen(years)} в IT, "
                f"последние годы — {ind_ru}. Сильные стороны: {s1} и {s2}.",
                f"Занимаюсь направлением «{f['focus_ru']}» уже {_ru_years(years)}. "
                f"Работаю с {s1}, {s2}, {s3}.",
            )
        )
        if spec["twin_of"]:
            text += f" Регулярно участвую в {FAMILIES[spec['twin_of']]['activity_ru']}."
        return text
    text = rng.choice(
        (
            f"{title} with {years} years of experience in {ind_en}. I mostly work with {s1}, {s2} "
            f"and {s3}, focusing on {f['focus_en']}.",
            f"I have been working as a {f['name_en']} for {years} years, most recently in "
            f"{ind_en}. "
            f"Strong in {s1} and {s2}.",
            f"{years}+ years building {f['focus_en']}. Comfortable with {s1}, {s2} and {s3}.",
            f"Hands-on {f['name_en']}: {f['focus_en']}; day-to-day tools are {s1} and {s2}. "
            f"Background in {ind_en}.",
        )
    )
    if spec["twin_of"]:
        text += f" Regularly involved in {FAMILIES[spec['twin_of']]['activity_en']}."
    return text


def _render_resume(seed: int, rid: str, spec: dict) -> dict[str, Any]:
    rng = _rng(seed, "resume", rid)
    lang = spec["language"]
    ref_minutes = _days(rng, 1, 400) if spec["layer"] == "active" else _days(rng, 1100, 2600)
    ref_idx = _month_index(ref_minutes)
    positions, earlier = _positions(rng, spec, ref_idx)
    fam, level = spec["role_family"], spec["level"]
    name = _person(rng, lang if rng.random() < 0.85 else ("en" if lang == "ru" else "ru"))
    if lang == "en" and _CYRILLIC.search(name):
        name = _person(rng, "en")
    if lang == "ru":
        city = rng.choice(REGION_CITIES["russia"] if rng.random() < 0.8 else REGION_CITIES["cis"])
    else:
        city = rng.choice(PHYSICAL_CITIES)
    industry = rng.choice(INDUSTRY_KEYS)
    stack = _stack_of(fam, spec["skills"])
    terse = spec["style"] == "terse"
    bases: dict[str, str] = {}
    employers = list(EMPLOYERS_RU if lang == "ru" else EMPLOYERS_EN)
    rng.shuffle(employers)
    for i, pos in enumerate(positions):
        pf = pos["family"]
        if terse:
            pos["title"] = rng.choice(_alt_titles(pf, lang))
        else:
            if pf not in bases:
                bases[pf] = _title_base(pf, lang, rng, _stack_of(pf, spec["skills"]))
            pos["title"] = _family_title(
                pf, pos["level"], lang, rng, _stack_of(pf, spec["skills"]), bases[pf]
            )
        pos["company"] = employers[i % len(employers)]
    # headline: the newest title, unless this resume's headline is a trap
    if spec["headline_family"]:
        hf = spec["headline_family"]
        headline = _family_title(
            hf, _clamp_level(hf, level), lang, rng, _stack_of(hf, spec["skills"])
        )
    elif terse:
        headline = rng.choice([*_alt_titles(fam, lang), None])
    elif rng.random() < 0.06:
        headline = None
    else:
        headline = positions[0]["title"]
        if rng.random() < 0.35 and len(spec["skills"]) >= 2:
            headline += f" | {spec['skills'][0]}, {spec['skills'][1]}"
    used_templates: set[str] = set()
    used_skills: set[str] = set()
    present = "по настоящее время" if lang == "ru" else "present"
    lines: list[str] = [name]
    if headline:
        lines.append(headline)
    if lang == "ru":
        lines.append(
            rng.choice(
                (
                    f"Город: {_city(city, 'ru')}",
                    f"{_city(city, 'ru')}, готов к переезду",
                    f"{_city(city, 'ru')} · рассматриваю удалённую работу",
                )
            )
        )
    else:
        lines.append(
            rng.choice(
                (
                    f"Location: {city}",
                    f"Based in {city}, open to relocation",
                    f"{city} · open to remote work",
                )
            )
        )
    lines.append("")
    if not terse:
        lines.append(
            rng.choice(("Summary", "Profile", "About me"))
            if lang == "en"
            else rng.choice(("О себе", "Кратко обо мне"))
        )
        lines.append(_summary(rng, spec, positions[0]["title"], lang, industry))
        lines.append("")
        lines.append(
            rng.choice(("Experience", "Work experience", "Professional experience"))
            if lang == "en"
            else "Опыт работы"
        )
    for i, pos in enumerate(positions):
        end = present if pos["current"] else _fmt_month(pos["end"] - 1)
        dates = f"{_fmt_month(pos['start'])} – {end}"
        if terse:
            lines.append(f"{dates} · {pos['company']} · {pos['title']}")
            rare = spec["rare_terms"][i % len(spec["rare_terms"]) :] if i < 2 else []
            lines.extend(
                _terse_lines(rng, lang, spec["skills"], rare, rng.randint(2, 3), used_skills)
            )
        else:
            lines.append(f"{pos['title']} — {pos['company']}")
            lines.append(dates)
            k = rng.randint(3, 4) if i == 0 else 2 if i == 2 else rng.randint(2, 3)
            bullets = _bullets(
                rng, pos["family"], lang, spec["skills"], k, used_templates, used_skills
            )
            if i == 0 and spec["twin_of"]:
                act = FAMILIES[spec["twin_of"]]
                bullets.insert(
                    1,
                    (
                        f"Regularly took part in {act['activity_en']} and wrote parts of the "
                        "technical specifications."
                        if lang == "en"
                        else f"Регулярно участвовал в {act['activity_ru']}, "
                        "писал части технических спецификаций."
                    ),
                )
            lines.extend(f"• {b}" for b in bullets)
        lines.append("")
    if earlier:
        ef = positions[-1]["family"]
        el = LEVELS[max(0, LEVEL_INDEX[positions[-1]["level"]] - 1)]
        et = _family_title(ef, _clamp_level(ef, el), lang, rng, stack)
        if lang == "ru":
            lines.append(
                f"Ранее: {et}, {employers[-1]}, {earlier[0] // 12}–{(earlier[1] - 1) // 12}"
            )
        else:
            lines.append(
                f"Earlier: {et} at {employers[-1]}, {earlier[0] // 12}–{(earlier[1] - 1) // 12}"
            )
        lines.append("")
    shown = list(spec["skills"]) + (list(spec["rare_terms"]) if terse else [])
    rng.shuffle(shown)
    if terse:
        lines.append(("Stack: " if lang == "en" else "Стек: ") + ", ".join(shown))
    else:
        header = (
            rng.choice(("Skills", "Key skills", "Tech stack"))
            if lang == "en"
            else rng.choice(("Навыки", "Ключевые навыки", "Стек"))
        )
        lines.append(f"{header}: {', '.join(shown)}")
    start_year = (positions[-1]["start"] if not earlier else earlier[0]) // 12
    grad = start_year - rng.randint(0, 1)
    if lang == "ru":
        uni, field = rng.choice(UNIVERSITIES_RU)
        lines.append(("Образование: " if not terse else "") + f"{uni}, {field}, {grad}")
        if not terse:
            lines.append(f"Языки: русский — родной, английский — {rng.choice(('B1', 'B2', 'C1'))}")
    else:
        degree, uni = rng.choice(UNIVERSITIES_EN)
        if terse:
            lines.append(f"{degree.split(' in ')[0]}, {uni}, {grad}")
        else:
            lines.append("Education")
            lines.append(f"{degree}, {uni}, {grad}")
            lines.append(f"Languages: English ({rng.choice(('B2', 'C1', 'C2', 'native'))})")
    text = "\n".join(lines).strip() + "\n"
    truth = {
        "name": name,
        "role_family": fam,
        "level": level,
        "years": round(spec["months"] / 12, 1),
        "language": lang,
        "layer": spec["layer"],
        "trap": spec["trap"],
        "skills": list(spec["skills"]),
        "headline_family": spec["headline_family"],
        "recent_titles": [p["title"] for p in positions[:2]],
        "style": spec["style"],
        "rare_terms": list(spec["rare_terms"]),
        "city": city,
        "targets": list(spec["targets"]),
        "planted_as": spec["slot"],
    }
    row = {
        "resume_id": rid,
        "headline": headline,
        "text": text,
        "language": lang,
        "layer": spec["layer"],
        "updated_at": _ts(ref_minutes),
    }
    return {"row": row, "truth": truth}

"""Operations on a role family: titles, main stack, skill picks, bullet slots, level moves."""

from __future__ import annotations

import random
import re

from hltm_devkit.generator.families import (
    COMPANIONS,
    FAMILIES,
    KIND_GROUPS,
    SKILL_KIND,
    STACK_DISPLAY,
)
from hltm_devkit.generator.vocabulary import LEVEL_INDEX, LEVELS


def _family_title(
    fam: str,
    level: str,
    lang: str,
    rng: random.Random,
    stack: str | None = None,
    base: str | None = None,
) -> str:
    f = FAMILIES[fam]
    if base is None:
        options = [t for t in f[lang] if "{stack}" not in t or stack]
        base = rng.choice(options)
    base = base.replace("{stack}", STACK_DISPLAY.get(stack or "", stack or ""))
    if level == "junior":
        prefix = "Junior "
    elif level == "middle":
        prefix = rng.choice(("", "", "Middle "))
    elif level == "senior":
        prefix = "Senior "
    else:
        prefix = (
            rng.choice(("Lead ", "Lead ", "Principal "))
            if lang == "en"
            else rng.choice(("Ведущий ", "Lead "))
        )
    return prefix + base


def _title_base(fam: str, lang: str, rng: random.Random, stack: str | None) -> str:
    options = [t for t in FAMILIES[fam][lang] if "{stack}" not in t or stack]
    return rng.choice(options)


def _stack_of(fam: str, skills: list[str]) -> str | None:
    for s in skills:
        if s in FAMILIES[fam]["primary"] and SKILL_KIND.get(s) in ("lang", "web"):
            return "Flutter" if s == "Dart" and "Flutter" in skills else s
    return None


def _pick_skills(
    rng: random.Random,
    fam: str,
    n: int,
    required: list[str] | tuple[str, ...] = (),
    exclude: list[str] | tuple[str, ...] = (),
    prefer_must: bool = True,
) -> list[str]:
    f = FAMILIES[fam]
    ex = set(exclude)
    out = [s for s in dict.fromkeys(required) if s not in ex]
    if f["primary"] and not any(s in f["primary"] for s in out):
        cands = [s for s in f["primary"] if s not in ex]
        if cands:
            out.append(rng.choice(cands))
    for s in list(out):
        for c in COMPANIONS.get((fam, s), ()):
            if c not in ex and c not in out and rng.random() < 0.8:
                out.append(c)
    must = [s for s in f["must"] if s not in out and s not in ex]
    pool = [s for s in dict.fromkeys(f["pool"]) if s not in out and s not in ex and s not in must]
    rng.shuffle(must)
    rng.shuffle(pool)
    rest = must + pool if prefer_must else pool + must
    if not prefer_must:
        rng.shuffle(rest)
    while len(out) < n and rest:
        out.append(rest.pop(0))
    return out


def _fill(
    template: str, skills: list[str], rng: random.Random, lang: str, used: set[str]
) -> str | None:
    """Fill a bullet template from the resume's own skills; None if a slot can't be filled."""
    values: dict[str, str] = {}
    taken: set[str] = set()
    for slot in dict.fromkeys(re.findall(r"{(\w+)}", template)):
        if slot in _NUMBERS:
            values[slot] = _NUMBERS[slot](rng, lang)
            continue
        kinds = KIND_GROUPS.get(slot, {slot})
        cands = [s for s in skills if SKILL_KIND.get(s) in kinds and s not in taken]
        if not cands:
            return None
        fresh = [s for s in cands if s not in used]
        pick = (fresh or cands)[0] if rng.random() < 0.7 else rng.choice(cands)
        taken.add(pick)
        values[slot] = pick
    used.update(taken)
    return template.format(**values)


def _num(options_en: tuple[str, ...], options_ru: tuple[str, ...] | None = None):  # type: ignore[no-untyped-def]
    return lambda rng, lang: rng.choice(options_ru if (lang == "ru" and options_ru) else options_en)


_NUMBERS = {
    "rps": _num(
        ("2k", "8k", "25k", "60k", "150k"), ("2 тыс.", "8 тыс.", "25 тыс.", "60 тыс.", "150 тыс.")
    ),
    "ms": _num(("5", "12", "40", "80", "150")),
    "pct": lambda rng, lang: str(rng.randint(12, 68)),
    "vol": _num(("300 GB", "2 TB", "18 TB", "120 TB"), ("300 ГБ", "2 ТБ", "18 ТБ", "120 ТБ")),
    "svc": lambda rng, lang: str(rng.randint(8, 60)),
    "n": lambda rng, lang: str(rng.randint(3, 9)),
    "team": lambda rng, lang: str(rng.randint(6, 25)),
    "nodes": lambda rng, lang: str(rng.choice((40, 120, 300, 800))),
    "tests": lambda rng, lang: str(rng.choice((400, 900, 1500, 2600))),
    "users": _num(("1.5M", "3M", "12M", "40M"), ("1,5 млн", "3 млн", "12 млн", "40 млн")),
    "money": _num(
        ("$1.2M", "$300k", "€800k", "€2M"), ("120 млн ₽", "30 млн ₽", "800 тыс. €", "2 млн $")
    ),
}


def _level_shift(fam: str, level: str, delta: int) -> str | None:
    allowed = FAMILIES[fam]["levels"]
    i = LEVEL_INDEX[level] + delta
    if 0 <= i < len(LEVELS) and LEVELS[i] in allowed:
        return LEVELS[i]
    return None


def _clamp_level(fam: str, level: str) -> str:
    allowed = FAMILIES[fam]["levels"]
    if level in allowed:
        return level
    return allowed[0] if LEVEL_INDEX[level] < LEVEL_INDEX[allowed[0]] else allowed[-1]

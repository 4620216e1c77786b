"""Seeded random streams, the fixed clock, Russian numerals and the formatting every part shares."""

from __future__ import annotations

import random
from datetime import datetime, timedelta

from hltm_devkit.generator.vocabulary import (
    CITIES,
    EN_FIRST,
    EN_LAST,
    RU_FIRST_F,
    RU_FIRST_M,
    RU_LAST,
)

BASE_DATE = datetime(2026, 1, 5)


def _rng(seed: int, *parts: object) -> random.Random:
    return random.Random("|".join(["hltm-world", str(seed), *map(str, parts)]))


def _ts(minutes_before: int) -> str:
    return (BASE_DATE - timedelta(minutes=max(0, int(minutes_before)))).isoformat(
        timespec="seconds"
    )


def _days(rng: random.Random, lo: float, hi: float) -> int:
    """A random offset in minutes between lo and hi days."""
    return int(rng.uniform(lo, hi) * 1440)


def _month_index(minutes_before: int) -> int:
    d = BASE_DATE - timedelta(minutes=minutes_before)
    return d.year * 12 + d.month - 1


def _fmt_month(idx: int) -> str:
    return f"{idx // 12:04d}-{idx % 12 + 1:02d}"


def _ru_years(n: int) -> str:
    if n % 10 == 1 and n % 100 != 11:
        word = "год"
    elif n % 10 in (2, 3, 4) and n % 100 not in (12, 13, 14):
        word = "года"
    else:
        word = "лет"
    return f"{n} {word}"


def _ru_years_gen(n: int) -> str:
    return f"{n} года" if n % 10 == 1 and n % 100 != 11 else f"{n} лет"


def _ru_from_years(n: int) -> str:
    return f"от {n} года" if n == 1 else f"от {n} лет"


def _join(items: list[str], lang: str, word: str | None = None) -> str:
    word = word or ("or" if lang == "en" else "или")
    if not items:
        return ""
    if len(items) == 1:
        return items[0]
    return ", ".join(items[:-1]) + f" {word} " + items[-1]


def _city(name: str, lang: str, rng: random.Random | None = None) -> str:
    region, ru, aliases = CITIES[name]
    if lang == "ru":
        return ru
    if rng is not None and aliases and rng.random() < 0.35:
        return rng.choice(aliases)
    return name


def _region_of(city: str) -> str:
    return CITIES[city][0]


def _person(rng: random.Random, lang: str) -> str:
    if lang == "ru":
        if rng.random() < 0.5:
            return f"{rng.choice(RU_FIRST_M)} {rng.choice(RU_LAST)}"
        last = rng.choice(RU_LAST)
        return f"{rng.choice(RU_FIRST_F)} {last}а"
    return f"{rng.choice(EN_FIRST)} {rng.choice(EN_LAST)}"


def _weighted(rng: random.Random, options: tuple[str, ...], weights: tuple[float, ...]) -> str:
    return rng.choices(options, weights=weights, k=1)[0]


def _other(rng: random.Random, options: tuple[str, ...], current: str) -> str:
    return rng.choice([o for o in options if o != current])

"""Free-text facts in several phrasings per language (no machine markers), and rejection reasons."""

from __future__ import annotations

import random

from hltm_devkit.generator.families import FAMILIES
from hltm_devkit.generator.helpers import _city, _join, _ru_from_years
from hltm_devkit.generator.vocabulary import (
    INDUSTRIES,
    INTERVIEW_STEPS,
    LEVEL_INDEX,
    YEARS_REQUIRED,
)

LEVEL_RU_NOUN = {"junior": "джун", "middle": "мидл", "senior": "сеньор", "lead": "лид"}


def _s_intro(rng: random.Random, lang: str, p: dict, company: str) -> str:
    title, team = p["title"], (p["team"] if lang == "en" else p["team_ru"])
    if p["team"] in title or p["team_ru"] in title:
        if lang == "ru":
            return rng.choice(
                (
                    f"Вакансия: {title}, компания {company}.",
                    f"{company} открывает позицию {title}.",
                    f"Ищем человека на позицию {title} в {company}.",
                )
            )
        return rng.choice(
            (
                f"{company} is hiring a {title}.",
                f"We are looking for a {title}.",
                f"Join {company} as a {title}.",
            )
        )
    if lang == "ru":
        return rng.choice(
            (
                f"Вакансия: {title} в команду «{team}» компании {company}.",
                f"Открыта позиция {title} (команда «{team}»).",
                f"Мы в {company} расширяем команду «{team}» и ищем человека на позицию {title}.",
            )
        )
    return rng.choice(
        (
            f"{company} is hiring a {title} for its {team} team.",
            f"We are looking for a {title} to join the {team} team at {company}.",
            f"Join {company} as a {title} in the {team} team.",
        )
    )


def _s_industry(rng: random.Random, lang: str, industry: str, company: str) -> str:
    en, ru = INDUSTRIES[industry]
    if lang == "ru":
        return rng.choice(
            (f"Наша отрасль — {ru}.", f"{company} работает в сфере «{ru}».", f"Домен: {ru}.")
        )
    return rng.choice(
        (f"{company} builds products in {en}.", f"We work in {en}.", f"Our domain is {en}.")
    )


def _s_seniority(rng: random.Random, lang: str, level: str, fam: str) -> str:
    f = FAMILIES[fam]
    if lang == "ru":
        return rng.choice(
            (
                f"Уровень позиции — {level}.",
                f"Ищем специалиста уровня {level.capitalize()}.",
                f"Нужен {LEVEL_RU_NOUN[level]}: {f['name_ru']} уровня {level}.",
            )
        )
    return rng.choice(
        (
            f"This is a {level}-level position.",
            f"We need a {level} {f['name_en']}.",
            f"The level we are targeting is {level}.",
            f"Seniority: {level.capitalize()}.",
        )
    )


def _s_years(rng: random.Random, lang: str, level: str, fam: str) -> str:
    y = YEARS_REQUIRED[level]
    f = FAMILIES[fam]
    if lang == "ru":
        return rng.choice(
            (
                f"Опыт {f['role_ru']} — {_ru_from_years(y)}.",
                f"Нужен опыт {f['role_ru']} {_ru_from_years(y)}.",
                f"Ждём {_ru_from_years(y)} опыта {f['role_ru']}.",
            )
        )
    return rng.choice(
        (
            f"At least {y} years of {f['role_en']}.",
            f"{y}+ years of hands-on {f['role_en']}.",
            f"You have {y} or more years of {f['role_en']} behind you.",
        )
    )


def _s_location(rng: random.Random, lang: str, cities: list[str]) -> str:
    names = [_city(c, lang, rng) for c in cities]
    if lang == "ru":
        joined = _join(names, "ru")
        return rng.choice(
            (
                f"Локация: {joined}.",
                f"Город — {joined}.",
                f"Рассматриваем кандидатов из локаций: {', '.join(names)}.",
            )
        )
    joined = _join(names, "en")
    return rng.choice(
        (
            f"The role is based in {joined}.",
            f"Location: {joined}.",
            f"We hire in {joined}.",
            f"Candidates should be located in {joined}.",
        )
    )


def _s_work_mode(rng: random.Random, lang: str, mode: str, office_days: int) -> str:
    d = office_days
    options = {
        ("en", "remote"): (
            "The position is fully remote.",
            "Remote-first: no office attendance required.",
            "You can work from home; the whole team is distributed.",
            "Work format: remote.",
        ),
        ("en", "hybrid"): (
            f"Hybrid setup: {d} days a week in the office.",
            f"We work in a hybrid mode and meet in the office {d} days a week.",
            "The team is hybrid, with office days on Tuesdays and Thursdays.",
        ),
        ("en", "onsite"): (
            "This is an on-site role in our office.",
            "Office-based, five days a week.",
            "Remote work is not an option here; the team sits together in the office.",
        ),
        ("ru", "remote"): (
            "Формат работы — полностью удалённый.",
            "Работа удалённая, в офис приезжать не нужно.",
            "Удалёнка, команда распределённая.",
        ),
        ("ru", "hybrid"): (
            f"Гибридный формат: {d} дня в неделю в офисе.",
            "Гибрид — часть недели в офисе, часть дома.",
            f"Работаем в гибридном режиме, в офисе бываем {d} дня в неделю.",
        ),
        ("ru", "onsite"): (
            "Работа в офисе, удалённый формат не рассматривается.",
            "Только офис, пять дней в неделю.",
            "Формат — офис, команда сидит вместе.",
        ),
    }
    return rng.choice(options[(lang, mode)])


def _s_employment(rng: random.Random, lang: str, emp: str, months: int, hours: int) -> str:
    options = {
        ("en", "full-time"): (
            "Full-time, permanent employment.",
            "This is a full-time position.",
            "We hire on a permanent full-time contract.",
        ),
        ("en", "contract"): (
            f"This is a contract role (B2B) for {months} months with a possible extension.",
            f"Engagement: contractor, {months}-month contract.",
            f"We are looking for a contractor, initially for {months} months.",
        ),
        ("en", "part-time"): (
            f"Part-time, about {hours} hours a week.",
            f"This is a part-time role ({hours} h/week).",
            f"Half-time engagement is fine: around {hours} hours per week.",
        ),
        ("ru", "full-time"): (
            "Полная занятость, оформление в штат.",
            "Занятость — полная.",
            "Работа на полный день, трудовой договор.",
        ),
        ("ru", "contract"): (
            f"Проектная работа по договору на {months} мес. с возможностью продления.",
            f"Оформление по договору ГПХ или как ИП, проект на {months} мес.",
            f"Контракт на {months} месяцев.",
        ),
        ("ru", "part-time"): (
            f"Частичная занятость, около {hours} часов в неделю.",
            f"Неполный день: {hours} ч в неделю.",
            f"Парт-тайм, примерно {hours} часов в неделю.",
        ),
    }
    return rng.choice(options[(lang, emp)])


def _money(amount: int, currency: str, lang: str) -> str:
    if lang == "ru":
        text = f"{amount:,}".replace(",", " ")
        return f"{text} {'₽' if currency == 'RUB' else '€' if currency == 'EUR' else '$'}"
    sym = {"EUR": "€", "USD": "$", "RUB": "₽"}[currency]
    text = f"{amount:,}"
    return f"{text} {sym}" if currency == "RUB" else f"{sym}{text}"


def _s_salary(rng: random.Random, lang: str, sal: dict) -> str:
    lo, hi, cur, per = sal["min"], sal["max"], sal["currency"], sal["period"]
    a, b = _money(lo, cur, lang), _money(hi, cur, lang)
    if lang == "ru":
        period = {"month": "в месяц", "year": "в год", "day": "в день", "hour": "в час"}[per]
        return rng.choice(
            (
                f"Вилка: от {a} до {b} {period}.",
                f"Бюджет — {a}–{b} {period}.",
                f"Готовы платить до {b} {period}, нижняя граница — {a}.",
            )
        )
    period = {"month": "per month", "year": "per year", "day": "per day", "hour": "per hour"}[per]
    k = 1000 if lo >= 10_000 else 1
    short = f"{lo // k}–{hi // k}{'k' if k > 1 else ''} {cur}"
    return rng.choice(
        (
            f"Salary band: {a}–{b} {period}.",
            f"We can offer {short} {period} (gross).",
            f"The budget is up to {b} {period}, starting from {a}.",
        )
    )


def _s_skills(rng: random.Random, lang: str, musts: list[str], nice: list[str]) -> str:
    m = _join(musts, lang, "and" if lang == "en" else "и")
    n = ", ".join(nice) if nice else ""
    if lang == "ru":
        options = [
            f"Ключевые навыки: {', '.join(musts)}.",
            f"Без {musts[0]} не рассматриваем; также важно: {', '.join(musts[1:]) or musts[0]}.",
            f"Стек: {', '.join(musts + nice)}.",
        ]
        if n:
            options.append(f"Обязательно: {m}. Будет плюсом: {n}.")
        return rng.choice(options)
    options = [
        f"Key skills: {', '.join(musts)}.",
        f"You should be strong in {m}.",
        f"Our stack is {', '.join(musts + nice)}; {musts[0]} is a must.",
    ]
    if n:
        options.append(f"Must-have: {m}. Nice to have: {n}.")
    return rng.choice(options)


def _s_interview(rng: random.Random, lang: str, steps: list[str]) -> str:
    idx = 0 if lang == "en" else 1
    names = [INTERVIEW_STEPS[s][idx] for s in steps]
    if lang == "ru":
        word = "этапа" if len(names) in (2, 3, 4) else "этапов"
        return rng.choice(
            (
                f"Этапы собеседования: {' → '.join(names)}.",
                f"Процесс найма: {', '.join(names)}.",
                f"У нас {len(names)} {word}: {', '.join(names)}.",
            )
        )
    return rng.choice(
        (
            f"The interview process: {' → '.join(names)}.",
            f"Interview steps: {', then '.join(names[:-1])}, and finally {names[-1]}.",
            f"We run {len(names)} stages: {', '.join(names)}.",
            f"Expect {_join(names, 'en', 'and')}, usually within two weeks.",
        )
    )


def _reason_text(rng: random.Random, lang: str, code: str, p: dict) -> str:
    kind, _, arg = code.partition(":")
    want_en = FAMILIES[p["role_family"]]["name_en"]
    want_ru = FAMILIES[p["role_family"]]["name_ru"]
    if kind == "role":
        got_en, got_ru = FAMILIES[arg]["name_en"], FAMILIES[arg]["name_ru"]
        if lang == "ru":
            return rng.choice(
                (
                    f"Не тот профиль: по факту {got_ru}, а нужен {want_ru}",
                    f"Последние места работы — {got_ru}, не {want_ru}",
                    f"Заголовок резюме не совпадает с опытом: это {got_ru}",
                )
            )
        return rng.choice(
            (
                f"Wrong role: the experience is as a {got_en}, not a {want_en}",
                f"Recent positions are {got_en} work, we need a {want_en}",
                f"Keyword match only; actually a {got_en}",
            )
        )
    texts = {
        "level:low": (
            (
                "Too junior for the scope",
                "Not enough experience for this level",
                "Level is below what the team needs",
            ),
            (
                "Уровень ниже нужного",
                "Недостаточно опыта для этого уровня",
                "Слабоват для задач команды",
            ),
        ),
        "level:high": (
            (
                "Overqualified for the role",
                "Too senior; would be bored quickly",
                "Expects a lead role we don't have",
            ),
            (
                "Слишком высокий уровень для задачи",
                "Переквалифицирован",
                "Хочет лидскую роль, которой нет",
            ),
        ),
        "salary": (
            (
                "Salary expectations above the band",
                "Asked well above our budget",
                "Compensation mismatch",
            ),
            ("Зарплатные ожидания выше вилки", "Просит больше бюджета", "Не сошлись по деньгам"),
        ),
        "relocation": (
            (
                "Not willing to relocate",
                "Relocation is not an option for the candidate",
                "Wants to stay in the current city",
            ),
            ("Не готов к переезду", "Переезд не рассматривает", "Хочет остаться в своём городе"),
        ),
        "notice": (
            ("Three-month notice period", "Cannot start before the spring", "Long notice period"),
            (
                "Уведомление за три месяца",
                "Может выйти только весной",
                "Долгий выход с текущего места",
            ),
        ),
        "counter_offer": (
            ("Accepted a counter-offer", "Stayed with the current employer", "Took another offer"),
            ("Принял контроффер", "Остался у текущего работодателя", "Принял другой оффер"),
        ),
        "work_mode": (
            (
                "Wants a different work format",
                "Only interested in fully remote roles",
                "Does not want to come to the office",
            ),
            (
                "Не подходит формат работы",
                "Рассматривает только удалёнку",
                "Не готов ходить в офис",
            ),
        ),
    }
    if kind == "skill":
        if lang == "ru":
            return rng.choice(
                (
                    f"Нет практического опыта с {arg}",
                    f"{arg} знает только по курсам",
                    f"Не хватает {arg} в продакшене",
                )
            )
        return rng.choice(
            (
                f"No hands-on {arg}",
                f"{arg} only from courses, not production",
                f"Missing production experience with {arg}",
            )
        )
    en, ru = texts[code]
    return rng.choice(ru if lang == "ru" else en)


def _miss_reason(v: dict, r: dict, rng: random.Random) -> str:
    if r["role_family"] != v["role_family"]:
        return f"role:{r['role_family']}"
    gap = LEVEL_INDEX[r["level"]] - LEVEL_INDEX[v["level"]]
    missing = [s for s in v["must_have_skills"] if s not in r["skills"]]
    if missing and (gap == 0 or rng.random() < 0.5):
        return f"skill:{missing[0]}"
    if gap < 0:
        return "level:low"
    if gap > 0:
        return "level:high"
    return rng.choice(("salary", "relocation", "notice"))

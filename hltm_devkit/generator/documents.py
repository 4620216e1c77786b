"""Recruiter actions on a project, and the documents and vacancy texts written from the facts."""

from __future__ import annotations

import random
from datetime import timedelta

from hltm_devkit.generator.families import FAMILIES
from hltm_devkit.generator.helpers import BASE_DATE, _city, _rng
from hltm_devkit.generator.labels import label_pair
from hltm_devkit.generator.sentences import (
    _miss_reason,
    _reason_text,
    _s_employment,
    _s_industry,
    _s_interview,
    _s_intro,
    _s_location,
    _s_salary,
    _s_seniority,
    _s_skills,
    _s_work_mode,
    _s_years,
)
from hltm_devkit.generator.vocabulary import INDUSTRIES, INTERVIEW_STEPS


def _project_actions(
    seed: int,
    p: dict,
    pseudo: dict,
    labelled: list[tuple[str, str]] | None,
    resumes: dict[str, dict],
    by_family: dict[str, list[str]],
    all_active: list[str],
) -> list[dict]:
    rng = _rng(seed, "actions", p["project_id"])
    layers_ok = ("active", "archive") if p["status"] == "closed" else ("active",)
    if labelled:
        picks = rng.sample(labelled, k=min(len(labelled), rng.randint(6, 10)))
        cands = [(rid, lab) for rid, lab in picks]
    else:
        same = [r for r in by_family.get(p["role_family"], []) if resumes[r]["layer"] in layers_ok]
        chosen = rng.sample(same, k=min(len(same), rng.randint(2, 4)))
        chosen += rng.sample(all_active, k=min(len(all_active), rng.randint(1, 2)))
        chosen = list(dict.fromkeys(chosen))
        cands = [(rid, label_pair(pseudo, resumes[rid])) for rid in chosen]
    created, updated = p["created_minutes_before"], p["updated_minutes_before"]
    window = max(60, created - updated)
    events = []
    for rid, lab in cands:
        r = resumes[rid]
        t0 = created - int(window * rng.uniform(0.02, 0.6))
        seq: list[tuple[str, str | None]] = [("viewed", None)]
        if lab == "fit":
            if rng.random() < 0.85:
                seq.append(("messaged", None))
                if rng.random() < 0.8:
                    seq.append(("advanced", None))
                else:
                    seq.append(
                        (
                            "rejected",
                            rng.choice(
                                ("salary", "notice", "counter_offer", "relocation", "work_mode")
                            ),
                        )
                    )
            else:
                seq.append(("saved", None))
        elif lab == "borderline":
            seq.append(("saved", None))
            if rng.random() < 0.55:
                seq.append(("rejected", _miss_reason(pseudo, r, rng)))
            elif rng.random() < 0.5:
                seq.append(("messaged", None))
        elif rng.random() < 0.85:
            seq.append(("rejected", _miss_reason(pseudo, r, rng)))
        t = t0
        for action, code in seq:
            lang = p["language"] if rng.random() < 0.85 else "en"
            events.append(
                {
                    "project_id": p["project_id"],
                    "resume_id": rid,
                    "action": action,
                    "reason": _reason_text(rng, lang, code, p) if code else None,
                    "_code": code,
                    "_minutes": max(updated, t),
                    "_label": lab,
                }
            )
            t -= int(window * rng.uniform(0.02, 0.15))
    events.sort(key=lambda e: (-e["_minutes"], e["resume_id"], ACTION_ORDER.index(e["action"])))
    return events


ACTION_ORDER = ("viewed", "saved", "messaged", "advanced", "rejected")


def _fmt_date(minutes_before: int, lang: str) -> str:
    d = BASE_DATE - timedelta(minutes=minutes_before)
    if lang == "ru":
        return d.strftime("%d.%m.%Y")
    return d.strftime("%d %b %Y").lstrip("0")


def _doc_job_description(rng: random.Random, lang: str, p: dict, company: str) -> str:
    f = FAMILIES[p["role_family"]]
    musts = p["key_skills"][:3]
    nice = p["key_skills"][3:5]
    intro = [_s_intro(rng, lang, p, company), _s_industry(rng, lang, p["industry"], company)]
    resp = list(f["resp_ru" if lang == "ru" else "resp_en"])
    rng.shuffle(resp)
    req = [
        _s_seniority(rng, lang, p["seniority"], p["role_family"]),
        _s_years(rng, lang, p["seniority"], p["role_family"]),
        _s_skills(rng, lang, musts, nice),
    ]
    cond = [
        _s_location(rng, lang, p["locations"]),
        _s_work_mode(rng, lang, p["work_mode"], p["office_days"]),
        _s_employment(rng, lang, p["employment_type"], p["contract_months"], p["part_time_hours"]),
        _s_salary(rng, lang, p["salary"]),
    ]
    rng.shuffle(cond)
    if lang == "ru":
        parts = [
            " ".join(intro),
            "Задачи:\n" + "\n".join(f"- {r}" for r in resp[:3]),
            "Что важно: " + " ".join(req),
            "Условия: " + " ".join(cond),
            _s_interview(rng, lang, p["interview_steps"]),
        ]
    else:
        parts = [
            " ".join(intro),
            "What you will do:\n" + "\n".join(f"- {r}" for r in resp[:3]),
            "What we expect: " + " ".join(req),
            " ".join(cond),
            _s_interview(rng, lang, p["interview_steps"]),
        ]
    return "\n\n".join(parts) + "\n"


def _doc_intake(rng: random.Random, lang: str, p: dict, minutes: int) -> str:
    mgr = p["hiring_manager"]
    date = _fmt_date(minutes, lang)
    hc = int(p["headcount"])
    if lang == "ru":
        head = rng.choice(
            (
                f"Интейк с нанимающим менеджером ({mgr}), {date}.",
                f"Встреча с нанимающим менеджером по вакансии ({mgr}), {date}.",
                f"Заметки по интейку, {date}, нанимающий менеджер — {mgr}.",
            )
        )
        why = rng.choice(("команда растёт", "замена ушедшего сотрудника", "запуск нового продукта"))
        facts = [
            f"Почему открыта позиция: {why}.",
            f"Нужно нанять: {hc} чел." if hc > 1 else "Нанимаем одного человека.",
            _s_seniority(rng, lang, p["seniority"], p["role_family"]),
            _s_skills(rng, lang, p["key_skills"][:2], p["key_skills"][2:4]),
        ]
        deal = rng.choice(
            (
                "частая смена работы (меньше года на месте)",
                "нет опыта в продакшене",
                "только аутсорс в последние годы",
            )
        )
        tail = f"Стоп-факторы: {deal}."
    else:
        head = rng.choice(
            (
                f"Intake call with {mgr} (hiring manager), {date}.",
                f"Notes from the intake meeting with {mgr} on {date}.",
                f"Hiring manager intake, {date}. Attendees: {mgr}, recruiter.",
            )
        )
        why = rng.choice(
            (
                "the team is growing",
                "backfill for someone who left",
                "a new product line is starting",
            )
        )
        facts = [
            f"Why the role is open: {why}.",
            f"Headcount: {hc}."
            if rng.random() < 0.5
            else (f"We need {hc} people." if hc > 1 else "One hire."),
            _s_seniority(rng, lang, p["seniority"], p["role_family"]),
            _s_skills(rng, lang, p["key_skills"][:2], p["key_skills"][2:4]),
        ]
        deal = rng.choice(
            (
                "job hopping (less than a year per company)",
                "no production experience",
                "only agency/outsourcing work recently",
            )
        )
        tail = f"Deal-breakers: {deal}."
    facts += [
        _s_location(rng, lang, p["locations"]),
        _s_work_mode(rng, lang, p["work_mode"], p["office_days"]),
        _s_employment(rng, lang, p["employment_type"], p["contract_months"], p["part_time_hours"]),
    ]
    if rng.random() < 0.8:
        facts.append(_s_salary(rng, lang, p["salary"]))
    if rng.random() < 0.7:
        facts.append(_s_interview(rng, lang, p["interview_steps"]))
    rng.shuffle(facts)
    return head + "\n" + "\n".join(f"- {x}" for x in facts) + "\n" + tail + "\n"


def _doc_recruiter_notes(
    rng: random.Random, lang: str, p: dict, actions: list[dict], minutes: int
) -> str:
    viewed = sum(1 for a in actions if a["action"] == "viewed")
    messaged = sum(1 for a in actions if a["action"] == "messaged")
    advanced = sum(1 for a in actions if a["action"] == "advanced")
    extra = rng.randint(10, 60)
    codes = [a["_code"] for a in actions if a["_code"]]
    top = sorted(set(codes), key=lambda c: (-codes.count(c), c))[:3]
    reasons = [_reason_text(rng, lang, c, p).lower() for c in top]
    date = _fmt_date(minutes, lang)
    city = _city(p["locations"][0], lang)
    if lang == "ru":
        lines = [
            rng.choice(
                (
                    f"Статус поиска на {date}.",
                    f"Заметки рекрутера, {date}.",
                    f"Апдейт по сорсингу ({date}).",
                )
            )
        ]
        lines.append(
            f"Просмотрено {viewed + extra} профилей, написали {messaged + extra // 4}, "
            f"на интервью — {advanced}."
        )
        if reasons:
            lines.append("Чаще всего отказываем по причинам: " + "; ".join(reasons) + ".")
        lines.append(
            rng.choice(
                (
                    f"Кандидаты не из локации {city} — только с релокацией.",
                    f"Приоритет — кандидаты, которые уже живут в локации «{city}».",
                    _s_location(rng, lang, p["locations"]),
                )
            )
        )
        lines.append(_s_work_mode(rng, lang, p["work_mode"], p["office_days"]))
        if rng.random() < 0.5:
            lines.append(_s_salary(rng, lang, p["salary"]))
        lines.append(
            rng.choice(
                (
                    f"Менеджер хочет людей из отрасли: {INDUSTRIES[p['industry']][1]}.",
                    "Ищем через LinkedIn, hh.ru и рекомендации.",
                    "Хорошо отвечают кандидаты из продуктовых компаний.",
                )
            )
        )
    else:
        lines = [
            rng.choice(
                (
                    f"Sourcing update, {date}.",
                    f"Recruiter notes as of {date}.",
                    f"Pipeline status ({date}).",
                )
            )
        ]
        lines.append(
            f"Reviewed {viewed + extra} profiles, messaged {messaged + extra // 4}, "
            f"{advanced} moved to interviews."
        )
        if reasons:
            lines.append("Most common rejection reasons so far: " + "; ".join(reasons) + ".")
        lines.append(
            rng.choice(
                (
                    f"Candidates outside {city} only if they relocate.",
                    f"Priority goes to people already in {city}.",
                    _s_location(rng, lang, p["locations"]),
                )
            )
        )
        lines.append(_s_work_mode(rng, lang, p["work_mode"], p["office_days"]))
        if rng.random() < 0.5:
            lines.append(_s_salary(rng, lang, p["salary"]))
        lines.append(
            rng.choice(
                (
                    f"The hiring manager prefers people with a {INDUSTRIES[p['industry']][0]} "
                    "background.",
                    "Sourcing on LinkedIn, referrals and our own database.",
                    "Product-company candidates respond best.",
                )
            )
        )
    return "\n".join(lines) + "\n"


def _doc_feedback(
    rng: random.Random, lang: str, p: dict, actions: list[dict], names: dict[str, str], minutes: int
) -> str:
    decided = {}
    for a in actions:
        if a["action"] in ("advanced", "rejected"):
            decided[a["resume_id"]] = a
    items = sorted(decided.values(), key=lambda a: a["resume_id"])[:4]
    steps = p["interview_steps"]
    idx = 0 if lang == "en" else 1
    date = _fmt_date(minutes, lang)
    lines = [
        rng.choice(
            (
                f"Interview feedback, {date}.",
                f"Candidate feedback summary ({date}).",
                f"Feedback from the panel, {date}.",
            )
        )
        if lang == "en"
        else rng.choice(
            (
                f"Обратная связь по кандидатам, {date}.",
                f"Фидбек с интервью ({date}).",
                f"Итоги собеседований на {date}.",
            )
        )
    ]
    for a in items:
        name = names[a["resume_id"]]
        step = INTERVIEW_STEPS[rng.choice(steps[1:] or steps)][idx]
        if a["action"] == "advanced":
            lines.append(
                f"{name}: moved on to the {step}; strong match."
                if lang == "en"
                else f"{name}: проходит дальше, следующий этап — {step}."
            )
        else:
            reason = _reason_text(rng, lang, a["_code"], p)
            lines.append(
                f"{name}: rejected after the {step}. {reason}."
                if lang == "en"
                else f"{name}: отказ после этапа «{step}». {reason}."
            )
    if len(lines) == 1:
        lines.append(
            "No decisions yet; first interviews are scheduled."
            if lang == "en"
            else "Решений пока нет, первые интервью назначены."
        )
    lines.append(_s_interview(rng, lang, steps))
    return "\n".join(lines) + "\n"


def _vacancy_text(rng: random.Random, v: dict, reqs: list[dict], p: dict, company: str) -> str:
    lang = v["language"]
    f = FAMILIES[v["role_family"]]
    resp = list(f["resp_ru" if lang == "ru" else "resp_en"])
    rng.shuffle(resp)
    must = [r["text"] for r in reqs if r["mandatory"]]
    nice = [r["text"] for r in reqs if not r["mandatory"]]
    cond = [
        _s_location(rng, lang, v["locations"]),
        _s_work_mode(rng, lang, v["work_mode"], p["office_days"]),
        _s_employment(rng, lang, v["employment_type"], p["contract_months"], p["part_time_hours"]),
        _s_salary(rng, lang, p["salary"]),
    ]
    pv = dict(p, title=v["title"])
    if lang == "ru":
        parts = [
            v["title"],
            _s_intro(rng, lang, pv, company) + " " + _s_industry(rng, lang, p["industry"], company),
            "Чем предстоит заниматься:\n" + "\n".join(f"- {r}" for r in resp[:3]),
            "Требования:\n" + "\n".join(f"- {r}" for r in must),
        ]
        if nice:
            parts.append("Будет плюсом:\n" + "\n".join(f"- {r}" for r in nice))
        parts.append("Условия: " + " ".join(cond))
    else:
        parts = [
            v["title"],
            _s_intro(rng, lang, pv, company) + " " + _s_industry(rng, lang, p["industry"], company),
            "What you will do:\n" + "\n".join(f"- {r}" for r in resp[:3]),
            "Requirements:\n" + "\n".join(f"- {r}" for r in must),
        ]
        if nice:
            parts.append("Nice to have:\n" + "\n".join(f"- {r}" for r in nice))
        parts.append("Conditions: " + " ".join(cond))
    parts.append(_s_interview(rng, lang, p["interview_steps"]))
    return "\n\n".join(parts) + "\n"

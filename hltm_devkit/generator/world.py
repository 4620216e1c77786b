"""Assembles the world from its parts and writes the source tables and the ground truth."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from hltm.sources.schema import TABLES
from hltm_devkit.generator.documents import (
    _doc_feedback,
    _doc_intake,
    _doc_job_description,
    _doc_recruiter_notes,
    _project_actions,
    _vacancy_text,
)
from hltm_devkit.generator.helpers import BASE_DATE, _days, _rng, _ts, _weighted
from hltm_devkit.generator.labels import _select_labels, label_pair
from hltm_devkit.generator.resumes import _plan_resumes, _render_resume
from hltm_devkit.generator.tenancy import (
    _build_contracts,
    _build_seats,
    _project_attrs,
    _project_timing,
    _similar_title_groups,
)
from hltm_devkit.generator.vacancies import (
    _build_vacancy,
    _choose_vacancy_projects,
    _finish_requirements,
)
from hltm_devkit.sizes import SIZES, WorldSize

GENERATOR_VERSION = 1

OTHER_DOC_KINDS = ("intake_notes", "recruiter_notes", "candidate_feedback")
DOC_SUFFIX = {
    "job_description": "jd",
    "intake_notes": "intake",
    "recruiter_notes": "notes",
    "candidate_feedback": "feedback",
}


def _public(d: dict) -> dict:
    return {
        k: v for k, v in d.items() if not k.startswith("_") and not k.endswith("minutes_before")
    }


def generate_world(out_dir: Path | str, seed: int = 7, size: WorldSize | str = WorldSize()) -> dict:
    """Write one `<table>.jsonl` per source table plus `ground_truth.json` into `out_dir`.

    Returns the number of rows written per table. Same seed and size → byte-identical files.
    """
    if isinstance(size, str):
        size = SIZES[size]
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)

    contracts = _build_contracts(seed, size)
    contract_by_id = {c["contract_id"]: c for c in contracts}
    seats = _build_seats(seed, size, contracts)
    projects: list[dict] = []
    for seat in seats:
        for k in range(size.projects_per_seat):
            pid = f"{seat['seat_id']}-p{k + 1:03d}"
            projects.append(_project_attrs(seed, pid, seat, contract_by_id[seat["contract_id"]]))
    project_by_id = {p["project_id"]: p for p in projects}
    groups = _similar_title_groups(seed, projects, contracts)

    # vacancies: chosen projects, with both languages represented
    vac_projects = _choose_vacancy_projects(seed, size.vacancies, projects) if projects else []
    langs = {p["language"] for p in vac_projects}
    if "ru" not in langs:
        ru_side = [p for p in vac_projects if contract_by_id[p["contract_id"]]["language"] == "ru"]
        if ru_side:
            ru_side[0]["language"] = "ru"
    if "en" not in {p["language"] for p in vac_projects} and vac_projects:
        vac_projects[-1]["language"] = "en"
    vacancies: list[dict] = []
    repeats: dict[str, int] = {}
    for i, p in enumerate(vac_projects):
        vid = f"v{i + 1:03d}"
        rep = repeats.get(p["project_id"], 0)
        repeats[p["project_id"]] = rep + 1
        vacancies.append(_build_vacancy(seed, vid, p, rep))
    for lang in ("en", "ru"):
        first = next((v for v in vacancies if v["language"] == lang), None)
        if first:
            first["_formal"] = True
    first_formal = next((v for v in vacancies if v["_formal"]), None)
    if first_formal:
        first_formal["_formal_mandatory"] = True
    requirements: list[dict] = []
    for v in vacancies:
        requirements += _finish_requirements(seed, v)

    # status and timing; projects with a vacancy are open
    vacancy_projects = {v["project_id"] for v in vacancies}
    for p in projects:
        prng = _rng(seed, "project-status", p["project_id"])
        status = _weighted(prng, ("open", "paused", "closed"), (0.3, 0.15, 0.55))
        if p["project_id"] in vacancy_projects:
            status = "open"
        p["status"] = status
        p["created_minutes_before"], p["updated_minutes_before"] = _project_timing(prng, status)

    # resumes
    specs = _plan_resumes(seed, size, vacancies)
    width = max(4, len(str(len(specs))))
    resume_rows: list[dict] = []
    resume_truth: dict[str, dict] = {}
    for i, spec in enumerate(specs):
        rid = f"r{i + 1:0{width}d}"
        rendered = _render_resume(seed, rid, spec)
        resume_rows.append(rendered["row"])
        resume_truth[rid] = rendered["truth"]
    active = [rid for rid, t in resume_truth.items() if t["layer"] == "active"]
    by_family: dict[str, list[str]] = {}
    for rid, t in resume_truth.items():
        by_family.setdefault(t["role_family"], []).append(rid)

    # labels (golden pairs come from the active layer: what a normal pool can contain)
    labels: list[dict] = []
    for v in vacancies:
        labels += _select_labels(seed, v, active, resume_truth)
    labelled: dict[str, list[tuple[str, str]]] = {}
    vac_by_project: dict[str, list[dict]] = {}
    for v in vacancies:
        vac_by_project.setdefault(v["project_id"], []).append(v)
    for lab in labels:
        pid = next(v["project_id"] for v in vacancies if v["vacancy_id"] == lab["vacancy_id"])
        labelled.setdefault(pid, []).append((lab["resume_id"], lab["label"]))

    # recruiter actions
    actions: list[dict] = []
    actions_by_project: dict[str, list[dict]] = {}
    for p in projects:
        vs = vac_by_project.get(p["project_id"])
        pseudo = (
            vs[0]
            if vs
            else {
                "role_family": p["role_family"],
                "level": p["seniority"],
                "must_have_skills": p["key_skills"][:2],
            }
        )
        pairs = list(dict.fromkeys(labelled.get(p["project_id"], []))) or None
        evs = _project_actions(seed, p, pseudo, pairs, resume_truth, by_family, active)
        actions_by_project[p["project_id"]] = evs
        actions += evs
    a_width = max(5, len(str(len(actions))))
    for i, a in enumerate(actions):
        a["action_id"] = f"a{i + 1:0{a_width}d}"

    # documents
    names = {rid: t["name"] for rid, t in resume_truth.items()}
    documents: list[dict] = []
    doc_truth: dict[str, dict] = {}
    for p in projects:
        rng = _rng(seed, "documents", p["project_id"])
        c = contract_by_id[p["contract_id"]]
        kinds = ["job_description", *rng.sample(OTHER_DOC_KINDS, k=rng.randint(1, 3))]
        kinds.sort(key=list(DOC_SUFFIX).index)
        created, updated = p["created_minutes_before"], p["updated_minutes_before"]
        window = max(60, created - updated)
        frac = {
            "intake_notes": (0.0, 0.02),
            "job_description": (0.02, 0.08),
            "recruiter_notes": (0.35, 0.7),
            "candidate_feedback": (0.7, 0.98),
        }
        p["documents"] = {}
        for kind in kinds:
            if p["language"] == "ru":
                lang = "ru" if rng.random() < 0.8 else "en"
            elif c["language"] == "ru":
                lang = "ru" if rng.random() < 0.2 else "en"
            else:
                lang = "en"
            minutes = created - int(window * rng.uniform(*frac[kind]))
            evs = actions_by_project[p["project_id"]]
            if kind == "job_description":
                text = _doc_job_description(rng, lang, p, c["name"])
            elif kind == "intake_notes":
                text = _doc_intake(rng, lang, p, minutes)
            elif kind == "recruiter_notes":
                text = _doc_recruiter_notes(rng, lang, p, evs, minutes)
            else:
                text = _doc_feedback(rng, lang, p, evs, names, minutes)
            did = f"doc-{p['project_id']}-{DOC_SUFFIX[kind]}"
            edited = minutes - (
                rng.randint(10, max(11, min(minutes, 3 * 1440))) if rng.random() < 0.3 else 0
            )
            documents.append(
                {
                    "document_id": did,
                    "project_id": p["project_id"],
                    "kind": kind,
                    "text": text,
                    "created_at": _ts(minutes),
                    "updated_at": _ts(max(0, edited)),
                }
            )
            p["documents"][did] = {"kind": kind, "language": lang}
            doc_truth[did] = p["documents"][did]
        codes = [a["_code"] for a in actions_by_project[p["project_id"]] if a["_code"]]
        p["rejection_reasons"] = sorted(set(codes), key=lambda x: (-codes.count(x), x))
        p["vacancy_ids"] = [v["vacancy_id"] for v in vac_by_project.get(p["project_id"], [])]

    vacancy_rows = []
    reqs_by_vacancy: dict[str, list[dict]] = {}
    for r in requirements:
        reqs_by_vacancy.setdefault(r["vacancy_id"], []).append(r)
    for v in vacancies:
        p = project_by_id[v["project_id"]]
        rng = _rng(seed, "vacancy-text", v["vacancy_id"])
        minutes = max(0, p["created_minutes_before"] - _days(rng, 1, 3))
        text = _vacancy_text(
            rng, v, reqs_by_vacancy[v["vacancy_id"]], p, contract_by_id[p["contract_id"]]["name"]
        )
        vacancy_rows.append(
            {
                "vacancy_id": v["vacancy_id"],
                "version": 1,
                "project_id": v["project_id"],
                "title": v["title"],
                "text": text,
                "updated_at": _ts(minutes),
            }
        )
        fits = {
            lab["resume_id"]
            for lab in labels
            if lab["vacancy_id"] == v["vacancy_id"] and lab["label"] == "fit"
        }
        v["archive_fits"] = sorted(
            rid
            for rid, t in resume_truth.items()
            if t["layer"] == "archive" and label_pair(v, t) == "fit"
        )
        v["rare_term_fits"] = sorted(
            rid
            for rid, t in resume_truth.items()
            if t["style"] == "terse" and rid in fits and v["vacancy_id"] in t["targets"]
        )
        v["keyword_twins"] = sorted(
            rid
            for rid, t in resume_truth.items()
            if t["trap"] == "keyword_twin" and v["vacancy_id"] in t["targets"]
        )
        v["headline_traps"] = sorted(
            rid
            for rid, t in resume_truth.items()
            if t["trap"] == "headline_mismatch" and v["vacancy_id"] in t["targets"]
        )

    tables: dict[str, list[dict]] = {
        "contracts": [
            {
                "contract_id": c["contract_id"],
                "name": c["name"],
                "updated_at": _ts(c["updated_minutes_before"]),
            }
            for c in contracts
        ],
        "seats": [
            {
                "seat_id": s["seat_id"],
                "contract_id": s["contract_id"],
                "recruiter_name": s["recruiter_name"],
                "updated_at": _ts(s["updated_minutes_before"]),
            }
            for s in seats
        ],
        "projects": [
            {
                "project_id": p["project_id"],
                "seat_id": p["seat_id"],
                "title": p["title"],
                "status": p["status"],
                "created_at": _ts(p["created_minutes_before"]),
                "updated_at": _ts(p["updated_minutes_before"]),
            }
            for p in projects
        ],
        "project_documents": documents,
        "resumes": resume_rows,
        "recruiter_actions": [
            {
                "action_id": a["action_id"],
                "project_id": a["project_id"],
                "resume_id": a["resume_id"],
                "action": a["action"],
                "reason": a["reason"],
                "created_at": _ts(a["_minutes"]),
            }
            for a in actions
        ],
        "vacancies": vacancy_rows,
        "vacancy_requirements": requirements,
    }
    counts = {}
    for table in TABLES:
        rows = tables[table.name]
        cols = table.column_names
        lines = [
            json.dumps({c: row[c] for c in cols}, sort_keys=True, ensure_ascii=False)
            for row in rows
        ]
        (out / f"{table.name}.jsonl").write_text(
            "".join(line + "\n" for line in lines), encoding="utf-8", newline="\n"
        )
        counts[table.name] = len(rows)

    for p in projects:
        p["created_at"] = _ts(p["created_minutes_before"])
        p["updated_at"] = _ts(p["updated_minutes_before"])
    truth = {
        "generator_version": GENERATOR_VERSION,
        "seed": seed,
        "size": asdict(size),
        "base_date": BASE_DATE.date().isoformat(),
        "contracts": {c["contract_id"]: _public(c) for c in contracts},
        "seats": {s["seat_id"]: _public(s) for s in seats},
        "projects": {p["project_id"]: _public(p) for p in projects},
        "resumes": resume_truth,
        "vacancies": {v["vacancy_id"]: _public(v) for v in vacancies},
        "labels": labels,
        "similar_title_groups": groups,
    }
    (out / "ground_truth.json").write_text(
        json.dumps(truth, sort_keys=True, ensure_ascii=False, indent=1) + "\n",
        encoding="utf-8",
        newline="\n",
    )
    return counts

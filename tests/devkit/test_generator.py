"""The deterministic sample world: bytes, schema, ownership habits, traps, labels, sizes."""

from __future__ import annotations

import json
import re
from collections import Counter
from datetime import datetime
from pathlib import Path

import pytest

from hltm.sources.schema import TABLES, TABLES_BY_NAME
from hltm_devkit.generator import (
    BASE_DATE,
    CITIES,
    FORMAL_REQUIREMENTS,
    LEVEL_MONTHS,
    SIZES,
    WorldSize,
    generate_world,
    label_pair,
)

FILES = [f"{t.name}.jsonl" for t in TABLES] + ["ground_truth.json"]
CYRILLIC = re.compile(r"[А-Яа-яЁё]")


def _rows(world: Path, table: str) -> list[dict]:
    lines = (world / f"{table}.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines]


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("demo")
    generate_world(out, seed=7, size=SIZES["demo"])
    return out


@pytest.fixture(scope="module")
def truth(demo: Path) -> dict:
    return json.loads((demo / "ground_truth.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def tables(demo: Path) -> dict[str, list[dict]]:
    return {t.name: _rows(demo, t.name) for t in TABLES}


def test_same_seed_gives_byte_identical_files(demo: Path, tmp_path: Path) -> None:
    counts = generate_world(tmp_path, seed=7, size=SIZES["demo"])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(FILES)
    for name in FILES:
        assert (tmp_path / name).read_bytes() == (demo / name).read_bytes(), name
    assert counts == {t.name: len(_rows(demo, t.name)) for t in TABLES}


def test_different_seed_gives_a_different_world(demo: Path, tmp_path: Path) -> None:
    generate_world(tmp_path, seed=8, size=SIZES["demo"])
    for name in ("resumes.jsonl", "project_documents.jsonl", "vacancies.jsonl"):
        assert (tmp_path / name).read_bytes() != (demo / name).read_bytes(), name


def test_rows_have_exactly_the_schema_columns_and_valid_values(
    tables: dict[str, list[dict]],
) -> None:
    for table in TABLES:
        rows = tables[table.name]
        assert rows, table.name
        keys = [r[table.key] for r in rows]
        assert len(keys) == len(set(keys)), f"duplicate ids in {table.name}"
        for row in rows:
            assert set(row) == set(table.column_names), table.name
            for col in table.columns:
                value = row[col.name]
                if col.required:
                    assert value is not None, (table.name, col.name)
                if col.choices and value is not None:
                    assert value in col.choices, (table.name, col.name, value)
                if col.non_empty_text:
                    assert str(value).strip(), (table.name, col.name)
                if col.sql_type == "TIMESTAMP" and value is not None:
                    assert datetime.fromisoformat(value) <= BASE_DATE, (table.name, value)


def test_stable_readable_ids(tables: dict[str, list[dict]]) -> None:
    patterns = {
        "contracts": r"c\d{2}",
        "seats": r"c\d{2}-s\d{2}",
        "projects": r"c\d{2}-s\d{2}-p\d{3}",
        "project_documents": r"doc-c\d{2}-s\d{2}-p\d{3}-(jd|intake|notes|feedback)",
        "resumes": r"r\d{4}",
        "recruiter_actions": r"a\d{5}",
        "vacancies": r"v\d{3}",
        "vacancy_requirements": r"v\d{3}-q\d",
    }
    for table, pattern in patterns.items():
        key = TABLES_BY_NAME[table].key
        assert all(re.fullmatch(pattern, r[key]) for r in tables[table]), table
    for r in tables["vacancy_requirements"]:
        assert r["requirement_id"].startswith(r["vacancy_id"] + "-")


def test_every_foreign_key_resolves(tables: dict[str, list[dict]]) -> None:
    for table in TABLES:
        for fk in table.foreign_keys:
            parents = {r[TABLES_BY_NAME[fk.table].key] for r in tables[fk.table]}
            dangling = [r[fk.column] for r in tables[table.name] if r[fk.column] not in parents]
            assert not dangling, (table.name, fk.column, dangling[:3])
    for s in tables["seats"]:
        assert s["seat_id"].startswith(s["contract_id"] + "-")
    for p in tables["projects"]:
        assert p["project_id"].startswith(p["seat_id"] + "-")


def test_ground_truth_covers_every_entity(truth: dict, tables: dict[str, list[dict]]) -> None:
    assert truth["seed"] == 7 and truth["size"]["resumes"] == 400
    for section, table in (
        ("contracts", "contracts"),
        ("seats", "seats"),
        ("projects", "projects"),
        ("resumes", "resumes"),
        ("vacancies", "vacancies"),
    ):
        key = TABLES_BY_NAME[table].key
        assert set(truth[section]) == {r[key] for r in tables[table]}, section
    r = next(iter(truth["resumes"].values()))
    assert {"role_family", "level", "years", "language", "layer", "trap", "skills"} <= set(r)
    v = next(iter(truth["vacancies"].values()))
    assert {"role_family", "level", "must_have_skills", "formal_requirement_ids"} <= set(v)


def test_contracts_and_seats_have_habits_projects_follow_them(truth: dict) -> None:
    for c in truth["contracts"].values():
        assert c["industry"] and c["region"] and c["default_work_mode"] and c["core_families"]
    for s in truth["seats"].values():
        assert 1 <= len(s["locations"]) <= 3
        assert all(city in CITIES for city in s["locations"])
        assert s["work_mode"] in ("remote", "hybrid", "onsite")
        assert s["employment_type"] in ("full-time", "contract", "part-time")
    projects, seats = truth["projects"], truth["seats"]
    for attr, seat_attr in (
        ("role_family", "title_family"),
        ("seniority", "seniority"),
        ("work_mode", "work_mode"),
        ("employment_type", "employment_type"),
    ):
        share = sum(p[attr] == seats[p["seat_id"]][seat_attr] for p in projects.values())
        assert 0.6 <= share / len(projects) <= 0.97, (attr, share)
    leaning = sum(
        seats[s]["title_family"] in truth["contracts"][seats[s]["contract_id"]]["core_families"]
        for s in seats
    )
    assert leaning / len(seats) >= 0.6


def test_similar_titles_under_different_owners(truth: dict, tables: dict) -> None:
    titles = {p["project_id"]: p["title"] for p in tables["projects"]}
    groups = truth["similar_title_groups"]
    assert groups
    for g in groups:
        owners = {truth["projects"][p]["contract_id"] for p in g["projects"]}
        assert len(owners) >= 2
        stems = {re.sub(r"\W+", " ", titles[p]).replace(" team", "").strip() for p in g["projects"]}
        assert len(stems) == 1, stems  # near-identical: same words, different punctuation


def test_documents_are_natural_text_stating_the_facts(truth: dict, tables: dict) -> None:
    per_project = Counter(d["project_id"] for d in tables["project_documents"])
    assert set(per_project) == set(truth["projects"])
    assert all(2 <= n <= 4 for n in per_project.values())
    assert {d["kind"] for d in tables["project_documents"]} == {
        "job_description",
        "intake_notes",
        "recruiter_notes",
        "candidate_feedback",
    }
    for d in tables["project_documents"]:
        assert not re.search(r"\b[A-Z_]{3,}\s*=", d["text"]), d["document_id"]
        if d["kind"] == "job_description":
            p = truth["projects"][d["project_id"]]
            names = {n for c in p["locations"] for n in (c, CITIES[c][1], *CITIES[c][2])}
            assert any(n in d["text"] for n in names), d["document_id"]
    russian = [d for d in tables["project_documents"] if CYRILLIC.search(d["text"].split("\n")[0])]
    assert russian
    ru_contracts = {c for c, v in truth["contracts"].items() if v["region"] == "russia"}
    langs = {
        doc["language"]
        for p in truth["projects"].values()
        for doc in p["documents"].values()
        if p["contract_id"] in ru_contracts
    }
    assert langs == {"en", "ru"}
    # several phrasings per fact: work-mode sentences are not one fixed template per mode
    phrases = {
        "remote": ("fully remote", "Remote-first", "work from home", "Work format: remote"),
        "hybrid": ("Hybrid setup", "hybrid mode", "The team is hybrid"),
        "onsite": ("on-site role", "Office-based", "Remote work is not an option"),
    }
    english = " ".join(
        d["text"] for d in tables["project_documents"] if not CYRILLIC.search(d["text"])
    )
    for mode, options in phrases.items():
        assert sum(o in english for o in options) >= 2, mode


def test_resumes_languages_layers_and_structure(truth: dict, tables: dict) -> None:
    resumes = tables["resumes"]
    langs = Counter(r["language"] for r in resumes)
    assert 0.2 <= langs["ru"] / len(resumes) <= 0.4
    layers = Counter(r["layer"] for r in resumes)
    assert 0.1 <= layers["archive"] / len(resumes) <= 0.2
    for r in resumes:
        t = truth["resumes"][r["resume_id"]]
        assert t["language"] == r["language"] and t["layer"] == r["layer"]
        assert bool(CYRILLIC.search(r["text"])) == (r["language"] == "ru"), r["resume_id"]
        assert re.search(r"\d{4}-\d{2} – (\d{4}-\d{2}|present|по настоящее время)", r["text"])
        lo, hi = LEVEL_MONTHS[t["level"]]
        assert lo / 12 - 0.1 <= t["years"] <= hi / 12 + 0.1 + 2, (r["resume_id"], t)
        for skill in t["skills"]:
            assert skill in r["text"], (r["resume_id"], skill)
    ru_texts = [r["text"] for r in resumes if r["language"] == "ru" and "Опыт работы" in r["text"]]
    assert ru_texts


def test_years_agree_with_the_dates_in_the_text(truth: dict, tables: dict) -> None:
    for r in tables["resumes"]:
        text = r["text"]
        starts = [int(y) * 12 + int(m) - 1 for y, m in re.findall(r"(\d{4})-(\d{2}) –", text)]
        ends = [int(y) * 12 + int(m) - 1 for y, m in re.findall(r"– (\d{4})-(\d{2})", text)]
        ref = int(r["updated_at"][:4]) * 12 + int(r["updated_at"][5:7]) - 1
        current = re.search(r"– (present|по настоящее время)(?!\w)", text)
        last = ref if current else max(ends) + 1
        earlier = re.search(r"(?:Earlier|Ранее): .*?(\d{4})–(\d{4})", text)
        first = int(earlier.group(1)) * 12 if earlier else min(starts)
        years = (last - first) / 12
        assert abs(years - truth["resumes"][r["resume_id"]]["years"]) <= 1.0, r["resume_id"]


def test_traps_are_planted(truth: dict, tables: dict) -> None:
    resumes = truth["resumes"]
    rows = {r["resume_id"]: r for r in tables["resumes"]}
    vacancies = truth["vacancies"]
    twins = [rid for rid, t in resumes.items() if t["trap"] == "keyword_twin"]
    assert len(twins) >= len(vacancies)
    for rid in twins:
        v = vacancies[resumes[rid]["targets"][0]]
        assert resumes[rid]["role_family"] != v["role_family"]
        assert set(v["must_have_skills"]) <= set(resumes[rid]["skills"])  # every keyword...
        assert label_pair(v, resumes[rid]) == "miss"  # ...and still the wrong role
    architect_twins = [
        rid
        for rid in twins
        if resumes[rid]["role_family"] == "backend_engineer"
        and vacancies[resumes[rid]["targets"][0]]["role_family"] == "solution_architect"
    ]
    analyst_twins = [
        rid
        for rid in twins
        if resumes[rid]["role_family"] == "data_analyst"
        and vacancies[resumes[rid]["targets"][0]]["role_family"] == "data_scientist"
    ]
    assert architect_twins and analyst_twins
    mismatches = [rid for rid, t in resumes.items() if t["trap"] == "headline_mismatch"]
    kinds = Counter(resumes[rid]["planted_as"] for rid in mismatches)
    assert kinds["headline_fit"] >= 5 and kinds["headline_miss"] >= 5
    for rid in mismatches:
        t = resumes[rid]
        assert t["headline_family"] != t["role_family"]
        assert rows[rid]["headline"] and rows[rid]["headline"] not in t["recent_titles"]
        v = vacancies[t["targets"][0]]
        expected = "fit" if t["planted_as"] == "headline_fit" else "miss"
        assert label_pair(v, t) == expected


def test_formal_requirements_in_both_languages(truth: dict, tables: dict) -> None:
    reqs = {r["requirement_id"]: r for r in tables["vacancy_requirements"]}
    formal = [reqs[q] for v in truth["vacancies"].values() for q in v["formal_requirement_ids"]]
    texts = {r["text"] for r in formal}
    assert texts & set(FORMAL_REQUIREMENTS["en"]) and texts & set(FORMAL_REQUIREMENTS["ru"])
    assert any(r["mandatory"] for r in formal) and not all(r["mandatory"] for r in formal)
    assert len({r["vacancy_id"] for r in formal}) >= 3
    per_vacancy = Counter(r["vacancy_id"] for r in tables["vacancy_requirements"])
    assert all(5 <= n <= 8 for n in per_vacancy.values())
    for vid, v in truth["vacancies"].items():
        mandatory = [r["text"] for r in reqs.values() if r["vacancy_id"] == vid and r["mandatory"]]
        for skill in v["must_have_skills"]:
            assert any(skill in text for text in mandatory), (vid, skill)


def test_labels_are_a_golden_set(truth: dict) -> None:
    labels = truth["labels"]
    vacancies, resumes = truth["vacancies"], truth["resumes"]
    assert len(vacancies) >= 19 and len(labels) >= 475
    assert {lab["vacancy_id"] for lab in labels} == set(vacancies)
    assert Counter(lab["label"] for lab in labels).keys() == {"fit", "borderline", "miss"}
    pairs = [(lab["vacancy_id"], lab["resume_id"]) for lab in labels]
    assert len(pairs) == len(set(pairs))
    for lab in labels:
        assert lab["label"] == label_pair(vacancies[lab["vacancy_id"]], resumes[lab["resume_id"]])
        assert resumes[lab["resume_id"]]["layer"] == "active"
    for vid in vacancies:
        mine = Counter(lab["label"] for lab in labels if lab["vacancy_id"] == vid)
        assert 20 <= sum(mine.values()) <= 35, (vid, mine)
        assert mine["fit"] >= 3 and mine["borderline"] >= 1 and mine["miss"] >= 6, (vid, mine)


def test_recall_probe_targets_archive_and_rare_term_fits(truth: dict, tables: dict) -> None:
    rows = {r["resume_id"]: r for r in tables["resumes"]}
    vacancies, resumes = truth["vacancies"], truth["resumes"]
    for vid, v in vacancies.items():
        assert v["archive_fits"], vid
        for rid in v["archive_fits"]:
            assert rows[rid]["layer"] == "archive" and label_pair(v, resumes[rid]) == "fit"
        assert v["rare_term_fits"], vid
        for rid in v["rare_term_fits"]:
            assert rows[rid]["layer"] == "active" and label_pair(v, resumes[rid]) == "fit"
            assert any(term in rows[rid]["text"] for term in v["rare_terms"])
            assert "Summary" not in rows[rid]["text"] and "О себе" not in rows[rid]["text"]


def test_recruiter_actions_tell_the_same_story(truth: dict, tables: dict) -> None:
    actions = tables["recruiter_actions"]
    assert {a["action"] for a in actions} == {"viewed", "saved", "messaged", "rejected", "advanced"}
    for a in actions:
        assert (a["reason"] is not None) == (a["action"] == "rejected"), a
    labels = {(lab["vacancy_id"], lab["resume_id"]): lab["label"] for lab in truth["labels"]}
    advanced_fits = 0
    for a in actions:
        for vid in truth["projects"][a["project_id"]]["vacancy_ids"]:
            if a["action"] == "advanced" and labels.get((vid, a["resume_id"])) == "fit":
                advanced_fits += 1
    assert advanced_fits >= 10


def test_label_pair_rules() -> None:
    v = {
        "role_family": "solution_architect",
        "level": "senior",
        "must_have_skills": ["AWS", "Kafka"],
    }
    r = {"role_family": "solution_architect", "level": "senior", "skills": ["AWS", "Kafka", "Go"]}
    assert label_pair(v, r) == "fit"
    assert label_pair(v, {**r, "level": "lead"}) == "borderline"
    assert label_pair(v, {**r, "skills": ["AWS"]}) == "borderline"
    assert label_pair(v, {**r, "level": "lead", "skills": ["AWS"]}) == "miss"
    assert label_pair(v, {**r, "level": "middle", "skills": []}) == "miss"
    assert label_pair(v, {**r, "role_family": "backend_engineer"}) == "miss"  # role first


def test_small_world_still_has_every_kind(tmp_path: Path) -> None:
    small = WorldSize(
        contracts=2, seats_per_contract=2, projects_per_seat=3, resumes=160, vacancies=19
    )
    counts = generate_world(tmp_path, seed=11, size=small)
    assert counts["vacancies"] == 19 and counts["projects"] == 12 and counts["resumes"] == 160
    truth = json.loads((tmp_path / "ground_truth.json").read_text(encoding="utf-8"))
    assert Counter(lab["label"] for lab in truth["labels"]).keys() == {"fit", "borderline", "miss"}
    traps = Counter(t["trap"] for t in truth["resumes"].values())
    assert traps["keyword_twin"] and traps["headline_mismatch"]
    assert all(v["archive_fits"] and v["rare_term_fits"] for v in truth["vacancies"].values())
    assert {v["language"] for v in truth["vacancies"].values()} == {"en", "ru"}


def test_bench_size_is_big(tmp_path: Path) -> None:
    """(Its generation time is measured by `bench/ingest.py`, not here.)"""
    counts = generate_world(tmp_path, seed=7, size=SIZES["bench"])
    assert counts["contracts"] >= 10 and counts["seats"] >= 100 and counts["projects"] >= 1000
    assert counts["resumes"] == 1500 and counts["vacancies"] == 40

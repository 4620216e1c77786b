"""The monthly recall probe: samples from outside pool and results (archive included), a cost
estimate before judging, the score cache and budget, and alerts only on displacing finds."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hltm.judge import probe
from hltm.judge.data import load_resumes, load_vacancies
from hltm.judge.service import JudgeEnv, build_vacancy_pool, judge_all
from hltm.llm import DETERMINISTIC_MODEL, LLM
from hltm.llm.registry import payload_from_messages
from hltm.warehouse import connect


class ScriptedJudge:
    """The offline judge, with `overall` set for chosen resumes and capped for all others, so a
    test decides exactly who is strong (checklists and quotes stay the rule-based judge's)."""

    name = "offline"

    def __init__(self, overall: dict[str, int], cap: int = 79) -> None:
        self.overall = overall
        self.cap = cap

    def complete(self, task: Any, messages: list[dict[str, str]], model: str) -> str:
        payload = payload_from_messages(messages)
        answer = task.offline(payload)
        if task.name == "judge":
            rid = payload["resume"]["id"]
            score = answer["overall"]["score"]
            scripted = self.overall.get(rid, min(score, self.cap))
            answer["overall"]["score"] = scripted
            answer["overall"]["explanation"] = f"scripted {scripted}"
        return json.dumps(answer, ensure_ascii=False)


def _env(settings, scripted: ScriptedJudge) -> JudgeEnv:  # type: ignore[no-untyped-def]
    env = JudgeEnv.from_settings(settings)
    env.llm = LLM(backend=scripted, model=DETERMINISTIC_MODEL)
    env.k_vector, env.k_bm25 = 30, 30  # small pools: plenty of active outsiders too
    return env


def _plant(settings, tmp_path: Path, rows: list[dict[str, Any]]) -> None:  # type: ignore[no-untyped-def]
    from hltm.sources.ingest import ingest_directory

    src = tmp_path / "planted"
    src.mkdir()
    (src / "resumes.jsonl").write_text(
        "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8"
    )
    report = ingest_directory(src, settings.sources_db)
    assert report.quarantined == 0, report.summary()


def test_probe_alerts_only_on_displacing_finds(loaded_world, tmp_path) -> None:  # type: ignore[no-untyped-def]
    settings = loaded_world
    scripted = ScriptedJudge({})
    env = _env(settings, scripted)
    vacancy = load_vacancies(settings.sources_db)[0]
    pool = build_vacancy_pool(env, vacancy).resumes
    # The current top 10 scores 86..95; everyone else in the pool stays below 80.
    for i, resume in enumerate(pool[:10]):
        scripted.overall[resume.resume_id] = 95 - i
    run = judge_all(env, [vacancy.vacancy_id], budget=None, workers=2, refresh=False)
    assert run.gate is not None and run.gate.passed, run.gate
    with connect(settings.derived_db) as con:
        top = con.execute(
            "SELECT overall FROM rankings WHERE vacancy_id = ? AND rank <= 10 ORDER BY rank",
            [vacancy.vacancy_id],
        ).fetchall()
    assert [o for (o,) in top] == list(range(95, 85, -1))  # top-10 minimum: 86

    # Plant two archive resumes written like the vacancy's best candidates (BM25 finds them):
    # one the judge scores 90 (≥ 80 and above 86 → displacing), one 85 (≥ 80 but below 86).
    planted = []
    for new_id, source in (("r9001", pool[0]), ("r9002", pool[1])):
        planted.append(
            {
                "resume_id": new_id,
                "headline": source.headline,
                "text": source.text,
                "language": source.language,
                "layer": "archive",
                "updated_at": source.updated_at,
            }
        )
    _plant(settings, tmp_path, planted)
    scripted.overall.update({"r9001": 90, "r9002": 85})

    config = probe.ProbeSettings(sample_size=20, budget=None, workers=2)
    plan = probe.plan(
        settings.sources_db, settings.derived_db, env.config, "2026-10", config,
        [vacancy.vacancy_id],
    )  # fmt: skip
    (vp,) = plan.vacancies
    sample = {c.resume.resume_id: c for c in vp.sample}
    pool_ids = {r.resume_id for r in pool}
    assert len(sample) == 20
    assert not set(sample) & pool_ids  # from outside the pool and the results
    layers = {c.layer for c in vp.sample}
    assert layers == {"active", "archive"}
    assert sum(c.layer == "archive" for c in vp.sample) == 10
    assert {"r9001", "r9002"} <= set(sample)
    assert {sample["r9001"].selection, sample["r9002"].selection} == {"targeted"}
    # The cost is known before anything is judged.
    estimate = plan.estimate()
    assert estimate["cold_pairs"] == estimate["pairs"] == 20
    assert estimate["est_prompt_tokens"] > 20 * 300 and estimate["est_completion_tokens"] > 0
    assert env.llm.snapshot().calls == run.totals()["llm_calls"]  # planning called no LLM

    result = probe.judge(plan, settings.derived_db, env.llm)
    probe.store(result, settings.derived_db)
    rows = {r.resume_id: r for r in result.rows}
    assert rows["r9001"].overall == 90 and rows["r9001"].displacing
    assert rows["r9002"].overall == 85 and not rows["r9002"].displacing
    assert rows["r9002"].top_min == 86
    assert [r.resume_id for r in result.finds] == ["r9001"]
    assert result.summary()["strong_but_not_displacing"] == 1
    with connect(settings.derived_db) as con:
        stored = con.execute(
            "SELECT resume_id FROM recall_probe_results WHERE month = '2026-10' AND displacing"
        ).fetchall()
    assert stored == [("r9001",)]

    # Same month again: same sample, every pair from the score cache.
    again = probe.plan(
        settings.sources_db, settings.derived_db, env.config, "2026-10", config,
        [vacancy.vacancy_id],
    )  # fmt: skip
    assert again.cold_pairs == 0 and [c.resume.resume_id for c in again.vacancies[0].sample] == [
        c.resume.resume_id for c in vp.sample
    ]
    # The budget caps cold evaluations; the rest waits for the next run.
    capped = probe.ProbeSettings(sample_size=20, budget=3, workers=2)
    nov = probe.plan(
        settings.sources_db, settings.derived_db, env.config, "2026-11", capped,
        [vacancy.vacancy_id],
    )  # fmt: skip
    assert nov.cold_pairs > 3 and nov.pairs_within_budget == 3
    nov_result = probe.judge(nov, settings.derived_db, env.llm)
    assert nov_result.summary()["judged_now"] == 3
    assert nov_result.deferred == nov.cold_pairs - 3
    assert sum(r.status == "pending" for r in nov_result.rows) == nov.cold_pairs - 3


@pytest.mark.parametrize(
    ("overall", "top", "expected"),
    [
        (80, [79] * 10, True),  # exactly the threshold, above the minimum
        (79, [50] * 10, False),  # below the threshold: never an alert
        (85, list(range(86, 96)), False),  # strong but would not enter the top 10
        (86, list(range(86, 96)), False),  # ties the minimum: does not displace it
        (87, list(range(86, 96)), True),
        (80, [90, 95], True),  # fewer than 10 ranked: any strong find enters the top 10
    ],
)
def test_displacing_rule(overall: int, top: list[int], expected: bool) -> None:
    assert probe.is_displacing(overall, top, min_overall=80, top_k=10) is expected


def test_recall_probe_asset_warns_with_finds(loaded_world, world_files) -> None:  # type: ignore[no-untyped-def]
    import dagster as dg

    from hltm_dagster.defs.probe.assets import CHECK_NAME, RECALL_PROBE_KEY, recall_probe
    from hltm_dagster.defs.probe.schedules import recall_probe_schedule
    from hltm_dagster.resources import JudgeSettingsResource, build_resources

    settings = loaded_world
    env = JudgeEnv.from_settings(settings)  # the plain offline judge, as the asset uses it
    env.k_vector, env.k_bm25 = 30, 30
    vacancies = [v.vacancy_id for v in load_vacancies(settings.sources_db)[:2]]
    judge_all(env, vacancies, budget=None, workers=2, refresh=False)

    result = dg.materialize(
        [recall_probe],
        partition_key="2026-10-01",
        resources=build_resources(settings, judge=JudgeSettingsResource(budget=100)),
    )
    assert result.success
    (mat,) = result.asset_materializations_for_node("recall_probe")
    meta = mat.metadata
    assert meta["estimate/pairs"].value == 40 and meta["estimate/cold_pairs"].value == 40
    assert meta["scored"].value == 40 and meta["archive_in_sample"].value == 20
    (check,) = result.get_asset_check_evaluations()
    assert check.asset_key == RECALL_PROBE_KEY and check.check_name == CHECK_NAME
    assert check.severity == dg.AssetCheckSeverity.WARN
    finds = check.metadata["finds"].value
    # The generated world plants archive fits per vacancy; the probe surfaces them.
    archive = {r.resume_id for r in load_resumes(settings.sources_db, layer="archive")}
    assert finds and not check.passed
    for f in finds:
        assert f["overall"] >= 80 and (f["top_min"] is None or f["overall"] > f["top_min"])
    # The generated world plants archive-layer fits per vacancy; the probe surfaces them.
    truth = json.loads((world_files / "ground_truth.json").read_text(encoding="utf-8"))
    fits = {(v, r) for v in vacancies for r in truth["vacancies"][v]["archive_fits"]}
    found = {(f["vacancy_id"], f["resume_id"]) for f in finds}
    assert fits & found, (fits, found)
    assert all(
        f["resume_id"] in archive for f in finds if (f["vacancy_id"], f["resume_id"]) in fits
    )
    assert meta["displacing_finds"].value == len(finds)
    # The command line sees the same month from the cache: nothing left to judge.
    from click.testing import CliRunner

    from hltm_cli import main

    out = CliRunner().invoke(main, ["probe", "--month", "2026-10", "--estimate", "--json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout)["cold_pairs"] == 0

    defs = dg.Definitions(
        assets=[recall_probe],
        schedules=[recall_probe_schedule],
        resources=build_resources(settings, judge=JudgeSettingsResource()),
    )
    dg.Definitions.validate_loadable(defs)
    schedule = defs.resolve_schedule_def("recall_probe_schedule")
    assert schedule.cron_schedule == "0 4 1 * *"  # 04:00 on the 1st: the month just ended

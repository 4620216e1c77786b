"""The judge's statistics report on the frozen golden set: tender table, weight study, figures;
and the tender over several models served by the local OpenAI-protocol server."""

from __future__ import annotations

import json
import time

import pytest

from hltm.evaluation.judge.golden import GOLDEN_DIR, load_golden
from hltm.evaluation.judge.tender import ReportSettings, build_report, judge_llms, parse_prices
from hltm.llm import DETERMINISTIC_MODEL

pytestmark = [
    pytest.mark.skipif(
        not (GOLDEN_DIR / "manifest.json").exists(), reason="golden set not frozen yet"
    ),
    pytest.mark.xdist_group("golden-set"),  # with test_judge_golden: one embedding of the set
]

FIGURES = (
    "judge_stats.md",
    "weight_study.md",
    "tender.png",
    "permutation_null.png",
    "per_vacancy_precision.png",
    "precision_intervals.png",
    "fold_weights.png",
    "judge_stats.json",
    "weight_study.json",
)


def test_stats_report_on_the_golden_set(golden_settings, tmp_path) -> None:  # type: ignore[no-untyped-def]
    gs = load_golden()
    started = time.perf_counter()
    report = build_report(
        golden_settings,
        tmp_path / "report",
        ReportSettings(n_permutations=1000, n_resamples=10_000),
        gs,
    )
    elapsed = time.perf_counter() - started
    for name in FIGURES:
        path = tmp_path / "report" / name
        assert path.exists() and path.stat().st_size > 0, name
    assert (tmp_path / "report" / "tender.png").read_bytes()[:4] == b"\x89PNG"

    h = report.headline()
    study = report.study
    assert study.loocv.grid_size == 1001 and study.permutation.n_permutations == 1000
    assert h["vacancies"] == gs.manifest["counts"]["vacancies"]
    assert h["pairs"] == gs.manifest["counts"]["pairs"]
    # The cosine baseline in the report is the pinned one.
    pin = gs.pins["cosine_strict_p10"]
    assert round(h["cosine_strict_p10"], 4) == round(pin["hits"] / pin["shown"], 4)
    # One model with the offline backend; its row carries every tender column.
    (row,) = report.tender
    assert row.pairs == h["pairs"] and row.failed == 0
    assert row.latency_mean_s > 0 and row.prompt_tokens_per_pair > 0
    assert 0.0 <= row.quote_mismatch_rate <= 1.0 and row.mandatory_quotes > 0
    assert row.strict_p10 == report.golden[row.model].value("closed", "union+judge")
    # The weight study: noise cannot reach the judge, and the report states its own finding
    # (on the sample world, whose labels follow role families the offline judge no longer
    # encodes, a fitted weighting of its five scores does help; see the README).
    assert study.permutation.p95_best < study.loocv.reference_precision
    verdict = (tmp_path / "report" / "weight_study.md").read_text(encoding="utf-8")
    assert ("**Weights help**" in verdict) == study.weights_needed
    assert ("**Weights are not needed**" in verdict) == (not study.weights_needed)
    text = report.path.read_text(encoding="utf-8")
    for needle in (
        "## Model tender",
        "quote mismatch (before validation)",
        "mandatory-quote survival",
        "permutation ceiling",
        "paired difference weighted − overall",
        "![tender](tender.png)",
    ):
        assert needle in text, needle
    saved = json.loads((tmp_path / "report" / "judge_stats.json").read_text(encoding="utf-8"))
    assert saved["headline"] == json.loads(json.dumps(h))

    # The command line writes the same report; the pairs are in the score cache by now.
    from click.testing import CliRunner

    from hltm_cli import main

    out = CliRunner().invoke(
        main,
        ["stats", "report", "--out", str(tmp_path / "cli"), "--vacancy", gs.vacancies[0].vacancy_id,
         "--resamples", "500"],
    )  # fmt: skip
    assert out.exit_code == 0, out.output
    assert DETERMINISTIC_MODEL in out.output and "permutation ceiling" in out.output
    assert (tmp_path / "cli" / "judge_stats.md").exists()

    print(f"\nstatistics report on the golden set ({elapsed:.1f}s):")
    for key, value in h.items():
        print(f"  {key}: {value}")


def test_prices_and_models_config(settings, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    assert parse_prices("gpt-5-mini=0.25/2.0; gpt-4.1-mini=0.4/1.6") == {
        "gpt-5-mini": (0.25, 2.0),
        "gpt-4.1-mini": (0.4, 1.6),
    }
    monkeypatch.setenv("HLTM_TENDER_MODELS", "a, b,a")
    rs = ReportSettings.from_env()
    assert rs.models == ("a", "b", "a")
    # Offline: one rule-based judge whatever is listed.
    assert [llm.model for llm in judge_llms(settings, rs.models)] == [DETERMINISTIC_MODEL]
    openai = settings.__class__(**{**settings.__dict__, "llm_backend": "openai"})
    assert [llm.model for llm in judge_llms(openai, rs.models)] == ["a", "b"]


def test_tender_over_models_served_by_the_local_server(settings, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Two model names behind the local OpenAI-protocol server; the second one quotes from
    memory on a share of its answers, which the tender's mismatch and survival columns show."""
    from dataclasses import replace

    import hltm.judge.tasks  # noqa: F401  (registers the judge task with the server)
    from hltm.evaluation.judge.golden_eval import evaluate_golden
    from hltm_devkit.openai_server import LocalOpenAIServer

    gs = load_golden()
    vacancies = [v.vacancy_id for v in gs.vacancies[:2]]
    with LocalOpenAIServer() as server:
        remote = replace(
            settings, llm_backend="openai", openai_base_url=server.base_url, llm_max_retries=0
        )
        good, sloppy = judge_llms(remote, ("judge-good", "judge-sloppy"))
        from hltm.embeddings import make_embedder

        embedder = make_embedder(settings)
        # Pre-judge the sloppy model with invented quotes on 20 answers (the cache keeps them).
        server.inject("invented_quotes", times=20)
        evaluate_golden(gs, sloppy, embedder, settings.derived_db, workers=1,
                        vacancy_ids=vacancies)  # fmt: skip
        report = build_report(
            remote, tmp_path / "tender",
            ReportSettings(n_permutations=1000, n_resamples=2000, workers=4,
                           prices={"judge-good": (0.25, 2.0)}),
            gs, llms=[good, sloppy], embedder=embedder, vacancy_ids=vacancies,
        )  # fmt: skip
    rows = {r.model: r for r in report.tender}
    assert set(rows) == {"judge-good", "judge-sloppy"}
    assert rows["judge-good"].quote_mismatch_rate == 0.0
    assert rows["judge-sloppy"].quote_mismatch_rate > 0.0
    assert rows["judge-sloppy"].mandatory_survival < rows["judge-good"].mandatory_survival
    assert rows["judge-good"].usd_per_pair is not None and rows["judge-sloppy"].usd_per_pair is None
    assert rows["judge-good"].latency_median_s > 0
    text = report.path.read_text(encoding="utf-8")
    assert "judge-good" in text and "judge-sloppy" in text
    print("\n" + "\n".join(line for line in text.splitlines() if line.startswith("| judge-")))

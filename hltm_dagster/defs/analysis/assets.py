"""`judge_stats_report`: the judge's statistics toolkit as an asset (Markdown report + PNGs).

Judges the frozen golden set with every configured tender model (through the score cache, so a
re-run costs nothing), writes the model tender table, and runs the weight study on the
production judge's five scores: simplex grid with leave-one-vacancy-out CV, permutation test,
bootstrap intervals over vacancies and the paired difference weighted − `overall`. The report
lands in `<data dir>/reports/judge_stats/` (`judge_stats.md`, `weight_study.md`, PNGs, JSON);
the metadata carries the headline numbers and the tender table. The work is in
`hltm.evaluation.judge.tender`; `hltm stats report` runs the same from the command line.
"""

from pathlib import Path

import dagster as dg

from hltm.evaluation.judge.tender import ReportSettings, build_report, tender_table
from hltm.settings import Settings
from hltm_dagster.resources import PlatformResource

ANALYSIS_GROUP = "judge_analysis"
STATS_REPORT_KEY = dg.AssetKey("judge_stats_report")


class StatsReportConfig(dg.Config):
    """Run-time overrides (`HLTM_TENDER_MODELS`, `HLTM_STATS_*` otherwise)."""

    out_dir: str | None = None  # default: <data dir>/reports/judge_stats
    models: list[str] | None = None
    n_permutations: int | None = None
    n_resamples: int | None = None


@dg.asset(
    key=STATS_REPORT_KEY,
    group_name=ANALYSIS_GROUP,
    kinds={"duckdb"},
    deps=[dg.AssetKey("golden_evaluation"), dg.AssetKey("judge_scores")],
    description="Markdown report with PNG plots on the golden set: model tender (strict/soft "
    "P@10, quote mismatch before validation, mandatory-quote survival, cost and latency per "
    "pair) and the weight study (simplex grid + LOOCV, permutation test, bootstrap CIs).",
)
def judge_stats_report(
    context: dg.AssetExecutionContext,
    config: StatsReportConfig,
    platform: PlatformResource,
) -> dg.MaterializeResult:
    from hltm.evaluation.judge.tender import judge_llms

    llm = platform.llm
    settings = Settings.from_env(
        data_dir=platform.derived_db.path.parent,
        llm_backend=llm.backend,
        llm_model=llm.model,
        judge_model=llm.judge_model,
        reasoning_effort=llm.reasoning_effort,
        openai_base_url=llm.base_url,
    )
    rs = ReportSettings.from_env(
        models=tuple(config.models) if config.models else None,
        n_permutations=config.n_permutations,
        n_resamples=config.n_resamples,
    )
    out_dir = (
        Path(config.out_dir) if config.out_dir else settings.data_dir / "reports" / "judge_stats"
    )
    report = build_report(
        settings,
        out_dir,
        rs,
        llms=judge_llms(settings, rs.models),
        embedder=platform.embeddings.get(),
    )
    h = report.headline()
    context.log.info(f"judge statistics report written to {report.path}")
    return dg.MaterializeResult(
        metadata={
            "report": dg.MetadataValue.path(str(report.path)),
            "directory": dg.MetadataValue.path(str(report.out_dir)),
            "tender": dg.MetadataValue.md(tender_table(report.tender, report.cosine)),
            "models": dg.MetadataValue.json(h["models"]),
            "vacancies": h["vacancies"],
            "pairs": h["pairs"],
            "cosine_strict_p10": h["cosine_strict_p10"],
            "judge_strict_p10": h["judge_strict_p10"],
            "judge_soft_p10": h["judge_soft_p10"],
            "weighted_loocv_p10": h["weighted_loocv_p10"],
            "permutation_p95": h["permutation_p95"],
            "paired_difference": dg.MetadataValue.json(h["paired_difference"]),
            "weights_needed": h["weights_needed"],
            "quote_mismatch_rate": h["quote_mismatch_rate"],
            "mandatory_survival": h["mandatory_survival"],
            "seconds": round(report.seconds, 2),
        }
    )


ANALYSIS_ASSETS = [judge_stats_report]

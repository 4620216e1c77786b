"""`recall_probe`: the monthly recall probe as a month-partitioned asset with a warning check.

Each partition is one month. The run picks, for every vacancy with a published ranking, 20
candidates from outside its pool and results (the archive layer included), logs the cost
estimate (pairs, tokens, dollars when prices are set) *before* judging, judges them through the
judge's score cache under a budget, and stores the month in `recall_probe_results`. The
`displacing_finds` check warns — it never blocks anything — when a find has `overall ≥ 80` and
beats the lowest `overall` of the vacancy's current top 10; its metadata lists exactly those
finds. Thresholds and sample size: `HLTM_PROBE_*` (see `hltm.judge.probe`) or run config;
budget, workers and the formal-item filter are the judge's (`JudgeSettingsResource`) unless
`HLTM_PROBE_BUDGET` / `HLTM_PROBE_WORKERS` or run config say otherwise. The work is in
`hltm.judge.probe`.
"""

from typing import Any

import dagster as dg

from hltm.judge import probe as probe_core
from hltm.judge.formal import DEFAULT_FORMAL_PATTERNS
from hltm.judge.pipeline import judge_config
from hltm.settings import PROBE_ENV, read_env
from hltm_dagster.defs.sources.assets import source_key
from hltm_dagster.resources import PlatformResource

PROBE_GROUP = "judge_analysis"
RECALL_PROBE_KEY = dg.AssetKey("recall_probe")
CHECK_NAME = "displacing_finds"
# The judge's published results the probe compares against (asset keys of the judge's layer).
JUDGE_RESULT_KEYS = [dg.AssetKey("rankings")]

monthly = dg.MonthlyPartitionsDefinition(start_date=probe_core.ProbeSettings.from_env().start_date)


class RecallProbeConfig(dg.Config):
    """Run-time overrides of the `HLTM_PROBE_*` settings."""

    sample_size: int | None = None
    min_overall: int | None = None
    top_k: int | None = None
    budget: int | None = None
    vacancy_ids: list[str] | None = None
    estimate_only: bool = False  # plan and report the cost, judge nothing


def _finds_table(finds: list[dict[str, Any]]) -> dg.MetadataValue:
    lines = [
        "| vacancy | resume | layer | overall | current top-10 min | actual role |",
        "|---|---|---|---|---|---|",
    ]
    for f in finds:
        lines.append(
            f"| {f['vacancy_id']} | {f['resume_id']} | {f['layer']} | {f['overall']} "
            f"| {f['top_min'] if f['top_min'] is not None else '—'} "
            f"| {str(f['actual_role'] or '').replace('|', '/')} |"
        )
    if not finds:
        lines.append("| — | — | — | — | — | no displacing finds |")
    return dg.MetadataValue.md("\n".join(lines))


@dg.asset(
    key=RECALL_PROBE_KEY,
    partitions_def=monthly,
    group_name=PROBE_GROUP,
    kinds={"duckdb"},
    deps=[
        source_key("resumes"),
        source_key("vacancies"),
        # Every vacancy partition of the judge's rankings feeds each month.
        *(
            dg.AssetDep(key, partition_mapping=dg.AllPartitionMapping())
            for key in JUDGE_RESULT_KEYS
        ),
    ],
    check_specs=[
        dg.AssetCheckSpec(
            CHECK_NAME,
            asset=RECALL_PROBE_KEY,
            blocking=False,
            description="Warns when a probed candidate from outside the pool (archive included) "
            "has overall ≥ 80 and beats the lowest overall in the vacancy's current top 10.",
        )
    ],
    description="Monthly recall probe: for each vacancy with a published ranking, 20 candidates "
    "from outside its pool and results (archive layer included) judged through the score cache "
    "and budget; results in `recall_probe_results`.",
)
def recall_probe(
    context: dg.AssetExecutionContext,
    config: RecallProbeConfig,
    platform: PlatformResource,
):
    sources_db, derived_db = platform.sources_db, platform.derived_db
    llm, judge = platform.llm, platform.judge
    month = context.partition_key[:7]  # "2026-10-01" → "2026-10"
    # Unless the probe has its own, the judge's budget and workers apply (same resource).
    own = read_env(PROBE_ENV)
    defaults = {
        "budget": None if "budget" in own else judge.budget,
        "workers": None if "workers" in own else judge.workers,
    }
    overrides = {k: v for k, v in defaults.items() if v is not None}
    overrides |= {
        k: v
        for k, v in {
            "sample_size": config.sample_size,
            "min_overall": config.min_overall,
            "top_k": config.top_k,
            "budget": config.budget,
        }.items()
        if v is not None
    }
    settings = probe_core.ProbeSettings.from_env(**overrides)
    judge_llm = llm.judge()
    judge_cfg = judge_config(judge_llm, llm.reasoning_effort)
    plan = probe_core.plan(
        sources_db.path, derived_db.path, judge_cfg, month, settings, config.vacancy_ids
    )
    estimate = plan.estimate()
    context.log.info(
        f"recall probe {month}: {estimate['pairs']} pairs over {estimate['vacancies']} vacancies, "
        f"{estimate['cold_pairs']} not cached ({estimate['pairs_within_budget']} within the "
        f"budget of {estimate['budget']}); ≈{estimate['est_tokens']:,} tokens, "
        f"cost {estimate['est_usd']}"
    )
    estimate_meta = {f"estimate/{k}": v for k, v in estimate.items() if k != "month"}
    if config.estimate_only:
        yield dg.MaterializeResult(metadata={"estimate_only": True, **estimate_meta})
        yield dg.AssetCheckResult(
            check_name=CHECK_NAME,
            passed=True,
            severity=dg.AssetCheckSeverity.WARN,
            metadata={"note": "estimate only: nothing was judged"},
        )
        return
    result = probe_core.judge(
        plan, derived_db.path, judge_llm, run_id=context.run.run_id,
        formal_patterns=(*DEFAULT_FORMAL_PATTERNS, *judge.extra_formal_patterns),
    )  # fmt: skip
    probe_core.store(result, derived_db.path)
    summary = result.summary()
    finds = [r.as_find() for r in result.finds]
    context.log.info(
        f"recall probe {month}: {summary['scored']} scored, {summary['deferred_by_budget']} "
        f"deferred by the budget, {len(finds)} displacing find(s)"
    )
    yield dg.MaterializeResult(
        metadata={
            **estimate_meta,
            "vacancies": summary["vacancies"],
            "skipped_vacancies": dg.MetadataValue.json(plan.skipped),
            "scored": summary["scored"],
            "judged_now": summary["judged_now"],
            "deferred_by_budget": summary["deferred_by_budget"],
            "failed": summary["failed"],
            "archive_in_sample": summary["archive_in_sample"],
            "strong_outside": summary["strong_outside"],
            "strong_but_not_displacing": summary["strong_but_not_displacing"],
            "displacing_finds": len(finds),
            "finds": _finds_table(finds),
            "llm_calls": summary["llm_calls"],
            "tokens": summary["tokens"],
            "min_overall": settings.min_overall,
            "top_k": settings.top_k,
            "sample_size": settings.sample_size,
        }
    )
    yield dg.AssetCheckResult(
        check_name=CHECK_NAME,
        passed=not finds,
        severity=dg.AssetCheckSeverity.WARN,
        description=(
            f"{len(finds)} candidate(s) outside the pools would enter a current top "
            f"{settings.top_k} with overall ≥ {settings.min_overall}"
            if finds
            else "no displacing finds"
        ),
        metadata={
            "displacing_finds": len(finds),
            "finds": dg.MetadataValue.json(finds),
            "vacancies_affected": dg.MetadataValue.json(sorted({f["vacancy_id"] for f in finds})),
        },
    )


recall_probe_job = dg.define_asset_job(
    "recall_probe_job",
    selection=[RECALL_PROBE_KEY],
    description="The monthly recall probe (one month partition per run).",
)

PROBE_ASSETS = [recall_probe]
PROBE_JOBS = [recall_probe_job]

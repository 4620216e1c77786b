"""`memory_evaluation`: the query path's quality, cost and isolation, as an asset.

Runs `hltm.evaluation.memory.questions.evaluate` (the same harness as `hltm eval memory`) on the current
memory tree and the sample world's ground truth: HLTM against its ablations and the full-context,
chunk-RAG and schema-filter baselines, plus the leakage test against unfiltered RAG. The metadata
carries the printed table, every system's figures and the leakage rates; the `zero_leakage` check
fails the materialisation's check if any HLTM answer ever held a foreign node.
"""

from pathlib import Path

import dagster as dg

from hltm.evaluation.memory.questions import ALL_SYSTEMS, evaluate
from hltm.query.engine import QueryEngine
from hltm.settings import Settings
from hltm_dagster.resources import PlatformResource

EVALUATION_GROUP = "evaluation"
HLTM_LEAKAGE = "HLTM (subtree filter)"
BASELINE_LEAKAGE = "RAG, unfiltered"


class MemoryEvaluationConfig(dg.Config):
    world_dir: str = ""  # directory with ground_truth.json; default: <data dir>/world
    limit: int = 0  # at most N questions of each kind (0: all)
    leakage: bool = True
    leakage_baseline: bool = True  # unfiltered RAG beside HLTM in the leakage test (chunk index)
    systems: list[
        str
    ] = []  # only these systems (default: all, see hltm.evaluation.memory.questions)

    def scope(self) -> str:
        """What this run covered, in words: the full harness, or the bounded subset it ran."""
        parts = [
            f"the first {self.limit} questions of each kind" if self.limit else "",
            f"systems {', '.join(self.systems)} only" if self.systems else "",
            "no leakage test" if not self.leakage else "",
            "leakage of HLTM only, no unfiltered RAG beside it"
            if self.leakage and not self.leakage_baseline
            else "",
        ]
        bounded = "; ".join(p for p in parts if p)
        if not bounded:
            return "full: every question, system and the leakage test"
        return f"bounded subset ({bounded}); the full run is `hltm eval memory`"


@dg.asset(
    group_name=EVALUATION_GROUP,
    deps=[dg.AssetKey("contract_memory")],
    check_specs=[
        dg.AssetCheckSpec(
            "zero_leakage",
            asset="memory_evaluation",
            description="No HLTM answer retrieved or cited a node outside the asker's subtree.",
        )
    ],
    description=__doc__,
)
def memory_evaluation(
    context: dg.AssetExecutionContext,
    config: MemoryEvaluationConfig,
    platform: PlatformResource,
) -> dg.MaterializeResult:
    derived_db, sources_db, llm = platform.derived_db, platform.sources_db, platform.llm
    data_dir = Path(derived_db.database).parent
    settings = Settings.from_env(data_dir=data_dir, llm_backend=llm.backend)
    if Path(sources_db.database) != settings.sources_db:
        raise dg.Failure(f"sources_db {sources_db.database} is not beside {settings.derived_db}")
    engine = QueryEngine(
        settings,
        llm=llm.get(),
        embedder=platform.embeddings.get(),
        vectors=platform.vectors.get(),
        log_queries=False,
    )
    world = Path(config.world_dir) if config.world_dir else data_dir / "world"
    report = evaluate(
        settings,
        world,
        systems=config.systems or ALL_SYSTEMS,
        leakage=config.leakage,
        leakage_baseline=config.leakage_baseline,
        limit=config.limit or None,
        engine=engine,
        progress=lambda name: context.log.info(f"evaluating {name}"),
    )
    table = report.table()
    context.log.info("\n" + table)
    metadata: dict[str, object] = {
        "table": dg.MetadataValue.md(f"```\n{table}\n```"),
        "scope": config.scope(),
        "questions": len(report.questions),
        "seconds": round(report.seconds, 1),
        "judge_model": report.judge_model or "n/a (offline)",
    }
    for row in report.rows:
        prefix = row.name.replace("baseline: ", "").replace("ablation: ", "")
        metadata[f"{prefix}/summary_token_f1"] = round(row.summary_f1, 4)
        metadata[f"{prefix}/summary_bleu1"] = round(row.bleu1, 4)
        if row.judge is not None:
            metadata[f"{prefix}/judge_correctness"] = round(row.judge, 4)
        metadata[f"{prefix}/retrieval_f1"] = round(row.ret_f1, 4)
        metadata[f"{prefix}/llm_calls_per_query"] = round(row.llm_calls, 2)
        metadata[f"{prefix}/tokens_per_query"] = round(row.tokens, 1)
        metadata[f"{prefix}/ms_per_query_excl_llm"] = round(row.non_llm_ms, 1)
    checks = []
    if report.leakage is not None:
        for system, levels in report.leakage.as_dict().items():
            for level, figures in levels.items():
                metadata[f"leakage/{system}/{level}/query_wise"] = figures["query_wise"]
                metadata[f"leakage/{system}/{level}/entity_wise"] = figures["entity_wise"]
        ours = report.leakage.get(HLTM_LEAKAGE)
        theirs = report.leakage.systems.get(BASELINE_LEAKAGE, {}).get("all")
        checks.append(
            dg.AssetCheckResult(
                check_name="zero_leakage",
                passed=ours.leaking_queries == 0,
                metadata={
                    "queries": ours.queries,
                    "query_wise": ours.query_wise,
                    "entity_wise": ours.entity_wise,
                    "baseline_query_wise": theirs.query_wise if theirs else "not run",
                    "examples": ", ".join(ours.foreign_examples) or "none",
                },
            )
        )
    else:
        checks.append(
            dg.AssetCheckResult(
                check_name="zero_leakage",
                passed=True,
                severity=dg.AssetCheckSeverity.WARN,
                metadata={"skipped": "leakage test disabled in config"},
            )
        )
    return dg.MaterializeResult(metadata=metadata, check_results=checks)


# Everything that measures the platform on the current data, in one run (the demo runs it with
# small settings so a first `hltm demo` leaves the whole asset graph materialised).
evaluate_platform_job = dg.define_asset_job(
    "evaluate_platform",
    selection=dg.AssetSelection.assets(memory_evaluation)
    | dg.AssetSelection.assets(dg.AssetKey("golden_evaluation"), dg.AssetKey("judge_stats_report")),
    description="The golden set, the memory evaluation and the judge statistics report.",
)

EVALUATION_ASSETS = [memory_evaluation]
EVALUATION_JOBS = [evaluate_platform_job]

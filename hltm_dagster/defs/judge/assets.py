"""The evidence-backed judge in Dagster: pools → judge scores → rankings, per vacancy.

* `resume_index` — the ``resumes`` vector collection, synced with the sources (only resumes whose
  content hash changed are embedded and upserted).
* `candidate_pools`, `judge_scores`, `rankings` — on the dynamic ``vacancies`` partitions (key =
  vacancy id), so each vacancy has its own status, metadata and "materialize" button:
  vector top-100 ∪ BM25 top-150 → the judge on every pool pair (score cache, budget, workers) →
  sorted by ``overall`` and appended to the hash-chained journal.
* `judge_quote_gate` — a **blocking** check on `judge_scores`: when fewer than 90% of the
  configuration's quotes on mandatory requirements survive validation it fails with ERROR, and
  `rankings` does not run in that run; `rankings` re-checks the gate itself, so no path
  publishes a blocked configuration.
* `ranking_journal_chain` — re-hashes the whole journal after each publication.
* `golden_evaluation` (+ check `golden_pins`) — the frozen golden set: cosine / BM25 / RRF /
  union + judge, closed set and live pool, with the pinned cosine baseline re-verified.
* `judge_refresh` — an op job doing the nightly run in one process with one budget: refresh
  the index, rebuild pools, judge, gate, publish; it logs the same materialisations and check
  results per vacancy partition. The nightly schedule and the `vacancy_changes` sensor run it.

All the work is done by `hltm.judge.service`; this module wires resources and events.
"""

from typing import Any

import dagster as dg
from dagster import AssetExecutionContext, OpExecutionContext

from hltm.judge.calibration import calibrated_vacancies
from hltm.judge.data import load_vacancies
from hltm.judge.formal import DEFAULT_FORMAL_PATTERNS
from hltm.judge.gate import GATE_MIN_SURVIVAL, GATE_WINDOW, GateDecision, blocked_advice
from hltm.judge.journal import (
    JOURNAL,
    REDACTIONS,
    Anchor,
    ChainReport,
    Publication,
    config_gate,
    reanchor,
    redactions_head,
    verify_chain,
)
from hltm.judge.pipeline import (
    Budget,
    JudgeConfig,
    JudgeReport,
    judge_config,
)
from hltm.judge.service import JudgeEnv, PoolResult, judge_all, pool_advice
from hltm.judge.service import build_vacancy_pool as _build_pool
from hltm.judge.service import gate as _gate
from hltm.judge.service import judge_vacancy as _judge
from hltm.judge.service import publish_vacancy as _publish
from hltm.judge.service import refresh_index as _refresh
from hltm.runlock import JUDGE_RUN
from hltm.warehouse import connect
from hltm_dagster.defs.sources.assets import VACANCIES, source_key
from hltm_dagster.resources import PlatformResource

JUDGE_GROUP = "judge"


def make_env(platform: PlatformResource) -> JudgeEnv:
    judge = platform.judge
    return JudgeEnv(
        sources_db=platform.sources_db.path,
        derived_db=platform.derived_db.path,
        store=platform.vectors.get(),
        embedder=platform.embeddings.get(),
        llm=platform.llm.judge(),
        reasoning_effort=platform.llm.reasoning_effort,
        k_vector=judge.k_vector,
        k_bm25=judge.k_bm25,
        formal_patterns=(*DEFAULT_FORMAL_PATTERNS, *judge.extra_formal_patterns),
    )


def _vacancy(env: JudgeEnv, vacancy_id: str):  # type: ignore[no-untyped-def]
    found = calibrated_vacancies(env.sources_db, env.derived_db, [vacancy_id])
    if not found:
        raise dg.Failure(f"vacancy {vacancy_id} is not in the sources (deleted?)")
    return found[0]


# ------------------------------------------------------------------------------ metadata


def pool_metadata(result: PoolResult) -> dict[str, Any]:
    head = [
        f"| {i} | {e.id} | {e.vector_rank or '–'} | {e.bm25_rank or '–'} |"
        for i, e in enumerate(result.entries[:10], start=1)
    ]
    table = "| # | resume | vector rank | BM25 rank |\n|---|---|---|---|\n" + "\n".join(head)
    return {**result.as_metadata(), "first_10": dg.MetadataValue.md(table)}


def judge_metadata(report: JudgeReport) -> dict[str, Any]:
    meta: dict[str, Any] = dict(report.as_metadata())
    meta["vacancy_version"] = report.vacancy_version
    if report.failures:
        rows = "\n".join(f"| {rid} | {reason[:160]} |" for rid, reason in report.failures[:20])
        meta["failures"] = dg.MetadataValue.md("| resume | reason |\n|---|---|\n" + rows)
    return meta


def survival_shown(decision: GateDecision) -> float | str:
    """The survival rate, or "not measured" when no mandatory quote was given to measure."""
    return round(decision.rate, 4) if decision.measured else "not measured"


def gate_metadata(decision: GateDecision, config: JudgeConfig) -> dict[str, Any]:
    return {
        "survival_rate": survival_shown(decision),
        "minimum": GATE_MIN_SURVIVAL,
        "decision": decision.reason,
        **config.as_metadata(),
    }


def ranking_metadata(publication: Publication) -> dict[str, Any]:
    """What a publish did and the ranking now served; its journal seq and full row hash also
    anchor the journal's head outside the table (see `dagster_anchor`)."""
    meta: dict[str, Any] = {
        "published": publication.published,
        "decision": publication.reason,
        "judged_of_pool": f"{publication.judged}/{publication.pool}",
    }
    entry = publication.live
    if entry is None:
        return meta
    rows = "\n".join(
        f"| {i} | {r.resume_id} | {r.overall} | {r.role} | {r.level} | {r.skills} |"
        for i, r in enumerate(entry.top(10), start=1)
    )
    table = "| # | resume | overall | role | level | skills |\n|---|---|---|---|---|---|\n" + rows
    return {
        **meta,
        "journal_seq": entry.seq,
        "row_hash": entry.row_hash,
        "ranked": entry.judged,
        "pending_not_judged": entry.pending,
        "failed_this_run": entry.failed,
        "gate_rate": entry.gate_rate,
        "top_10": dg.MetadataValue.md(table),
        "judge_model": entry.model,
        "prompt_version": entry.prompt_version,
    }


def _anchor(meta: Any, keys: tuple[str, str], source: str, chain: str) -> Anchor | None:
    """The anchor that event metadata names under `keys` (seq, row hash), if it does."""
    seq, digest = keys
    if seq not in meta or digest not in meta:
        return None
    return Anchor(int(meta[seq].value), str(meta[digest].value), source, chain)


def dagster_anchor(instance: dg.DagsterInstance) -> Anchor | None:
    """The journal row named by the latest `rankings` materialisation (any vacancy)."""
    event = instance.get_latest_materialization_event(RANKINGS_KEY)
    materialization = event.asset_materialization if event else None
    return _anchor(
        materialization.metadata if materialization else {},
        ("journal_seq", "row_hash"),
        "latest Dagster materialisation of rankings",
        JOURNAL,
    )


def dagster_redaction_anchor(instance: dg.DagsterInstance) -> Anchor | None:
    """The ranking journal's last deletion record, as `hltm delete` observed it on `rankings`
    (`record_redactions`)."""
    result = instance.fetch_observations(RANKINGS_KEY, limit=1)
    event = result.records[0].asset_observation if result.records else None
    return _anchor(
        event.metadata if event else {},
        ("redaction_seq", "redaction_hash"),
        "latest Dagster observation of rankings",
        REDACTIONS,
    )


def record_redactions(instance: dg.DagsterInstance, derived_db: Any) -> None:
    """What `hltm delete` calls once it redacted the journal: the head of its deletion records,
    anchored in the instance as an observation of `rankings`, outside the data dir."""
    head = redactions_head(derived_db)
    if head is not None:
        instance.report_runless_asset_event(
            dg.AssetObservation(
                RANKINGS_KEY,
                metadata={"redaction_seq": head.seq, "redaction_hash": head.row_hash},
                description="the ranking journal's deletion records, after `hltm delete`",
            )
        )


def chain_check(
    instance: dg.DagsterInstance, derived_db: Any, rewrite_head: bool = False
) -> ChainReport:
    """The journal checked against the head file and the instance's anchors (`rewrite_head`:
    the head file written anew first, when the journal verifies without it)."""
    anchors = [dagster_anchor(instance), dagster_redaction_anchor(instance)]
    present = [a for a in anchors if a is not None]
    return (reanchor if rewrite_head else verify_chain)(derived_db, present)


def log_publication(log: Any, vacancy_id: str, publication: Publication) -> None:
    if publication.published or publication.unchanged:
        log.info(f"{vacancy_id}: ranking published, {publication.reason}")
    else:
        log.warning(f"{vacancy_id}: ranking not replaced, {publication.reason}")


# --------------------------------------------------------------------------------- assets


@dg.asset(
    group_name=JUDGE_GROUP,
    deps=[source_key("resumes")],
    kinds={"chroma"},
    description="The `resumes` vector collection (the active layer, metadata layer + content hash); "
    "only changed resumes are embedded and upserted.",
)
def resume_index(
    context: AssetExecutionContext,
    platform: PlatformResource,
) -> dg.MaterializeResult:
    env = make_env(platform)
    sync = _refresh(env)
    return dg.MaterializeResult(metadata=dict(sync.__dict__))


@dg.asset(
    group_name=JUDGE_GROUP,
    partitions_def=VACANCIES,
    deps=[resume_index, source_key("vacancies"), source_key("vacancy_requirements")],
    kinds={"duckdb"},
    description="Vector top-100 ∪ BM25 top-150 over the active layer, with each candidate's "
    "provenance (retriever, rank). RRF is a measured baseline only, never the pool.",
)
def candidate_pools(
    context: AssetExecutionContext,
    platform: PlatformResource,
) -> dg.MaterializeResult:
    env = make_env(platform)
    result = _build_pool(env, _vacancy(env, context.partition_key), context.run.run_id)
    return dg.MaterializeResult(metadata=pool_metadata(result))


@dg.asset(
    group_name=JUDGE_GROUP,
    partitions_def=VACANCIES,
    deps=[candidate_pools, dg.AssetKey("vacancy_calibration")],
    kinds={"duckdb", "openai"},
    description="The judge's verdict on every pool pair: five scores, a checklist with "
    "validated verbatim quotes. Score cache (append-only), budget of cold evaluations, workers.",
)
def judge_scores(
    context: AssetExecutionContext,
    platform: PlatformResource,
) -> dg.MaterializeResult:
    env = make_env(platform)
    vacancy = _vacancy(env, context.partition_key)
    judge = platform.judge
    with platform.exclusive(JUDGE_RUN, context):
        report = _judge(env, vacancy, budget=Budget(judge.budget), workers=judge.workers,
                        run_id=context.run.run_id)  # fmt: skip
    for rid, reason in report.failures[:20]:
        context.log.warning(f"judging {vacancy.vacancy_id} × {rid} failed: {reason}")
    if report.deferred:
        context.log.info(f"{report.deferred} cold pairs deferred to the next run by the budget")
    return dg.MaterializeResult(metadata=judge_metadata(report))


@dg.asset_check(
    asset=judge_scores,
    blocking=True,
    description="Config gate: at least 90% of the quotes this judge configuration gave on "
    "mandatory requirements must survive validation, or rankings are not published.",
)
def judge_quote_gate(platform: PlatformResource) -> dg.AssetCheckResult:
    config = judge_config(platform.llm.judge(), platform.llm.reasoning_effort)
    with connect(platform.derived_db.path) as con:
        decision = config_gate(con, config)
    return dg.AssetCheckResult(
        passed=decision.passed,
        severity=dg.AssetCheckSeverity.ERROR,
        metadata=gate_metadata(decision, config),
        description=decision.reason,
    )


@dg.asset(
    group_name=JUDGE_GROUP,
    partitions_def=VACANCIES,
    deps=[judge_scores],
    kinds={"duckdb"},
    description="The vacancy's candidates sorted by `overall` alone, appended to the "
    "hash-chained ranking journal — only when complete or at least as complete as the live "
    "ranking (else the live one stays, and the metadata says why).",
)
def rankings(
    context: AssetExecutionContext,
    platform: PlatformResource,
) -> dg.MaterializeResult:
    env = make_env(platform)
    vacancy = _vacancy(env, context.partition_key)
    try:
        publication = _publish(env, vacancy, run_id=context.run.run_id)
    except PermissionError as err:
        raise dg.Failure(str(err), metadata=gate_metadata(_gate(env), env.config)) from None
    log_publication(context.log, vacancy.vacancy_id, publication)
    return dg.MaterializeResult(metadata=ranking_metadata(publication))


@dg.asset_check(
    asset=rankings,
    description="Re-hash the ranking journal, check its head against the head file and the "
    "latest materialisation, and `rankings` against the journal: any edited, deleted or "
    "truncated row fails it.",
)
def ranking_journal_chain(
    context: dg.AssetCheckExecutionContext, platform: PlatformResource
) -> dg.AssetCheckResult:
    report = chain_check(context.instance, platform.derived_db.path)
    return dg.AssetCheckResult(
        passed=report.ok,
        metadata={"rows": report.rows, "first_bad_seq": report.first_bad_seq or 0},
        description=report.summary(),
    )


@dg.asset(
    group_name=JUDGE_GROUP,
    kinds={"duckdb"},
    description="The frozen golden set (hltm/evaluation/golden/): strict/soft precision@10 for cosine, BM25, "
    "RRF and union + judge, closed set and live pool, and the fit recall of each pool.",
)
def golden_evaluation(
    context: AssetExecutionContext, platform: PlatformResource
) -> dg.MaterializeResult:
    from hltm.evaluation.judge.golden import load_golden
    from hltm.evaluation.judge.golden_eval import evaluate_golden, save_report

    llm, derived_db = platform.llm, platform.derived_db.path
    report = evaluate_golden(
        load_golden(), llm.judge(), platform.embeddings.get(), derived_db,
        reasoning_effort=llm.reasoning_effort, workers=platform.judge.workers,
        run_id=context.run.run_id,
    )  # fmt: skip
    save_report(derived_db, report, context.run.run_id)
    meta: dict[str, Any] = {
        "table": dg.MetadataValue.md(report.table()),
        "per_vacancy": dg.MetadataValue.md(report.per_vacancy_table()),
    }
    for setting in ("closed", "live"):
        for method in ("cosine", "bm25", "rrf", "union+judge"):
            for soft in (False, True):
                name = f"{setting}_{method.replace('+', '_')}_{'soft' if soft else 'strict'}_p10"
                meta[name] = round(report.value(setting, method, soft), 4)
    meta.update(report.config.as_metadata())
    meta["quote_survival"] = survival_shown(report.gate)
    return dg.MaterializeResult(metadata=meta)


@dg.asset_check(
    asset=golden_evaluation,
    description="Pin test: the cosine strict and soft precision@10 on the frozen golden set "
    "must reproduce the pinned numbers (embedding snapshot spot-checked).",
)
def golden_pins(platform: PlatformResource) -> dg.AssetCheckResult:
    from hltm.evaluation.judge.golden import check_pins, load_golden

    result = check_pins(load_golden(), platform.embeddings.get())
    return dg.AssetCheckResult(
        passed=result.ok,
        metadata={"max_drift": result.max_drift, "spot_checked": result.spot_checked},
        description=result.message,
    )


# ------------------------------------------------------------------- the nightly op job

POOLS_KEY = dg.AssetKey("candidate_pools")
SCORES_KEY = dg.AssetKey("judge_scores")
RANKINGS_KEY = dg.AssetKey("rankings")


class JudgeRunConfig(dg.Config):
    """Empty `vacancies` = every vacancy in the sources; 0 = the resource's default.
    `rejudge_failed`: judge again the cached evaluations that failed the evidence check (how an
    operator clears a quote gate blocked by a bad spell of the model, see
    `hltm.judge.gate.blocked_advice`)."""

    vacancies: list[str] = []
    budget: int = 0
    workers: int = 0
    rejudge_failed: bool = False


@dg.op
def judge_all_vacancies(
    context: OpExecutionContext, config: JudgeRunConfig, platform: PlatformResource
) -> dict[str, Any]:
    with platform.exclusive(JUDGE_RUN, context):
        return _judge_all(context, config, platform)


def _judge_all(
    context: OpExecutionContext, config: JudgeRunConfig, platform: PlatformResource
) -> dict[str, Any]:
    """One judge run over the given vacancies (all by default); another waits for it to end
    and then finds its pairs in the score cache."""
    judge = platform.judge
    env = make_env(platform)
    wanted = config.vacancies or None
    ids = [v.vacancy_id for v in load_vacancies(env.sources_db, wanted)]
    known = set(context.instance.get_dynamic_partitions(VACANCIES.name))
    missing = [i for i in ids if i not in known]
    if missing:
        context.instance.add_dynamic_partitions(VACANCIES.name, missing)

    def on_vacancy(vid: str, step: str, result: Any) -> None:
        if step == "pool":
            context.log_event(
                dg.AssetMaterialization(POOLS_KEY, partition=vid, metadata=pool_metadata(result))
            )
        elif step == "judge":
            context.log_event(
                dg.AssetMaterialization(SCORES_KEY, partition=vid, metadata=judge_metadata(result))
            )
        elif step == "publish":
            log_publication(context.log, vid, result)
            context.log_event(
                dg.AssetMaterialization(
                    RANKINGS_KEY, partition=vid, metadata=ranking_metadata(result)
                )
            )
        elif step == "blocked":
            context.log.error(f"{vid}: ranking not published, quote gate {result.reason}")

    # Recorded in dependency order: the index before the pools it feeds, or the UI reads every
    # pool of this run stale ("resume_index has a new materialization").
    index = _refresh(env)
    context.log_event(
        dg.AssetMaterialization(dg.AssetKey("resume_index"), metadata=dict(index.__dict__))
    )
    summary = judge_all(
        env, ids, budget=config.budget or judge.budget, workers=config.workers or judge.workers,
        run_id=context.run.run_id, on_vacancy=on_vacancy, rejudge_failed=config.rejudge_failed,
        refresh=False,
    )  # fmt: skip
    if summary.gate is not None:
        for vid in ids:
            context.log_event(
                dg.AssetCheckEvaluation(
                    asset_key=SCORES_KEY,
                    check_name="judge_quote_gate",
                    passed=summary.gate.passed,
                    metadata=gate_metadata(summary.gate, env.config),
                    partition=vid,
                    severity=dg.AssetCheckSeverity.ERROR,
                    description=summary.gate.reason,
                )  # fmt: skip
            )
    chain = chain_check(context.instance, env.derived_db)
    context.log_event(
        dg.AssetCheckEvaluation(
            asset_key=RANKINGS_KEY,
            check_name="ranking_journal_chain",
            passed=chain.ok,
            metadata={"rows": chain.rows},
            description=chain.summary(),
        )  # fmt: skip
    )
    for line in summary.lines():
        context.log.info(line)
    if summary.gate is not None and not summary.gate.passed:
        raise dg.Failure(
            f"rankings not published: quote gate {summary.gate.reason} over the latest"
            f" {GATE_WINDOW} evaluations; {blocked_advice(summary.gate)}",
            metadata=summary.totals(),
        )
    blocked = {vid: f"quote gate {r}; {pool_advice(vid)}" for vid, r in summary.blocked.items()}
    return {
        **summary.totals(),
        "budget": summary.budget,
        "held_reasons": summary.held,
        "blocked_reasons": blocked,
    }


@dg.job(
    name="judge_refresh",
    description="Refresh the resume index, rebuild pools, judge with one budget, gate and "
    "publish rankings — for every vacancy (nightly) or the given ones (sensor).",
)
def judge_refresh_job() -> None:
    judge_all_vacancies()


judge_vacancy_job = dg.define_asset_job(
    "judge_vacancy",
    selection=dg.AssetSelection.assets(candidate_pools, judge_scores, rankings),
    description="One vacancy partition: pool → judge scores → (blocking gate) → rankings.",
)

JUDGE_ASSETS = [resume_index, candidate_pools, judge_scores, rankings, golden_evaluation]
JUDGE_CHECKS = [judge_quote_gate, ranking_journal_chain, golden_pins]
JUDGE_JOBS = [judge_refresh_job, judge_vacancy_job]

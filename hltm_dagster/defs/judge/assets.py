"""The evidence-backed judge in Dagster: pools → judge scores → rankings, per vacancy.

* `resume_index` — the ``resumes`` vector collection, synced with the sources (only resumes whose
  content hash changed are embedded and upserted).
* `candidate_pools`, `judge_scores`, `rankings` — on the dynamic ``vacancies`` partitions (key =
  vacancy id), so each vacancy has its own status, metadata and "materialize" button:
  vector top-100 ∪ BM25 top-150 → the judge on every pool pair (score cache, budget, workers) →
  sorted by ``overall`` and appended to the hash-chained journal. Their backfill policy is a
  single run: a run over many vacancies runs each step once for all of them, so the judge
  spends one budget of cold evaluations across the run and the gate is evaluated once; each
  partition still gets its own metadata (`add_asset_metadata`).
* `judge_quote_gate` — a **blocking** check on `judge_scores`: when fewer than 90% of the
  configuration's quotes on mandatory requirements survive validation it fails with ERROR, and
  `rankings` does not run in that run; `rankings` re-checks the gate itself, so no path
  publishes a blocked configuration.
* `ranking_journal_chain` — re-hashes the whole journal after each publication.
* `golden_evaluation` (+ check `golden_pins`) — the frozen golden set: cosine / BM25 / RRF /
  union + judge, closed set and live pool, with the pinned cosine baseline re-verified.
* `judge_refresh` — the asset job over the index and the three per-vacancy assets: the UI's
  Materialize of a vacancy (or a range), the `vacancy_changes` sensor, the nightly schedule and
  `hltm judge run` all run it, so every path runs the assets' own functions.

All the work is done by `hltm.judge.service`; this module wires resources and events.
"""

from typing import Any

import dagster as dg
from dagster import AssetExecutionContext

from hltm.judge.calibration import calibrated_vacancies
from hltm.judge.data import Vacancy
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
from hltm.judge.pipeline import JudgeConfig, JudgeReport, judge_config
from hltm.judge.service import (
    JudgeEnv,
    PoolResult,
    build_pools,
    failed_in_run,
    judge_pools,
    load_pool,
    pool_advice,
    publish_vacancies,
    refresh_index,
)
from hltm.judge.service import gate as _gate
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


def _vacancies(env: JudgeEnv, context: AssetExecutionContext) -> list[Vacancy]:
    """The run's vacancies: one partition (the UI's Materialize) or a range of them."""
    wanted = list(context.partition_keys)
    found = calibrated_vacancies(env.sources_db, env.derived_db, wanted)
    missing = sorted(set(wanted) - {v.vacancy_id for v in found})
    if missing:
        raise dg.Failure(f"vacancies not in the sources (deleted?): {', '.join(missing[:10])}")
    return found


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
    outcome = (
        "published" if publication.published else "unchanged" if publication.unchanged else "held"
    )
    meta: dict[str, Any] = {
        "published": publication.published,
        "outcome": outcome,
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


class JudgeRunConfig(dg.Config):
    """How `judge_scores` spends a run: `budget` is its cold evaluations, shared by the run's
    vacancies (None: the resource's default; 0: nothing new is judged, the cache is published);
    `workers` 0 is the resource's default. `rejudge_failed`: judge again the cached
    evaluations that failed the evidence check (how an operator clears a quote gate blocked by
    a bad spell of the model, see `hltm.judge.gate.blocked_advice`)."""

    budget: int | None = None
    workers: int = 0
    rejudge_failed: bool = False


# A run over many vacancies runs each step once for all of them (one budget, one gate).
_ONE_RUN = dg.BackfillPolicy.single_run()


def _per_partition(context: AssetExecutionContext, metadata: dict[str, dict[str, Any]]) -> None:
    """Each partition's own metadata, when the run materializes several in one step."""
    for vacancy_id, meta in metadata.items():
        context.add_asset_metadata(meta, partition_key=vacancy_id)


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
    with platform.exclusive(JUDGE_RUN, context):
        sync = refresh_index(make_env(platform))
    return dg.MaterializeResult(metadata=dict(sync.__dict__))


@dg.asset(
    group_name=JUDGE_GROUP,
    partitions_def=VACANCIES,
    backfill_policy=_ONE_RUN,
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
    with platform.exclusive(JUDGE_RUN, context):
        pools = build_pools(env, _vacancies(env, context), context.run.run_id)
    _per_partition(context, {vid: pool_metadata(result) for vid, result in pools.items()})
    return dg.MaterializeResult()


@dg.asset(
    group_name=JUDGE_GROUP,
    partitions_def=VACANCIES,
    backfill_policy=_ONE_RUN,
    deps=[candidate_pools, dg.AssetKey("vacancy_calibration")],
    kinds={"duckdb", "openai"},
    description="The judge's verdict on every pool pair: five scores, a checklist with "
    "validated verbatim quotes. Score cache (append-only), one budget of cold evaluations per "
    "run shared fairly by its vacancies, workers.",
)
def judge_scores(
    context: AssetExecutionContext,
    config: JudgeRunConfig,
    platform: PlatformResource,
) -> dg.MaterializeResult:
    env = make_env(platform)
    budget = platform.judge.budget if config.budget is None else config.budget
    with platform.exclusive(JUDGE_RUN, context):
        vacancies = _vacancies(env, context)
        pools = {v.vacancy_id: load_pool(env, v) for v in vacancies}
        reports = judge_pools(
            env, vacancies, pools, budget, config.workers or platform.judge.workers,
            context.run.run_id, rejudge_failed=config.rejudge_failed,
        )  # fmt: skip
    for vid, report in reports.items():
        for rid, reason in report.failures[:20]:
            context.log.warning(f"judging {vid} × {rid} failed: {reason}")
    deferred = sum(r.deferred for r in reports.values())
    if deferred:
        context.log.info(f"{deferred} cold pairs deferred to the next run by the budget")
    _per_partition(context, {vid: judge_metadata(report) for vid, report in reports.items()})
    return dg.MaterializeResult(metadata={"run_budget": budget})


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
        description=gate_failure(decision) if not decision.passed else decision.reason,
    )


def gate_failure(decision: GateDecision) -> str:
    """Why no ranking was published, and what clears it."""
    return (
        f"rankings not published: quote gate {decision.reason} over the latest {GATE_WINDOW}"
        f" evaluations; {blocked_advice(decision)}"
    )


def blocked_metadata(vacancy_id: str, decision: GateDecision) -> dict[str, Any]:
    """A vacancy whose own evaluations fail the gate: nothing published, the live one stays."""
    return {
        "published": False,
        "outcome": "blocked",
        "decision": f"quote gate {decision.reason}; {pool_advice(vacancy_id)}",
    }


@dg.asset(
    group_name=JUDGE_GROUP,
    partitions_def=VACANCIES,
    backfill_policy=_ONE_RUN,
    deps=[judge_scores],
    kinds={"duckdb"},
    description="The vacancy's candidates sorted by `overall` alone, appended to the "
    "hash-chained ranking journal — only when complete or at least as complete as the live "
    "ranking (else the live one stays, and the metadata says why); a vacancy whose own "
    "evaluations fail the quote gate is not published.",
)
def rankings(
    context: AssetExecutionContext,
    platform: PlatformResource,
) -> dg.MaterializeResult:
    env = make_env(platform)
    with platform.exclusive(JUDGE_RUN, context):
        overall = _gate(env)
        if not overall.passed:  # the blocking check stops this step; a run without it too
            raise dg.Failure(gate_failure(overall), metadata=gate_metadata(overall, env.config))
        vacancies = _vacancies(env, context)
        pools = {v.vacancy_id: load_pool(env, v) for v in vacancies}
        failed = failed_in_run(env.derived_db, context.run.run_id)
        outcomes = publish_vacancies(env, vacancies, pools, failed, context.run.run_id)
    metadata: dict[str, dict[str, Any]] = {}
    for vid, outcome in outcomes.items():
        if isinstance(outcome, GateDecision):
            context.log.error(f"{vid}: ranking not published, quote gate {outcome.reason}")
            metadata[vid] = blocked_metadata(vid, outcome)
        else:
            log_publication(context.log, vid, outcome)
            metadata[vid] = ranking_metadata(outcome)
    _per_partition(context, metadata)
    # The journal's newest row this run served, on every partition's event: the latest
    # materialization anchors the journal's head whichever partition it is (`dagster_anchor`).
    live = [o.live for o in outcomes.values() if isinstance(o, Publication) and o.live]
    newest = max(live, key=lambda e: e.seq, default=None)
    anchor = {"journal_seq": newest.seq, "row_hash": newest.row_hash} if newest else {}
    return dg.MaterializeResult(metadata=anchor)


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


# ------------------------------------------------------------------------------------ jobs

POOLS_KEY = dg.AssetKey("candidate_pools")
SCORES_KEY = dg.AssetKey("judge_scores")
RANKINGS_KEY = dg.AssetKey("rankings")

judge_refresh_job = dg.define_asset_job(
    "judge_refresh",
    selection=dg.AssetSelection.assets(resume_index, candidate_pools, judge_scores, rankings),
    description="Refresh the resume index, rebuild pools, judge with one budget, gate and "
    "publish rankings — for one vacancy, a range of them in one run (the UI's backfill, the "
    "`vacancy_changes` sensor), or every vacancy (the nightly schedule, `hltm judge run`).",
)

JUDGE_ASSETS = [resume_index, candidate_pools, judge_scores, rankings, golden_evaluation]
JUDGE_CHECKS = [judge_quote_gate, ranking_journal_chain, golden_pins]
JUDGE_JOBS = [judge_refresh_job]

"""The memory tree in Dagster: three partitioned assets and one ordered refresh job.

* `project_memory`, `seat_memory`, `contract_memory` — each on its own dynamic partition set
  (`projects`, `seats`, `contracts`; partition key = the source id), so every node has its own
  status, metadata and "materialize" button; a backfill of many nodes of a level is one run
  (single-run backfill policy) that builds them together. `seat_memory ← project_memory` and
  `contract_memory ← seat_memory` use `AllPartitionMapping` (serialisable; a backfill runs level
  by level); the precise tree lives in DuckDB and each materialisation records its exact lineage
  (child keys and versions) in metadata.
* `refresh_memory_tree` — an op job whose config is an affected set (node ids); it purges deleted
  nodes, then rebuilds the rest in one run and one process (a parent as soon as its children are
  done: `MemoryBuilder.build`), and logs an `AssetMaterialization` per rebuilt node with the same
  metadata as the assets. The
  `source_changes` sensor requests it. `rebuild_memory_tree` is the same graph preset to rebuild
  everything that is not current (optionally from scratch): the full-rebuild path.

All the work is done by `hltm.memory.MemoryBuilder`; this module only wires resources and events.
"""

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dagster as dg
from dagster import AssetExecutionContext, OpExecutionContext

from hltm.deletion import compact_chroma_log
from hltm.memory import MemoryBuilder, MemoryStore, load_hints
from hltm.memory.build import version_config
from hltm.memory.flow import NodeReport
from hltm.memory.hints import Hints
from hltm.memory.models import LEVELS, node_id_for, split_node_id
from hltm.memory.store import degraded_nodes
from hltm.memory.tree import Plan, Tree, close_over_ancestors, plan_changes
from hltm.runlock import MEMORY_REFRESH
from hltm.warehouse import connect
from hltm_dagster.defs.patterns.assets import MEMORY_HINTS_KEY
from hltm_dagster.defs.sources.assets import source_key
from hltm_dagster.resources import PlatformResource, WarehouseResource

MEMORY_GROUP = "memory"
PARTITIONS: dict[str, dg.DynamicPartitionsDefinition] = {
    "project": dg.DynamicPartitionsDefinition(name="projects"),
    "seat": dg.DynamicPartitionsDefinition(name="seats"),
    "contract": dg.DynamicPartitionsDefinition(name="contracts"),
}
ASSET_KEYS: dict[str, dg.AssetKey] = {
    "project": dg.AssetKey("project_memory"),
    "seat": dg.AssetKey("seat_memory"),
    "contract": dg.AssetKey("contract_memory"),
}
REFRESH_TAG = "hltm/memory_refresh"


def current_hints(derived_db: WarehouseResource, read_only: bool = False) -> Hints:
    if read_only and not derived_db.path.exists():
        return Hints()
    with connect(derived_db.path, read_only=read_only) as con:
        return load_hints(con)


def make_builder(platform: PlatformResource, hints: Hints | None = None) -> MemoryBuilder:
    """A builder on the run's resources (`hints`: as read by an earlier op of the same run, so
    every op of a run builds with the same release; else the newest released)."""
    store = MemoryStore(platform.derived_db.path, platform.vectors.get())
    return MemoryBuilder(
        platform.sources_db.path,
        store,
        platform.llm.get(),
        platform.embeddings.get(),
        hints if hints is not None else current_hints(platform.derived_db),
        platform.memory_tree.config(),
    )


def node_metadata(report: NodeReport) -> dict[str, Any]:
    """Materialisation metadata: exact lineage, item counts, LLM and embedding cost, time."""
    meta = report.metadata()
    return {
        "node_id": meta["node_id"],
        "version": meta["version"],
        "previous_version": meta["previous_version"] or "-",
        "children": dg.MetadataValue.json(meta["children"]),
        "child_count": meta["child_count"],
        "facets": meta["facets"],
        "qa_pairs": meta["qa_pairs"],
        "summaries": meta["summaries"],
        "facets_dropped": meta["facets_dropped"],
        "qa_dropped": meta["qa_dropped"],
        "dropped_reasons": dg.MetadataValue.json(meta["dropped_reasons"]),
        "llm_calls": meta["llm_calls"],
        "llm_failed_calls": meta["llm_failed_calls"],
        "llm_interrupted": meta["llm_interrupted"],
        "prompt_tokens": meta["prompt_tokens"],
        "completion_tokens": meta["completion_tokens"],
        "embedding_calls": meta["embedding_calls"],
        "seconds": meta["seconds"],
    }


def _partition_key(node_id: str) -> str:
    return split_node_id(node_id)[1]


# ---- the partitioned assets --------------------------------------------------------------------


def _stale_children(builder: MemoryBuilder, node_ids: list[str]) -> list[str]:
    """Children of these parents (outside the set) whose stored memory is not current."""
    tree = builder.tree()
    built = builder.store.built()
    wanted = set(node_ids)
    return sorted(
        c
        for n in node_ids
        if n in tree.nodes
        for c in tree.children[n]
        if c not in wanted and (c not in built or built[c].version != tree.versions[c])
    )


def _materialize_nodes(
    context: AssetExecutionContext, builder: MemoryBuilder, level: str
) -> dg.MaterializeResult:
    """The run's partitions of one level: one node (the UI's Materialize of a partition) or a
    range of them in one run (a backfill: the assets' backfill policy is a single run)."""
    node_ids = [node_id_for(level, key) for key in context.partition_keys]
    stale = _stale_children(builder, node_ids) if level != "project" else []
    if stale:
        raise dg.Failure(
            description=(
                f"{', '.join(node_ids[:3])}{' …' if len(node_ids) > 3 else ''} is built from its"
                f" children's memories, and {len(stale)} of them are not current"
                f" ({', '.join(stale[:5])}{' …' if len(stale) > 5 else ''})."
                " Materialize them first, or run `refresh_memory_tree`."
            )
        )
    reports = [r for r in builder.build(node_ids) if r.node_id in set(node_ids)]
    failed = [r for r in reports if r.status == "failed"]
    for report in reports:
        if report.status == "deleted":
            context.log.warning(
                f"{report.node_id} is no longer in the sources: its memory was purged"
            )
        elif report.status == "current":
            context.log.info(
                f"{report.node_id} is current (version {report.version}): nothing rebuilt"
            )
    if len(reports) == 1:
        (report,) = reports
        if failed:  # its cost stays in the failure's metadata
            raise dg.Failure(description=report.error, metadata=node_metadata(report))
        status = report.status
        if status == "current":  # nothing rebuilt: record what the store holds, not zeros
            stored = builder.store.nodes([report.node_id])[report.node_id]
            report.facets, report.qa = len(stored.facets), len(stored.qa)
            report.summaries = 1 if stored.summary_short else 0
            status = "current, not rebuilt (item counts are the stored node's)"
        return dg.MaterializeResult(
            metadata={**node_metadata(report), "status": status},
            data_version=dg.DataVersion(report.version or "deleted"),
        )
    if failed:
        raise dg.Failure(
            description=f"{len(failed)} of {len(reports)} {level} node(s) failed; every other"
            " node was stored:\n" + "\n".join(r.error or r.node_id for r in failed),
            metadata={"failed_nodes": dg.MetadataValue.json([r.node_id for r in failed])},
        )
    return dg.MaterializeResult(metadata=_range_metadata(reports))


def _range_metadata(reports: list[NodeReport]) -> dict[str, Any]:
    """What a run over many nodes records on each of them: the totals and every node's line."""
    rows = "\n".join(
        f"| {r.node_id} | {r.status} | {r.version or '-'} | {r.facets} | {r.qa} |" for r in reports
    )
    table = "| node | status | version | facets | QA pairs |\n|---|---|---|---|---|\n" + rows
    statuses = Counter(r.status for r in reports)
    return {
        "nodes": len(reports),
        "status": ", ".join(f"{n} {s}" for s, n in sorted(statuses.items())),
        "llm_calls": sum(r.llm_calls for r in reports),
        "embedding_calls": sum(r.embedding_calls for r in reports),
        "nodes_table": dg.MetadataValue.md(table),
    }


_ASSET_KINDS = {"duckdb", "chroma"}


def _memory_asset(level: str, deps: list[dg.AssetDep | dg.AssetKey], description: str):  # type: ignore[no-untyped-def]
    """One partitioned asset per tree level; each partition is one node."""

    @dg.asset(
        key=ASSET_KEYS[level],
        partitions_def=PARTITIONS[level],
        # A backfill of many nodes of a level is one run (one process, one build), not a run each.
        backfill_policy=dg.BackfillPolicy.single_run(),
        group_name=MEMORY_GROUP,
        kinds=_ASSET_KINDS,
        deps=deps,
        description=description,
    )
    def _asset(
        context: AssetExecutionContext,
        platform: PlatformResource,
    ) -> dg.MaterializeResult:
        with platform.exclusive(MEMORY_REFRESH, context):
            return _materialize_nodes(context, make_builder(platform), level)

    return _asset


def _all_of(level: str) -> dg.AssetDep:
    return dg.AssetDep(ASSET_KEYS[level], partition_mapping=dg.AllPartitionMapping())


project_memory = _memory_asset(
    "project",
    [
        # The released hints are an input of every node's version (seats and contracts
        # inherit the edge through their children).
        MEMORY_HINTS_KEY,
        *(
            source_key(t)
            for t in (
                "projects",
                "project_documents",
                "recruiter_actions",
                "vacancies",
                "vacancy_requirements",
            )
        ),
    ],
    "Leaf memory of one hiring project: facets, QA pairs and summaries extracted "
    "from its documents, vacancies and recruiter actions, with the released memory hints.",
)
seat_memory = _memory_asset(
    "seat",
    [_all_of("project"), source_key("seats")],
    "A recruiter seat's memory, aggregated from its projects' memories "
    "(the exact child keys and versions are in each materialization's metadata).",
)
contract_memory = _memory_asset(
    "contract",
    [_all_of("seat"), source_key("contracts")],
    "A contract's (customer organisation's) memory, aggregated from its seats' memories.",
)


# ---- the refresh job ---------------------------------------------------------------------------


class RefreshConfig(dg.Config):
    """The affected set (node ids: `project:<id>`, `seat:<id>`, `contract:<id>`).

    Ancestors are added automatically (under the current parent and the parent a node was built
    with), so a list of changed projects is enough. `all_stale` ignores the lists and takes every
    node whose stored version is not the one its sources give (the full-rebuild path);
    `from_scratch` empties the store first (readers see an empty tree meanwhile)."""

    projects: list[str] = []
    seats: list[str] = []
    contracts: list[str] = []
    deletes: list[str] = []
    all_stale: bool = False
    from_scratch: bool = False


def _sync_partitions(context: OpExecutionContext, plan: Plan, tree: Tree) -> None:
    """Make sure every node this run materializes has its partition, and drop purged ones."""
    instance = context.instance
    for level in LEVELS:
        name = PARTITIONS[level].name
        assert name is not None
        existing = set(instance.get_dynamic_partitions(name))
        wanted = {_partition_key(n) for n in plan.level(level)}
        missing = sorted(wanted - existing)
        if missing:
            instance.add_dynamic_partitions(name, missing)
        gone = sorted(
            _partition_key(n)
            for n in plan.deletes
            if split_node_id(n)[0] == level and n not in tree.nodes
        )
        for key in gone:
            if key in existing:
                instance.delete_dynamic_partition(name, key)


@dg.op(
    description="Diff the sources against the memory store, purge deleted nodes, and hand the "
    "affected set (leaves plus ancestor chains) to `refresh_memories`.",
    tags={"kind": "plan"},
)
def plan_memory_refresh(
    context: OpExecutionContext,
    config: RefreshConfig,
    platform: PlatformResource,
) -> dict[str, Any]:
    with platform.exclusive(MEMORY_REFRESH, context):
        return _plan(context, config, platform)


def _plan(
    context: OpExecutionContext, config: RefreshConfig, platform: PlatformResource
) -> dict[str, Any]:
    builder = make_builder(platform)
    # A vector index a full disk or a crash left unreadable is rebuilt from the stored nodes
    # (derived data: nothing is lost), on every path that refreshes the memory.
    repairs = builder.store.vectors.repair()
    for line in repairs:
        context.log.warning(f"vector index: {line}")
    if config.from_scratch:
        context.log.warning("from_scratch: dropping every stored memory node first")
        builder.store.clear()
    tree = builder.tree()
    built = builder.store.built()
    if config.all_stale or config.from_scratch:
        plan = plan_changes(tree, built)
    else:
        requested = [*config.projects, *config.seats, *config.contracts]
        plan = close_over_ancestors(
            tree,
            built,
            [n for n in requested if n in tree.nodes],
            [n for n in [*requested, *config.deletes] if n not in tree.nodes],
        )
    # The two stores must agree before planning: orphans swept, lost items re-indexed (all
    # contracts on the full path, the affected ones otherwise).
    everything = config.all_stale or config.from_scratch or repairs
    scope = None if everything else _contracts_of(plan, tree, built)
    swept, reindexed = builder.reconcile(scope)
    if swept or reindexed:
        repairs.append(
            f"store consistency: swept {swept} orphan vector item(s), re-indexed"
            f" {len(reindexed)} node(s) whose items were missing"
        )
        context.log.warning(repairs[-1])
    context.log.info(f"plan: {plan.describe()}")
    _sync_partitions(context, plan, tree)
    deleted = builder.delete(plan.deletes)
    for report in deleted:
        context.log.info(f"purged {report.node_id} (was version {report.previous_version})")
    return {
        **plan.as_config(),
        "config_digest": version_config(builder.llm.model, builder.hints, builder.config).digest,
        "hints": {**builder.hints.as_payload(), "version": builder.hints.version},
        "repairs": repairs,
    }


def _contracts_of(plan: Plan, tree: Tree, built: dict[str, Any]) -> list[str]:
    nodes = [*plan.rebuilds, *plan.deletes]
    return sorted(
        {tree.nodes[n].contract_id for n in nodes if n in tree.nodes}
        | {built[n].contract_id for n in nodes if n in built}
    )


@dg.op(
    description="Rebuild the affected nodes, a parent as soon as its children are done, and log "
    "a materialization per node (of project_memory, seat_memory or contract_memory).",
    out={},
)
def refresh_memories(
    context: OpExecutionContext,
    state: dict[str, Any],
    platform: PlatformResource,
) -> Iterator[dg.AssetMaterialization | dg.AssetObservation]:
    """Yields each node's event as soon as it may be written (an event is written when yielded;
    one logged inside a step that then fails would be lost): a materialization per stored node,
    an observation with its cost and error per failed one, so every request is in some node's
    metadata, and a run stopped halfway keeps what its stored projects cost (a seat's or
    contract's event waits for the level below, see `pending`). A failed node fails the step
    only after every other node was stored and recorded. A refresh that ran between this run's
    plan and this step left its nodes current: they are not built again."""
    with platform.exclusive(MEMORY_REFRESH, context):
        yield from _refresh(context, state, platform)


def _refresh(
    context: OpExecutionContext, state: dict[str, Any], platform: PlatformResource
) -> Iterator[dg.AssetMaterialization | dg.AssetObservation]:
    builder = make_builder(platform, hints=Hints.from_dict(state["hints"]))
    failures: list[str] = []
    counts: dict[str, Counter[str]] = {level: Counter() for level in LEVELS}
    run = f"{context.run_id[:8]} ({context.job_name})"
    node_ids = [*state["projects"], *state["seats"], *state["contracts"]]
    # A parent's materialization must be newer than every child's across the whole level below
    # (Dagster's staleness compares timestamps over all partitions of the level below), and the
    # build interleaves levels: a seat or contract is held until every node below it settled.
    pending: dict[str, list[dg.AssetMaterialization]] = {level: [] for level in LEVELS}
    expected = {level: len(state[f"{level}s"]) for level in LEVELS}

    def ready(final: bool = False) -> Iterator[dg.AssetMaterialization]:
        for i, level in enumerate(LEVELS):
            below = LEVELS[:i]
            if final or all(sum(counts[b].values()) >= expected[b] for b in below):
                yield from pending[level]
                pending[level] = []
            else:
                return

    for report in builder.build_reports(node_ids):
        counts[report.level][report.status] += 1
        partition = _partition_key(report.node_id)
        if report.status == "built":
            pending[report.level].append(
                dg.AssetMaterialization(
                    asset_key=ASSET_KEYS[report.level],
                    partition=partition,
                    metadata=node_metadata(report),
                    description=f"rebuilt by {run}",
                )
            )
        elif report.status == "failed":
            error = report.error or f"{report.node_id} failed"
            context.log.error(error)
            failures.append(error)
            yield dg.AssetObservation(
                asset_key=ASSET_KEYS[report.level],
                partition=partition,
                metadata={**node_metadata(report), "status": "failed", "error": error},
                description=f"failed in {run}; its previous version stays",
            )
        elif report.status == "deleted":
            context.log.info(f"purged {report.node_id}: it is no longer in the sources")
        yield from ready()
    yield from ready(final=True)
    for level in LEVELS:
        shown = {s: counts[level][s] for s in ("built", "current", "failed")}
        context.log.info(f"{level} level: {shown}")
    vectors = platform.vectors
    if not vectors.host:  # deleted items leave Chroma's log too
        compact_chroma_log(Path(vectors.path))
    for evaluation in memory_check_evaluations(platform):  # the checks of what this run wrote
        context.log_event(evaluation)
    if failures:
        raise dg.Failure(
            description=f"{len(failures)} memory node(s) failed; their previous versions were"
            " kept and every other node was stored:\n" + "\n".join(failures),
            metadata={"failed_nodes": dg.MetadataValue.json(failures)},
        )


@dg.graph
def memory_refresh_graph() -> None:
    refresh_memories(plan_memory_refresh())


refresh_memory_tree = memory_refresh_graph.to_job(
    name="refresh_memory_tree",
    description="Rebuild an affected set of memory nodes — each parent after its children — "
    "in one run (requested by the `source_changes` sensor).",
    executor_def=dg.in_process_executor,
    tags={REFRESH_TAG: "incremental"},
)

rebuild_memory_tree = memory_refresh_graph.to_job(
    name="rebuild_memory_tree",
    description="The full-rebuild path: make the whole tree current (every stale node rebuilt, "
    "every removed node purged); set `from_scratch` to rebuild every node.",
    executor_def=dg.in_process_executor,
    config={"ops": {"plan_memory_refresh": {"config": {"all_stale": True}}}},
    tags={REFRESH_TAG: "full"},
)

# ---- checks ------------------------------------------------------------------------------------


def degraded_evaluation(platform: PlatformResource, level: str) -> dg.AssetCheckEvaluation:
    """`{level}_memories_not_degraded` on the store as it is."""
    derived_db = platform.derived_db.path
    bad = []
    if derived_db.exists():
        with connect(derived_db) as con:
            bad = degraded_nodes(con, level)
    return dg.AssetCheckEvaluation(
        asset_key=ASSET_KEYS[level],
        check_name=f"{level}_memories_not_degraded",
        passed=not bad,
        severity=dg.AssetCheckSeverity.WARN,
        description=(
            f"{len(bad)} degraded {level} node(s); first: {bad[0].node_id} {bad[0].why}"
            if bad
            else f"no degraded {level} node"
            if derived_db.exists()
            else "no memory store yet"
        ),
        metadata={
            "degraded_nodes": len(bad),
            "examples": dg.MetadataValue.json(
                [{"node_id": b.node_id, "why": b.why, "dropped": b.reasons} for b in bad[:20]]
            ),
        },
    )


def consistency_evaluation(platform: PlatformResource) -> dg.AssetCheckEvaluation:
    """`memory_store_consistent` on the store as it is."""
    found = MemoryStore(platform.derived_db.path, platform.vectors.get()).check()
    return dg.AssetCheckEvaluation(
        asset_key=ASSET_KEYS["contract"],
        check_name="memory_store_consistent",
        passed=found.clean,
        severity=dg.AssetCheckSeverity.WARN,
        description=found.describe(),
        metadata={
            "orphan_items": found.orphan_count,
            "unowned_collections": len(found.unowned_collections),
            "nodes_missing_items": len(found.incomplete),
            "first_nodes_missing_items": dg.MetadataValue.json(found.incomplete[:20]),
        },
    )


def memory_check_evaluations(platform: PlatformResource) -> list[dg.AssetCheckEvaluation]:
    """Every memory check, as the memory jobs log them at the end of each run."""
    return [
        *(degraded_evaluation(platform, level) for level in LEVELS),
        consistency_evaluation(platform),
    ]


def _as_result(evaluation: dg.AssetCheckEvaluation) -> dg.AssetCheckResult:
    return dg.AssetCheckResult(
        passed=evaluation.passed,
        severity=evaluation.severity,
        description=evaluation.description,
        metadata=evaluation.metadata,
    )


def _degraded_check(level: str) -> dg.AssetChecksDefinition:
    @dg.asset_check(
        asset=ASSET_KEYS[level],
        name=f"{level}_memories_not_degraded",
        description=f"Flags {level} nodes that are empty (no facet, no QA pair), whose build "
        "dropped more of the model's items than it kept (unknown ids, too little support, "
        "echoed prompt examples), or whose facets all cite the same full set of sources (no "
        "evidence of provenance: the model copied the allowed ids). Also evaluated at the end "
        "of every memory job's run.",
    )
    def _check(platform: PlatformResource) -> dg.AssetCheckResult:
        return _as_result(degraded_evaluation(platform, level))

    return _check


@dg.asset_check(
    asset=ASSET_KEYS["contract"],
    description="The vector index and the stored nodes agree: no orphan items (crash "
    "leftovers that take nearest-neighbour slots), no node with missing items (a lost or new "
    "Chroma). The next full refresh (`rebuild_memory_tree`) sweeps and re-indexes. Also "
    "evaluated at the end of every memory job's run.",
)
def memory_store_consistent(platform: PlatformResource) -> dg.AssetCheckResult:
    return _as_result(consistency_evaluation(platform))


MEMORY_CHECKS = [*(_degraded_check(level) for level in LEVELS), memory_store_consistent]
MEMORY_ASSETS = [project_memory, seat_memory, contract_memory]
MEMORY_JOBS = [refresh_memory_tree, rebuild_memory_tree]


def refresh_run_config(plan: Plan, all_stale: bool = False) -> dict[str, Any]:
    """Run config of `refresh_memory_tree` for a plan."""
    config: dict[str, Any] = {"all_stale": True} if all_stale else plan.as_config()
    return {"ops": {"plan_memory_refresh": {"config": config}}}

"""The memory tree in Dagster: one partitioned multi-asset, its checks, and its asset job.

* `memory_tree` — the multi-asset of `project_memory`, `seat_memory` and `contract_memory`, on
  the dynamic `contracts` partitions (partition key = the contract id): a partition is one
  contract's subtree. A run over some contracts (one partition from the UI's Materialize, a range
  from a backfill, the sensor or the CLI: single-run backfill policy) repairs the vector index,
  reconciles the two stores for those contracts, purges their nodes the sources no longer have and
  rebuilds their nodes whose stored version is not the one the sources give (a parent as soon as
  its children are done: `MemoryBuilder.build`). Each level's materialization of a partition
  records that contract's nodes of the level (versions, what was rebuilt and what it cost). The
  three are one step (not subsettable): a contract's levels are built together or not at all.
* `refresh_memory_tree` — the asset job over the multi-asset and its checks, which the
  `source_changes` sensor and the CLI run.

All the work is done by `hltm.memory.MemoryBuilder`; this module only wires resources and events.
"""

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dagster as dg
from dagster import AssetExecutionContext

from hltm.deletion import compact_chroma_log
from hltm.memory import MemoryBuilder, MemoryStore, load_hints
from hltm.memory.flow import NodeReport
from hltm.memory.hints import Hints
from hltm.memory.models import LEVELS
from hltm.memory.store import degraded_nodes
from hltm.memory.tree import Plan, Tree, contracts_of, plan_contracts
from hltm.runlock import MEMORY_REFRESH
from hltm.warehouse import connect, store_exists
from hltm_dagster.defs.patterns.assets import MEMORY_HINTS_KEY
from hltm_dagster.defs.sources.assets import source_key
from hltm_dagster.instance import added_ranges, partition_range_tags
from hltm_dagster.resources import PlatformResource, WarehouseResource

MEMORY_GROUP = "memory"
CONTRACTS = dg.DynamicPartitionsDefinition(name="contracts")
ASSET_KEYS: dict[str, dg.AssetKey] = {
    "project": dg.AssetKey("project_memory"),
    "seat": dg.AssetKey("seat_memory"),
    "contract": dg.AssetKey("contract_memory"),
}
REFRESH_TAG = "hltm/memory_refresh"
REFRESH_JOB = "refresh_memory_tree"


def current_hints(derived_db: WarehouseResource, read_only: bool = False) -> Hints:
    if read_only and not store_exists(derived_db.path):
        return Hints()
    with connect(derived_db.path, read_only=read_only) as con:
        return load_hints(con)


def make_builder(platform: PlatformResource, hints: Hints | None = None) -> MemoryBuilder:
    """A builder on the run's resources, with `hints` or else the newest released."""
    store = MemoryStore(platform.derived_db.path, platform.vectors.get())
    return MemoryBuilder(
        platform.sources_db.path,
        store,
        platform.llm.get(),
        platform.embeddings.get(),
        hints if hints is not None else current_hints(platform.derived_db),
        platform.memory_tree.config(),
    )


# ---- the partitioned multi-asset ---------------------------------------------------------------


class MemoryTreeConfig(dg.Config):
    """`from_scratch`: drop the run's contracts' stored nodes first and rebuild every one of them
    (their readers see an empty subtree meanwhile)."""

    from_scratch: bool = False


_COSTS = (
    "llm_calls",
    "llm_failed_calls",
    "prompt_tokens",
    "completion_tokens",
    "embedding_calls",
)


def _level_metadata(
    level: str,
    contracts: list[str],
    tree: Tree,
    purged_from: dict[str, str],
    reports: list[NodeReport],
) -> dict[str, dict[str, Any]]:
    """One level's materialization of each contract: every node of the level with its version,
    what this run rebuilt or purged (each node's exact lineage, item counts and cost) and the
    totals. Nodes not listed under `rebuilt` or `purged` were current and not touched. One pass
    over the level's nodes and the run's reports, whatever the number of contracts."""
    versions: dict[str, dict[str, str]] = {c: {} for c in contracts}
    for n in tree.ids(level):
        if (mine := versions.get(tree.nodes[n].contract_id)) is not None:
            mine[n] = tree.versions[n]
    reported: dict[str, list[NodeReport]] = {c: [] for c in contracts}
    for r in reports:
        node = tree.nodes.get(r.node_id)
        contract = node.contract_id if node is not None else purged_from.get(r.node_id)
        if r.level == level and contract in reported:
            reported[contract].append(r)
    return {c: _contract_metadata(versions[c], reported[c]) for c in contracts}


def _contract_metadata(versions: dict[str, str], mine: list[NodeReport]) -> dict[str, Any]:
    rebuilt = {r.node_id: r.metadata() for r in mine if r.status == "built"}
    purged = {r.node_id: r.previous_version for r in mine if r.status == "deleted"}
    totals = {k: sum(int(m[k]) for m in rebuilt.values()) for k in _COSTS}
    return {
        "nodes": len(versions),
        "rebuilt_nodes": len(rebuilt),
        "purged_nodes": len(purged),
        "current_nodes": len(versions) - len(rebuilt),
        "versions": dg.MetadataValue.json(versions),
        "rebuilt": dg.MetadataValue.json(rebuilt),
        "purged": dg.MetadataValue.json(purged),
        **totals,
        "seconds": round(sum(float(m["seconds"]) for m in rebuilt.values()), 3),
    }


def _refresh_contracts(
    context: AssetExecutionContext,
    config: MemoryTreeConfig,
    platform: PlatformResource,
    builder: MemoryBuilder,
    tree: Tree,
) -> Iterator[dg.MaterializeResult]:
    contracts = list(context.partition_keys)
    # A vector index a full disk or a crash left unreadable is rebuilt from the stored nodes
    # (derived data: nothing is lost), on every path that refreshes the memory. Only the data
    # dir's embedded index is repaired, and a refresh beside it holds every contract's lock.
    repairs = builder.store.vectors.repair()
    for line in repairs:
        context.log.warning(f"vector index: {line}")
    if config.from_scratch:
        wanted = set(contracts)
        mine = [n for n, b in builder.store.built().items() if b.contract_id in wanted]
        context.log.warning(f"from_scratch: dropping the {len(mine)} stored node(s) first")
        builder.store.delete(mine)
    # The two stores must agree first: orphans swept, lost items re-indexed (every contract after
    # a repair of the index, else the run's).
    swept, reindexed = builder.reconcile(None if repairs else contracts)
    if swept or reindexed:
        repairs.append(
            f"store consistency: swept {swept} orphan vector item(s), re-indexed"
            f" {len(reindexed)} node(s) whose items were missing"
        )
        context.log.warning(repairs[-1])
    built = builder.store.built()
    plan: Plan = plan_contracts(tree, built, contracts)
    context.log.info(f"plan: {plan.describe()}")
    reports = [*builder.delete(plan.deletes), *builder.build(plan.rebuilds)]
    if not platform.vectors.host:  # deleted and replaced items leave Chroma's log too
        compact_chroma_log(Path(platform.vectors.path))
    purged_from = {n: built[n].contract_id for n in plan.deletes}
    failed = [r for r in reports if r.status == "failed"]
    statuses = Counter(f"{r.level} {r.status}" for r in reports)
    context.log.info(
        "run: "
        + (", ".join(f"{n} {s}" for s, n in sorted(statuses.items())) or "every node current")
    )
    if failed:  # no partition of the run is published as materialized with a node missing
        raise dg.Failure(
            description=f"{len(failed)} memory node(s) failed; their previous versions were"
            " kept and every other node was stored:\n"
            + "\n".join(r.error or r.node_id for r in failed),
            metadata={
                "failed_nodes": dg.MetadataValue.json([r.node_id for r in failed]),
                "reports": dg.MetadataValue.json(
                    [{**r.metadata(), "error": r.error or ""} for r in reports]
                ),
            },
        )
    for level in LEVELS:
        per_contract = _level_metadata(level, contracts, tree, purged_from, reports)
        if level == "contract" and repairs:  # what the run repaired first, shown with the tree
            for meta in per_contract.values():
                meta["repairs"] = dg.MetadataValue.json(repairs)
        if len(contracts) == 1:
            (meta,) = per_contract.values()
            yield dg.MaterializeResult(asset_key=ASSET_KEYS[level], metadata=meta)
            continue
        for contract, meta in per_contract.items():
            context.add_asset_metadata(meta, asset_key=ASSET_KEYS[level], partition_key=contract)
        yield dg.MaterializeResult(
            asset_key=ASSET_KEYS[level],
            metadata={
                "contracts_in_run": len(contracts),
                "nodes_in_run": sum(m["nodes"] for m in per_contract.values()),
            },
        )


_ASSET_KINDS = {"duckdb", "chroma"}
_PROJECT_INPUTS = (
    "projects",
    "project_documents",
    "recruiter_actions",
    "vacancies",
    "vacancy_requirements",
)


@dg.multi_asset(
    name="memory_tree",
    partitions_def=CONTRACTS,
    # A backfill of many contracts is one run (one process, one build), not a run each.
    backfill_policy=dg.BackfillPolicy.single_run(),
    group_name=MEMORY_GROUP,
    specs=[
        dg.AssetSpec(
            ASSET_KEYS["project"],
            # The released hints are an input of every node's version (seats and contracts
            # inherit the edge through their children).
            deps=[MEMORY_HINTS_KEY, *(source_key(t) for t in _PROJECT_INPUTS)],
            kinds=_ASSET_KINDS,
            description="Leaf memory of a contract's hiring projects: facets, QA pairs and "
            "summaries extracted from each project's documents, vacancies and recruiter actions, "
            "with the released memory hints. Each materialization lists the contract's project "
            "nodes (version; lineage and cost of those rebuilt).",
        ),
        dg.AssetSpec(
            ASSET_KEYS["seat"],
            deps=[ASSET_KEYS["project"], source_key("seats")],
            kinds=_ASSET_KINDS,
            description="A contract's recruiter seats' memories, each aggregated from its "
            "projects' memories (the exact child keys and versions are in the metadata).",
        ),
        dg.AssetSpec(
            ASSET_KEYS["contract"],
            deps=[ASSET_KEYS["seat"], source_key("contracts")],
            kinds=_ASSET_KINDS,
            description="A contract's (customer organisation's) memory, aggregated from its "
            "seats' memories.",
        ),
    ],
)
def memory_tree(
    context: AssetExecutionContext, config: MemoryTreeConfig, platform: PlatformResource
) -> Iterator[dg.MaterializeResult]:
    """The run's contracts' subtrees made current, each contract by one run at a time: the run
    holds the lock of every contract it writes (`hltm.runlock`), the run's own and the former
    contract of a node that moved into one of them, which it learns from its plan under the
    locks of its own; it then takes them all again, in the one order every run takes locks."""
    covered = set(context.partition_keys)
    while True:
        with platform.exclusive(MEMORY_REFRESH, context, covered) as held:
            builder = make_builder(platform)
            tree = builder.tree()
            if held is not None:
                built = builder.store.built()
                plan = plan_contracts(tree, built, context.partition_keys)
                if wider := set(contracts_of(plan, tree, built)) - held:
                    context.log.info(
                        f"nodes moved here from contract(s) {', '.join(sorted(wider))}:"
                        " taking their locks too"
                    )
                    covered |= wider
                    continue
            yield from _refresh_contracts(context, config, platform, builder, tree)
            return


# ---- checks (steps of every run of the memory assets) -------------------------------------------


def _degraded_check(level: str) -> dg.AssetChecksDefinition:
    @dg.asset_check(
        asset=ASSET_KEYS[level],
        name=f"{level}_memories_not_degraded",
        description=f"Flags {level} nodes that are empty (no facet, no QA pair), whose build "
        "dropped more of the model's items than it kept (unknown ids, too little support, "
        "echoed prompt examples), or whose facets all cite the same full set of sources (no "
        "evidence of provenance: the model copied the allowed ids).",
    )
    def _check(platform: PlatformResource) -> dg.AssetCheckResult:
        derived_db = platform.derived_db.path
        bad = []
        if store_exists(derived_db):
            with connect(derived_db) as con:
                bad = degraded_nodes(con, level)
        return dg.AssetCheckResult(
            passed=not bad,
            severity=dg.AssetCheckSeverity.WARN,
            description=(
                f"{len(bad)} degraded {level} node(s); first: {bad[0].node_id} {bad[0].why}"
                if bad
                else f"no degraded {level} node"
                if store_exists(derived_db)
                else "no memory store yet"
            ),
            metadata={
                "degraded_nodes": len(bad),
                "examples": dg.MetadataValue.json(
                    [{"node_id": b.node_id, "why": b.why, "dropped": b.reasons} for b in bad[:20]]
                ),
            },
        )

    return _check


@dg.asset_check(
    asset=ASSET_KEYS["contract"],
    description="The vector index and the stored nodes agree: no orphan items (crash "
    "leftovers that take nearest-neighbour slots), no node with missing items (a lost or new "
    "Chroma). The next run of the memory assets sweeps and re-indexes the contracts it covers "
    "(every contract after a repair of the index).",
)
def memory_store_consistent(
    context: dg.AssetCheckExecutionContext, platform: PlatformResource
) -> dg.AssetCheckResult:
    # In a run of some contracts, only theirs: another refresh running beside it writes its own
    # contracts' items before their rows flip, and those are not orphans.
    partitioned = context.has_partition_key or context.has_partition_key_range
    contracts = list(context.partition_keys) if partitioned else None
    found = MemoryStore(platform.derived_db.path, platform.vectors.get()).check(contracts)
    scope = "every contract" if contracts is None else f"the run's {len(contracts)} contract(s)"
    return dg.AssetCheckResult(
        passed=found.clean,
        severity=dg.AssetCheckSeverity.WARN,
        description=f"{found.describe()} (over {scope})",
        metadata={
            "orphan_items": found.orphan_count,
            "unowned_collections": len(found.unowned_collections),
            "nodes_missing_items": len(found.incomplete),
            "first_nodes_missing_items": dg.MetadataValue.json(found.incomplete[:20]),
        },
    )


MEMORY_CHECKS = [*(_degraded_check(level) for level in LEVELS), memory_store_consistent]
MEMORY_ASSETS = [memory_tree]
refresh_memory_tree = dg.define_asset_job(
    REFRESH_JOB,
    selection=dg.AssetSelection.assets(*ASSET_KEYS.values()),
    description="Make chosen contracts' memory current: their stale nodes rebuilt, each parent "
    "after its children, their removed nodes purged, in one run (the `source_changes` sensor's "
    "and the CLI's runs; the UI's Materialize runs the same assets).",
    tags={REFRESH_TAG: "refresh"},
)
MEMORY_JOBS = [refresh_memory_tree]


def refresh_tags(instance: dg.DagsterInstance, contracts: set[str]) -> list[dict[str, str]]:
    """The tags of the `refresh_memory_tree` runs over these contracts: their partitions added
    first, then one run per contiguous range of them."""
    ranges = added_ranges(instance, str(CONTRACTS.name), contracts)
    return [partition_range_tags(start, end) for start, end in ranges]

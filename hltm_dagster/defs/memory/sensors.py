"""`source_changes`: one refresh of exactly the contracts a source change affects. The planner
(`hltm.memory.planner`) decides; the sensor reads the instance (runs, partitions) and carries the
decision to Dagster: the `contracts` partitions to add and delete, and runs of the memory's asset
job `refresh_memory_tree` over the affected contracts — one per contiguous range of them in the
partitions' order (the assets' backfill policy is a single run) — each tagged with the
refresh's deterministic key (sha1 of the change set and the cursor's sequence number)."""

import functools
import time

import dagster as dg

from hltm.memory.build import version_config
from hltm.memory.planner import plan_refresh
from hltm.warehouse import store_exists
from hltm_dagster.defs.memory.assets import (
    ASSET_KEYS,
    CONTRACTS,
    REFRESH_TAG,
    current_hints,
    refresh_memory_tree,
)
from hltm_dagster.instance import (
    fail_dead_runs,
    partition_range_tags,
    partition_ranges,
    run_partitions,
)
from hltm_dagster.resources import PlatformResource

# Up to this many partition keys are looked up one by one; more, and all keys are read once.
MAX_PARTITION_LOOKUPS = 2_000
# The refresh (the planner's key) each run of the sensor belongs to.
REQUEST_TAG = "hltm/memory_request"
_UNFINISHED = [
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
]
_ENDED_BADLY = [dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED]


def _existing_partitions(instance: dg.DagsterInstance, keys: set[str] | None) -> set[str]:
    """The memory partitions among `keys` (None: all of them), without reading every key of a
    large partition set for a handful of lookups."""
    name = str(CONTRACTS.name)
    if keys is not None and len(keys) <= MAX_PARTITION_LOOKUPS:
        return {k for k in keys if instance.has_dynamic_partition(name, k)}
    existing = set(instance.get_dynamic_partitions(name))
    return existing if keys is None else existing & keys


def _busy_contracts(
    instance: dg.DagsterInstance, unfinished: list[dg.DagsterRun]
) -> frozenset[str] | None:
    """The contracts the memory refresh runs among `unfinished` cover: the sensor's, the CLI's,
    the UI's Materialize of the memory assets. None when one of them covers every contract, or
    its partitions cannot be told."""
    # Read once, and only for a run of a range.
    partitions_order = functools.cache(
        lambda: list(instance.get_dynamic_partitions(str(CONTRACTS.name)))
    )
    memory_keys = set(ASSET_KEYS.values())
    busy: set[str] = set()
    for run in unfinished:
        selected = run.asset_selection or frozenset()
        if REFRESH_TAG not in run.tags and not selected & memory_keys:
            continue
        covered = run_partitions(run, partitions_order)
        if covered is None:
            return None
        busy |= covered
    return frozenset(busy)


def refresh_requests(
    order: list[str], contracts: list[str], key: str, tags: dict[str, str]
) -> list[dg.RunRequest]:
    """Runs of `refresh_memory_tree` over `contracts`: one per contiguous range of them in the
    partitions' `order` (as it is once this tick's partition requests are applied)."""
    return [
        dg.RunRequest(
            run_key=f"{key}-{start}",
            job_name=refresh_memory_tree.name,
            tags={
                REFRESH_TAG: "sensor",
                REQUEST_TAG: key,
                **tags,
                **partition_range_tags(start, end),
            },
        )
        for start, end in partition_ranges(order, set(contracts))
    ]


@dg.sensor(
    name="source_changes",
    job=refresh_memory_tree,
    minimum_interval_seconds=30,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Detects added, changed, moved and deleted projects (and new or removed seats and "
    "contracts) and requests one refresh of exactly the affected contracts' memory partitions "
    "(their stale nodes rebuilt, their removed ones purged).",
)
def source_changes(
    context: dg.SensorEvaluationContext, platform: PlatformResource
) -> dg.SensorResult | dg.SkipReason:
    sources_db, derived_db = platform.sources_db, platform.derived_db
    if not store_exists(sources_db.path):
        return dg.SkipReason(f"no sources yet ({sources_db.path} does not exist)")
    instance = context.instance
    fail_dead_runs(instance, REFRESH_TAG)
    # Read once a tick: which contracts are busy, and which requested refreshes still run.
    unfinished_runs = instance.get_runs(dg.RunsFilter(statuses=_UNFINISHED))
    running_requests = {run.tags.get(REQUEST_TAG) for run in unfinished_runs}
    busy = _busy_contracts(instance, unfinished_runs)
    if busy is None:
        # Its writes move the store watermark; diff once it has ended, not against a half-built
        # tree (and a change made meanwhile would wait for it anyway).
        return dg.SkipReason("a memory refresh run of every contract is queued or in progress")
    hints = current_hints(derived_db, read_only=True)
    config = version_config(platform.llm.get().model, hints, platform.memory_tree.config())

    def ended_badly(key: str) -> bool:
        runs = instance.get_runs(
            dg.RunsFilter(tags={REQUEST_TAG: key}, statuses=_ENDED_BADLY), limit=1
        )
        return bool(runs)

    def existing(keys: set[str] | None) -> set[str]:
        return _existing_partitions(instance, keys)

    decision = plan_refresh(
        context.cursor,
        sources_db.path,
        derived_db.path,
        config,
        existing,
        ended_badly,
        time.time(),
        running_requests.__contains__,
        busy,
    )
    for note in decision.notes:
        context.log.info(note)
    partition_requests: list[dg.AddDynamicPartitionsRequest | dg.DeleteDynamicPartitionsRequest]
    partition_requests = []
    if decision.adds:
        partition_requests.append(CONTRACTS.build_add_request(decision.adds))
    if decision.deletes:
        partition_requests.append(CONTRACTS.build_delete_request(decision.deletes))
    if decision.plan is None and not partition_requests:
        if decision.cursor is not None:
            context.update_cursor(decision.cursor)
        return dg.SkipReason(decision.skip)
    run_requests = []
    if decision.plan is not None:
        gone = set(decision.deletes)  # the order once this tick's requests are applied
        order = [k for k in instance.get_dynamic_partitions(str(CONTRACTS.name)) if k not in gone]
        run_requests = refresh_requests(
            [*order, *decision.adds], decision.contracts, decision.run_key, decision.tags
        )
    return dg.SensorResult(
        run_requests=run_requests,
        dynamic_partitions_requests=partition_requests,
        cursor=decision.cursor,
        skip_reason=decision.skip,
    )

"""`source_changes`: one refresh run over exactly the nodes a source change affects. The planner
(`hltm.memory.planner`) decides; the sensor reads the instance (runs, partitions) and carries the
decision to Dagster: dynamic partition requests, a run request with a deterministic run key
(sha1 of the change set and the cursor's sequence number), the cursor."""

import time

import dagster as dg

from hltm.memory.build import version_config
from hltm.memory.models import LEVELS
from hltm.memory.planner import plan_refresh
from hltm_dagster.defs.memory.assets import (
    ASSET_KEYS,
    PARTITIONS,
    REFRESH_TAG,
    current_hints,
    refresh_memory_tree,
    refresh_run_config,
)
from hltm_dagster.instance import RUN_KEY_TAG, fail_dead_runs
from hltm_dagster.resources import PlatformResource

# Above this many affected nodes, the run rebuilds "everything stale" instead of carrying ids.
MAX_IDS_IN_RUN_CONFIG = 5_000
# Up to this many partition keys are looked up one by one; more, and all keys are read once.
MAX_PARTITION_LOOKUPS = 2_000
_UNFINISHED = [
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
]
_ENDED_BADLY = (dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED)
_REFRESH_KINDS = ["sensor", "incremental", "full"]


def _existing_partitions(
    instance: dg.DagsterInstance, name: str, keys: set[str] | None
) -> set[str]:
    """The partitions of `name` among `keys` (None: all of them), without reading every key of
    a large partition set for a handful of lookups."""
    if keys is not None and len(keys) <= MAX_PARTITION_LOOKUPS:
        return {k for k in keys if instance.has_dynamic_partition(name, k)}
    existing = set(instance.get_dynamic_partitions(name))
    return existing if keys is None else existing & keys


# One asset job per tree level, targeted by the sensor beside the ordered refresh job: the UI then
# lists `source_changes` under each memory asset's automations. Every run the sensor requests is
# still the one `refresh_memory_tree` run (leaves, then seats, then contracts).
LEVEL_JOBS = [
    dg.define_asset_job(
        f"materialize_{level}_memory",
        selection=[ASSET_KEYS[level]],
        description=f"Materialize chosen {level} memory partitions (the sensor uses the ordered"
        " `refresh_memory_tree` instead).",
    )
    for level in LEVELS
]


@dg.sensor(
    name="source_changes",
    jobs=[refresh_memory_tree, *LEVEL_JOBS],
    minimum_interval_seconds=30,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Detects added, changed, moved and deleted projects (and new or removed seats and "
    "contracts) and requests one refresh of exactly the affected leaves and ancestor chains.",
)
def source_changes(
    context: dg.SensorEvaluationContext, platform: PlatformResource
) -> dg.SensorResult | dg.SkipReason:
    sources_db, derived_db = platform.sources_db, platform.derived_db
    if not sources_db.path.exists():
        return dg.SkipReason(f"no sources yet ({sources_db.path} does not exist)")
    instance = context.instance
    fail_dead_runs(instance, REFRESH_TAG)
    if instance.get_runs(
        dg.RunsFilter(statuses=_UNFINISHED, tags={REFRESH_TAG: _REFRESH_KINDS}), limit=1
    ):
        # Its writes move the store watermark; diff once it has ended, not against a half-built
        # tree (and a change made meanwhile would wait for the one refresh slot anyway).
        return dg.SkipReason("a memory refresh run is queued or in progress")
    hints = current_hints(derived_db, read_only=True)
    config = version_config(platform.llm.get().model, hints, platform.memory_tree.config())

    def ended_badly(run_key: str) -> bool:
        runs = instance.get_runs(dg.RunsFilter(tags={RUN_KEY_TAG: run_key}), limit=1)
        return bool(runs) and runs[0].status in _ENDED_BADLY

    def existing(level: str, keys: set[str] | None) -> set[str]:
        return _existing_partitions(instance, str(PARTITIONS[level].name), keys)

    decision = plan_refresh(
        context.cursor, sources_db.path, derived_db.path, config, existing, ended_badly, time.time()
    )
    for note in decision.notes:
        context.log.info(note)
    partition_requests: list[dg.AddDynamicPartitionsRequest | dg.DeleteDynamicPartitionsRequest]
    partition_requests = []
    for change in decision.partitions:
        name = str(PARTITIONS[change.level].name)
        if change.adds:
            partition_requests.append(
                dg.AddDynamicPartitionsRequest(partitions_def_name=name, partition_keys=change.adds)
            )
        if change.deletes:
            partition_requests.append(
                dg.DeleteDynamicPartitionsRequest(
                    partitions_def_name=name, partition_keys=change.deletes
                )
            )
    plan = decision.plan
    if plan is None and not partition_requests:
        if decision.cursor is not None:
            context.update_cursor(decision.cursor)
        return dg.SkipReason(decision.skip)
    run_requests = []
    if plan is not None:
        many = len(plan.rebuilds) + len(plan.deletes) > MAX_IDS_IN_RUN_CONFIG
        run_requests.append(
            dg.RunRequest(
                job_name=refresh_memory_tree.name,
                run_key=decision.run_key,
                run_config=refresh_run_config(plan, all_stale=many),
                tags={REFRESH_TAG: "sensor", **decision.tags},
            )
        )
    return dg.SensorResult(
        run_requests=run_requests,
        dynamic_partitions_requests=partition_requests,
        cursor=decision.cursor,
        skip_reason=decision.skip,
    )

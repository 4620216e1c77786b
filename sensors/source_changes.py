"""`source_changes`: turn source changes into one refresh run over exactly the affected chains.

Each evaluation:

1. reads the sources (read-only) and computes a cheap watermark over every table the memory tree
   reads, and another over the stored nodes (id and version of each); if both and the build
   settings are unchanged since the cursor, and the last full diff is less than
   `FULL_DIFF_EVERY_S` old, it skips;
2. otherwise computes the desired tree and every node's desired version from the sources (no LLM)
   and diffs it against the versions stored in `memory_nodes` (read-only): added, changed, moved
   and deleted projects, new or removed seats and contracts. A node whose version differs is
   affected, and a change to a project changes its seat's and contract's versions, so the affected
   set is always the changed leaves plus their ancestor chains — old and new parents for a move;
3. adds / deletes dynamic partitions so they match the tree (≤ 25,000 requests per evaluation, the
   rest on the next ticks), and requests one `refresh_memory_tree` run for the affected set, with
   a deterministic run key (sha1 of the change set and the cursor's sequence number).

Diffing against what is *stored* (not against the previous tick) makes the sensor self-healing:
nodes a failed run left stale are requested again, and because a change of the store alone (a
crash that emptied it, a restore from an old backup) also triggers the diff, the tree is rebuilt
without waiting for a source change. The slow periodic full diff catches what neither watermark
sees (partitions deleted by hand).
"""

import hashlib
import json
import time
from pathlib import Path

import dagster as dg

from assets.memory import (
    ASSET_KEYS,
    PARTITIONS,
    REFRESH_TAG,
    current_hints,
    refresh_memory_tree,
    refresh_run_config,
)
from hltm.dagster_instance import fail_dead_runs
from hltm.memory.build import version_config
from hltm.memory.inputs import read_tree, sources_watermark
from hltm.memory.models import LEVELS, split_node_id
from hltm.memory.store import MEMORY_TABLE, read_built
from hltm.memory.tree import Tree, plan_changes
from hltm.warehouse import connect, table_exists
from resources import PlatformResource

# Dagster's advice: at most 25k partition adds/deletes per sensor evaluation.
MAX_PARTITION_REQUESTS = 25_000
# Above this many affected nodes, the run rebuilds "everything stale" instead of carrying ids.
MAX_IDS_IN_RUN_CONFIG = 5_000
# Even when nothing seems to have changed, diff the whole tree this often.
FULL_DIFF_EVERY_S = 3_600
_UNFINISHED = [
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
]
_REFRESH_KINDS = ["sensor", "incremental", "full"]


def _cursor(raw: str | None) -> dict[str, object]:
    try:
        value = json.loads(raw) if raw else {}
    except json.JSONDecodeError:
        value = {}
    return value if isinstance(value, dict) else {}


def store_watermark(derived_db: Path) -> str:
    """A cheap digest of the stored tree: which nodes exist, at which version."""
    if not derived_db.exists():
        return "no-store"
    with connect(derived_db, read_only=True) as con:
        if not table_exists(con, MEMORY_TABLE):
            return "no-store"
        row = con.execute(
            "SELECT count(*), md5(coalesce(string_agg(node_id || chr(31) || version, chr(30)"
            f" ORDER BY node_id), '')) FROM {MEMORY_TABLE}"
        ).fetchone()
    return f"{row[0]}:{row[1]}" if row else "no-store"


# One asset job per tree level, targeted by the sensor beside the ordered refresh job: the UI then
# lists `source_changes` under each memory asset's automations. Every run the sensor requests is
# still the one `refresh_memory_tree` run (leaves, then seats, then contracts).
LEVEL_JOBS = [
    dg.define_asset_job(
        f"materialize_{level}_memory",
        selection=[ASSET_KEYS[level]],
        partitions_def=PARTITIONS[level],
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
    llm, memory_tree = platform.llm, platform.memory_tree
    if not sources_db.path.exists():
        return dg.SkipReason(f"no sources yet ({sources_db.path} does not exist)")
    previous = _cursor(context.cursor)
    fail_dead_runs(context.instance, REFRESH_TAG)
    if context.instance.get_runs(
        dg.RunsFilter(statuses=_UNFINISHED, tags={REFRESH_TAG: _REFRESH_KINDS}), limit=1
    ):
        # Its writes move the store watermark; diff once it has ended, not against a half-built
        # tree (and a change made meanwhile would wait for the one refresh slot anyway).
        return dg.SkipReason("a memory refresh run is queued or in progress")
    hints = current_hints(derived_db, read_only=True)
    config = version_config(llm.get().model, hints, memory_tree.config())
    stored = store_watermark(derived_db.path)
    now = time.time()
    with connect(sources_db.path, read_only=True) as con:
        con.execute("BEGIN TRANSACTION")
        watermark = hashlib.sha1(sources_watermark(con).encode()).hexdigest()
        unchanged = (
            previous.get("watermark") == watermark
            and previous.get("stored") == stored
            and previous.get("config") == config.digest
            and not previous.get("partitions_pending")
            and now - float(str(previous.get("diffed_at", 0))) < FULL_DIFF_EVERY_S
        )
        if unchanged:
            con.execute("COMMIT")
            return dg.SkipReason(
                "no source changes (nor memory store changes) since the last evaluation"
            )
        source = read_tree(con)
        con.execute("COMMIT")
    tree = Tree.from_sources(source, config)
    built = {}
    if derived_db.path.exists():
        with connect(derived_db.path, read_only=True) as con:
            built = read_built(con)
    plan = plan_changes(tree, built)

    partition_requests: list[dg.AddDynamicPartitionsRequest | dg.DeleteDynamicPartitionsRequest]
    partition_requests = []
    budget = MAX_PARTITION_REQUESTS
    pending = False
    for level in LEVELS:
        name = PARTITIONS[level].name
        assert name is not None
        existing = set(context.instance.get_dynamic_partitions(name))
        wanted = {split_node_id(n)[1] for n in tree.ids(level)}
        adds = sorted(wanted - existing)
        deletes = sorted(existing - wanted)
        if len(adds) + len(deletes) > budget:
            pending = True
        adds, deletes = adds[:budget], deletes[: max(0, budget - len(adds))]
        budget -= len(adds) + len(deletes)
        if adds:
            partition_requests.append(
                dg.AddDynamicPartitionsRequest(partitions_def_name=name, partition_keys=adds)
            )
        if deletes:
            partition_requests.append(
                dg.DeleteDynamicPartitionsRequest(partitions_def_name=name, partition_keys=deletes)
            )

    sequence = int(str(previous.get("sequence", 0))) + 1
    cursor = json.dumps(
        {
            "watermark": watermark,
            "stored": stored,
            "diffed_at": now,
            "config": config.digest,
            "sequence": sequence,
            "partitions_pending": pending,
        },
        sort_keys=True,
    )
    if pending:
        return dg.SensorResult(
            dynamic_partitions_requests=partition_requests,
            cursor=cursor,
            skip_reason=f"adding/deleting partitions in batches of {MAX_PARTITION_REQUESTS}; "
            "the refresh run follows once they are in place",
        )
    if plan.empty and not partition_requests:
        context.update_cursor(cursor)
        return dg.SkipReason("diffed the sources against the store: every memory node is current")
    if plan.empty:
        return dg.SensorResult(
            dynamic_partitions_requests=partition_requests,
            cursor=cursor,
            skip_reason="every memory node is current; partitions brought in line",
        )
    many = len(plan.rebuilds) + len(plan.deletes) > MAX_IDS_IN_RUN_CONFIG
    run_key = plan.run_key(f"{config.digest}:{sequence}")
    context.log.info(f"requesting a refresh: {plan.describe()} (run key {run_key[:12]})")
    return dg.SensorResult(
        run_requests=[
            dg.RunRequest(
                job_name=refresh_memory_tree.name,
                run_key=run_key,
                run_config=refresh_run_config(plan, all_stale=many),
                tags={
                    REFRESH_TAG: "sensor",
                    "hltm/projects": str(len(plan.projects)),
                    "hltm/seats": str(len(plan.seats)),
                    "hltm/contracts": str(len(plan.contracts)),
                    "hltm/deletes": str(len(plan.deletes)),
                },
            )
        ],
        dynamic_partitions_requests=partition_requests,
        cursor=cursor,
    )

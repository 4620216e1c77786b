"""`source_changes`: turn source changes into one refresh run over exactly the affected chains.

Each evaluation:

1. reads the sources (read-only) and computes a cheap watermark over every table the memory tree
   reads, and digests of the stored nodes per bucket of contracts; if both and the build
   settings are unchanged since the cursor, and no periodic full diff is due or under way, it
   skips;
2. otherwise it diffs, incrementally: only the contracts whose subtree changed — rows ingested
   or deleted since the cursor's change number (the ingest change log), stored buckets whose
   digest moved — are read, their desired versions computed from the sources (no LLM) and
   compared with the versions stored in `memory_nodes` (read-only). A node whose version differs
   is affected, and a change to a project changes its seat's and contract's versions, so the
   affected set is always the changed leaves plus their ancestor chains — old and new parents for
   a move (`hltm.memory.changes`). The whole tree is diffed instead when there is no usable
   cursor (missing, or from an older format), when the build settings changed, when the sources
   have no change log (an older ingest wrote them) or changed without one. Every
   `FULL_DIFF_EVERY_S` a periodic full diff is spread over the next ticks, `SWEEP_BUCKETS` store
   buckets of contracts each;
3. adds / deletes dynamic partitions so they match the diffed nodes (≤ 25,000 requests per
   evaluation, the rest on the next ticks), and requests one `refresh_memory_tree` run for the
   affected set, with a deterministic run key (sha1 of the change set and the cursor's sequence
   number).

The cursor remembers the run it requested and the change number its diff started from. If that
run fails or is canceled (a killed run is failed by run monitoring), the next tick diffs again
from that older change number: the contracts the run did not reach are requested again,
although the change log has nothing newer for them. Diffing against what is *stored* (not against the previous
tick) makes the sensor self-healing: nodes a failed run left stale are requested again, and
because a change of the store alone (a
crash that emptied it, a restore from an old backup) also triggers a diff of the contracts it
touched, the tree is rebuilt without waiting for a source change. The slow periodic full diff
catches what neither sees (partitions deleted by hand, sources edited outside ingest beside a
logged change).
"""

import hashlib
import json
import time

import dagster as dg

from assets.memory import (
    ASSET_KEYS,
    PARTITIONS,
    REFRESH_TAG,
    current_hints,
    refresh_memory_tree,
    refresh_run_config,
)
from hltm.memory.build import version_config
from hltm.memory.changes import (
    BUCKETS,
    change_mark,
    contracts_to_diff,
    diff_contracts,
    moved_buckets,
    store_digests,
)
from hltm.memory.inputs import sources_watermark
from hltm.memory.models import LEVELS, split_node_id
from hltm.warehouse import connect
from resources import PlatformResource
from resources.instance import RUN_KEY_TAG, fail_dead_runs

# Dagster's advice: at most 25k partition adds/deletes per sensor evaluation.
MAX_PARTITION_REQUESTS = 25_000
# Above this many affected nodes, the run rebuilds "everything stale" instead of carrying ids.
MAX_IDS_IN_RUN_CONFIG = 5_000
# Even when nothing seems to have changed, diff the whole tree this often: spread over ticks,
# this many of the store's 256 buckets of contracts per tick (a whole-tree diff at 100k projects
# can outlast a sensor evaluation).
FULL_DIFF_EVERY_S = 3_600
SWEEP_BUCKETS = 32
# Cursors of another layout (the full-diff-only sensor had none) trigger one full diff.
CURSOR_FORMAT = 2
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


def _cursor(raw: str | None) -> dict[str, object]:
    try:
        value = json.loads(raw) if raw else {}
    except json.JSONDecodeError:
        value = {}
    return value if isinstance(value, dict) else {}


def _digests(value: object) -> dict[str, str]:
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}


def _unsucceeded_request(
    instance: dg.DagsterInstance, previous: dict[str, object]
) -> dict[str, object] | None:
    """The last requested refresh (its run key and the change number its diff started from)
    if its run ended without succeeding: failed, canceled, or killed (run monitoring fails it).
    A run still queued or running holds the refresh slot, so this tick skips anyway."""
    requested = previous.get("requested")
    if not isinstance(requested, dict):
        return None
    runs = instance.get_runs(dg.RunsFilter(tags={RUN_KEY_TAG: str(requested["run_key"])}), limit=1)
    ended_badly = runs and runs[0].status in _ENDED_BADLY
    return requested if ended_badly else None


def _full_diff_reason(
    previous: dict[str, object], config: str, mark: int | None, since: int
) -> str | None:
    """Why this tick must diff the whole tree (None: an incremental diff is exact)."""
    if previous.get("format") != CURSOR_FORMAT:
        return "no cursor, or one from an older format"
    if previous.get("config") != config:
        return "the build settings changed"
    if previous.get("partitions_pending"):
        return "partitions are still being added"
    if mark is None:
        return "the sources have no change log (written by an older ingest)"
    if mark < since:
        return "the change log went back (the sources file was replaced)"
    return None


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
    stored = store_digests(derived_db.path)
    unsucceeded = _unsucceeded_request(context.instance, previous)
    now = time.time()
    with connect(sources_db.path, read_only=True) as con:
        con.execute("BEGIN TRANSACTION")
        watermark = hashlib.sha1(sources_watermark(con).encode()).hexdigest()
        mark = change_mark(con)
        last_full = float(str(previous.get("diffed_at", 0)))
        sweep = previous.get("sweep")  # the next bucket of a periodic full diff under way
        due = now - last_full >= FULL_DIFF_EVERY_S
        if (
            previous.get("format") == CURSOR_FORMAT
            and previous.get("watermark") == watermark
            and previous.get("stored") == stored
            and previous.get("config") == config.digest
            and not previous.get("partitions_pending")
            and not due
            and sweep is None
            and unsucceeded is None
        ):
            con.execute("COMMIT")
            return dg.SkipReason(
                "no source changes (nor memory store changes) since the last evaluation"
            )
        since = int(str(previous.get("change_seq", 0)))
        if unsucceeded is not None:
            since = min(since, int(str(unsucceeded["since"])))
            context.log.info(
                f"the refresh requested last did not succeed: diffing again from change {since}"
            )
        full_why = _full_diff_reason(previous, config.digest, mark, since)
        scope, next_sweep = None, None
        start = int(str(sweep)) if sweep is not None else (0 if due else None)
        swept = BUCKETS[start : start + SWEEP_BUCKETS] if start is not None else ()
        if full_why is None:
            buckets = moved_buckets(_digests(previous.get("stored")), stored) | set(swept)
            scope = contracts_to_diff(con, derived_db.path, since, buckets)
            if swept and start is not None and start + SWEEP_BUCKETS < len(BUCKETS):
                next_sweep = start + SWEEP_BUCKETS
            if not scope and not swept and previous.get("watermark") != watermark:
                full_why = "the sources changed outside ingest (no change log entry)"
                scope = None
        diff = diff_contracts(con, derived_db.path, scope, config)
        con.execute("COMMIT")
    tree, plan = diff.tree, diff.plan
    how = (
        f"diffed the whole tree against the store ({full_why}; incremental from the next tick)"
        if scope is None
        else f"diffed incrementally the {len(scope)} contract(s) changed since change {since}"
        + (f" or in buckets {swept[0]}–{swept[-1]} of the periodic full diff" if swept else "")
    )
    context.log.info(f"{how}: read {diff.nodes_read} tree and stored node(s)")

    partition_requests: list[dg.AddDynamicPartitionsRequest | dg.DeleteDynamicPartitionsRequest]
    partition_requests = []
    budget = MAX_PARTITION_REQUESTS
    pending = False
    for level in LEVELS:
        name = PARTITIONS[level].name
        assert name is not None
        wanted = {split_node_id(n)[1] for n in tree.ids(level)}
        seen = wanted | {split_node_id(n)[1] for n, b in diff.built.items() if b.level == level}
        existing = _existing_partitions(context.instance, name, None if scope is None else seen)
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
    run_key = plan.run_key(f"{config.digest}:{sequence}")

    def cursor_with(requested: dict[str, object] | None) -> str:
        return json.dumps(
            {
                "format": CURSOR_FORMAT,
                "watermark": watermark,
                "stored": stored,
                "change_seq": mark or 0,
                "diffed_at": now if scope is None or (swept and next_sweep is None) else last_full,
                "sweep": next_sweep,
                "config": config.digest,
                "sequence": sequence,
                "partitions_pending": pending,
                "requested": requested,
            },
            sort_keys=True,
        )

    cursor = cursor_with(None)
    if pending:  # the unfinished run, if any, stays to be checked after the partitions
        return dg.SensorResult(
            dynamic_partitions_requests=partition_requests,
            cursor=cursor_with(unsucceeded),
            skip_reason=f"adding/deleting partitions in batches of {MAX_PARTITION_REQUESTS}; "
            "the refresh run follows once they are in place",
        )
    if plan.empty and not partition_requests:
        context.update_cursor(cursor)
        return dg.SkipReason(f"{how}: every memory node is current")
    if plan.empty:
        return dg.SensorResult(
            dynamic_partitions_requests=partition_requests,
            cursor=cursor,
            skip_reason=f"{how}: every memory node is current; partitions brought in line",
        )
    many = len(plan.rebuilds) + len(plan.deletes) > MAX_IDS_IN_RUN_CONFIG
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
                    "hltm/diff": "full" if scope is None else "incremental",
                },
            )
        ],
        dynamic_partitions_requests=partition_requests,
        cursor=cursor_with({"run_key": run_key, "since": since}),
    )

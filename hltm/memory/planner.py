"""The memory refresh planner: from the sources, the store and what the last evaluation saw (its
cursor), which nodes one refresh must rebuild or delete, and which partitions must exist. Plain
Python: the `source_changes` sensor only carries its answer to Dagster.

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
3. adds / deletes the memory's partitions (one per contract: those of the sources, and those
   still stored, whose purge is a run of that partition) so they match the diffed contracts
   (≤ 25,000 requests per evaluation, the rest on the next ticks), and asks for one refresh of
   the affected contracts — the contracts of the changed leaves and their ancestor chains, old
   and new for a move — with a deterministic key (sha1 of the change set and the cursor's
   sequence number).

Contracts a refresh run is still working on (`busy`) are left out of the diff (their stored
nodes are half-written) and kept in the cursor as deferred: they are diffed on the first tick
after their run ended, so a change to them made meanwhile is requested then, while changes to
every other contract are requested at once and run beside it.

The cursor remembers the refreshes it requested that have not ended, each with the change number
its diff started from. If one of their runs fails or is canceled (a killed run is failed by run
monitoring), the next tick diffs again from that older change number: the contracts the run did
not reach are requested again, although the change log has nothing newer for them. Diffing against what is *stored* (not against the previous
tick) makes the sensor self-healing: nodes a failed run left stale are requested again, and
because a change of the store alone (a
crash that emptied it, a restore from an old backup) also triggers a diff of the contracts it
touched, the tree is rebuilt without waiting for a source change. The slow periodic full diff
catches what neither sees (partitions deleted by hand, sources edited outside ingest beside a
logged change).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from hltm.memory.changes import (
    BUCKETS,
    change_mark,
    contracts_to_diff,
    diff_contracts,
    moved_buckets,
    store_digests,
)
from hltm.memory.inputs import sources_watermark
from hltm.memory.models import split_node_id
from hltm.memory.store import MEMORY_TABLE
from hltm.memory.tree import Plan, VersionConfig, contracts_of
from hltm.warehouse import connect, store_exists, table_exists

# Dagster's advice: at most 25k partition adds/deletes per sensor evaluation.
MAX_PARTITION_REQUESTS = 25_000
# Even when nothing seems to have changed, diff the whole tree this often: spread over ticks,
# this many of the store's 256 buckets of contracts per tick (a whole-tree diff at 100k projects
# can outlast a sensor evaluation).
FULL_DIFF_EVERY_S = 3_600
SWEEP_BUCKETS = 32
# Cursors of another layout (the full-diff-only sensor had none) trigger one full diff.
CURSOR_FORMAT = 3

# The memory partitions (contract ids) among `keys` (None: all of them) that exist now.
ExistingPartitions = Callable[[set[str] | None], set[str]]


@dataclass(frozen=True)
class RefreshDecision:
    """One evaluation's answer. `plan` is set when a refresh must run, with the `contracts` (the
    memory partitions) it touches, its `run_key` and `tags`; else `skip` says why not; `cursor`
    is the next cursor (None: keep the old one); `adds` / `deletes`: the partitions to add and
    to delete; `notes` say what was diffed and why."""

    cursor: str | None
    skip: str | None = None
    plan: Plan | None = None
    contracts: list[str] = field(default_factory=list)
    run_key: str = ""
    tags: dict[str, str] = field(default_factory=dict)
    adds: list[str] = field(default_factory=list)
    deletes: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def memory_partitions(sources_db: Path, derived_db: Path) -> set[str]:
    """The memory's partitions a whole-tree refresh runs over: every contract of the sources,
    and every contract still stored (its purge is a run of its partition)."""
    contracts: set[str] = set()
    for path, table in ((sources_db, "contracts"), (derived_db, MEMORY_TABLE)):
        if store_exists(path):
            with connect(path, read_only=True) as con:
                if table_exists(con, table):
                    rows = con.execute(f"SELECT DISTINCT contract_id FROM {table}").fetchall()
                    contracts |= {str(r[0]) for r in rows}
    return contracts


def read_cursor(raw: str | None) -> dict[str, object]:
    try:
        value = json.loads(raw) if raw else {}
    except json.JSONDecodeError:
        value = {}
    return value if isinstance(value, dict) else {}


def _digests(value: object) -> dict[str, str]:
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}


def _requests(previous: dict[str, object]) -> list[dict[str, object]]:
    """The refreshes requested earlier whose runs had not all ended (key, change number)."""
    requested = previous.get("requested")
    return [r for r in requested if isinstance(r, dict)] if isinstance(requested, list) else []


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


def plan_refresh(
    raw_cursor: str | None,
    sources_db: Path,
    derived_db: Path,
    config: VersionConfig,
    existing_partitions: ExistingPartitions,
    ended_badly: Callable[[str], bool],
    now: float,
    unfinished: Callable[[str], bool] = lambda _: False,
    busy: frozenset[str] = frozenset(),
) -> RefreshDecision:
    """What the memory tree needs now: nothing (a cheap watermark check), or the partitions to
    bring in line and the one refresh of the contracts of the affected leaves and ancestor
    chains, leaving out the `busy` contracts (a refresh run is at them). `ended_badly` and
    `unfinished` tell, by its key, whether a requested refresh failed or still runs."""
    previous = read_cursor(raw_cursor)
    stored = store_digests(derived_db)
    earlier = _requests(previous)
    failed = [r for r in earlier if ended_badly(str(r["run_key"]))]
    running = [r for r in earlier if r not in failed and unfinished(str(r["run_key"]))]
    listed = previous.get("deferred")
    deferred = {str(c) for c in listed} if isinstance(listed, list) else set()
    freed = deferred - busy  # left out while their run went on; it has ended
    notes: list[str] = []
    with connect(sources_db, read_only=True) as con:
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
            and not failed
            and not freed
        ):
            con.execute("COMMIT")
            return RefreshDecision(
                None, "no source changes (nor memory store changes) since the last evaluation"
            )
        since = int(str(previous.get("change_seq", 0)))
        if failed:
            since = min(since, *(int(str(r["since"])) for r in failed))
            notes.append(
                f"a refresh requested earlier did not succeed: diffing again from change {since}"
            )
        full_why = _full_diff_reason(previous, config.digest, mark, since)
        scope, next_sweep = None, None
        start = int(str(sweep)) if sweep is not None else (0 if due else None)
        swept = BUCKETS[start : start + SWEEP_BUCKETS] if start is not None else ()
        if full_why is None:
            buckets = moved_buckets(_digests(previous.get("stored")), stored) | set(swept)
            scope = contracts_to_diff(con, derived_db, since, buckets) | freed
            if swept and start is not None and start + SWEEP_BUCKETS < len(BUCKETS):
                next_sweep = start + SWEEP_BUCKETS
            if not scope and not swept and previous.get("watermark") != watermark:
                full_why = "the sources changed outside ingest (no change log entry)"
                scope = None
        if scope is None and busy:  # a whole-tree diff would read their half-written nodes
            con.execute("COMMIT")
            why = f"a memory refresh run is in progress; the whole-tree diff ({full_why}) waits"
            return RefreshDecision(None, why)
        if scope is None:
            deferred = set()  # the whole tree is diffed
        else:
            deferred = (deferred | scope) & busy
            scope -= busy
            if deferred:
                notes.append(
                    f"left {len(deferred)} contract(s) a refresh run is at for when it ends:"
                    f" {', '.join(sorted(deferred)[:8])}"
                )
        diff = diff_contracts(con, derived_db, scope, config)
        con.execute("COMMIT")
    tree, plan = diff.tree, diff.plan
    how = (
        f"diffed the whole tree against the store ({full_why}; incremental from the next tick)"
        if scope is None
        else f"diffed incrementally the {len(scope)} contract(s) changed since change {since}"
        + (f" or in buckets {swept[0]}–{swept[-1]} of the periodic full diff" if swept else "")
    )
    notes.append(f"{how}: read {diff.nodes_read} tree and stored node(s)")

    # A contract stored but gone from the sources keeps its partition until a run of it purged it.
    wanted = {split_node_id(n)[1] for n in tree.ids("contract")} | {
        b.contract_id for b in diff.built.values()
    }
    existing = existing_partitions(None if scope is None else wanted | set(scope))
    adds, deletes = sorted(wanted - existing), sorted(existing - wanted)
    budget = MAX_PARTITION_REQUESTS
    pending = len(adds) + len(deletes) > budget
    adds, deletes = adds[:budget], deletes[: max(0, budget - len(adds))]

    sequence = int(str(previous.get("sequence", 0))) + 1
    run_key = plan.run_key(f"{config.digest}:{sequence}")

    def cursor_with(requested: list[dict[str, object]]) -> str:
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
                "deferred": sorted(deferred),
            },
            sort_keys=True,
        )

    if pending:  # the failed runs, if any, stay to be checked after the partitions
        skip = (
            f"adding/deleting partitions in batches of {MAX_PARTITION_REQUESTS}; "
            "the refresh run follows once they are in place"
        )
        return RefreshDecision(
            cursor_with([*running, *failed]), skip, adds=adds, deletes=deletes, notes=notes
        )
    if plan.empty:
        brought = "; partitions brought in line" if adds or deletes else ""
        skip = f"{how}: every memory node is current{brought}"
        return RefreshDecision(cursor_with(running), skip, adds=adds, deletes=deletes, notes=notes)
    contracts = contracts_of(plan, tree, diff.built)
    notes.append(
        f"requesting a refresh of {len(contracts)} contract(s): {plan.describe()}"
        f" (key {run_key[:12]})"
    )
    tags = {
        "hltm/projects": str(len(plan.projects)),
        "hltm/seats": str(len(plan.seats)),
        "hltm/contracts": str(len(plan.contracts)),
        "hltm/deletes": str(len(plan.deletes)),
        "hltm/diff": "full" if scope is None else "incremental",
    }
    return RefreshDecision(
        cursor_with([*running, {"run_key": run_key, "since": since}]),
        plan=plan,
        contracts=contracts,
        run_key=run_key,
        tags=tags,
        adds=adds,
        deletes=deletes,
        notes=notes,
    )

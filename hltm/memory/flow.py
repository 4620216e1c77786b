"""The dataflow of `MemoryBuilder.build`: up to N LLM calls in flight across nodes of all levels."""

from __future__ import annotations

import threading
from collections import Counter, defaultdict, deque
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from hltm.errors import FULL, READ_ONLY, StoreError
from hltm.llm.calls import Backend, LLMUsage
from hltm.memory.inputs import read_project_inputs, read_tree, source_children
from hltm.memory.models import LEVELS, MemoryNode, Placement, split_node_id
from hltm.memory.store import Drops
from hltm.memory.tree import leaf_version, parent_version
from hltm.warehouse import connect

if TYPE_CHECKING:
    from hltm.memory.build import MemoryBuilder


@dataclass
class NodeReport:
    """What became of one node: made by the flow, and by the builder's deletes and re-indexes."""

    node_id: str
    level: str
    status: str  # built | current | reindexed | deleted | failed
    version: str = ""
    previous_version: str | None = None
    children: list[tuple[str, str]] = field(default_factory=list)
    facets: int = 0
    qa: int = 0
    summaries: int = 0
    drops: Drops = field(default_factory=Drops)
    llm_calls: int = 0  # every request, failed ones and retries included
    llm_failed_calls: int = 0
    llm_interrupted: int = 0  # failed calls the server cut off (transport, not the model)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    embedding_calls: int = 0
    seconds: float = 0.0
    error: str | None = None

    def metadata(self) -> dict[str, Any]:
        return {
            "node_id": self.node_id,
            "status": self.status,
            "version": self.version,
            "previous_version": self.previous_version or "",
            "children": [list(c) for c in self.children],
            "child_count": len(self.children),
            "facets": self.facets,
            "qa_pairs": self.qa,
            "summaries": self.summaries,
            "facets_dropped": self.drops.count("facet"),
            "qa_dropped": self.drops.count("qa"),
            "dropped_reasons": dict(self.drops.reasons),
            "llm_calls": self.llm_calls,
            "llm_failed_calls": self.llm_failed_calls,
            "llm_interrupted": self.llm_interrupted,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "embedding_calls": self.embedding_calls,
            "seconds": round(self.seconds, 3),
        }


OnNode = Callable[[NodeReport], None]


class Flow:
    """One `MemoryBuilder.build`: which nodes wait for which, what may start, what to store.

    Only the calling thread reads and writes the stores. A parent is built from the children
    this build made (kept in memory until their parent takes them) and, for the others, from
    the store: what a level-by-level build would have read once the level below was stored."""

    def __init__(self, builder: MemoryBuilder, node_ids: list[str], on_node: OnNode | None):
        self.builder = builder
        self.on_node = on_node
        self.config = builder.version_config()
        self.reports: list[NodeReport] = []
        self.built = builder.store.built(node_ids)  # what the store holds for them now
        with connect(builder.sources_db, read_only=True) as con:
            con.execute("BEGIN TRANSACTION")  # one consistent snapshot of the tree
            ids = [split_node_id(n) for n in node_ids]
            source = read_tree(con, project_ids=[i for level, i in ids if level == "project"])
            placements = {n: source.nodes[n].placement for n in node_ids if n in source.nodes}
            parents = [p for p in placements.values() if p.level != "project"]
            kids = source_children(con, parents)
            con.execute("COMMIT")
        self.placements = placements
        self.parents = {
            p.node_id: Job(p, "", {}, kids[p.node_id], source.nodes[p.node_id].fingerprint)
            for p in parents
        }
        # A parent waits for its children in the set; a contract's nodes are stored once
        # none of them is still open.
        self.waiting = {
            nid: {k for k in job.child_ids if k in placements} for nid, job in self.parents.items()
        }
        self.open = Counter(p.contract_id for p in placements.values())
        # Leaves of one seat, then of one contract, together: their parents start early.
        self.leaves = deque(
            sorted(
                (p for p in placements.values() if p.level == "project"),
                key=lambda p: (p.contract_id, p.seat_id or "", p.node_id),
            )
        )
        self.leaf_jobs: deque[Job] = deque()
        self.ready: deque[Job] = deque()  # parents, started before any waiting leaf
        self.fresh: dict[str, MemoryNode] = {}  # built here, until their parent takes them
        self.unembedded: list[Outcome] = []
        self.unstored: dict[str, list[tuple[Outcome, np.ndarray]]] = defaultdict(list)
        self.leaves_running = 0
        # Nodes whose memory misses what this build should have put in (their own build failed,
        # or a child's did), with why: recorded for readers once the build is done.
        self.incomplete: dict[str, tuple[Placement, str]] = {}
        self._report(builder.delete([n for n in node_ids if n not in placements]))
        self._prepare([nid for nid, waits in self.waiting.items() if not waits])

    def run(self) -> list[NodeReport]:
        """Keep the nodes' LLM work going (parents first), take what finishes: one node at a
        time with one worker; else up to twice `workers` nodes, a leaf's QA and summary calls
        side by side, never more than `workers` requests in flight (a shared slot per request,
        so a retry's pause holds none), embedding and storing meanwhile."""
        builder = self.builder
        workers = max(1, builder.workers)
        # More nodes than slots under way, so a node busy between its calls (cleaning its
        # facets) leaves its slot to a waiting request instead of idle.
        threads = 1 if workers == 1 else 2 * workers
        backend = Slotted(builder.llm.backend, threading.BoundedSemaphore(workers))
        with (
            ThreadPoolExecutor(threads, thread_name_prefix="memory-node") as nodes,
            ThreadPoolExecutor(threads, thread_name_prefix="memory-call") as calls,
        ):
            side = calls if workers > 1 else None
            running: set[Future[Outcome]] = set()
            try:
                while True:
                    # Nodes that may start are started before this thread embeds and stores.
                    while len(running) < threads and (job := self._next_job()) is not None:
                        running.add(nodes.submit(builder.build_one, job, self.built, backend, side))
                        self.leaves_running += job.placement.level == "project"
                    self._embed_and_store(workers)
                    if not running:
                        break
                    finished, running = wait(running, return_when=FIRST_COMPLETED)
                    self._take([f.result() for f in finished])
            finally:
                for future in running:  # taking failed: start no more nodes
                    future.cancel()
        self._store(list(self.unstored))
        self.builder.store.mark_incomplete(
            list(self.incomplete.values()),
            settled=[r.node_id for r in self.reports if r.status != "failed"],
        )
        return sorted(
            self.reports,
            key=lambda r: (LEVELS.index(r.level), r.status != "deleted", r.node_id),  # type: ignore[arg-type]
        )

    def _next_job(self) -> Job | None:
        if self.ready:
            return self.ready.popleft()
        while not self.leaf_jobs and self.leaves:
            self._read_leaves()
        return self.leaf_jobs.popleft() if self.leaf_jobs else None

    def _read_leaves(self) -> None:
        """The next `batch_size` leaves' inputs, with their versions from the same snapshot."""
        chunk = [
            self.leaves.popleft()
            for _ in range(min(self.builder.config.batch_size, len(self.leaves)))
        ]
        pids = [p.project_id or "" for p in chunk]
        with connect(self.builder.sources_db, read_only=True) as con:
            con.execute("BEGIN TRANSACTION")
            source = read_tree(con, project_ids=pids)
            inputs = read_project_inputs(con, pids)
            con.execute("COMMIT")
        gone, current = [], []
        for placement, pid in zip(chunk, pids, strict=True):
            node = source.nodes.get(placement.node_id)
            if node is None or pid not in inputs:
                gone.append(placement.node_id)
                continue
            version = leaf_version(node.placement, node.fingerprint, self.config)
            before = self.built.get(placement.node_id)
            if before and before.version == version:
                current.append(_current(node.placement, version, []))
            else:
                self.leaf_jobs.append(Job(node.placement, version, inputs[pid], []))
        self._report(self.builder.delete(gone))
        self._report(current)
        self._settle([*gone, *(r.node_id for r in current)])

    def _take(self, outcomes: list[Outcome]) -> None:
        """Finished nodes: failures reported, the built kept for their parents, which may
        now start."""
        outcomes.sort(key=lambda o: o.report.node_id)
        self.builder.absorb(outcomes)
        for outcome in outcomes:
            self.leaves_running -= outcome.report.level == "project"
            if outcome.node is None:
                self._report([outcome.report])  # failed: its previous version stays
                placement = self.placements[outcome.report.node_id]
                self.incomplete[placement.node_id] = (placement, outcome.report.error or "failed")
                continue
            self.unembedded.append(outcome)
            if outcome.node.placement.parent_id in self.parents:
                self.fresh[outcome.report.node_id] = outcome.node
        self._settle([o.report.node_id for o in outcomes])

    def _embed_and_store(self, workers: int) -> None:
        """Built nodes are embedded once `workers` of them wait (or a write is due); a
        contract's nodes are stored once none of them is open, or `batch_size` wait, or only
        parents are left under way (the tail: the last contracts' leaves go in meanwhile)."""
        finished = [*self.unembedded, *(o for pairs in self.unstored.values() for o, _ in pairs)]
        waiting = Counter(self._contract_of(o) for o in finished)
        limit = self.builder.config.batch_size
        tail = not (self.ready or self.leaf_jobs or self.leaves or self.leaves_running)
        with_leaves = {self._contract_of(o) for o in finished if o.report.level == "project"}
        due = sorted(
            c
            for c, n in waiting.items()
            if self.open[c] == 0 or n >= limit or (tail and c in with_leaves)
        )
        if len(self.unembedded) >= workers or due:
            group, self.unembedded = self.unembedded, []
            for outcome, (_, vectors) in zip(group, self.builder.embed_built(group), strict=True):
                self.unstored[self._contract_of(outcome)].append((outcome, vectors))
        self._store(due)

    def _store(self, contract_ids: list[str]) -> None:
        """One write per contract of its finished nodes, in id order; then their reports. A
        contract whose write fails (its collection refuses the items) fails its nodes, which
        keep their last good versions and are marked incomplete; the other contracts go on. A
        full or read-only disk stops the build: nothing more could be stored."""
        for cid in sorted(contract_ids):
            done = sorted(self.unstored.pop(cid, []), key=lambda pair: pair[0].report.node_id)
            if not done:
                continue
            try:
                self.builder.store.write(
                    [(o.node, vectors) for o, vectors in done],  # type: ignore[misc]
                    old=self.built,
                    drops={o.report.node_id: o.report.drops for o, _ in done},
                )
            except StoreError as err:
                if err.kind in (FULL, READ_ONLY):
                    raise
                self._not_stored(done, err)
            except Exception as err:  # noqa: BLE001 - reported against each node of the contract
                self._not_stored(done, err)
            else:
                self._report([o.report for o, _ in done])

    def _not_stored(self, done: list[tuple[Outcome, np.ndarray]], err: Exception) -> None:
        for outcome, _ in done:
            report = outcome.report
            report.status = "failed"
            report.error = f"{report.node_id}: not stored: {type(err).__name__}: {err}"
            self.incomplete[report.node_id] = (self.placements[report.node_id], report.error)
        self._report([o.report for o, _ in done])

    def _settle(self, node_ids: list[str]) -> None:
        """These nodes are done: their contracts have fewer open, their parents wait less."""
        ready = []
        for nid in node_ids:
            placement = self.placements[nid]
            self.open[placement.contract_id] -= 1
            waits = self.waiting.get(placement.parent_id or "")
            if waits is not None and nid in waits:
                waits.discard(nid)
                if not waits:
                    ready.append(placement.parent_id or "")
        self._prepare(ready)

    def _prepare(self, parent_ids: list[str]) -> None:
        """Parents whose children are settled: versions from their children's, then queued
        (or reported current)."""
        if not parent_ids:
            return
        jobs = [self.parents.pop(nid) for nid in sorted(parent_ids)]
        unseen = {k for job in jobs for k in job.child_ids if k not in self.fresh}
        stored = self.builder.store.nodes(unseen) if unseen else {}
        current, unbuilt = [], []
        for job in jobs:
            found = (self.fresh.pop(k, None) or stored.get(k) for k in job.child_ids)
            job.children = [c for c in found if c is not None]
            short = sorted(k for k in job.child_ids if k in self.incomplete)
            if short:
                why = f"its child {short[0]} is incomplete" + (
                    f" (and {len(short) - 1} more)" if len(short) > 1 else ""
                )
                self.incomplete[job.placement.node_id] = (job.placement, why)
            lost = [k for k in short if k not in {c.node_id for c in job.children}]
            if lost:  # built without them, it would read as if they were empty
                unbuilt.append(self._not_built(job, lost))
                continue
            pairs = [(c.node_id, c.version) for c in job.children]
            job.version = parent_version(job.placement, job.fingerprint, pairs, self.config)
            before = self.built.get(job.placement.node_id)
            if before and before.version == job.version:
                current.append(_current(job.placement, job.version, pairs))
            else:
                self.ready.append(job)
        self._report([*current, *unbuilt])
        self._settle([r.node_id for r in [*current, *unbuilt]])

    def _not_built(self, job: Job, lost: list[str]) -> NodeReport:
        """A parent with a child that failed and has no memory at all is not built: it keeps
        its last good version, unless that version still holds a child the sources no longer
        have (a deletion must not wait for the outage to end); then it is purged."""
        nid = job.placement.node_id
        before = self.builder.store.nodes([nid]).get(nid)
        kept = "; its last good version stays"
        if before is not None and {k for k, _ in before.children} - set(job.child_ids):
            self.builder.store.delete([nid])
            kept = "; its last version was purged (it held a child that is gone)"
        return NodeReport(
            nid,
            job.placement.level,
            "failed",
            previous_version=before.version if before else None,
            error=f"{nid}: not rebuilt, its child {lost[0]} failed and has no memory"
            + (f" (and {len(lost) - 1} more)" if len(lost) > 1 else "")
            + (kept if before is not None else ""),
        )

    def _contract_of(self, outcome: Outcome) -> str:
        return self.placements[outcome.report.node_id].contract_id

    def _report(self, reports: list[NodeReport]) -> None:
        self.reports.extend(reports)
        for report in reports:
            if self.on_node:
                self.on_node(report)


def _current(placement: Placement, version: str, children: list[tuple[str, str]]) -> NodeReport:
    """The report of a node whose stored version is already the one its inputs give."""
    nid = placement.node_id
    return NodeReport(nid, placement.level, "current", version, version, children)


class Slotted:
    """A backend whose requests each wait for one of a shared set of slots: the bound on LLM
    calls in flight across every thread of a build. Anything else is the backend's own."""

    def __init__(self, backend: Backend, slots: threading.BoundedSemaphore) -> None:
        self._backend = backend
        self._slots = slots

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._backend, name)
        if name not in ("send", "complete"):
            return attr

        def bounded(*args: Any) -> Any:
            with self._slots:
                return attr(*args)

        return bounded


class Recorder:
    """Sees what reaches the model behind the cache (to charge embedding calls per node)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.model_name = inner.model_name
        self.dim = inner.dim
        self.seen: list[str] = []

    def passages(self, texts: list[str]) -> np.ndarray:
        self.seen.extend(texts)
        return self.inner.passages(texts)

    def query(self, text: str) -> np.ndarray:
        return self.inner.query(text)


@dataclass
class Job:
    placement: Placement
    version: str
    inputs: dict[str, Any]
    child_ids: list[str]
    fingerprint: str = ""
    children: list[MemoryNode] = field(default_factory=list)


@dataclass
class Outcome:
    node: MemoryNode | None
    report: NodeReport
    usage: LLMUsage

"""Build and refresh the memory tree: leaves from sources, parents from their children's memories.

`MemoryBuilder` is the one implementation behind every path — the full build, the sensor's
refresh run, the per-partition assets, the CLI and the benchmarks:

* `plan()` diffs the desired tree (versions computed from the sources) against the store;
* `build(node_ids)` rebuilds nodes of any levels, projects from their source data with the
  facets / qa / summary tasks, seats and contracts from their children's F/Q/S with the aggregate
  task; a node whose stored version is already the one its inputs give is skipped;
* `refresh(plan)` runs deletions, then `build` over the plan; `full_build()` refreshes everything
  that is not current and purges the rest.

A node whose LLM output stays unusable is reported as failed with an error naming it; the rest of
the tree is still stored, its previous good version stays in place, and its parent is rebuilt
from the children that do have a memory (so a deletion is never held back by a sibling's
failure). `MemoryBuildError` is raised at the end when anything failed.

The model may only cite ids of its input: they are sent as enums in the schema (strict mode or a
grammar enforces them), and checked again in code, with the parents' minimum support. What is
dropped (unknown ids, too little support, the prompt's own examples echoed back) is counted per
node, in its report and in the store, for the degraded-node check.

`build` is a dataflow, not level by level: up to `workers` LLM calls in flight (the backend's
concurrency by default: 1 offline, more against a remote endpoint) across nodes of every level, a
leaf's QA and summary calls side by side, and a parent started as soon as its own children are
done, ahead of the leaves still waiting (leaves go seat by seat, contract by contract, so seats
and contracts finish early). Embedding and every store write stay in the calling thread (one
DuckDB writer): it embeds finished nodes while the others' calls are in flight, and stores a
contract's nodes in one write once all of them are done (earlier in the tail, when only parents
are left). What is stored does not depend on `workers` or on the order nodes finish in.
Full plans first `reconcile()` the two stores: orphan vector items are swept and nodes whose
items are missing are re-indexed from their stored rows.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter, defaultdict, deque
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_COMPLETED, Executor, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from hltm.embeddings import CachedEmbedder
from hltm.llm import LLM, Backend, LLMUsage, Task
from hltm.memory import lexicon as lx
from hltm.memory import tasks
from hltm.memory.hints import NO_HINTS, Hints
from hltm.memory.inputs import read_project_inputs, read_tree, source_children
from hltm.memory.models import (
    CHILD_LEVEL,
    LEVELS,
    QA,
    AggregateOutput,
    Facet,
    FacetsOutput,
    MemoryNode,
    Placement,
    QAOutput,
    SummaryOutput,
    split_node_id,
)
from hltm.memory.offline import required_support
from hltm.memory.store import Drops, MemoryStore
from hltm.memory.tree import (
    BuiltNode,
    Plan,
    Tree,
    VersionConfig,
    close_over_ancestors,
    leaf_version,
    parent_version,
    plan_changes,
)
from hltm.warehouse import connect


@dataclass(frozen=True)
class MemoryConfig:
    """Build settings. A parent keeps a facet value only if at least `support_threshold` of its
    children, and at least `min_support` of them (or all, when it has fewer), state it. Both are
    part of every node's version."""

    support_threshold: float = 0.3
    min_support: int = 2  # and at least this many children (or all of them, if fewer)
    workers: int = 0  # LLM calls in flight across nodes; 0 = the LLM backend's concurrency
    batch_size: int = 200  # nodes stored per atomic batch


class MemoryBuildError(RuntimeError):
    def __init__(self, failures: list[NodeReport]) -> None:
        lines = [f"{r.node_id}: {r.error}" for r in failures]
        super().__init__(
            f"{len(failures)} memory node(s) failed; their previous versions were kept:\n"
            + "\n".join(lines)
        )
        self.failures = failures


@dataclass
class NodeReport:
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
    llm_calls: int = 0
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
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "embedding_calls": self.embedding_calls,
            "seconds": round(self.seconds, 3),
        }


@dataclass
class RefreshReport:
    nodes: list[NodeReport] = field(default_factory=list)
    seconds: float = 0.0
    orphans_swept: int = 0

    def extend(self, reports: list[NodeReport]) -> None:
        self.nodes.extend(reports)

    def with_status(self, status: str) -> list[NodeReport]:
        return [r for r in self.nodes if r.status == status]

    @property
    def failures(self) -> list[NodeReport]:
        return self.with_status("failed")

    @property
    def rebuilt(self) -> list[NodeReport]:
        return self.with_status("built")

    def totals(self) -> dict[str, int]:
        return {
            "nodes_rebuilt": len(self.rebuilt),
            "nodes_deleted": len(self.with_status("deleted")),
            "nodes_reindexed": len(self.with_status("reindexed")),
            "orphans_swept": self.orphans_swept,
            "nodes_failed": len(self.failures),
            "llm_calls": sum(r.llm_calls for r in self.nodes),
            "prompt_tokens": sum(r.prompt_tokens for r in self.nodes),
            "completion_tokens": sum(r.completion_tokens for r in self.nodes),
            "embedding_calls": sum(r.embedding_calls for r in self.nodes),
        }

    def raise_for_failures(self) -> None:
        if self.failures:
            raise MemoryBuildError(self.failures)


OnNode = Callable[[NodeReport], None]
MAX_PROJECT_QA = 10
MAX_PARENT_QA = 10


class MemoryBuilder:
    def __init__(
        self,
        sources_db: Path | str,
        store: MemoryStore,
        llm: LLM,
        embedder: CachedEmbedder,
        hints: Hints = NO_HINTS,
        config: MemoryConfig | None = None,
    ) -> None:
        self.sources_db = Path(sources_db)
        self.store = store
        self.llm = llm
        self.embedder = embedder
        self.hints = hints
        self.config = config or MemoryConfig()

    # ---- planning ------------------------------------------------------------------------------

    def version_config(self) -> VersionConfig:
        return version_config(self.llm.model, self.hints, self.config)

    def tree(self) -> Tree:
        if not self.sources_db.exists():
            return Tree({}, {}, {}, {})
        with connect(self.sources_db, read_only=True) as con:
            source = read_tree(con)
        return Tree.from_sources(source, self.version_config())

    def plan(self, tree: Tree | None = None) -> Plan:
        """Every node that is not current, with its ancestors, and every node to purge."""
        return plan_changes(tree or self.tree(), self.store.built())

    def plan_for(self, node_ids: list[str], tree: Tree | None = None) -> Plan:
        """An explicit affected set, closed over current and former ancestors."""
        tree = tree or self.tree()
        built = self.store.built()
        present = [n for n in node_ids if n in tree.nodes]
        gone = [n for n in node_ids if n not in tree.nodes]
        return close_over_ancestors(tree, built, present, gone)

    # ---- running -------------------------------------------------------------------------------

    def full_build(self, on_node: OnNode | None = None) -> RefreshReport:
        """Make the store equal to a build of the current sources (only stale nodes cost)."""
        return self.refresh(None, on_node=on_node)

    def refresh(
        self, plan: Plan | None = None, on_node: OnNode | None = None, tree: Tree | None = None
    ) -> RefreshReport:
        """Run a plan; without one, reconcile the stores and plan everything not current."""
        started = time.perf_counter()
        report = RefreshReport()
        if plan is None:
            swept, repaired = self.reconcile(on_node=on_node)
            report.orphans_swept = swept
            report.extend(repaired)
            plan = plan_changes(tree or self.tree(), self.store.built())
        report.extend(self.delete(plan.deletes, on_node))
        report.extend(self.build(plan.rebuilds, on_node))
        report.seconds = time.perf_counter() - started
        return report

    def reconcile(
        self, contract_ids: Iterable[str] | None = None, on_node: OnNode | None = None
    ) -> tuple[int, list[NodeReport]]:
        """Sweep orphan vector items and re-index nodes whose items are missing (from their
        stored rows: embeddings only, no LLM). Returns (items swept, reports of re-indexed)."""
        found = self.store.check(contract_ids)
        swept = self.store.sweep(found)
        reports: list[NodeReport] = []
        ids = found.incomplete
        for start in range(0, len(ids), self.config.batch_size):
            nodes = self.store.nodes(ids[start : start + self.config.batch_size])
            entries = []
            for nid in sorted(nodes):
                node = nodes[nid]
                texts = [t for _, _, t, _ in node.search_items()]
                began = time.perf_counter()
                vectors, embedded = self._embed(texts)
                entries.append((node, vectors))
                report = NodeReport(
                    nid,
                    node.level,
                    "reindexed",
                    version=node.version,
                    previous_version=node.version,
                    children=list(node.children),
                    facets=len(node.facets),
                    qa=len(node.qa),
                    summaries=1 if node.summary_short else 0,
                    embedding_calls=len(embedded),
                    seconds=time.perf_counter() - began,
                )
                reports.append(report)
            self.store.reindex(entries)
        for r in reports:
            if on_node:
                on_node(r)
        return swept, reports

    def delete(self, node_ids: list[str], on_node: OnNode | None = None) -> list[NodeReport]:
        """Purge nodes the sources no longer have (rows first, then vectors)."""
        deleted = self.store.delete(node_ids)
        reports = [
            NodeReport(nid, old.level, "deleted", previous_version=old.version)
            for nid, old in sorted(deleted.items())
        ]
        for r in reports:
            if on_node:
                on_node(r)
        return reports

    def build(self, node_ids: Iterable[str], on_node: OnNode | None = None) -> list[NodeReport]:
        """Rebuild these nodes, of any levels; every node's report, leaves first, in id order.

        A dataflow rather than level by level: a parent starts as soon as each of its children
        in the set is settled (built, current, failed or gone), ahead of the leaves still
        waiting, and a contract's nodes are stored in one write once all of them are settled
        (or every `batch_size` nodes), while other contracts' calls go on."""
        return _Flow(self, sorted(set(node_ids)), on_node).run()

    def _embed_built(self, outcomes: list[_Outcome]) -> list[tuple[MemoryNode, np.ndarray]]:
        """The search items' vectors of the nodes that were built (one embedding call)."""
        done = [o for o in outcomes if o.node is not None]
        texts_per_node = [[t for _, _, t, _ in o.node.search_items()] for o in done]  # type: ignore[union-attr]
        started = time.perf_counter()
        vectors, embedded = self._embed([t for texts in texts_per_node for t in texts])
        share = (time.perf_counter() - started) / max(1, len(done))
        entries: list[tuple[MemoryNode, np.ndarray]] = []
        offset = 0
        for outcome, texts in zip(done, texts_per_node, strict=True):
            # Each text the model really embedded is charged to the first node that needed it.
            outcome.report.embedding_calls = sum(
                1 for t in dict.fromkeys(texts) if embedded.pop(t, 0)
            )
            outcome.report.seconds += share
            entries.append((outcome.node, vectors[offset : offset + len(texts)]))  # type: ignore[arg-type]
            offset += len(texts)
        return entries

    def _embed(self, texts: list[str]) -> tuple[np.ndarray, dict[str, int]]:
        """All texts of a batch in one call; also which ones the model actually had to embed."""
        recorder = _Recorder(self.embedder.inner)
        self.embedder.inner = recorder
        try:
            vectors = self.embedder.passages(texts)
        finally:
            self.embedder.inner = recorder.inner
        return vectors, dict.fromkeys(recorder.seen, 1)

    @property
    def workers(self) -> int:
        return self.config.workers or self.llm.concurrency

    def _absorb(self, outcomes: list[_Outcome]) -> None:
        for outcome in outcomes:  # fold per-node usage into the shared counters
            self.llm.absorb(outcome.usage)

    def _build_one(
        self,
        job: _Job,
        built: dict[str, BuiltNode],
        backend: Backend,
        side: Executor | None = None,
    ) -> _Outcome:
        placement = job.placement
        node_llm = LLM(backend=backend, model=self.llm.model)
        before = built.get(placement.node_id)
        report = NodeReport(
            placement.node_id,
            placement.level,
            "built",
            version=job.version,
            previous_version=before.version if before else None,
            children=[(c.node_id, c.version) for c in job.children],
        )
        started = time.perf_counter()
        node: MemoryNode | None = None
        try:
            if placement.level == "project":
                node, report.drops = build_project(
                    node_llm, placement, job.version, job.inputs, self.hints, side
                )
            else:
                node, report.drops = build_parent(
                    node_llm,
                    placement,
                    job.version,
                    job.children,
                    self.hints,
                    self.config.support_threshold,
                    self.config.min_support,
                )
            report.facets = len(node.facets)
            report.qa = len(node.qa)
            report.summaries = 1 if node.summary_short else 0
        except Exception as err:  # noqa: BLE001 - every failure is reported against its node
            report.status = "failed"
            report.error = (
                str(err)
                if placement.node_id in str(err)
                else (f"{placement.node_id}: {type(err).__name__}: {err}")
            )
            node = None
        usage = node_llm.snapshot()
        report.llm_calls = usage.calls  # every request, retries included
        report.prompt_tokens = usage.prompt_tokens
        report.completion_tokens = usage.completion_tokens
        report.seconds = time.perf_counter() - started
        return _Outcome(node, report, usage)


class _Flow:
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
            p.node_id: _Job(p, "", {}, kids[p.node_id], source.nodes[p.node_id].fingerprint)
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
        self.leaf_jobs: deque[_Job] = deque()
        self.ready: deque[_Job] = deque()  # parents, started before any waiting leaf
        self.fresh: dict[str, MemoryNode] = {}  # built here, until their parent takes them
        self.unembedded: list[_Outcome] = []
        self.unstored: dict[str, list[tuple[_Outcome, np.ndarray]]] = defaultdict(list)
        self.leaves_running = 0
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
        backend = _Slotted(builder.llm.backend, threading.BoundedSemaphore(workers))
        with (
            ThreadPoolExecutor(threads, thread_name_prefix="memory-node") as nodes,
            ThreadPoolExecutor(threads, thread_name_prefix="memory-call") as calls,
        ):
            side = calls if workers > 1 else None
            running: set[Future[_Outcome]] = set()
            try:
                while True:
                    # Nodes that may start are started before this thread embeds and stores.
                    while len(running) < threads and (job := self._next_job()) is not None:
                        running.add(
                            nodes.submit(builder._build_one, job, self.built, backend, side)
                        )
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
        return sorted(
            self.reports,
            key=lambda r: (LEVELS.index(r.level), r.status != "deleted", r.node_id),  # type: ignore[arg-type]
        )

    def _next_job(self) -> _Job | None:
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
                self.leaf_jobs.append(_Job(node.placement, version, inputs[pid], []))
        self._report(self.builder.delete(gone))
        self._report(current)
        self._settle([*gone, *(r.node_id for r in current)])

    def _take(self, outcomes: list[_Outcome]) -> None:
        """Finished nodes: failures reported, the built kept for their parents, which may
        now start."""
        outcomes.sort(key=lambda o: o.report.node_id)
        self.builder._absorb(outcomes)
        for outcome in outcomes:
            self.leaves_running -= outcome.report.level == "project"
            if outcome.node is None:
                self._report([outcome.report])  # failed: its previous version stays
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
            for outcome, (_, vectors) in zip(group, self.builder._embed_built(group), strict=True):
                self.unstored[self._contract_of(outcome)].append((outcome, vectors))
        self._store(due)

    def _store(self, contract_ids: list[str]) -> None:
        """One write of these contracts' finished nodes, in id order; then their reports."""
        done = sorted(
            (pair for cid in contract_ids for pair in self.unstored.pop(cid, [])),
            key=lambda pair: pair[0].report.node_id,
        )
        if not done:
            return
        self.builder.store.write(
            [(o.node, vectors) for o, vectors in done],  # type: ignore[misc]
            old=self.built,
            drops={o.report.node_id: o.report.drops for o, _ in done},
        )
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
        current = []
        for job in jobs:
            found = (self.fresh.pop(k, None) or stored.get(k) for k in job.child_ids)
            job.children = [c for c in found if c is not None]
            pairs = [(c.node_id, c.version) for c in job.children]
            job.version = parent_version(job.placement, job.fingerprint, pairs, self.config)
            before = self.built.get(job.placement.node_id)
            if before and before.version == job.version:
                current.append(_current(job.placement, job.version, pairs))
            else:
                self.ready.append(job)
        self._report(current)
        self._settle([r.node_id for r in current])

    def _contract_of(self, outcome: _Outcome) -> str:
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


class _Slotted:
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


class _Recorder:
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
class _Job:
    placement: Placement
    version: str
    inputs: dict[str, Any]
    child_ids: list[str]
    fingerprint: str = ""
    children: list[MemoryNode] = field(default_factory=list)


@dataclass
class _Outcome:
    node: MemoryNode | None
    report: NodeReport
    usage: LLMUsage


def version_config(model: str, hints: Hints, config: MemoryConfig) -> VersionConfig:
    return VersionConfig(
        prompt_versions=tuple(sorted(tasks.prompt_versions().items())),
        hints_version=hints.version,
        model=model,
        support_threshold=config.support_threshold,
        min_support=config.min_support,
    )


# ---- the representations -----------------------------------------------------------------------


def _known_project_ids(inputs: dict[str, Any]) -> set[str]:
    ids = {inputs["project"]["project_id"]}
    ids |= {d["document_id"] for d in inputs.get("documents", [])}
    ids |= {v["vacancy_id"] for v in inputs.get("vacancies", [])}
    ids |= {a["action_id"] for a in inputs.get("actions", {}).get("with_reasons", [])}
    return ids


class _Tally:
    """Items kept and dropped (by reason) while cleaning one node's answer."""

    def __init__(self) -> None:
        self.kept = 0
        self.reasons: Counter[str] = Counter()

    def drop(self, kind: str, reason: str) -> None:
        self.reasons[f"{kind}:{reason}"] += 1

    def result(self) -> Drops:
        return Drops(self.kept, tuple(sorted(self.reasons.items())))


def _clean_facets(
    items: list[tuple[str, str, list[str], list[str]]],
    known_support: set[str],
    known: set[str],
    tally: _Tally,
    is_echo: Callable[[str, str], bool] = lambda field, value: False,
    supported: Callable[[str, set[str]], set[str]] | None = None,
    required: int = 1,
) -> tuple[Facet, ...]:
    """Normalised fields, merged duplicates, invented ids, echoed prompt examples and values
    below `required` support dropped (and counted), canonical order. `supported(field, ids)`:
    the ids among `ids` whose node really states that field (parents check their children)."""
    merged: dict[tuple[str, str], tuple[str, set[str], set[str]]] = {}
    for field_name, value, support, sources in items:
        name = lx.normalise_field(field_name)
        text = " ".join(value.split())
        if not name or not text:
            tally.drop("facet", "empty")
            continue
        good_sources = {s for s in sources if s in known}
        good_support = {s for s in support if s in known_support}
        if not good_sources:
            tally.drop("facet", "unknown_source")
            continue
        if not good_support:
            tally.drop("facet", "unknown_support")
            continue
        if is_echo(name, text):
            tally.drop("facet", "echoed_prompt_example")
            continue
        key = (name, lx.normalise_value(text))
        spelling, sup, src = merged.get(key, (text, set(), set()))
        merged[key] = (min(spelling, text), sup | good_support, src | good_sources)
    facets = []
    for (name, _), (spelling, sup, src) in sorted(merged.items()):
        if supported is not None:
            sup = supported(name, sup)
        if len(sup) < required:
            tally.drop("facet", "below_min_support")
            continue
        facets.append(Facet(name, spelling, tuple(sorted(sup)), tuple(sorted(src))))
    tally.kept += len(facets)
    return tuple(facets)


def _echo_check(task: Task[Any], payload: dict[str, Any]) -> Callable[[str, str], bool]:
    """A value is an echo of the prompt when it is one of the prompt's own example phrases
    (two or more words, or with a digit) and the input never states it, in any spelling the
    field's vocabulary knows (so "San Francisco Bay Area" from "Сан-Франциско" is no echo)."""
    instructions = " ".join(f"{task.system} {task.user}".casefold().split())
    raw = json.dumps(payload, ensure_ascii=False)
    given = " ".join(raw.casefold().split())

    def is_echo(field: str, value: str) -> bool:
        folded = " ".join(value.casefold().split())
        distinctive = len(folded.split()) >= 2 or any(ch.isdigit() for ch in folded)
        if not distinctive or folded not in instructions or folded in given:
            return False
        vocabulary = lx.CANONICAL_TERMS.get(field)
        named = {t for t, _ in lx.find_terms(vocabulary, raw)} if vocabulary else set()
        return lx.canonical(field, value) not in named

    return is_echo


def _clean_qa(
    pairs: list[tuple[str, str, str, str, list[str]]],
    known_sources: set[str],
    known_support: set[str],
    tally: _Tally,
    limit: int,
    source_required: bool,
) -> tuple[QA, ...]:
    """Unique questions whose source (and support) ids are known; the rest dropped, counted."""
    kept: list[QA] = []
    seen: set[str] = set()
    for question, answer, rationale, source, support in pairs:
        text = " ".join(question.split())
        if not text or text in seen:
            continue  # a blank or repeated question is no loss
        if (source or source_required) and source not in known_sources:
            tally.drop("qa", "unknown_source")
            continue
        good_support = tuple(sorted({s for s in support if s in known_support}))
        if not good_support:
            tally.drop("qa", "unknown_support")
            continue
        seen.add(text)
        kept.append(QA(text, answer.strip(), rationale.strip(), source, good_support))
    tally.kept += min(len(kept), limit)
    return tuple(kept[:limit])


def build_project(
    llm: LLM,
    placement: Placement,
    version: str,
    inputs: dict[str, Any],
    hints: Hints,
    side: Executor | None = None,
) -> tuple[MemoryNode, Drops]:
    """A leaf's F/Q/S from its own source data: three LLM calls (facets, then QA and summary,
    which need only the facets: the summary runs on `side` meanwhile, when one is given)."""
    nid = placement.node_id
    hint_payload = hints.as_payload()
    known = _known_project_ids(inputs)
    ids = {"sources": sorted(known), "source": sorted(known)}
    tally = _Tally()
    payload = {**inputs, "hints": {"attributes": hint_payload["attributes"]}}
    extracted: FacetsOutput = llm.run(tasks.FACETS, payload, context=nid, choices=ids)
    facets = _clean_facets(
        [(f.field, f.value, f.sources, f.sources) for f in extracted.facets],
        known,
        known,
        tally,
        is_echo=_echo_check(tasks.FACETS, payload),
    )
    facet_payload = [
        {"field": f.field, "value": f.value, "sources": list(f.sources)} for f in facets
    ]
    summary_payload = {
        **inputs,
        "facets": facet_payload,
        "hints": {"attributes": hint_payload["attributes"]},
    }
    summary_call = partial(llm.run, tasks.SUMMARY, summary_payload, context=nid)
    summary_later = side.submit(summary_call) if side is not None else None
    try:
        qa_out: QAOutput = llm.run(
            tasks.QA,
            {**inputs, "facets": facet_payload, "hints": hint_payload},
            context=nid,
            choices=ids,
        )
    finally:
        if summary_later is not None:
            wait([summary_later])  # its requests are this node's, whatever QA's fate
    summary_out: SummaryOutput = (
        summary_later.result() if summary_later is not None else summary_call()
    )
    pairs = _clean_qa(
        [(q.question, q.answer, q.rationale, q.source, [q.source]) for q in qa_out.pairs],
        known,
        known,
        tally,
        MAX_PROJECT_QA,
        source_required=True,
    )
    node = MemoryNode(
        placement,
        version,
        facets,
        pairs,
        summary_out.summary_long.strip(),
        " ".join(summary_out.summary_short.split()),
    )
    return node, tally.result()


def build_parent(
    llm: LLM,
    placement: Placement,
    version: str,
    children: list[MemoryNode],
    hints: Hints,
    support_threshold: float,
    min_support: int = 2,
) -> tuple[MemoryNode, Drops]:
    """A seat's or contract's F/Q/S from its children's F/Q/S only: one aggregate call.

    Minimum support is enforced here, not only asked for: a kept value needs `min_support`
    supporting children that really state its field."""
    nid = placement.node_id
    children = sorted(children, key=lambda c: c.node_id)
    required = required_support(support_threshold, len(children), min_support)
    payload = {
        "node_id": nid,
        "level": placement.level,
        "label": placement.label,
        "child_level": CHILD_LEVEL[placement.level],
        "support_threshold": support_threshold,
        "min_support": required,
        "children": [c.as_child_payload() for c in children],
        "hints": hints.as_payload(),
    }
    child_ids = {c.node_id for c in children}
    known_sources = {s for c in children for f in c.facets for s in f.sources}
    known_sources |= {q.source for c in children for q in c.qa}
    ids = {
        "support": sorted(child_ids),
        "sources": sorted(known_sources),
        "source": ["", *sorted(known_sources)],
    }
    out: AggregateOutput = llm.run(tasks.AGGREGATE, payload, context=nid, choices=ids)
    fields_of = {c.node_id: {f.field for f in c.facets} for c in children}
    tally = _Tally()
    facets = _clean_facets(
        [(f.field, f.value, f.support, f.sources) for f in out.facets],
        child_ids,
        known_sources,
        tally,
        supported=lambda field, ids: {c for c in ids if field in fields_of[c]},
        required=required,
    )
    pairs = _clean_qa(
        [(q.question, q.answer, q.rationale, q.source, q.support) for q in out.qa],
        known_sources,
        child_ids,
        tally,
        MAX_PARENT_QA,
        source_required=False,
    )
    node = MemoryNode(
        placement,
        version,
        facets,
        pairs,
        out.summary_long.strip(),
        " ".join(out.summary_short.split()),
        tuple((c.node_id, c.version) for c in children),
    )
    return node, tally.result()

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

The dataflow is `hltm.memory.flow`; one node's LLM calls and their cleaning,
`hltm.memory.representations`.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import Executor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from hltm.embeddings import SHORT_TEXT_MODEL, CachedEmbedder, remember_short_texts, short_key
from hltm.llm import LLM
from hltm.llm.calls import Backend
from hltm.memory import tasks
from hltm.memory.flow import Flow, Job, NodeReport, OnNode, Outcome, Recorder
from hltm.memory.hints import NO_HINTS, Hints
from hltm.memory.inputs import read_tree
from hltm.memory.models import MemoryNode
from hltm.memory.representations import build_parent, build_project
from hltm.memory.store import MemoryStore
from hltm.memory.tree import (
    BuiltNode,
    Plan,
    Tree,
    VersionConfig,
    close_over_ancestors,
    plan_changes,
)
from hltm.settings import OFFLINE_BACKEND
from hltm.warehouse import connect, store_exists


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
        if not store_exists(self.sources_db):
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
        return Flow(self, sorted(set(node_ids)), on_node).run()

    def build_reports(self, node_ids: Iterable[str]) -> Iterator[NodeReport]:
        """`build`, yielding each node's report as it is settled (a built node once stored), so
        a caller records every node's cost as it finishes: what a build stopped halfway had
        stored is recorded too. The build runs in a thread; its error is raised at the end."""
        reports: queue.SimpleQueue[NodeReport | None] = queue.SimpleQueue()
        failed: list[BaseException] = []

        def run() -> None:
            try:
                self.build(node_ids, reports.put)
            except BaseException as err:  # noqa: BLE001 - re-raised in the caller's thread
                failed.append(err)
            finally:
                reports.put(None)

        thread = threading.Thread(target=run, name="memory-build", daemon=True)
        thread.start()
        while (report := reports.get()) is not None:
            yield report
        thread.join()
        if failed:
            raise failed[0]

    @property
    def embeds_statements(self) -> bool:
        """Whether a built node's statements are embedded too: for the offline answer, which
        compares each with the question, when the build's model is the one it compares with
        (the bundled e5), so no answer embeds them again."""
        return (
            self.llm.backend_name == OFFLINE_BACKEND
            and self.embedder.model_name == SHORT_TEXT_MODEL
        )

    def embed_built(self, outcomes: list[Outcome]) -> list[tuple[MemoryNode, np.ndarray]]:
        """The search items' vectors of the nodes that were built (one embedding call); their
        statements' vectors go to the embedding cache only (`embeds_statements`)."""
        done = [o for o in outcomes if o.node is not None]
        texts_per_node = [[t for _, _, t, _ in o.node.search_items()] for o in done]  # type: ignore[union-attr]
        said_per_node = [
            [short_key(s) for s in o.node.statements()] if self.embeds_statements else []  # type: ignore[union-attr]
            for o in done
        ]
        started = time.perf_counter()
        vectors, embedded = self._embed([t for texts in texts_per_node for t in texts])
        said = list(dict.fromkeys(key for keys in said_per_node for key in keys))
        if said:
            said_vectors, said_embedded = self._embed(said)
            remember_short_texts(said, list(said_vectors))
            embedded |= said_embedded
        share = (time.perf_counter() - started) / max(1, len(done))
        entries: list[tuple[MemoryNode, np.ndarray]] = []
        offset = 0
        for outcome, texts, keys in zip(done, texts_per_node, said_per_node, strict=True):
            # Each text the model really embedded is charged to the first node that needed it.
            outcome.report.embedding_calls = sum(
                1 for t in dict.fromkeys([*texts, *keys]) if embedded.pop(t, 0)
            )
            outcome.report.seconds += share
            entries.append((outcome.node, vectors[offset : offset + len(texts)]))  # type: ignore[arg-type]
            offset += len(texts)
        return entries

    def _embed(self, texts: list[str]) -> tuple[np.ndarray, dict[str, int]]:
        """All texts of a batch in one call; also which ones the model actually had to embed."""
        recorder = Recorder(self.embedder.inner)
        self.embedder.inner = recorder
        try:
            vectors = self.embedder.passages(texts)
        finally:
            self.embedder.inner = recorder.inner
        return vectors, dict.fromkeys(recorder.seen, 1)

    @property
    def workers(self) -> int:
        return self.config.workers or self.llm.concurrency

    def absorb(self, outcomes: list[Outcome]) -> None:
        for outcome in outcomes:  # fold per-node usage into the shared counters
            self.llm.absorb(outcome.usage)

    def build_one(
        self,
        job: Job,
        built: dict[str, BuiltNode],
        backend: Backend,
        side: Executor | None = None,
    ) -> Outcome:
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
        report.llm_failed_calls = usage.failed_calls
        report.llm_interrupted = usage.interrupted
        report.prompt_tokens = usage.prompt_tokens
        report.completion_tokens = usage.completion_tokens
        report.seconds = time.perf_counter() - started
        return Outcome(node, report, usage)


def version_config(model: str, hints: Hints, config: MemoryConfig) -> VersionConfig:
    return VersionConfig(
        prompt_versions=tuple(sorted(tasks.prompt_versions().items())),
        hints_version=hints.version,
        model=model,
        support_threshold=config.support_threshold,
        min_support=config.min_support,
    )

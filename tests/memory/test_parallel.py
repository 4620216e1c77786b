"""Parallel LLM work in the memory build: a shared bound on the calls in flight, a leaf's QA and
summary calls side by side giving the node the sequential build gives, and parents started as
soon as their own children are done (not after the whole level) storing the same tree."""

from __future__ import annotations

import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

from hltm.llm import DETERMINISTIC_MODEL, LLM, DeterministicBackend
from hltm.memory import MemoryConfig, builder_from_settings, tasks
from hltm.memory.flow import Slotted
from hltm.memory.hints import NO_HINTS
from hltm.memory.inputs import read_project_inputs, read_tree
from hltm.memory.models import node_id_for
from hltm.memory.representations import build_project
from hltm.settings import Settings
from hltm.warehouse import connect
from hltm_devkit.scenarios import read_world
from tests.support import memory as _shared

ingested_sources = _shared.ingested_sources
memory_world = _shared.memory_world


class _Watched(DeterministicBackend):
    """The offline rules, each answer held a little, counting the requests under way."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.now = 0
        self.peak = 0
        self.started: list[str] = []  # task names, in the order their requests began

    def complete(self, *args: Any) -> str:
        with self._lock:
            self.now += 1
            self.peak = max(self.peak, self.now)
            self.started.append(args[0].name)
        try:
            time.sleep(0.05)
            return super().complete(*args)
        finally:
            with self._lock:
                self.now -= 1


def test_slots_bound_the_requests_in_flight() -> None:
    watched = _Watched()
    slotted = Slotted(watched, threading.BoundedSemaphore(2))
    assert slotted.name == watched.name  # everything but the requests is the backend's own
    with ThreadPoolExecutor(6) as pool:
        futures = [pool.submit(slotted.complete, *_one_request()) for _ in range(6)]
        answers = [f.result() for f in futures]
    assert len(set(answers)) == 1
    assert watched.peak == 2


def _one_request() -> tuple[Any, list[dict[str, str]], str]:
    payload = {"node_id": "seat:s", "level": "seat", "label": "s", "child_level": "project"}
    payload |= {"support_threshold": 0.3, "min_support": 1, "children": [], "hints": {}}
    return tasks.AGGREGATE, tasks.AGGREGATE.messages(payload), DETERMINISTIC_MODEL


def test_qa_and_summary_side_by_side_build_the_same_leaf(memory_world: Settings) -> None:
    pid = sorted(read_world(memory_world.sources_db).projects)[0]
    with connect(memory_world.sources_db, read_only=True) as con:
        placement = read_tree(con, project_ids=[pid]).nodes[node_id_for("project", pid)].placement
        inputs = read_project_inputs(con, [pid])[pid]
    sequential = build_project(
        LLM(_Watched(), DETERMINISTIC_MODEL), placement, "v", inputs, NO_HINTS
    )
    watched = _Watched()
    llm = LLM(watched, DETERMINISTIC_MODEL)
    with ThreadPoolExecutor(1) as side:
        overlapped = build_project(llm, placement, "v", inputs, NO_HINTS, side)
    assert overlapped == sequential
    assert watched.peak == 2  # QA and summary were under way together
    assert llm.usage.calls == 3


def test_parents_start_once_their_children_are_done_and_store_the_same_tree(
    memory_world: Settings,
) -> None:
    """One contract's subtree (6 projects, 2 seats, 1 contract) with 1 and with 4 workers."""
    world = read_world(memory_world.sources_db)
    contract = world.contracts[0]
    leaves = [
        node_id_for("project", pid)
        for pid, seat in world.projects.items()
        if world.seats[seat] == contract
    ]
    snapshots, orders, peaks = [], [], []
    for workers in (1, 4):
        settings = replace(memory_world, data_dir=memory_world.data_dir.parent / f"w{workers}")
        settings.data_dir.mkdir()
        shutil.copy(memory_world.sources_db, settings.sources_db)
        watched = _Watched()
        llm = LLM(watched, DETERMINISTIC_MODEL)
        builder = builder_from_settings(settings, MemoryConfig(workers=workers), llm=llm)
        report = builder.refresh(builder.plan_for(leaves))
        report.raise_for_failures()
        assert [(r.level, r.status) for r in report.nodes] == [
            *[("project", "built")] * len(leaves),
            ("seat", "built"),
            ("seat", "built"),
            ("contract", "built"),
        ]
        snapshots.append(builder.store.snapshot())
        orders.append(watched.started)
        peaks.append(watched.peak)
    assert snapshots[0] == snapshots[1]
    assert peaks == [1, 4]
    # One worker takes a seat as soon as its own projects are done, before the next seat's.
    sequential = orders[0]
    assert sequential.index("aggregate") < len(sequential) - 1 - sequential[::-1].index("facets")

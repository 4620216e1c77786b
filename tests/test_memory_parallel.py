"""Parallel LLM work in the memory build: a shared bound on the calls in flight, and a leaf's QA
and summary calls side by side giving the node the sequential build gives."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from hltm.llm import DETERMINISTIC_MODEL, LLM, DeterministicBackend
from hltm.memory import tasks
from hltm.memory.build import _Slotted, build_project
from hltm.memory.hints import NO_HINTS
from hltm.memory.inputs import read_project_inputs, read_tree
from hltm.memory.models import node_id_for
from hltm.memory.scenarios import read_world
from hltm.settings import Settings
from hltm.warehouse import connect
from tests import test_memory_dagster as _shared

ingested_sources = _shared.ingested_sources
memory_world = _shared.memory_world


class _Watched(DeterministicBackend):
    """The offline rules, each answer held a little, counting the requests under way."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.now = 0
        self.peak = 0

    def complete(self, *args: Any) -> str:
        with self._lock:
            self.now += 1
            self.peak = max(self.peak, self.now)
        try:
            time.sleep(0.05)
            return super().complete(*args)
        finally:
            with self._lock:
                self.now -= 1


def test_slots_bound_the_requests_in_flight() -> None:
    watched = _Watched()
    slotted = _Slotted(watched, threading.BoundedSemaphore(2))
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

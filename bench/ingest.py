"""Ingest of the bench world (1,000 projects, 15,758 rows): its generation, a first load into an
empty sources file, then a re-ingest of the same files (every row unchanged).

    .venv/bin/python bench/ingest.py

Before column-wise validation (row-by-row Python and `executemany`), the first load took 220 s
on a loaded 2-core machine (89 CPU-seconds); the target is ≤ 10 s. Column-wise, it took 7.2 s
wall and 1.2 CPU-seconds at load average 15 (2026-12-01). Ends with one JSON line.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from hltm.sources.ingest import ingest_directory
from hltm_devkit.generator import SIZES, generate_world

T = TypeVar("T")


def timed(fn: Callable[[], T]) -> tuple[T, float, float]:
    """`fn()`, its wall seconds and its CPU seconds."""
    started, cpu = time.perf_counter(), time.process_time()
    result = fn()
    return result, time.perf_counter() - started, time.process_time() - cpu


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        world = Path(tmp) / "world"
        _, generate_s, generate_cpu = timed(
            lambda: generate_world(world, seed=7, size=SIZES["bench"])
        )
        db = Path(tmp) / "sources.duckdb"
        first, first_s, first_cpu = timed(lambda: ingest_directory(world, db))
        again, again_s, again_cpu = timed(lambda: ingest_directory(world, db))
    print(f"generating the bench world: {generate_s:.2f} s, {generate_cpu:.2f} CPU-s")
    print(f"{'run':12} {'rows':>7} {'changed':>8} {'seconds':>8} {'CPU-s':>6} {'rows/s':>8}")
    for name, report, seconds, cpu_s in (
        ("first load", first, first_s, first_cpu),
        ("re-ingest", again, again_s, again_cpu),
    ):
        print(
            f"{name:12} {report.loaded:7} {report.changed:8} {seconds:8.2f} {cpu_s:6.2f}"
            f" {report.loaded / seconds:8.0f}"
        )
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(
        json.dumps(
            {
                "ingest_s_bench_1000": round(first_s, 2),
                "ingest_cpu_s_bench_1000": round(first_cpu, 2),
                "reingest_s_bench_1000": round(again_s, 2),
                "generate_s_bench_1000": round(generate_s, 2),
            }
        )
    )


if __name__ == "__main__":
    main()

"""Full rebuild vs one-change refresh of the memory tree, side by side, through Dagster.

    python bench/incremental.py                 # the bench world: 1,000 projects, 100 seats, 10 contracts
    python bench/incremental.py --size demo     # the small demo world, for a quick look
    python bench/incremental.py --verify        # also check incremental == a from-scratch rebuild
    python bench/incremental.py --llm-delay-ms 300 --concurrency 1,8   # LLM-bound full rebuilds

With ``--concurrency`` the bench instead times full rebuilds (`refresh_memory_tree` over every
contract) through the
real `openai` client against the local protocol server, which answers every call after a fixed
delay (``--llm-delay-ms``, like a remote model), once per concurrency level (the memory build's
`workers`), each on a fresh memory store with the same warm embedding cache (so embedding does
not hide the LLM-bound part). Only the rebuild run is timed: the Dagster instance is made before,
and one leaf is built through the server first (its process loads its rules' tables on its first
answers, as a remote model has its weights loaded). It prints the wall times side by side, checks that every level
stored byte-identical trees (DuckDB rows and Chroma items with their vectors), and ends with one
JSON line: {"speedup_8_vs_1": …, "identical": true, …}. It defaults to the demo world (60
projects, 195 LLM calls: about a minute at 300 ms per call with 1 worker).

Steps, all in one process on an ephemeral Dagster instance:

1. generate the sample world and ingest it into a fresh data directory (cold stores and caches);
2. full rebuild: one run of the memory's asset job `refresh_memory_tree` over every contract's
   partition (every node, each parent after its children);
3. one change: a sentence appended to one document of one project, through the ingest API;
4. refresh: the `source_changes` sensor evaluates, and its one run request (the changed
   contract's partition) is executed.

LLM calls and tokens are counted at the LLM interface (o200k_base) whichever backend answers, so
the offline figures are what a real model would be sent. Wall time includes Dagster (run start,
event logging, the sensor evaluation for the refresh); CPU time is printed too, since wall time
on a shared machine depends on what else runs (embedding with the bundled e5 model on CPU is most
of a full build).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import dagster as dg
import httpx

from hltm.memory import MemoryConfig, builder_from_settings
from hltm.memory.models import node_id_for
from hltm.memory.store import StoreSnapshot
from hltm.settings import E5_ONNX_BACKEND, Settings
from hltm.sources.ingest import ingest_directory
from hltm_dagster.defs.memory.assets import MEMORY_ASSETS, MEMORY_JOBS, REFRESH_JOB, refresh_tags
from hltm_dagster.defs.memory.sensors import source_changes
from hltm_dagster.resources import MemoryTreeResource, build_resources
from hltm_devkit.generator import SIZES, generate_world
from hltm_devkit.scenarios import change_project, read_world

REPO = Path(__file__).resolve().parent.parent


@dataclass
class Figures:
    nodes_rebuilt: int = 0
    llm_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    embedding_calls: int = 0
    seconds: float = 0.0
    cpu_seconds: float = 0.0

    @classmethod
    def of_run(
        cls, result: dg.ExecuteInProcessResult, seconds: float, cpu_seconds: float
    ) -> Figures:
        out = cls(seconds=seconds, cpu_seconds=cpu_seconds)
        for event in result.get_asset_materialization_events():
            meta = event.materialization.metadata  # type: ignore[union-attr]
            out.nodes_rebuilt += int(meta["rebuilt_nodes"].value)  # type: ignore[attr-defined]
            out.llm_calls += int(meta["llm_calls"].value)  # type: ignore[attr-defined]
            out.prompt_tokens += int(meta["prompt_tokens"].value)  # type: ignore[attr-defined]
            out.completion_tokens += int(meta["completion_tokens"].value)  # type: ignore[attr-defined]
            out.embedding_calls += int(meta["embedding_calls"].value)  # type: ignore[attr-defined]
        return out


def _ratio(full: float, one: float) -> str:
    if one == 0:
        return "∞ (none needed)" if full else "–"
    return f"{full / one:,.1f}×  ({100 * (1 - one / full):.2f}% less)"


def table(full: Figures, one: Figures) -> str:
    rows = [
        ("nodes rebuilt", full.nodes_rebuilt, one.nodes_rebuilt),
        ("LLM calls", full.llm_calls, one.llm_calls),
        ("prompt tokens (o200k_base)", full.prompt_tokens, one.prompt_tokens),
        ("completion tokens", full.completion_tokens, one.completion_tokens),
        ("embedding calls", full.embedding_calls, one.embedding_calls),
        ("wall time incl. Dagster (s)", round(full.seconds, 1), round(one.seconds, 2)),
        ("CPU time of this process (s)", round(full.cpu_seconds, 1), round(one.cpu_seconds, 2)),
    ]
    lines = [f"{'':30} {'full rebuild':>14} {'one change':>12}   saving (full / one change)"]
    for name, a, b in rows:
        lines.append(f"{name:30} {a:>14,} {b:>12,}   {_ratio(float(a), float(b))}")
    return "\n".join(lines)


def _levels(text: str) -> list[int]:
    levels = [int(part) for part in text.split(",") if part.strip()]
    if not levels or min(levels) < 1:
        raise argparse.ArgumentTypeError("expected positive integers, e.g. 1,8")
    return levels


@contextlib.contextmanager
def protocol_server(latency_ms: float, embedding_latency_ms: float = 0.0) -> Iterator[str]:
    """The local protocol server in its own process (its CPU stands for the model's, so it must
    not share this process's interpreter lock); yields its base URL."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [sys.executable, "-m", "hltm_devkit.openai_server", "--port", str(port)]
    command += ["--latency-ms", str(latency_ms), "--log-level", "warning"]
    command += ["--embedding-latency-ms", str(embedding_latency_ms)]
    proc = subprocess.Popen(command, cwd=REPO)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                httpx.get(f"{url}/health", timeout=2).raise_for_status()
                break
            except httpx.HTTPError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the local protocol server did not start") from None
                time.sleep(0.2)
        yield f"{url}/v1"
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def concurrency_bench(args: argparse.Namespace, workdir: Path) -> int:
    """Full rebuilds against a slow endpoint, one per concurrency level, side by side."""
    size = args.size or "demo"
    warm = Settings.from_env(
        data_dir=workdir / "warm",
        llm_backend="offline",
        chroma_host=None,
        embeddings_backend=E5_ONNX_BACKEND,
    )
    generate_world(workdir / "world", seed=args.seed, size=SIZES[size])
    ingest_directory(workdir / "world", warm.sources_db)
    world = read_world(warm.sources_db)
    print(
        f"world '{size}' (seed {args.seed}): {len(world.contracts)} contracts, "
        f"{len(world.seats)} seats, {len(world.projects)} projects",
        flush=True,
    )
    started = time.perf_counter()
    builder_from_settings(warm, MemoryConfig(workers=1)).full_build().raise_for_failures()
    print(f"embedding cache warmed by an offline build in {time.perf_counter() - started:.1f} s")

    rows: list[tuple[int, float, Figures]] = []
    snapshots: list[StoreSnapshot] = []
    with protocol_server(args.llm_delay_ms) as base_url:
        stats_url = base_url.removesuffix("/v1") + "/_stats"

        def settings_for(name: str, workers: int) -> Settings:
            """A fresh data directory: the sources and the warm embedding cache, no memory."""
            settings = replace(
                warm,
                data_dir=workdir / name,
                llm_backend="openai",
                openai_base_url=base_url,
                openai_api_key="bench",
                llm_concurrency=workers,
            )
            settings.data_dir.mkdir(parents=True)
            shutil.copy(warm.sources_db, settings.sources_db)
            shutil.copy(warm.derived_db, settings.derived_db)
            builder_from_settings(settings).store.clear()
            return settings

        # One leaf through the server first, untimed: the server process loads its rules'
        # tables on its first answers (a remote model has its weights loaded already).
        builder_from_settings(settings_for("warm-up", 1)).build(
            [node_id_for("project", min(world.projects))]
        )
        for workers in args.concurrency:
            settings = settings_for(f"workers-{workers}", workers)
            resources = build_resources(settings, memory_tree=MemoryTreeResource(workers=workers))
            defs = dg.Definitions(assets=MEMORY_ASSETS, jobs=MEMORY_JOBS, resources=resources)
            job = defs.resolve_job_def(REFRESH_JOB)
            instance = dg.DagsterInstance.ephemeral()  # set-up, not part of a rebuild
            (tags,) = refresh_tags(instance, set(world.contracts))
            print(f"full rebuild with {workers} LLM call(s) in flight …", flush=True)
            httpx.delete(stats_url, timeout=10)
            started, cpu = time.perf_counter(), time.process_time()
            result = job.execute_in_process(
                instance=instance,
                tags=tags,
                run_config={"loggers": {"console": {"config": {"log_level": "WARNING"}}}},
            )
            seconds = time.perf_counter() - started
            assert result.success
            figures = Figures.of_run(result, seconds, time.process_time() - cpu)
            requests = httpx.get(stats_url, timeout=10).json()["chat_requests"]
            assert figures.llm_calls == requests  # every request the server saw is counted
            rows.append((workers, seconds, figures))
            snapshots.append(builder_from_settings(settings).store.snapshot())

    base_workers, base_seconds, _ = rows[0]
    print(
        f"\n{'LLM calls in flight':>20} {'wall time (s)':>14} {'LLM calls':>10} {'nodes':>6}   speed-up"
    )
    for workers, seconds, figures in rows:
        print(
            f"{workers:>20} {seconds:>14.1f} {figures.llm_calls:>10,} {figures.nodes_rebuilt:>6}"
            f"   {base_seconds / seconds:.2f}× vs {base_workers}"
        )
    identical = all(snap == snapshots[0] for snap in snapshots[1:])
    print(f"every level stored the same tree (DuckDB + Chroma, byte for byte): {identical}")
    headline: dict[str, object] = {
        f"speedup_{w}_vs_{base_workers}": round(base_seconds / s, 2) for w, s, _ in rows[1:]
    }
    headline.update({f"wall_s_{w}": round(s, 1) for w, s, _ in rows})
    headline.update(
        {
            "identical": identical,
            "llm_delay_ms": args.llm_delay_ms,
            "llm_calls": rows[0][2].llm_calls,
            "world": size,
        }
    )
    print(json.dumps(headline))
    shutil.rmtree(workdir, ignore_errors=True)
    return 0 if identical else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(SIZES), default=None, help="default: bench")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--data", type=Path, help="data directory (default: a temporary one)")
    parser.add_argument("--verify", action="store_true", help="compare with a fresh rebuild")
    parser.add_argument(
        "--concurrency",
        type=_levels,
        help="time full rebuilds against the local server at these concurrency levels, e.g. 1,8",
    )
    parser.add_argument(
        "--llm-delay-ms", type=float, default=300.0, help="the server's delay per LLM call"
    )
    args = parser.parse_args(argv)
    if args.concurrency:
        return concurrency_bench(args, Path(tempfile.mkdtemp(prefix="hltm-bench-")))
    args.size = args.size or "bench"

    workdir = Path(tempfile.mkdtemp(prefix="hltm-bench-"))
    data = args.data or workdir / "data"
    if data.exists():
        shutil.rmtree(data)
    settings = Settings.from_env(
        data_dir=data, llm_backend="offline", chroma_host=None, embeddings_backend=E5_ONNX_BACKEND
    )
    size = SIZES[args.size]
    started = time.perf_counter()
    generate_world(workdir / "world", seed=args.seed, size=size)
    ingest_directory(workdir / "world", settings.sources_db)
    world = read_world(settings.sources_db)
    print(
        f"world '{args.size}' (seed {args.seed}): {len(world.contracts)} contracts, "
        f"{len(world.seats)} seats, {len(world.projects)} projects, "
        f"{len(world.documents)} documents — generated and ingested in "
        f"{time.perf_counter() - started:.1f} s",
        flush=True,
    )

    resources = build_resources(settings)
    defs = dg.Definitions(
        assets=MEMORY_ASSETS, jobs=MEMORY_JOBS, sensors=[source_changes], resources=resources
    )
    instance = dg.DagsterInstance.ephemeral()
    quiet = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}

    print(f"full rebuild ({REFRESH_JOB} over every contract, cold caches) …", flush=True)
    (tags,) = refresh_tags(instance, set(world.contracts))
    started, cpu = time.perf_counter(), time.process_time()
    result = defs.resolve_job_def(REFRESH_JOB).execute_in_process(
        instance=instance, tags=tags, run_config=quiet
    )
    full = Figures.of_run(result, time.perf_counter() - started, time.process_time() - cpu)
    assert result.success

    def tick(cursor: str | None) -> dg.SensorResult | dg.SkipReason:
        with dg.build_sensor_context(
            instance=instance, cursor=cursor, resources=resources
        ) as context:
            return source_changes(context)

    first = tick(None)  # the sensor's cursor and partitions, as after any earlier tick
    cursor = first.cursor if isinstance(first, dg.SensorResult) else None
    assert not isinstance(first, dg.SensorResult) or not first.run_requests

    pid = sorted(world.projects)[len(world.projects) // 2]
    change_project(settings.sources_db, random.Random(args.seed), project_id=pid, kind="edit")
    print(f"one change: a sentence appended to a document of project {pid}", flush=True)
    started, cpu = time.perf_counter(), time.process_time()
    evaluation = tick(cursor)
    assert isinstance(evaluation, dg.SensorResult) and len(evaluation.run_requests or []) == 1
    request = evaluation.run_requests[0]  # type: ignore[index]
    result = defs.resolve_job_def(REFRESH_JOB).execute_in_process(
        run_config=quiet, instance=instance, tags=request.tags
    )
    one = Figures.of_run(result, time.perf_counter() - started, time.process_time() - cpu)
    assert result.success
    counts = {k: request.tags[f"hltm/{k}"] for k in ("projects", "seats", "contracts")}
    print(f"sensor → one run rebuilding {counts} node(s)\n")
    print(table(full, one))

    if args.verify:
        fresh = replace(settings, data_dir=workdir / "fresh")
        fresh.data_dir.mkdir(parents=True)
        shutil.copy(settings.sources_db, fresh.sources_db)
        rebuilt = builder_from_settings(fresh)
        rebuilt.full_build().raise_for_failures()
        incremental = builder_from_settings(settings).store.snapshot()
        same = incremental == rebuilt.store.snapshot()
        print(f"\nincremental tree == fresh full rebuild (DuckDB + Chroma, byte for byte): {same}")
        if not same:
            return 1
    if not args.data:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""bench/serve: the HTTP endpoint under load — 1 client, then 50 concurrent clients over 10 seats.

    python bench/serve.py [--data DIR] [--seconds S] [--clients N] [--seats K] [--workers W]
    python bench/serve.py --during-refresh [--data DIR] [--clients N] [--seats K]

Starts `hltm serve` as its own process (`--workers` serving processes, by default the server's
own: one per core; offline LLM backend, embedded stores, or with `HLTM_DATABASE_URL` set the
server profile's stores, and the Chroma server if `CHROMA_HOST` is set) on a loopback port, over a data dir with
a built memory tree (default: the 1,000-project tree `bench/query.py` builds under
data/bench-query/1k), creates one bearer token per seat, and drives `POST /v1/ask` with
closed-loop aiohttp clients (each sends its next question as soon as the last one is answered)
for a bounded time per phase. Reported per phase: requests, throughput, p50 / p95 / max latency
as the client sees it and EXCLUDING the time spent inside the LLM (the response's `cost.llm_ms`),
the count of non-200 answers (503 = refused as busy, with Retry-After) with what each said, and
the CPU-seconds the server's processes spent in the phase (from /proc), per request too. Ends with one JSON line of the headline figures.

The load generator shares the machine's cores with the server, so it must be light: httpx's
async client spent 4.1 ms of CPU per request here (9.5 CPU-s in 16 s at 50 clients, as much as
a third of the two cores), and its own event loop's backlog showed up as a 3.5-s latency tail;
aiohttp's spends about 0.7 ms.

`--during-refresh` (the server profile only: `HLTM_DATABASE_URL` and `CHROMA_HOST` set) measures
instead what readers see while the memory is rebuilt: it starts TWO separate `hltm serve`
processes (`--workers 1` each), spreads the clients over both (each asks them in turn), and
`--seconds` into the load it appends a sentence to one document of a project of the first seat
(through the ingest API, as a user's change) and runs a memory refresh in a process of its own,
which rebuilds that project's chain (project, seat, contract); the load goes on until
`--seconds` after the refresh returned. Reported per server: requests, non-200 answers with what
each said, p50 / p95, server CPU; then the refresh's wall time and the nodes it rebuilt.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import math
import multiprocessing
import os
import random
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import numpy as np

from hltm.query.access import create_token
from hltm.query.scope import Identity
from hltm.serving.http import default_workers
from hltm.settings import DATABASE_URL_ENV, E5_ONNX_BACKEND, Settings, chroma_host
from hltm.warehouse import connect
from hltm_devkit.postgres import free_port

ROOT = Path(__file__).resolve().parent.parent

QUESTIONS = (
    "Where do I usually hire?",
    "Which seniority level do I usually hire?",
    "Which roles do I usually hire for?",
    "Which projects are remote roles?",
    "Which skills do my projects require?",
)


def _tokens(data: Path, seats: int) -> dict[str, str]:
    """A bearer token for each of `seats` seats spread over the tree, by seat id."""
    db = data / "derived.duckdb"
    with connect(db) as con:
        ids = [
            r[0]
            for r in con.execute(
                "SELECT seat_id FROM memory_nodes WHERE level = 'seat' ORDER BY seat_id"
            ).fetchall()
        ]
    if not ids:
        raise SystemExit(f"{db} holds no memory tree: run bench/query.py (or hltm demo) first")
    chosen = ids[:: max(1, len(ids) // seats)][:seats]
    return {seat: create_token(db, Identity("seat", seat), "bench/serve")[1] for seat in chosen}


def _start_server(
    data: Path, port: int, workers: int, concurrency: int | None, queue: int, wait_s: float
) -> subprocess.Popen[bytes]:
    env = os.environ | {
        "HLTM_DATA_DIR": str(data),
        "HLTM_LLM_BACKEND": "offline",
        "HLTM_EMBEDDINGS": E5_ONNX_BACKEND,
    }
    if not os.environ.get(DATABASE_URL_ENV):  # the embedded profile: Chroma's files too
        env.pop("CHROMA_HOST", None)
    command = [str(Path(sys.executable).parent / "hltm"), "serve", "--port", str(port)]
    command += ["--workers", str(workers), "--queue", str(queue)]
    if concurrency is not None:
        command += ["--concurrency", str(concurrency)]
    server = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL)
    started = time.monotonic()
    deadline = started + wait_s
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit("hltm serve exited during start-up")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                print(f"hltm serve answered /healthz after {time.monotonic() - started:.0f} s")
                return server
        except httpx.HTTPError:
            time.sleep(0.2)
    server.kill()
    raise SystemExit(f"hltm serve did not answer /healthz in {wait_s:.0f} s (--start-timeout)")


def _server_cpu_s(pid: int) -> float:
    """CPU-seconds (user + system) the server and its worker processes have used so far, from
    /proc (Linux): on a shared machine, CPU per request says what wall-clock figures cannot."""
    parents: dict[int, int] = {}
    ticks: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # a process that ended while read
        child = int(stat.parent.name)
        parents[child] = int(fields[1])
        ticks[child] = int(fields[11]) + int(fields[12])  # utime, stime
    family, grown = {pid}, True
    while grown:
        below = {child for child, parent in parents.items() if parent in family} - family
        family |= below
        grown = bool(below)
    return sum(ticks.get(p, 0) for p in family) / os.sysconf("SC_CLK_TCK")


def _measured(
    servers: dict[str, subprocess.Popen[bytes]],
    tokens: list[str],
    clients: int,
    seconds: float,
    during: Callable[[], Any] | None = None,
) -> tuple[list[dict[str, Any]], Any]:
    """One phase over these servers (base URL → process), each's figures with its
    CPU-seconds spent in it; and what `during` returned (see `_phase`)."""
    cpu = {base: _server_cpu_s(server.pid) for base, server in servers.items()}
    phases, outcome = asyncio.run(_phase(list(servers), tokens, clients, seconds, during))
    for phase in phases:
        spent = _server_cpu_s(servers[phase["server"]].pid) - cpu[phase["server"]]
        phase["server_cpu_s"] = round(spent, 1)
        phase["cpu_ms_per_request"] = round(1000 * spent / max(phase["ok"], 1), 2)
    return phases, outcome


async def _phase(
    bases: list[str],
    tokens: list[str],
    clients: int,
    seconds: float,
    during: Callable[[], Any] | None = None,
) -> tuple[list[dict[str, Any]], Any]:
    """Closed-loop clients for `seconds`, each asking the servers in turn; the figures of each
    server. With `during`, it runs in a worker process `seconds` into the load, and the
    load goes on until `seconds` after it returned; its result is returned too."""
    latencies: dict[str, list[float]] = {base: [] for base in bases}
    spans: dict[str, list[tuple[float, float, int]]] = {b: [] for b in bases}  # answered 200?
    non_llm: dict[str, list[float]] = {base: [] for base in bases}
    statuses: dict[str, Counter[int | str]] = {b: Counter() for b in bases}  # or error's name
    refusals: dict[str, Counter[str]] = {b: Counter() for b in bases}  # "status: what it said"
    connector = aiohttp.TCPConnector(limit=clients)
    timeout = aiohttp.ClientTimeout(total=120)
    outcome = None
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as http:
        deadline = time.perf_counter() + (seconds if during is None else math.inf)

        async def client(i: int) -> None:
            rng = random.Random(i)
            token = tokens[i % len(tokens)]
            headers = {"Authorization": f"Bearer {token}"}
            asked = 0
            while time.perf_counter() < deadline:
                base = bases[(i + asked) % len(bases)]
                asked += 1
                body = {"question": rng.choice(QUESTIONS)}
                started = time.perf_counter()
                try:
                    async with http.post(f"{base}/v1/ask", json=body, headers=headers) as response:
                        status = response.status
                        try:
                            payload = await response.json(content_type=None)
                        except ValueError:  # a plain-text answer (a crash's 500)
                            payload = {"error": await response.text()}
                        retry = response.headers.get("retry-after", "0.1")
                except aiohttp.ClientError as err:  # counted, not fatal: the run goes on
                    statuses[base][type(err).__name__] += 1
                    continue
                took = (time.perf_counter() - started) * 1000
                statuses[base][status] += 1
                spans[base].append((started, time.perf_counter(), status == 200))
                if status == 200:
                    latencies[base].append(took)
                    non_llm[base].append(took - payload["cost"]["llm_ms"])
                else:
                    refusals[base][f"{status}: {str(payload.get('error', payload))[:100]}"] += 1
                    await asyncio.sleep(float(retry))

        async def run_during() -> None:
            nonlocal deadline, outcome
            await asyncio.sleep(seconds)
            spawn = multiprocessing.get_context("spawn")  # a process of its own, as a run is
            with ProcessPoolExecutor(1, mp_context=spawn) as pool:
                outcome = await asyncio.get_running_loop().run_in_executor(pool, during)
            deadline = time.perf_counter() + seconds

        started = time.perf_counter()
        extra = [run_during()] if during is not None else []
        await asyncio.gather(*(client(i) for i in range(clients)), *extra)
        wall = time.perf_counter() - started

    def pct(values: list[float], q: float) -> float:
        return round(float(np.percentile(values, q)), 1) if values else float("nan")

    return [
        {
            "server": base,
            "clients": clients,
            "requests": sum(statuses[base].values()),
            "ok": len(latencies[base]),
            "spans": spans[base],  # (sent, answered, 200) on time.perf_counter()
            "statuses": dict(statuses[base]),
            "refusals": dict(refusals[base]),
            "throughput_rps": round(len(latencies[base]) / wall, 1),
            "p50_ms": pct(latencies[base], 50),
            "p95_ms": pct(latencies[base], 95),
            "max_ms": round(max(latencies[base]), 1) if latencies[base] else float("nan"),
            "non_llm_p50_ms": pct(non_llm[base], 50),
            "non_llm_p95_ms": pct(non_llm[base], 95),
            "non_llm_max_ms": round(max(non_llm[base]), 1) if non_llm[base] else float("nan"),
        }
        for base in bases
    ], outcome


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, default=Path("data/bench-query/1k"))
    parser.add_argument(
        "--seconds",
        type=float,
        default=20.0,
        help="Per phase (--during-refresh: the load before the change and after the refresh).",
    )
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--seats", type=int, default=10)
    parser.add_argument(
        "--workers", type=int, default=default_workers(), help="The server's processes."
    )
    parser.add_argument(
        "--concurrency",
        type=int,
        default=None,
        help="The server's query slots per worker (default: the server's own).",
    )
    parser.add_argument("--queue", type=int, default=64, help="The server's waiting queries.")
    parser.add_argument(
        "--start-timeout", type=float, default=180.0, help="Seconds to wait for /healthz."
    )
    parser.add_argument(
        "--during-refresh",
        action="store_true",
        help="Two `hltm serve --workers 1` under the clients while a memory refresh rebuilds an"
        " edited project's chain (the server profile only).",
    )
    args = parser.parse_args(argv)
    data = args.data.resolve()
    if args.during_refresh:
        _during_refresh(data, args)
        return
    tokens = list(_tokens(data, args.seats).values())
    port = free_port()
    server = _start_server(
        data, port, args.workers, args.concurrency, args.queue, args.start_timeout
    )
    base = f"http://127.0.0.1:{port}"
    try:
        asyncio.run(_phase([base], tokens, 1, 3))  # warm caches (tree, embeddings) first
        phases = [
            _measured({base: server}, tokens, 1, args.seconds)[0][0],
            _measured({base: server}, tokens, args.clients, args.seconds)[0][0],
        ]
    finally:
        server.terminate()
        server.wait(timeout=30)
    _print_table(phases)
    one, many = phases
    print(
        f"throughput {many['throughput_rps']} vs {one['throughput_rps']} req/s"
        f" ({many['throughput_rps'] / max(one['throughput_rps'], 1e-9):.2f}x) with"
        f" {many['clients']} clients over {len(tokens)} seats, {args.workers} server worker(s);"
        f" load {os.getloadavg()[0]:.1f}"
    )
    n = many["clients"]
    print(
        json.dumps(
            {
                "p95_ms_1_client": one["non_llm_p95_ms"],
                f"p50_ms_{n}_clients": many["non_llm_p50_ms"],
                f"p95_ms_{n}_clients": many["non_llm_p95_ms"],
                f"max_ms_{n}_clients": many["non_llm_max_ms"],
                "throughput_rps_1_client": one["throughput_rps"],
                f"throughput_rps_{n}_clients": many["throughput_rps"],
                f"refused_{n}_clients": many["requests"] - many["ok"],
                "cpu_ms_per_request_1_client": one["cpu_ms_per_request"],
                f"cpu_ms_per_request_{n}_clients": many["cpu_ms_per_request"],
            }
        )
    )


def _print_table(phases: list[dict[str, Any]], by_server: bool = False) -> None:
    """One row per phase (or per server), then what each answer other than 200 said."""
    first = f"{'server':>22} " if by_server else ""
    head = (
        f"{first}{'clients':>7} {'requests':>8} {'ok':>6} {'req/s':>6} {'p50 ms':>7}"
        f" {'p95 ms':>7} {'max ms':>7} {'non-LLM p50':>11} {'p95':>6} {'max':>7}"
        f" {'server CPU-s':>12} {'CPU ms/req':>10}  statuses"
    )
    print(head)
    print("-" * len(head))
    for r in phases:
        first = f"{r['server']:>22} " if by_server else ""
        print(
            f"{first}{r['clients']:>7} {r['requests']:>8} {r['ok']:>6}"
            f" {r['throughput_rps']:>6} {r['p50_ms']:>7} {r['p95_ms']:>7} {r['max_ms']:>7}"
            f" {r['non_llm_p50_ms']:>11} {r['non_llm_p95_ms']:>6} {r['non_llm_max_ms']:>7}"
            f" {r['server_cpu_s']:>12} {r['cpu_ms_per_request']:>10}  {r['statuses']}"
        )
    for r in phases:
        for said, n in sorted(r["refusals"].items()):
            who = r["server"] if by_server else f"{r['clients']:>7} clients"
            print(f"{who}: {n} × {said}")


def _during_refresh(data: Path, args: argparse.Namespace) -> None:
    """Two serving processes under the clients while a memory refresh writes (module doc)."""
    if not os.environ.get(DATABASE_URL_ENV) or not chroma_host():
        raise SystemExit(
            "--during-refresh measures the server profile: set HLTM_DATABASE_URL (the stores in"
            " PostgreSQL, `hltm migrate-to-server`) and CHROMA_HOST / CHROMA_PORT (a Chroma"
            " server over the data dir's index, `chroma run --path DATA/chroma`), as `hltm stack"
            " up` prints them. An embedded index written by another process is a view that"
            " lags (docs/query.md)."
        )
    tokens = _tokens(data, args.seats)
    seat = next(iter(tokens))
    with connect(data / "sources.duckdb", read_only=True) as con:
        row = con.execute(
            "SELECT min(project_id) FROM projects WHERE seat_id = ?", [seat]
        ).fetchone()
    if row is None or row[0] is None:
        raise SystemExit(f"seat {seat} has no project to edit")
    servers: dict[str, subprocess.Popen[bytes]] = {}
    try:
        for _ in range(2):
            port = free_port()
            servers[f"http://127.0.0.1:{port}"] = _start_server(
                data, port, 1, args.concurrency, args.queue, args.start_timeout
            )
        for base in servers:
            asyncio.run(_phase([base], list(tokens.values()), 1, 3))  # warm caches first
        edit = functools.partial(_edit_and_refresh, data, str(row[0]))
        phases, refresh = _measured(
            servers, list(tokens.values()), args.clients, args.seconds, edit
        )
    finally:
        for server in servers.values():
            server.terminate()
        for server in servers.values():
            server.wait(timeout=30)
    _print_table(phases, by_server=True)
    rebuilt = ", ".join(f"{n} {level}" for level, n in refresh["rebuilt"].items())
    print(
        f"refresh: edited {refresh['project']} ({refresh['edit_s']} s, the ingest), rebuilt"
        f" {rebuilt} node(s) in {refresh['refresh_s']} s; {args.clients} clients over"
        f" {len(tokens)} seats and 2 servers; load {os.getloadavg()[0]:.1f}"
    )
    begun, ended = refresh["window"]
    during = [
        [ok for sent, answered, ok in phase["spans"] if begun < sent and answered < ended]
        for phase in phases
    ]
    for phase, inside in zip(phases, during, strict=True):
        print(
            f"{phase['server']}: {len(inside)} requests sent and answered while the edit and"
            f" refresh ran, {len(inside) - sum(inside)} of them not 200"
        )
    print(
        json.dumps(
            {
                "requests": sum(p["requests"] for p in phases),
                "non_200": sum(p["requests"] - p["ok"] for p in phases),
                "answered_during_refresh": sum(len(inside) for inside in during),
                **{f"p95_ms_server_{i}": p["non_llm_p95_ms"] for i, p in enumerate(phases, 1)},
                "refresh_s": refresh["refresh_s"],
                "nodes_rebuilt": sum(refresh["rebuilt"].values()),
            }
        )
    )


def _edit_and_refresh(data: Path, project: str) -> dict[str, Any]:
    """A sentence appended to one of `project`'s documents, then a memory refresh of what
    changed (`MemoryBuilder.refresh`: the store reconciled, the stale nodes rebuilt); run in a
    process of its own, on the environment's stores."""
    from hltm.memory import builder_from_settings
    from hltm_devkit.scenarios import change_project

    settings = Settings.from_env(
        data_dir=data, llm_backend="offline", embeddings_backend=E5_ONNX_BACKEND
    )
    started = time.perf_counter()
    change_project(settings.sources_db, random.Random(0), project, "edit")
    edited = time.perf_counter()
    report = builder_from_settings(settings).refresh()
    report.raise_for_failures()
    done = time.perf_counter()
    return {
        "project": project,
        "window": (started, done),  # CLOCK_MONOTONIC: the same clock in every process
        "edit_s": round(edited - started, 2),
        "refresh_s": round(done - edited, 2),
        "rebuilt": dict(Counter(r.level for r in report.rebuilt)),
    }


if __name__ == "__main__":
    main()

"""bench/serve: the HTTP endpoint under load — 1 client, then 50 concurrent clients over 10 seats.

    python bench/serve.py [--data DIR] [--seconds S] [--clients N] [--seats K] [--workers W]

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
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import numpy as np

from hltm.query.access import create_token
from hltm.query.scope import Identity
from hltm.serving.http import default_workers
from hltm.settings import DATABASE_URL_ENV, E5_ONNX_BACKEND
from hltm.warehouse import connect

ROOT = Path(__file__).resolve().parent.parent

QUESTIONS = (
    "Where do I usually hire?",
    "Which seniority level do I usually hire?",
    "Which roles do I usually hire for?",
    "Which projects are remote roles?",
    "Which skills do my projects require?",
)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _tokens(data: Path, seats: int) -> list[str]:
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
    return [create_token(db, Identity("seat", seat), "bench/serve")[1] for seat in chosen]


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
    server: subprocess.Popen[bytes], base: str, tokens: list[str], clients: int, seconds: float
) -> dict[str, Any]:
    """One phase, with the server's CPU-seconds spent in it."""
    cpu = _server_cpu_s(server.pid)
    phase = asyncio.run(_phase(base, tokens, clients, seconds))
    phase["server_cpu_s"] = round(_server_cpu_s(server.pid) - cpu, 1)
    phase["cpu_ms_per_request"] = round(1000 * phase["server_cpu_s"] / max(phase["ok"], 1), 2)
    return phase


async def _phase(base: str, tokens: list[str], clients: int, seconds: float) -> dict[str, Any]:
    latencies: list[float] = []
    non_llm: list[float] = []
    statuses: dict[int | str, int] = {}  # HTTP status, or the transport error's name
    refusals: dict[str, int] = {}  # "status: error message" of each answer other than 200
    connector = aiohttp.TCPConnector(limit=clients)
    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(base, connector=connector, timeout=timeout) as http:
        deadline = time.perf_counter() + seconds

        async def client(i: int) -> None:
            rng = random.Random(i)
            token = tokens[i % len(tokens)]
            headers = {"Authorization": f"Bearer {token}"}
            while time.perf_counter() < deadline:
                body = {"question": rng.choice(QUESTIONS)}
                started = time.perf_counter()
                try:
                    async with http.post("/v1/ask", json=body, headers=headers) as response:
                        status = response.status
                        try:
                            payload = await response.json(content_type=None)
                        except ValueError:  # a plain-text answer (a crash's 500)
                            payload = {"error": await response.text()}
                        retry = response.headers.get("retry-after", "0.1")
                except aiohttp.ClientError as err:  # counted, not fatal: the run goes on
                    name = type(err).__name__
                    statuses[name] = statuses.get(name, 0) + 1
                    continue
                took = (time.perf_counter() - started) * 1000
                statuses[status] = statuses.get(status, 0) + 1
                if status == 200:
                    latencies.append(took)
                    non_llm.append(took - payload["cost"]["llm_ms"])
                else:
                    said = f"{status}: {str(payload.get('error', payload))[:100]}"
                    refusals[said] = refusals.get(said, 0) + 1
                    await asyncio.sleep(float(retry))

        started = time.perf_counter()
        await asyncio.gather(*(client(i) for i in range(clients)))
        wall = time.perf_counter() - started

    def pct(values: list[float], q: float) -> float:
        return round(float(np.percentile(values, q)), 1) if values else float("nan")

    return {
        "clients": clients,
        "requests": sum(statuses.values()),
        "ok": len(latencies),
        "statuses": statuses,
        "refusals": refusals,
        "throughput_rps": round(len(latencies) / wall, 1),
        "p50_ms": pct(latencies, 50),
        "p95_ms": pct(latencies, 95),
        "max_ms": round(max(latencies), 1) if latencies else float("nan"),
        "non_llm_p50_ms": pct(non_llm, 50),
        "non_llm_p95_ms": pct(non_llm, 95),
        "non_llm_max_ms": round(max(non_llm), 1) if non_llm else float("nan"),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, default=Path("data/bench-query/1k"))
    parser.add_argument("--seconds", type=float, default=20.0, help="Per phase.")
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
    args = parser.parse_args(argv)
    data = args.data.resolve()
    tokens = _tokens(data, args.seats)
    port = _free_port()
    server = _start_server(
        data, port, args.workers, args.concurrency, args.queue, args.start_timeout
    )
    base = f"http://127.0.0.1:{port}"
    try:
        asyncio.run(_phase(base, tokens, 1, 3))  # warm caches (tree, embeddings) first
        phases = [
            _measured(server, base, tokens, 1, args.seconds),
            _measured(server, base, tokens, args.clients, args.seconds),
        ]
    finally:
        server.terminate()
        server.wait(timeout=30)
    head = (
        f"{'clients':>7} {'requests':>8} {'ok':>6} {'req/s':>6} {'p50 ms':>7} {'p95 ms':>7}"
        f" {'max ms':>7} {'non-LLM p50':>11} {'p95':>6} {'max':>7} {'server CPU-s':>12}"
        f" {'CPU ms/req':>10}  statuses"
    )
    print(head)
    print("-" * len(head))
    for r in phases:
        print(
            f"{r['clients']:>7} {r['requests']:>8} {r['ok']:>6} {r['throughput_rps']:>6}"
            f" {r['p50_ms']:>7} {r['p95_ms']:>7} {r['max_ms']:>7} {r['non_llm_p50_ms']:>11}"
            f" {r['non_llm_p95_ms']:>6} {r['non_llm_max_ms']:>7} {r['server_cpu_s']:>12}"
            f" {r['cpu_ms_per_request']:>10}  {r['statuses']}"
        )
    for r in phases:
        for said, n in sorted(r["refusals"].items()):
            print(f"{r['clients']:>7} clients: {n} × {said}")
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


if __name__ == "__main__":
    main()

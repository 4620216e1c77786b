"""bench/judge: cold vs warm re-ranking of one vacancy, and the judge's workers against a slow LLM.

    .venv/bin/python bench/judge.py [--root DIR] [--vacancy ID] [--workers W] [--server]
    .venv/bin/python bench/judge.py --llm-delay-ms 300 --workers 1,5 [--pairs 40]

On the sample `demo` world (seed 7), ingested and indexed once under ``--root`` (embeddings
are cached there, so only the first run pays for them):

* **cold** — the vacancy's pool (vector top-100 ∪ BM25 top-150) judged with an empty score
  cache, then ranked and journalled;
* **warm** — the same again: every pair comes from the cache, zero LLM calls;
* **one resume changed** — one pool member's content changes: exactly one pair is re-judged.

LLM time here is the offline judge's (rules, milliseconds). With ``--server`` the same runs go
through the real `openai` client over HTTP to the local protocol server. The last column
projects the cold run onto a real judge at the write-up's median latencies (20.7 s at low
reasoning effort, 47.4 s at default) on W workers — what the score cache saves every night.

With ``--llm-delay-ms D`` every chat call goes through the real `openai` client to the local
protocol server, which holds each answer D ms (its ``timeout`` fault, with the client's timeout
above it), as a real endpoint's latency would. The first ``--pairs`` pool members are judged
cold once per worker count, each on an empty score cache: wall time, the speed-up against the
first count, and whether every score and verdict is identical (the pairs are the vacancy and
the first active resumes: retrieval plays no part in the timing, so nothing is embedded). Both modes end with one JSON line.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from hltm.judge.data import load_resumes, load_vacancies
from hltm.judge.journal import config_gate, publish_ranking
from hltm.judge.pipeline import Budget, judge_pool
from hltm.judge.service import JudgeEnv, build_vacancy_pool, refresh_index
from hltm.settings import Settings
from hltm.sources.ingest import ingest_directory
from hltm.warehouse import connect
from hltm_devkit.generator import SIZES, generate_world

ROOT = Path(__file__).resolve().parent.parent

MEDIAN_S = {"low effort": 20.7, "default": 47.4}  # per evaluation, from the write-up


def log(message: str) -> None:
    print(message, flush=True)


def _run(env: JudgeEnv, db: Path, vacancy: Any, pool: list[Any], workers: int) -> dict[str, Any]:
    started = time.perf_counter()
    report = judge_pool(db, env.llm, vacancy, pool, config=env.config, budget=Budget(None),
                        workers=workers)  # fmt: skip
    with connect(db) as con:
        gate = config_gate(con, env.config)
    entry = publish_ranking(db, vacancy, pool, env.config, gate).live
    assert entry is not None
    wall = time.perf_counter() - started
    return {
        "pairs": len(pool),
        "llm_calls": report.usage.calls,
        "tokens": report.usage.prompt_tokens + report.usage.completion_tokens,
        "cached": report.cached,
        "judged": report.evaluated,
        "wall_s": round(wall, 3),
        "journal_seq": entry.seq,
        "top3": [r.resume_id for r in entry.top(3)],
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=ROOT / "bench" / "out" / "judge")
    parser.add_argument("--vacancy", default=None, help="default: the first vacancy")
    parser.add_argument("--workers", default="5", help="one count, or a list: 1,5")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--size", default="demo", choices=sorted(SIZES))
    parser.add_argument("--server", action="store_true", help="through the local OpenAI server")
    parser.add_argument("--llm-delay-ms", type=int, default=0, help="per-call latency (server)")
    parser.add_argument("--pairs", type=int, default=40, help="pool members judged per count")
    args = parser.parse_args(argv)
    args.workers = [int(w) for w in str(args.workers).split(",") if w.strip()]

    data = args.root / f"{args.size}-{args.seed}"
    settings = Settings.from_env(data_dir=data, llm_backend="offline", chroma_host=None)
    if not settings.sources_db.exists():
        log(f"generating and ingesting the {args.size} world (seed {args.seed}) under {data}")
        generate_world(data / "world", seed=args.seed, size=SIZES[args.size])
        ingest_directory(data / "world", settings.sources_db)
    if args.llm_delay_ms:
        return _workers_bench(args, settings)
    args.workers = args.workers[-1]
    server = None
    if args.server:
        import hltm.judge.tasks  # noqa: F401  (registers the judge task with the server)
        from hltm_devkit.openai_server import LocalOpenAIServer

        server = LocalOpenAIServer().start()
        settings = replace(settings, llm_backend="openai", openai_base_url=server.base_url,
                           openai_api_key="bench")  # fmt: skip
    try:
        env = JudgeEnv.from_settings(settings)
        t0 = time.perf_counter()
        sync = refresh_index(env)
        index_s = time.perf_counter() - t0
        log(f"resume index: {sync.indexed} resumes, {sync.embedded} embedded now ({index_s:.1f}s)")
        vacancy = load_vacancies(settings.sources_db, [args.vacancy] if args.vacancy else None)[0]
        t0 = time.perf_counter()
        pool = build_vacancy_pool(env, vacancy).resumes
        pool_s = time.perf_counter() - t0
        log(f"{vacancy.vacancy_id} ({vacancy.title}): pool of {len(pool)} in {pool_s:.2f}s")

        scratch = args.root / f"scores-{int(time.time() * 1000)}.duckdb"
        cold = _run(env, scratch, vacancy, pool, args.workers)
        warm = _run(env, scratch, vacancy, pool, args.workers)
        changed_pool = list(pool)
        changed_pool[len(pool) // 2] = replace(
            pool[len(pool) // 2],
            text=pool[len(pool) // 2].text + "\nHobbies: chess\n",
            content_hash=pool[len(pool) // 2].content_hash + "-edited",
        )
        one = _run(env, scratch, vacancy, changed_pool, args.workers)
        scratch.unlink(missing_ok=True)
    finally:
        if server is not None:
            server.stop()

    def ratio(a: float, b: float) -> str:
        return "∞" if b == 0 else f"{a / b:.1f}×"

    rows = [("cold", cold), ("warm", warm), ("one resume changed", one)]
    log("")
    log(f"| run ({'openai client → local server' if args.server else 'offline judge'}) "
        "| pairs | LLM calls | tokens | wall s | projected real judge (low / default effort) |")  # fmt: skip
    log("|---|---|---|---|---|---|")
    for name, r in rows:
        waves = math.ceil(r["llm_calls"] / args.workers) if r["llm_calls"] else 0
        proj = " / ".join(f"{waves * s / 60:.1f} min" for s in MEDIAN_S.values())
        log(
            f"| {name} | {r['pairs']} | {r['llm_calls']} | {r['tokens']:,} | {r['wall_s']} | {proj} |"
        )
    log("")
    log(
        f"cold/warm: LLM calls {ratio(cold['llm_calls'], warm['llm_calls'])}, tokens "
        f"{ratio(cold['tokens'], warm['tokens'])}, wall {ratio(cold['wall_s'], warm['wall_s'])}; "
        f"cold/one-changed: calls {ratio(cold['llm_calls'], one['llm_calls'])}, wall "
        f"{ratio(cold['wall_s'], one['wall_s'])}; same top 3 warm: {cold['top3'] == warm['top3']}"
    )
    result = {
        "vacancy": vacancy.vacancy_id,
        "pool": len(pool),
        "workers": args.workers,
        "via_server": args.server,
        "index_seconds": round(index_s, 2),
        "pool_seconds": round(pool_s, 3),
        "cold": cold,
        "warm": warm,
        "one_changed": one,
    }
    out = args.root / ("judge-server.json" if args.server else "judge.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    log(json.dumps({
        f"cold_llm_calls_{len(pool)}": cold["llm_calls"], "warm_llm_calls": warm["llm_calls"],
        "one_changed_llm_calls": one["llm_calls"], "cold_wall_s": cold["wall_s"],
        "warm_wall_s": warm["wall_s"],
    }))  # fmt: skip
    return result


def _stored_scores(db: Path) -> list[tuple[Any, ...]]:
    """Every cached score and verdict, without what differs by run (ids, times)."""
    with connect(db) as con:
        return con.execute(
            "SELECT vacancy_id, resume_id, resume_hash, model, prompt_version, role, level,"
            " skills, experience, overall, actual_role, verdict, quote_counts FROM judge_scores"
            " ORDER BY vacancy_id, resume_id"
        ).fetchall()


def _workers_bench(args: argparse.Namespace, settings: Settings) -> dict[str, Any]:
    """Cold judging through the protocol server with a fixed latency, per worker count."""
    import hltm.judge.tasks  # noqa: F401  (registers the judge task with the server)
    from hltm_devkit.openai_server import LocalOpenAIServer

    delay_s = args.llm_delay_ms / 1000
    vacancy = load_vacancies(settings.sources_db, [args.vacancy] if args.vacancy else None)[0]
    # Which candidates does not matter for the timing: the first active resumes, no embedding.
    pool = load_resumes(settings.sources_db, layer="active")[: args.pairs]
    log(f"{vacancy.vacancy_id}: {len(pool)} pairs, {args.llm_delay_ms} ms per LLM call")
    rows: list[dict[str, Any]] = []
    scores: list[list[tuple[Any, ...]]] = []
    with LocalOpenAIServer() as server:
        server.inject("timeout", times=10**9, delay_s=delay_s)
        remote = replace(
            settings, llm_backend="openai", openai_base_url=server.base_url,
            openai_api_key="bench", llm_timeout_s=delay_s + 30, llm_max_retries=0,
        )  # fmt: skip
        env = JudgeEnv.from_settings(remote)
        for workers in args.workers:
            db = args.root / f"workers-{workers}-{int(time.time() * 1000)}.duckdb"
            started = time.perf_counter()
            report = judge_pool(db, env.llm, vacancy, pool, config=env.config,
                                budget=Budget(None), workers=workers)  # fmt: skip
            wall = time.perf_counter() - started
            scores.append(_stored_scores(db))
            db.unlink(missing_ok=True)
            rows.append({"workers": workers, "wall_s": round(wall, 2), "judged": report.evaluated,
                         "failed": report.failed, "llm_calls": report.usage.calls})  # fmt: skip
    base = rows[0]["wall_s"]
    identical = all(s == scores[0] for s in scores[1:]) and all(r["failed"] == 0 for r in rows)
    log("")
    log("| workers | pairs judged | failed | LLM calls | wall s | speed-up |")
    log("|---|---|---|---|---|---|")
    for r in rows:
        log(f"| {r['workers']} | {r['judged']} | {r['failed']} | {r['llm_calls']} |"
            f" {r['wall_s']} | {base / r['wall_s']:.2f}× |")  # fmt: skip
    log(f"scores and verdicts identical across worker counts: {identical}")
    first = args.workers[0]
    headline: dict[str, Any] = {
        f"speedup_{r['workers']}_vs_{first}": round(base / r["wall_s"], 2) for r in rows[1:]
    }
    headline.update({f"wall_s_{r['workers']}_workers": r["wall_s"] for r in rows})
    headline.update({"pairs": len(pool), "llm_delay_ms": args.llm_delay_ms, "identical": identical})
    log(json.dumps(headline))
    return headline


if __name__ == "__main__":
    main()

"""What breaks first at 100,000 projects, 10,000 seats and 1,000 contracts (issue 12 item 5).

Synthetic sources (one short job description per project; memory content is not needed for
these figures) are written as JSONL and ingested, then each scale-sensitive step is measured:

* ingest of the whole world (the DuckDB single writer holds the sources file this long);
* the `source_changes` sensor: its skip path (the watermark), and its full diff per changed
  tick (read the tree, compute every node's version, diff against the stored versions), time and
  peak Python memory;
* dynamic partitions: adding every project key to a real (SQLite) Dagster instance and reading
  them back, against Dagster's advice (≤ 100k per asset, ≤ 25k requests per sensor evaluation);
* Chroma: one collection per contract, creation time and a filtered nearest-neighbour query's
  latency, with synthetic 384-d vectors (`--chroma-contracts`, `--items-per-collection`);
* the nightly judge at its budget, estimated from a per-pair latency (`--pair-seconds`, default
  the write-up's 47 s median) and the worker count.

    .venv/bin/python bench/scale.py --projects 100000 --seats 10000 --contracts 1000

Prints a table and ends with one JSON line of headline figures whose keys name figure and scale.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np
import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hltm.memory.build import MemoryConfig, version_config  # noqa: E402
from hltm.memory.hints import Hints  # noqa: E402
from hltm.memory.inputs import read_tree, sources_watermark  # noqa: E402
from hltm.memory.models import split_node_id  # noqa: E402
from hltm.memory.tree import BuiltNode, Tree, plan_changes  # noqa: E402
from hltm.sources.ingest import ingest_directory  # noqa: E402
from hltm.warehouse import connect  # noqa: E402


def write_world(out: Path, projects: int, seats: int, contracts: int) -> None:
    out.mkdir(parents=True, exist_ok=True)
    c = pl.DataFrame({"contract_id": [f"c{i:05d}" for i in range(contracts)]})
    c.with_columns(name=pl.format("Org {}", "contract_id")).write_ndjson(out / "contracts.jsonl")
    s = pl.DataFrame({"i": range(seats)}).select(
        seat_id=pl.format("s{}", pl.col("i").cast(pl.Utf8).str.zfill(6)),
        contract_id=pl.format("c{}", (pl.col("i") % contracts).cast(pl.Utf8).str.zfill(5)),
        recruiter_name=pl.format("Recruiter {}", "i"),
    )
    s.write_ndjson(out / "seats.jsonl")
    p = pl.DataFrame({"i": range(projects)}).select(
        project_id=pl.format("p{}", pl.col("i").cast(pl.Utf8).str.zfill(7)),
        seat_id=pl.format("s{}", (pl.col("i") % seats).cast(pl.Utf8).str.zfill(6)),
        title=pl.format("Backend engineer {}", "i"),
        status=pl.lit("open"),
    )
    p.write_ndjson(out / "projects.jsonl")
    p.select(
        document_id=pl.format("d{}", "project_id"),
        project_id="project_id",
        kind=pl.lit("job_description"),
        text=pl.format("Senior backend engineer, Berlin, hybrid, Python ({}).", "project_id"),
    ).write_ndjson(out / "project_documents.jsonl")


def timed(fn):  # type: ignore[no-untyped-def]
    tracemalloc.start()
    started = time.perf_counter()
    value = fn()
    seconds = time.perf_counter() - started
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    return value, seconds, peak


def sensor_diff(sources_db: Path, built: dict[str, BuiltNode] | None) -> tuple[Tree, object]:
    config = version_config("offline", Hints(), MemoryConfig())
    with connect(sources_db, read_only=True) as con:
        con.execute("BEGIN TRANSACTION")
        sources_watermark(con)
        source = read_tree(con)
        con.execute("COMMIT")
    tree = Tree.from_sources(source, config)
    return tree, plan_changes(tree, built or {})


def partitions(keys: list[str], home: Path) -> tuple[float, float]:
    import dagster as dg

    os.environ["DAGSTER_HOME"] = str(home)
    home.mkdir(parents=True, exist_ok=True)
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    with dg.DagsterInstance.get() as instance:
        started = time.perf_counter()
        for start in range(0, len(keys), 25_000):  # the sensor's batch: ≤ 25k per evaluation
            instance.add_dynamic_partitions("projects", keys[start : start + 25_000])
        added = time.perf_counter() - started
        started = time.perf_counter()
        assert len(instance.get_dynamic_partitions("projects")) == len(keys)
        return added, time.perf_counter() - started


def chroma(path: Path, contracts: int, items: int) -> tuple[float, float, float]:
    import chromadb
    from chromadb.config import Settings as ChromaSettings

    client = chromadb.PersistentClient(
        path=str(path), settings=ChromaSettings(anonymized_telemetry=False)
    )
    rng = np.random.default_rng(7)
    started = time.perf_counter()
    for c in range(contracts):
        col = client.create_collection(f"mem-c{c:05d}", metadata={"hnsw:space": "cosine"})
        vectors = rng.standard_normal((items, 384)).astype(np.float32)
        col.add(
            ids=[f"c{c}-{i}" for i in range(items)],
            embeddings=vectors,
            metadatas=[{"seat_id": f"s{i % 10}", "level": "project"} for i in range(items)],
        )
    created = time.perf_counter() - started
    latencies = []
    for q in range(50):
        col = client.get_collection(f"mem-c{q % contracts:05d}")
        started = time.perf_counter()
        col.query(
            query_embeddings=rng.standard_normal((1, 384)).astype(np.float32),
            n_results=10,
            where={"seat_id": f"s{q % 10}"},
        )
        latencies.append((time.perf_counter() - started) * 1000)
    return created, float(np.percentile(latencies, 50)), float(np.percentile(latencies, 95))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--projects", type=int, default=100_000)
    parser.add_argument("--seats", type=int, default=10_000)
    parser.add_argument("--contracts", type=int, default=1_000)
    parser.add_argument("--chroma-contracts", type=int, default=1_000)
    parser.add_argument("--items-per-collection", type=int, default=100)
    parser.add_argument("--pair-seconds", type=float, default=47.0)
    parser.add_argument("--workers", type=int, default=5)
    parser.add_argument("--budget", type=int, default=3_000)
    args = parser.parse_args()
    n = args.projects
    rows: list[tuple[str, str, str]] = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write_world(root / "world", n, args.seats, args.contracts)
        db = root / "sources.duckdb"
        report, ingest_s, _ = timed(lambda: ingest_directory(root / "world", db))
        rows.append(
            (
                "ingest (single writer holds sources.duckdb)",
                f"{ingest_s:.1f} s",
                f"{report.loaded:,} rows",
            )
        )

        def skip_path() -> str:
            with connect(db, read_only=True) as con:
                return sources_watermark(con)

        _, skip_s, _ = timed(skip_path)
        rows.append(("sensor skip path (watermark)", f"{skip_s:.2f} s", "every 30 s tick"))
        (tree, plan), cold_s, cold_mb = timed(lambda: sensor_diff(db, None))
        rows.append(("sensor full diff, empty store", f"{cold_s:.1f} s", f"peak {cold_mb:.0f} MB"))
        built = {
            nid: BuiltNode(nid, split_node_id(nid)[0], v, tree.nodes[nid].contract_id, None)
            for nid, v in tree.versions.items()
        }
        (_, warm_plan), warm_s, warm_mb = timed(lambda: sensor_diff(db, built))
        rows.append(
            (
                "sensor full diff per changed tick",
                f"{warm_s:.1f} s",
                f"peak {warm_mb:.0f} MB, plan empty={warm_plan.empty}",
            )  # type: ignore[attr-defined]
        )
        keys = sorted(split_node_id(k)[1] for k in tree.ids("project"))
        added_s, read_s = partitions(keys, root / "dagster_home")
        rows.append(
            (
                "partitions: add all project keys",
                f"{added_s:.1f} s",
                f"{len(keys):,} keys in {-(-len(keys) // 25_000)} ticks of 25k",
            )
        )
        rows.append(
            ("partitions: read all keys", f"{read_s:.2f} s", "Dagster advises ≤ 100k per asset")
        )
        created_s, p50, p95 = chroma(
            root / "chroma", args.chroma_contracts, args.items_per_collection
        )
        rows.append(
            (
                f"chroma: {args.chroma_contracts} collections × {args.items_per_collection} items",
                f"{created_s:.1f} s",
                "one per contract",
            )
        )
        rows.append(
            ("chroma: filtered query p50 / p95", f"{p50:.1f} / {p95:.1f} ms", "where seat_id = …")
        )
    judge_hours = args.budget * args.pair_seconds / args.workers / 3600
    rows.append(
        (
            "nightly judge at budget (estimate)",
            f"{judge_hours:.1f} h",
            f"{args.budget} pairs × {args.pair_seconds:.0f} s / {args.workers} workers",
        )
    )
    width = max(len(r[0]) for r in rows)
    print(f"scale: {n:,} projects, {args.seats:,} seats, {args.contracts:,} contracts")
    for name, value, note in rows:
        print(f"{name:<{width}}  {value:>16}  {note}")
    print(
        json.dumps(
            {
                f"ingest_s_{n}": round(ingest_s, 2),
                f"sensor_skip_s_{n}": round(skip_s, 3),
                f"sensor_full_diff_s_{n}": round(warm_s, 2),
                f"sensor_full_diff_peak_mb_{n}": round(warm_mb, 1),
                f"partitions_add_s_{n}": round(added_s, 2),
                f"chroma_collections_{args.chroma_contracts}_create_s": round(created_s, 2),
                f"chroma_filtered_query_p95_ms_{args.chroma_contracts}": round(p95, 2),
                f"judge_nightly_hours_{args.budget}": round(judge_hours, 2),
            }
        )
    )


if __name__ == "__main__":
    main()

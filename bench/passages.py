"""bench/passages: shorter resume passages for the vector index — CPU saved against retrieval lost.

    .venv/bin/python bench/passages.py [--tokens 128,200] [--sets sample,real] [--work DIR]

The bundled e5 (run by ONNX Runtime, the default) embeds a whole text however long it is
(sliding 512-token windows), and its cost grows with the tokens it reads: embedding the resume
index is most of a first `make demo`. This bench embeds each golden set's active resumes cut to
the first N tokens of their passage (at a word boundary) and reports, beside the whole passage:
mean tokens embedded, CPU-ms per passage (the first ``--timed`` embedded afresh), and cosine
precision@10, strict and soft, overall and per vacancy (hits of 10). Union + judge on the
closed set does not depend on the vectors (the judge scores every labelled pair; cosine only
breaks ties), so cosine is what a cut can lose.
Vectors are cached under ``--work`` (reruns cost only the timing). Ends with one JSON line.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from hltm.embeddings import CachedEmbedder, OnnxE5Embedder, passage_tokens
from hltm.evaluation.judge.golden import (
    GoldenSet,
    cosine_rankings,
    golden_vectors,
    labelled_in,
    load_golden,
)
from hltm.evaluation.judge.golden_real import load_real_golden
from hltm.evaluation.judge.metrics import overall_precision

ROOT = Path(__file__).resolve().parent.parent

LOADERS: dict[str, Callable[[], GoldenSet]] = {"sample": load_golden, "real": load_real_golden}


def measure(gs: GoldenSet, embedder: CachedEmbedder, timed: int) -> dict:
    """Cosine P@10 of ``gs`` (vectors from the cache or the snapshot), and the CPU cost of
    embedding its first ``timed`` passages afresh, one call."""
    sample = [gs.passage(r) for r in gs.active[:timed]]
    started = time.process_time()
    embedder.inner.passages(sample)
    cpu_ms = 1000 * (time.process_time() - started) / max(1, len(sample))
    vectors = golden_vectors(gs, embedder)
    cos = cosine_rankings(gs, vectors)
    ranked = {v: labelled_in([r for r, _ in cos[v]], gs.labels.get(v, {})) for v in cos}
    row: dict[str, Any] = {
        "mean_tokens": round(
            sum(passage_tokens(gs.passage(r)) for r in gs.active) / len(gs.active), 1
        ),
        "cpu_ms": round(cpu_ms),
    }
    for kind in ("strict", "soft"):
        p = overall_precision(ranked, gs.labels, k=10, soft=kind == "soft")
        row[kind] = p.hits
        row["shown"] = p.shown
        row[f"{kind}_per_vacancy"] = {v: hits for v, (hits, _) in sorted(p.per_vacancy.items())}
    return row


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", default="128,200", help="Token budgets to try.")
    parser.add_argument("--sets", default="sample,real", help="Golden sets: sample, real.")
    parser.add_argument("--work", type=Path, default=ROOT / ".bench" / "passages")
    parser.add_argument("--timed", type=int, default=16, help="Passages timed per variant.")
    args = parser.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    headline: dict[str, Any] = {}
    for name in args.sets.split(","):
        gs = LOADERS[name]()
        embedder = CachedEmbedder(OnnxE5Embedder(), args.work / f"{name}.duckdb")
        rows: dict[str, dict[str, Any]] = {}
        for limit in (None, *(int(t) for t in args.tokens.split(","))):
            variant = replace(gs, passage_tokens=limit)
            rows[str(limit or "all")] = measure(variant, embedder, args.timed)
        print(f"\n{name} set ({len(gs.active)} active resumes)")
        print("| passage | mean tokens | CPU ms/passage | strict P@10 | soft P@10 |")
        print("|---|---:|---:|---:|---:|")
        for label, r in rows.items():
            print(
                f"| {label} | {r['mean_tokens']} | {r['cpu_ms']} |"
                f" {r['strict']}/{r['shown']} | {r['soft']}/{r['shown']} |"
            )
        vids = list(rows["all"]["strict_per_vacancy"])
        print("per vacancy, strict · soft hits of 10:")
        for label, r in rows.items():
            cells = " ".join(
                f"{v} {r['strict_per_vacancy'][v]}·{r['soft_per_vacancy'][v]}" for v in vids
            )
            print(f"  {label:>4}: {cells}")
        for label, r in rows.items():
            headline[f"{name}_strict_hits_{label}"] = r["strict"]
            headline[f"{name}_soft_hits_{label}"] = r["soft"]
            headline[f"{name}_cpu_ms_per_passage_{label}"] = r["cpu_ms"]
    print(json.dumps(headline))
    return headline


if __name__ == "__main__":
    main()

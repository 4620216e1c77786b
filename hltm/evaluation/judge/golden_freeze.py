"""Writing a golden set, done on purpose only: the sample set's freeze and the shared writers."""

from __future__ import annotations

import csv
import json
import shutil
import tempfile
from collections.abc import Mapping
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np

from hltm.embeddings import CachedEmbedder, text_hash
from hltm.evaluation.judge.golden import (
    GoldenSet,
    K,
    Vectors,
    cosine_pins,
    file_sha256,
    golden_vectors,
    read_set,
)
from hltm.judge.candidates import K_BM25, K_VECTOR
from hltm.judge.data import resume_content_hash

__all__ = ["freeze_golden", "label_counts", "write_manifest", "write_snapshot"]

FILES = ("vacancies.jsonl", "resumes.jsonl", "labels.csv", "vectors.npz")


def freeze_golden(
    out_dir: Path | str,
    embedder: CachedEmbedder,
    seed: int = 7,
    size: str = "demo",
    frozen_on: date | None = None,
    force: bool = False,
) -> dict[str, Any]:
    """Build the golden set from the sample world (fixed seed) and pin its cosine baseline.

    Refuses to overwrite an existing set unless ``force``: re-freezing changes the yardstick
    every later number is compared with, so it is done on purpose only.
    """
    from hltm_devkit.generator import GENERATOR_VERSION, SIZES, generate_world

    out = Path(out_dir)
    if (out / "manifest.json").exists() and not force:
        raise FileExistsError(f"{out} already holds a frozen golden set (use force to re-freeze)")
    work = Path(tempfile.mkdtemp(prefix="golden-world-"))
    try:
        generate_world(work, seed=seed, size=SIZES[size])
        truth = json.loads((work / "ground_truth.json").read_text(encoding="utf-8"))
        read = lambda name: [  # noqa: E731
            json.loads(line)
            for line in (work / f"{name}.jsonl").read_text(encoding="utf-8").splitlines()
            if line.strip()
        ]
        vac_rows, req_rows, res_rows = (
            read("vacancies"),
            read("vacancy_requirements"),
            read("resumes"),
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)
    reqs: dict[str, list[dict[str, Any]]] = {}
    for r in req_rows:
        reqs.setdefault(r["vacancy_id"], []).append(
            {
                "requirement_id": r["requirement_id"],
                "text": r["text"],
                "mandatory": bool(r["mandatory"]),
            }
        )
    with (out / "vacancies.jsonl").open("w", encoding="utf-8", newline="\n") as fh:
        for v in sorted(vac_rows, key=lambda x: x["vacancy_id"]):
            row = {
                **v,
                "requirements": sorted(
                    reqs.get(v["vacancy_id"], []), key=lambda x: x["requirement_id"]
                ),
            }
            fh.write(json.dumps(row, ensure_ascii=False, sort_keys=True) + "\n")
    with (out / "resumes.jsonl").open("w", encoding="utf-8", newline="\n") as fh:
        for r in sorted(res_rows, key=lambda x: x["resume_id"]):
            fh.write(
                json.dumps(
                    {**r, "content_hash": resume_content_hash(r)},
                    ensure_ascii=False,
                    sort_keys=True,
                )
                + "\n"
            )
    rtruth = truth["resumes"]
    with (out / "labels.csv").open("w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow(["vacancy_id", "resume_id", "label", "trap"])
        for lab in sorted(truth["labels"], key=lambda x: (x["vacancy_id"], x["resume_id"])):
            t = rtruth[lab["resume_id"]]
            trap = t["trap"] if t.get("trap") and lab["vacancy_id"] in t.get("targets", []) else ""
            writer.writerow([lab["vacancy_id"], lab["resume_id"], lab["label"], trap])
    gs = read_set(out, {})
    vectors = golden_vectors(gs, embedder, use_snapshot=False)
    active = gs.active
    write_snapshot(out, gs, vectors, embedder.model_name)
    counts = label_counts(gs.labels)
    manifest = {
        "name": "judge golden set",
        "frozen_on": (frozen_on or date.today()).isoformat(),
        "built_from": {
            "generator": "hltm_devkit.generator.generate_world",
            "generator_version": GENERATOR_VERSION,
            "seed": seed,
            "size": size,
            "labels": "the world's labelled pairs (label_pair on ground truth): all fits and"
            " borderlines of the active layer, planted traps, sampled misses",
        },
        "counts": {
            "vacancies": len(gs.vacancies),
            "resumes": len(gs.resumes),
            "active_resumes": len(active),
            "pairs": gs.pairs(),
            **counts,
            "trap_pairs": len(gs.traps),
        },
        "embedding_model": embedder.model_name,
        "passage_tokens": gs.passage_tokens,
        "k": K,
        "pool": {"k_vector": K_VECTOR, "k_bm25": K_BM25},
        "pins": cosine_pins(gs, vectors),
        "files": {name: file_sha256(out / name) for name in FILES},
    }
    write_manifest(out, manifest)
    return manifest


def write_snapshot(out: Path, gs: GoldenSet, vectors: Vectors, model: str) -> None:
    """``vectors.npz``: the active resumes' and the vacancies' vectors with their text hashes."""
    active = gs.active
    np.savez_compressed(
        out / "vectors.npz",
        model=np.array(model),
        resume_ids=np.array([r.resume_id for r in active]),
        resume_hashes=np.array([text_hash(gs.passage(r)) for r in active]),
        resume_vectors=np.stack([vectors.resumes[r.resume_id] for r in active]).astype(np.float32),
        vacancy_ids=np.array([v.vacancy_id for v in gs.vacancies]),
        vacancy_hashes=np.array([text_hash(v.vector_query()) for v in gs.vacancies]),
        vacancy_vectors=np.stack([vectors.queries[v.vacancy_id] for v in gs.vacancies]).astype(
            np.float32
        ),
    )


def label_counts(labels: Mapping[str, Mapping[str, str]]) -> dict[str, int]:
    counts = {"fit": 0, "borderline": 0, "miss": 0}
    for per_vacancy in labels.values():
        for label in per_vacancy.values():
            counts[label] += 1
    return counts


def write_manifest(out: Path, manifest: Mapping[str, Any]) -> None:
    (out / "manifest.json").write_text(
        json.dumps(manifest, ensure_ascii=False, indent=2, sort_keys=True) + "\n", encoding="utf-8"
    )

"""The frozen golden set: labelled vacancy–resume pairs, their pinned baseline, the evaluation.

**What is frozen** (files in ``hltm/evaluation/golden/``, written once by `golden_freeze.freeze_golden`, never
by a test):

* ``vacancies.jsonl`` — the vacancies with their requirements, as they were on the freeze date;
* ``resumes.jsonl``   — every resume of the sample world (both layers) with its content hash;
* ``labels.csv``      — (vacancy, resume, label ``fit``/``borderline``/``miss``, trap kind);
* ``vectors.npz``     — the embedding snapshot of the active resumes and the vacancy queries
  (model name + text hashes), so the pin test does not spend minutes re-embedding: it re-embeds
  a sample and checks it matches, and uses the snapshot only for the model it was made with;
* ``manifest.json``   — freeze date, how it was built (generator, seed, size), counts, SHA-256 of
  every file, and the **pins**: cosine strict and soft precision@10 on the closed set.

Labels come from the sample world's own labelled pairs (`hltm_devkit.generator`, fixed seed):
every fit and borderline of the active layer, the planted traps (keyword twins, headline
mismatches) and a sample of misses. The set is a snapshot: regenerating the world with a newer
generator does not change it; only ``hltm judge golden freeze --force`` does.

**Evaluation** (`golden_eval.evaluate_golden`), strict and soft precision@10 per vacancy and pooled
(Σ hits / Σ shown), for cosine, BM25, RRF and union + judge:

* *closed set* — each method ranks only the labelled pairs of a vacancy;
* *live pool* — only pairs the live system would show: cosine = the labelled pairs inside the
  vector top-100, BM25 = inside the BM25 top-150, RRF = inside the RRF fusion of those two lists
  (top-100), union + judge = inside vector top-100 ∪ BM25 top-150, ranked by ``overall``;
* *fit recall* of each pool (how many of the labelled fits it contains), and how many fits the
  vector top-100 misses that the union rescues.

Ties in a ranking keep the retrieval order (a stable sort), as in the product.
"""

from __future__ import annotations

import csv
import hashlib
import json
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from hltm.embeddings import CachedEmbedder, text_hash
from hltm.evaluation.judge.metrics import overall_precision
from hltm.judge.candidates import QueryVectors
from hltm.judge.data import PASSAGE_TOKENS, Requirement, Resume, Vacancy
from hltm.judge.pools import BM25Index

__all__ = [
    "GOLDEN_DIR",
    "GoldenSet",
    "PinCheck",
    "check_pins",
    "load_golden",
]

# The frozen golden sets ship inside the package (an installed wheel evaluates them too).
GOLDEN_DIR = Path(str(resources.files("hltm.evaluation") / "golden"))
K = 10


@dataclass
class GoldenSet:
    path: Path
    manifest: dict[str, Any]
    vacancies: list[Vacancy]
    resumes: list[Resume]
    labels: dict[str, dict[str, str]]  # vacancy → resume → label
    traps: dict[tuple[str, str], str]  # (vacancy, resume) → trap kind
    passage_tokens: int | None = PASSAGE_TOKENS  # what the index embeds (`bench/passages.py`)

    @property
    def active(self) -> list[Resume]:
        return [r for r in self.resumes if r.layer == "active"]

    @property
    def resume_by_id(self) -> dict[str, Resume]:
        return {r.resume_id: r for r in self.resumes}

    @property
    def pins(self) -> dict[str, Any]:
        return self.manifest["pins"]

    def pairs(self) -> int:
        return sum(len(v) for v in self.labels.values())

    def passage(self, resume: Resume) -> str:
        """What the set's cosine baseline embeds: the resume's passage (its first
        ``passage_tokens``, as the index embeds it), cut to the manifest's ``passage_chars``
        when the set declares one."""
        limit = self.manifest.get("passage_chars")
        text = resume.passage(self.passage_tokens)
        return text[:limit] if limit else text


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _vacancy_from(row: Mapping[str, Any]) -> Vacancy:
    return Vacancy(
        row["vacancy_id"],
        int(row["version"]),
        row["title"],
        row["text"],
        tuple(
            Requirement(r["requirement_id"], r["text"], bool(r["mandatory"]))
            for r in row["requirements"]
        ),
        row.get("project_id"),
    )


def _resume_from(row: Mapping[str, Any]) -> Resume:
    return Resume(
        row["resume_id"], row["text"], row["content_hash"], row.get("headline"),
        row.get("language"), row.get("layer") or "active", row.get("updated_at"),
    )  # fmt: skip


def load_golden(path: Path | str = GOLDEN_DIR, verify: bool = True) -> GoldenSet:
    """Read the frozen set; with ``verify`` every file must match the manifest's SHA-256."""
    path = Path(path)
    manifest_path = path / "manifest.json"
    if not manifest_path.exists():
        raise FileNotFoundError(f"no golden set in {path}: run `hltm judge golden freeze`")
    manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    if verify:
        for name, digest in manifest["files"].items():
            actual = file_sha256(path / name)
            if actual != digest:
                raise ValueError(
                    f"hltm/evaluation/golden/{name} changed since the freeze (sha256 {actual[:12]}…)"
                )
    return read_set(path, manifest)


def read_set(path: Path, manifest: dict[str, Any]) -> GoldenSet:
    vacancies = [
        _vacancy_from(json.loads(line))
        for line in (path / "vacancies.jsonl").read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]
    resumes = [
        _resume_from(json.loads(line))
        for line in (path / "resumes.jsonl").read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]
    labels: dict[str, dict[str, str]] = {}
    traps: dict[tuple[str, str], str] = {}
    with (path / "labels.csv").open(encoding="utf-8", newline="") as fh:
        for row in csv.DictReader(fh):
            labels.setdefault(row["vacancy_id"], {})[row["resume_id"]] = row["label"]
            if row.get("trap"):
                traps[(row["vacancy_id"], row["resume_id"])] = row["trap"]
    return GoldenSet(path, manifest, vacancies, resumes, labels, traps)


# ------------------------------------------------------------------------------------ vectors


@dataclass
class Vectors:
    """Resume passage vectors (active layer) and vacancy query vectors, by id."""

    model: str
    resumes: dict[str, np.ndarray]
    queries: dict[str, np.ndarray]
    from_snapshot: int = 0
    embedded: int = 0


def _snapshot(path: Path) -> dict[str, Any] | None:
    file = path / "vectors.npz"
    if not file.exists():
        return None
    with np.load(file, allow_pickle=False) as data:
        return {k: data[k] for k in data.files}


def golden_vectors(
    gs: GoldenSet,
    embedder: CachedEmbedder,
    query_vectors: QueryVectors | None = None,
    use_snapshot: bool = True,
) -> Vectors:
    """Vectors for the golden set: from the snapshot when it was made with this model and the
    texts are unchanged, otherwise from the embedder (which caches them)."""
    snap = _snapshot(gs.path) if use_snapshot else None
    out = Vectors(embedder.model_name, {}, {})
    known_r: dict[str, np.ndarray] = {}
    known_q: dict[str, np.ndarray] = {}
    if snap is not None and str(snap["model"]) == embedder.model_name:
        for rid, digest, vec in zip(
            snap["resume_ids"], snap["resume_hashes"], snap["resume_vectors"], strict=True
        ):
            known_r[f"{rid}:{digest}"] = vec
        for vid, digest, vec in zip(
            snap["vacancy_ids"], snap["vacancy_hashes"], snap["vacancy_vectors"], strict=True
        ):
            known_q[f"{vid}:{digest}"] = vec
    missing: list[Resume] = []
    for r in gs.active:
        vec = known_r.get(f"{r.resume_id}:{text_hash(gs.passage(r))}")
        if vec is None:
            missing.append(r)
        else:
            out.resumes[r.resume_id] = vec.astype(np.float32)
            out.from_snapshot += 1
    if missing:
        vectors = embedder.passages([gs.passage(r) for r in missing])
        for r, vec in zip(missing, vectors, strict=True):
            out.resumes[r.resume_id] = vec
        out.embedded += len(missing)
    queries = query_vectors or QueryVectors(embedder)
    for v in gs.vacancies:
        vec = known_q.get(f"{v.vacancy_id}:{text_hash(v.vector_query())}")
        if vec is None:
            vec = queries.get(v.vector_query())
            out.embedded += 1
        else:
            out.from_snapshot += 1
        out.queries[v.vacancy_id] = np.asarray(vec, dtype=np.float32)
    return out


def cosine_rankings(gs: GoldenSet, vectors: Vectors) -> dict[str, list[tuple[str, float]]]:
    """Every active resume by cosine to each vacancy, best first (exact, no ANN)."""
    ids = [r.resume_id for r in gs.active]
    matrix = np.stack([vectors.resumes[i] for i in ids]).astype(np.float32)
    out: dict[str, list[tuple[str, float]]] = {}
    for v in gs.vacancies:
        sims = matrix @ vectors.queries[v.vacancy_id]
        order = np.argsort(-sims, kind="stable")
        out[v.vacancy_id] = [(ids[i], float(sims[i])) for i in order]
    return out


def bm25_rankings(gs: GoldenSet) -> dict[str, list[tuple[str, float]]]:
    active = gs.active
    index = BM25Index().build([r.resume_id for r in active], [r.text for r in active])
    return {v.vacancy_id: index.search(v.bm25_query(), k=len(active)) for v in gs.vacancies}


def labelled_in(order: Sequence[str], labels: Mapping[str, str]) -> list[str]:
    return [rid for rid in order if rid in labels]


def cosine_pins(gs: GoldenSet, vectors: Vectors) -> dict[str, dict[str, Any]]:
    cos = cosine_rankings(gs, vectors)
    ranked = {vid: labelled_in([r for r, _ in cos[vid]], gs.labels.get(vid, {})) for vid in cos}
    strict = overall_precision(ranked, gs.labels, k=K)
    soft = overall_precision(ranked, gs.labels, k=K, soft=True)
    return {
        "cosine_strict_p10": {
            "hits": strict.hits,
            "shown": strict.shown,
            "value": round(strict.value, 4),
        },
        "cosine_soft_p10": {"hits": soft.hits, "shown": soft.shown, "value": round(soft.value, 4)},
    }


# --------------------------------------------------------------------------------------- pins


@dataclass(frozen=True)
class PinCheck:
    ok: bool
    pinned: dict[str, Any]
    measured: dict[str, Any]
    spot_checked: int
    max_drift: float
    message: str


def check_pins(
    gs: GoldenSet, embedder: CachedEmbedder, sample: int = 4, full: bool = False, seed: int = 0
) -> PinCheck:
    """Recompute the cosine baseline and compare it with the pins.

    The embedding model must be the pinned one. Unless ``full`` (re-embed everything), the
    snapshot is used after re-embedding ``sample`` random resumes and one vacancy and checking
    they match it (cosine ≥ 0.999): a stale or foreign snapshot fails here, not silently.
    """
    pinned = gs.pins
    if embedder.model_name != gs.manifest["embedding_model"]:
        return PinCheck(False, pinned, {}, 0, 1.0,
                        f"embedding model {embedder.model_name} is not the pinned "
                        f"{gs.manifest['embedding_model']}")  # fmt: skip
    vectors = golden_vectors(gs, embedder, use_snapshot=not full)
    drift = 0.0
    checked = 0
    if not full:
        rng = random.Random(seed)
        picks = rng.sample(gs.active, k=min(sample, len(gs.active)))
        fresh = embedder.passages([gs.passage(r) for r in picks])
        for r, vec in zip(picks, fresh, strict=True):
            drift = max(drift, 1.0 - float(np.dot(vec, vectors.resumes[r.resume_id])))
            checked += 1
        v = rng.choice(gs.vacancies)
        q = np.asarray(embedder.query(v.vector_query()), dtype=np.float32)
        drift = max(drift, 1.0 - float(np.dot(q, vectors.queries[v.vacancy_id])))
        checked += 1
    measured = cosine_pins(gs, vectors)
    same = all(
        (measured[k]["hits"], measured[k]["shown"]) == (pinned[k]["hits"], pinned[k]["shown"])
        for k in pinned
    )
    ok = same and drift <= 1e-3
    parts = [
        f"{k}: pinned {pinned[k]['hits']}/{pinned[k]['shown']}, measured"
        f" {measured[k]['hits']}/{measured[k]['shown']}"
        for k in pinned
    ]
    if drift > 1e-3:
        parts.append(f"snapshot drift {drift:.2e} > 1e-3: re-embedding disagrees with vectors.npz")
    return PinCheck(ok, pinned, measured, checked, drift, "; ".join(parts))

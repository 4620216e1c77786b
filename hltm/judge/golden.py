"""The frozen golden set: labelled vacancy–resume pairs, their pinned baseline, the evaluation.

**What is frozen** (files in ``golden/``, written once by `freeze_golden`, never by a test):

* ``vacancies.jsonl`` — the vacancies with their requirements, as they were on the freeze date;
* ``resumes.jsonl``   — every resume of the sample world (both layers) with its content hash;
* ``labels.csv``      — (vacancy, resume, label ``fit``/``borderline``/``miss``, trap kind);
* ``vectors.npz``     — the embedding snapshot of the active resumes and the vacancy queries
  (model name + text hashes), so the pin test does not spend minutes re-embedding: it re-embeds
  a sample and checks it matches, and uses the snapshot only for the model it was made with;
* ``manifest.json``   — freeze date, how it was built (generator, seed, size), counts, SHA-256 of
  every file, and the **pins**: cosine strict and soft precision@10 on the closed set.

Labels come from the sample world's own labelled pairs (`hltm.sources.generator`, fixed seed):
every fit and borderline of the active layer, the planted traps (keyword twins, headline
mismatches) and a sample of misses. The set is a snapshot: regenerating the world with a newer
generator does not change it; only ``hltm judge golden freeze --force`` does.

**Evaluation** (`evaluate_golden`), strict and soft precision@10 per vacancy and pooled
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
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np

from hltm.embeddings import CachedEmbedder, text_hash
from hltm.judge.candidates import K_BM25, K_VECTOR, QueryVectors
from hltm.judge.data import PASSAGE_TOKENS, Requirement, Resume, Vacancy, resume_content_hash
from hltm.judge.gate import GateDecision, gate_from_counts
from hltm.judge.metrics import PrecisionResult, overall_fit_recall, overall_precision
from hltm.judge.pipeline import Budget, JudgeConfig, cached_scores, judge_config, judge_pool
from hltm.judge.pools import BM25Index, rrf, union_pool
from hltm.judge.quotes import sum_counts
from hltm.judge.tasks import build_payload
from hltm.llm import LLM, LLMUsage

__all__ = [
    "GOLDEN_DIR",
    "GoldenReport",
    "GoldenSet",
    "PinCheck",
    "check_pins",
    "evaluate_golden",
    "freeze_golden",
    "load_golden",
]

GOLDEN_DIR = Path(__file__).resolve().parent.parent.parent / "golden"
FILES = ("vacancies.jsonl", "resumes.jsonl", "labels.csv", "vectors.npz")
METHODS = ("cosine", "bm25", "rrf", "union+judge")
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
                raise ValueError(f"golden/{name} changed since the freeze (sha256 {actual[:12]}…)")
    return _read_set(path, manifest)


def _read_set(path: Path, manifest: dict[str, Any]) -> GoldenSet:
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


def _labelled_in(order: Sequence[str], labels: Mapping[str, str]) -> list[str]:
    return [rid for rid in order if rid in labels]


def cosine_pins(gs: GoldenSet, vectors: Vectors) -> dict[str, dict[str, Any]]:
    cos = cosine_rankings(gs, vectors)
    ranked = {vid: _labelled_in([r for r, _ in cos[vid]], gs.labels.get(vid, {})) for vid in cos}
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


# ------------------------------------------------------------------------------------- freeze


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
    from hltm.sources.generator import GENERATOR_VERSION, SIZES, generate_world

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
    gs = _read_set(out, {})
    vectors = golden_vectors(gs, embedder, use_snapshot=False)
    active = gs.active
    write_snapshot(out, gs, vectors, embedder.model_name)
    counts = label_counts(gs.labels)
    manifest = {
        "name": "judge golden set",
        "frozen_on": (frozen_on or date.today()).isoformat(),
        "built_from": {
            "generator": "hltm.sources.generator.generate_world",
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


# --------------------------------------------------------------------------------- evaluation


@dataclass
class GoldenReport:
    config: JudgeConfig
    precision: dict[tuple[str, str, str], PrecisionResult]  # (setting, method, strict|soft)
    recall: dict[str, tuple[int, int]]  # pool name → (fits found, fits labelled)
    invisible_fits: int  # fits outside the vector top-100
    rescued_fits: int  # of those, in the union pool
    rrf_rescued: int  # of those, in the RRF top-100
    judged: int
    cached: int
    failed: int
    usage: LLMUsage
    gate: GateDecision
    pins: dict[str, Any]
    vacancies: list[str] = field(default_factory=list)
    spread: dict[str, tuple[float, float]] = field(default_factory=dict)

    def value(self, setting: str, method: str, soft: bool = False) -> float:
        return self.precision[(setting, method, "soft" if soft else "strict")].value

    def as_dict(self) -> dict[str, Any]:
        return {
            "config": self.config.as_metadata(),
            "precision": {
                f"{s}/{m}/{kind}": {"hits": p.hits, "shown": p.shown, "value": round(p.value, 4)}
                for (s, m, kind), p in self.precision.items()
            },
            "fit_recall": {k: {"found": f, "of": t} for k, (f, t) in self.recall.items()},
            "invisible_fits": self.invisible_fits,
            "rescued_by_union": self.rescued_fits,
            "rescued_by_rrf": self.rrf_rescued,
            "judged": self.judged,
            "cached": self.cached,
            "failed": self.failed,
            "gate": {"passed": self.gate.passed, "rate": round(self.gate.rate, 4)},
            "pins": self.pins,
        }

    def table(self) -> str:
        """The evaluation as a Markdown table (what the closing note and the UI show)."""

        def cell(setting: str, method: str, soft: bool) -> str:
            p = self.precision[(setting, method, "soft" if soft else "strict")]
            return f"{p.value:.1%} ({p.hits}/{p.shown})"

        lines = [
            "| method | closed strict P@10 | closed soft P@10 | live strict P@10 | live soft P@10 |",
            "|---|---|---|---|---|",
        ]
        for m in METHODS:
            lines.append(
                f"| {m} | {cell('closed', m, False)} | {cell('closed', m, True)} |"
                f" {cell('live', m, False)} | {cell('live', m, True)} |"
            )
        lines += ["", "| pool | fit recall |", "|---|---|"]
        for name, (found, total) in self.recall.items():
            lines.append(
                f"| {name} | {found}/{total} ({found / total:.1%}) |"
                if total
                else f"| {name} | – |"
            )
        lines.append("")
        lines.append(
            f"Fits outside the vector top-{K_VECTOR}: {self.invisible_fits}; the union pool"
            f" rescues {self.rescued_fits}, the RRF top-{K_VECTOR} {self.rrf_rescued}."
        )
        lo_c, hi_c = self.spread.get("cosine", (0.0, 0.0))
        lo_j, hi_j = self.spread.get("union+judge", (0.0, 0.0))
        lines.append(
            f"Per-vacancy strict P@10 (closed): cosine {lo_c:.0%}–{hi_c:.0%},"
            f" union+judge {lo_j:.0%}–{hi_j:.0%}. Judge: {self.config.model}"
            f" ({self.config.prompt_version}); {self.judged} pairs judged now, {self.cached} from"
            f" the cache, {self.failed} failed; {self.usage.calls} LLM calls,"
            f" {self.usage.prompt_tokens + self.usage.completion_tokens} tokens; quote gate"
            f" {self.gate.reason}."
        )
        return "\n".join(lines)

    def per_vacancy_table(self) -> str:
        """Strict · soft hits in each vacancy's top 10, every method, closed set and live pool."""
        head = " | ".join(f"{m} {s}" for s in ("closed", "live") for m in METHODS)
        lines = [f"| vacancy | {head} |", "|---" * (1 + 2 * len(METHODS)) + "|"]
        for vid in self.vacancies:
            cells = []
            for setting in ("closed", "live"):
                for method in METHODS:
                    h, n = self.precision[(setting, method, "strict")].per_vacancy.get(vid, (0, 0))
                    soft, _ = self.precision[(setting, method, "soft")].per_vacancy.get(vid, (0, 0))
                    cells.append(f"{h} · {soft} /{n}")
            lines.append(f"| {vid} | " + " | ".join(cells) + " |")
        return "\n".join(lines)


def evaluate_golden(
    gs: GoldenSet,
    llm: LLM,
    embedder: CachedEmbedder,
    derived_db: Path | str,
    *,
    reasoning_effort: str | None = None,
    workers: int = 5,
    run_id: str = "golden",
    vacancy_ids: Sequence[str] | None = None,
) -> GoldenReport:
    """Judge the golden pairs (cached ones are free) and compute every baseline's numbers."""
    config = judge_config(llm, reasoning_effort)
    vectors = golden_vectors(gs, embedder, QueryVectors(embedder, derived_db))
    cos = cosine_rankings(gs, vectors)
    bm = bm25_rankings(gs)
    by_id = gs.resume_by_id
    vacancies = [v for v in gs.vacancies if vacancy_ids is None or v.vacancy_id in vacancy_ids]
    labels = {v.vacancy_id: gs.labels.get(v.vacancy_id, {}) for v in vacancies}

    rankings: dict[tuple[str, str], dict[str, list[str]]] = {}
    pools: dict[str, dict[str, list[str]]] = {"vector": {}, "bm25": {}, "rrf": {}, "union": {}}
    judged = cached = failed = 0
    usage = LLMUsage()
    counts = []
    invisible = rescued = rrf_rescued = 0
    for v in vacancies:
        vid = v.vacancy_id
        lab = labels[vid]
        cos_ids = [r for r, _ in cos[vid]]
        bm_ids = [r for r, _ in bm[vid]]
        fused_all = [r for r, _ in rrf([cos_ids, bm_ids])]
        vec_top = cos[vid][:K_VECTOR]
        bm_top = bm[vid][:K_BM25]
        union = [str(e.id) for e in union_pool(vec_top, bm_top, K_VECTOR, K_BM25)]
        fused_live = [r for r, _ in rrf([[r for r, _ in vec_top], [r for r, _ in bm_top]])][
            :K_VECTOR
        ]
        pools["vector"][vid] = [r for r, _ in vec_top]
        pools["bm25"][vid] = [r for r, _ in bm_top]
        pools["rrf"][vid] = fused_live
        pools["union"][vid] = union
        fits = {r for r, label in lab.items() if label == "fit"}
        outside = fits - set(pools["vector"][vid])
        invisible += len(outside)
        rescued += len(outside & set(union))
        rrf_rescued += len(outside & set(fused_live))

        # judge every labelled pair (closed set ⊇ live pool), ties in cosine order
        closed_order = _labelled_in(cos_ids, lab)
        report = judge_pool(
            derived_db, llm, v, [by_id[r] for r in closed_order], config=config,
            budget=Budget(None), workers=workers, run_id=run_id,
        )  # fmt: skip
        judged += report.evaluated
        cached += report.cached
        failed += report.failed
        usage = _add(usage, report.usage)
        scores = cached_scores(derived_db, v, [by_id[r] for r in closed_order], config)
        counts.append(_counts_from(scores))

        def by_overall(order: Sequence[str], scores: Mapping[str, Any] = scores) -> list[str]:
            judged_ids = [r for r in order if r in scores]
            return sorted(judged_ids, key=lambda r: -int(scores[r]["overall"]))

        rankings.setdefault(("closed", "cosine"), {})[vid] = closed_order
        rankings.setdefault(("closed", "bm25"), {})[vid] = _labelled_in(
            bm_ids + [r for r in cos_ids if r not in set(bm_ids)], lab
        )
        rankings.setdefault(("closed", "rrf"), {})[vid] = _labelled_in(
            fused_all + [r for r in cos_ids if r not in set(fused_all)], lab
        )
        rankings.setdefault(("closed", "union+judge"), {})[vid] = by_overall(closed_order)
        rankings.setdefault(("live", "cosine"), {})[vid] = _labelled_in(pools["vector"][vid], lab)
        rankings.setdefault(("live", "bm25"), {})[vid] = _labelled_in(pools["bm25"][vid], lab)
        rankings.setdefault(("live", "rrf"), {})[vid] = _labelled_in(fused_live, lab)
        rankings.setdefault(("live", "union+judge"), {})[vid] = by_overall(_labelled_in(union, lab))

    precision = {}
    for (setting, method), ranked in rankings.items():
        for kind in ("strict", "soft"):
            precision[(setting, method, kind)] = overall_precision(
                ranked, labels, k=K, soft=kind == "soft"
            )
    recall = {
        f"vector top-{K_VECTOR}": overall_fit_recall(pools["vector"], labels),
        f"BM25 top-{K_BM25}": overall_fit_recall(pools["bm25"], labels),
        f"RRF top-{K_VECTOR}": overall_fit_recall(pools["rrf"], labels),
        f"union (vector {K_VECTOR} ∪ BM25 {K_BM25})": overall_fit_recall(pools["union"], labels),
    }
    spread = {}
    for method in ("cosine", "union+judge"):
        values = list(precision[("closed", method, "strict")].per_vacancy_values().values())
        spread[method] = (min(values), max(values)) if values else (0.0, 0.0)
    return GoldenReport(
        config=config, precision=precision, recall=recall, invisible_fits=invisible,
        rescued_fits=rescued, rrf_rescued=rrf_rescued, judged=judged, cached=cached,
        failed=failed, usage=usage, gate=gate_from_counts(sum_counts(counts)),
        pins=gs.pins, vacancies=[v.vacancy_id for v in vacancies], spread=spread,
    )  # fmt: skip


def _add(a: LLMUsage, b: LLMUsage) -> LLMUsage:
    return LLMUsage(
        a.calls + b.calls, a.prompt_tokens + b.prompt_tokens,
        a.completion_tokens + b.completion_tokens, a.failed_calls + b.failed_calls,
        a.seconds + b.seconds,
    )  # fmt: skip


def _counts_from(scores: Mapping[str, Mapping[str, Any]]) -> dict[str, int]:
    return {
        "mandatory_quotes": sum(int(s["mandatory_quotes"] or 0) for s in scores.values()),
        "mandatory_survived": sum(int(s["mandatory_survived"] or 0) for s in scores.values()),
    }


def save_report(derived_db: Path | str, report: GoldenReport, run_id: str = "") -> None:
    """Append an evaluation to ``judge_golden_evaluations`` (one JSON row per run)."""
    from datetime import UTC, datetime

    from hltm.warehouse import connect

    with connect(derived_db) as con:
        con.execute(
            "CREATE TABLE IF NOT EXISTS judge_golden_evaluations (evaluated_at TIMESTAMP,"
            " run_id VARCHAR, model VARCHAR, prompt_version VARCHAR, report VARCHAR)"
        )
        con.execute(
            "INSERT INTO judge_golden_evaluations VALUES (?, ?, ?, ?, ?)",
            [
                datetime.now(UTC).replace(tzinfo=None), run_id, report.config.model,
                report.config.prompt_version, json.dumps(report.as_dict(), ensure_ascii=False),
            ],
        )  # fmt: skip


# ------------------------------------------------------------------- quote relevance threshold


@dataclass(frozen=True)
class RelevanceMeasure:
    """Raw e5 cosines of requirement–quote pairs that share no key term, and the threshold."""

    supporting: list[float]  # the judge's own quote for the requirement, on fit pairs
    foreign: list[float]  # a quote the judge cited for another vacancy's requirement
    threshold: float
    accuracy: float  # balanced accuracy of the threshold on the two lists

    def summary(self) -> str:
        def q(values: list[float]) -> str:
            if not values:
                return "none"
            p = np.percentile(values, [10, 50, 90])
            return f"n={len(values)}, p10 {p[0]:.3f}, median {p[1]:.3f}, p90 {p[2]:.3f}"

        return (
            f"supporting quotes: {q(self.supporting)}\nforeign quotes: {q(self.foreign)}\n"
            f"threshold {self.threshold:.3f} (balanced accuracy {self.accuracy:.1%})"
        )


def measure_relevance(gs: GoldenSet, per_vacancy: int = 5, seed: int = 0) -> RelevanceMeasure:
    """How `quotes.RELEVANCE_THRESHOLD` was chosen: the offline judge's quotes on up to
    ``per_vacancy`` fit pairs per vacancy are *supporting* for their own requirement and
    *foreign* for a requirement of another vacancy; only pairs sharing no key term count (the
    others pass on terms); the threshold maximises balanced accuracy between the two."""
    from hltm.embeddings import prefetch_texts, similarities
    from hltm.judge.heuristic import judge_offline
    from hltm.judge.quotes import shared_terms

    rng = random.Random(seed)
    by_id = gs.resume_by_id
    cited: list[tuple[str, str, str]] = []  # (vacancy id, requirement, quote)
    for v in gs.vacancies:
        fits = sorted(r for r, label in gs.labels.get(v.vacancy_id, {}).items() if label == "fit")
        for rid in rng.sample(fits, k=min(per_vacancy, len(fits))):
            verdict = judge_offline(build_payload(v, by_id[rid]))
            for item in verdict["checklist"]:
                if item["quote"] and item["status"] == "met":
                    cited.append((v.vacancy_id, item["requirement"], item["quote"]))
    pairs: list[tuple[bool, str, str]] = []
    for vid, req, quote in cited:
        pairs.append((True, req, quote))
        others = [c for c in cited if c[0] != vid]
        if others:
            pairs.append((False, req, rng.choice(others)[2]))
    pairs = [p for p in pairs if shared_terms(p[1], p[2]) == 0]
    prefetch_texts([t for _, req, quote in pairs for t in (req, quote)])
    sims = [(ok, similarities(req, [quote])[0]) for ok, req, quote in pairs]
    pos = [s for ok, s in sims if ok]
    neg = [s for ok, s in sims if not ok]
    best = (0.0, 1.0)
    for cut in sorted({round(s, 3) for _, s in sims}):
        tpr = sum(s >= cut for s in pos) / len(pos) if pos else 0.0
        tnr = sum(s < cut for s in neg) / len(neg) if neg else 0.0
        if (tpr + tnr) / 2 > best[0]:
            best = ((tpr + tnr) / 2, cut)
    return RelevanceMeasure(pos, neg, best[1], best[0])

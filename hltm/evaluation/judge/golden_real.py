"""The real golden set: resumes and postings written by real people, labelled by a fixed rule.

Why a second set: the sample golden set measures the judge on the world its own generator
wrote, which flatters it. This set is built from ``realdata`` (livecareer resumes, LinkedIn
postings, hh.ru vacancies) that nobody here wrote.

**What is frozen** (``hltm/evaluation/golden/real/``), and what is not:

* ``spec.json`` — written by hand before any ranking was looked at: the vacancies (source
  row id, requirements read off the posting), the resume sampling rule and the labelling rule;
* ``labels.csv`` — the rule applied once: (vacancy, resume row id, label, resume category);
* ``vectors.npz`` — the embedding snapshot of the sampled resumes and the vacancy queries;
* ``manifest.json`` — freeze date, the SHA-256 of each source file, counts, the pins (cosine
  strict / soft P@10) and the SHA-256 of every frozen file.

The resume and posting *texts* are not copied into the repository (their licence is not
stated): they are read from the realdata folder at evaluation time, and the source hashes in
the manifest make sure they are the same files. Without that folder the set cannot be loaded,
and says so.

**Labelling rule** (``spec.json``): from the resume's category and its first-line title only —
*fit* when the category is one of the vacancy's categories and the title matches the vacancy's
title pattern, *borderline* when exactly one of the two holds or the category is a related one,
*miss* otherwise.

**The Indeed set** (``hltm/evaluation/golden/real-indeed/``, resumes of another layout) is built the same way
from ``resumes_indeed_ner.jsonl``: every resume with a human ``Designation`` span, labelled from
those spans (`label_by_titles`: *fit* when one matches the vacancy's ``fit_title``,
*borderline* when one matches its ``related_title``, *miss* otherwise).
"""

from __future__ import annotations

import csv
import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

from hltm.embeddings import CachedEmbedder
from hltm.evaluation.judge.golden import (
    GOLDEN_DIR,
    GoldenSet,
    K,
    cosine_pins,
    file_sha256,
    golden_vectors,
)
from hltm.evaluation.judge.golden_freeze import label_counts, write_manifest, write_snapshot
from hltm.evaluation.judge.titles import designation_spans
from hltm.judge.candidates import K_BM25, K_VECTOR
from hltm.judge.data import Requirement, Resume, Vacancy, resume_content_hash
from hltm.settings import REALDATA_SOURCES_HINT, realdata_dir

__all__ = [
    "INDEED_DIR",
    "REAL_DIR",
    "RealDataMissing",
    "default_realdata",
    "first_line_title",
    "freeze_real_golden",
    "label_by_titles",
    "label_pair",
    "load_real_golden",
]

REAL_DIR = GOLDEN_DIR / "real"
INDEED_DIR = GOLDEN_DIR / "real-indeed"
FROZEN_FILES = ("spec.json", "labels.csv", "vectors.npz")
_SAMPLE_SALT = "real-golden:"


class RealDataMissing(FileNotFoundError):
    """The realdata folder (or one of its files) is not where the real golden set reads it."""


def default_realdata() -> Path:
    """``$HLTM_REALDATA``, else ``../shared/realdata`` beside the repository (where CI has it)."""
    return realdata_dir()


def _source(realdata: Path, name: str) -> Path:
    path = realdata / name
    if not path.is_file():
        raise RealDataMissing(
            f"{path} not found: the real golden set reads its texts from the realdata folder"
            " (set HLTM_REALDATA or pass --realdata; default ../shared/realdata); "
            + REALDATA_SOURCES_HINT
        )
    return path


def _rows(path: Path) -> list[dict[str, str]]:
    csv.field_size_limit(1 << 30)
    with path.open(encoding="utf-8", newline="") as fh:
        return list(csv.DictReader(fh))


def first_line_title(text: str) -> str:
    """Line 1 of a livecareer resume: the person's own job title."""
    return (text or "").strip().split("\n", 1)[0].strip()


def label_pair(vacancy_spec: Mapping[str, Any], category: str, title: str) -> str:
    """The written labelling rule (see the module docstring) for one pair."""
    in_category = category in vacancy_spec["fit_categories"]
    titled = re.search(vacancy_spec["fit_title"], title, re.IGNORECASE) is not None
    if in_category and titled:
        return "fit"
    if in_category or titled or category in vacancy_spec.get("related_categories", ()):
        return "borderline"
    return "miss"


def _sample(resumes: list[dict[str, str]], rule: Mapping[str, Any]) -> list[dict[str, str]]:
    out: list[dict[str, str]] = []
    for category in rule["categories"]:
        rows = [r for r in resumes if r["Category"] == category]
        rows.sort(key=lambda r: hashlib.sha1((_SAMPLE_SALT + r["ID"]).encode()).hexdigest())
        out += rows[: int(rule["per_category"])]
    return out


def _resume(rid: str, text: str) -> Resume:
    digest = resume_content_hash({"resume_id": rid, "text": text, "language": "en"})
    return Resume(rid, text, digest, None, "en", "active", None)


def _vacancy(spec: Mapping[str, Any], posting: Mapping[str, str], source: str) -> Vacancy:
    if source == "postings_en":
        title, text = posting["title"], posting["description"]
    else:  # an hh.ru search item: the short requirement / responsibility texts it carries
        title = posting["name"]
        text = "\n".join(
            part
            for part in (
                posting.get("snippet_requirement"),
                posting.get("snippet_responsibility"),
                f"Опыт работы: {posting['experience_name']}"
                if posting.get("experience_name")
                else "",
            )
            if part
        )
    reqs = tuple(
        Requirement(f"{spec['vacancy_id']}-R{n:02d}", req, bool(mandatory))
        for n, (req, mandatory) in enumerate(spec["requirements"], start=1)
    )
    return Vacancy(spec["vacancy_id"], 1, title.strip(), text.strip(), reqs)


@dataclass(frozen=True)
class _Built:
    vacancies: list[Vacancy]
    resumes: list[Resume]
    categories: dict[str, str]  # resume id → category
    labels: dict[str, dict[str, str]]
    source_hashes: dict[str, str]


def label_by_titles(vacancy_spec: Mapping[str, Any], titles: Sequence[str]) -> str:
    """The Indeed set's written rule: fit when a marked title matches ``fit_title``,
    borderline when none does but one matches ``related_title``, miss otherwise."""

    def any_match(pattern: str) -> bool:
        return any(re.search(pattern, t, re.IGNORECASE) for t in titles)

    if any_match(vacancy_spec["fit_title"]):
        return "fit"
    if vacancy_spec.get("related_title") and any_match(vacancy_spec["related_title"]):
        return "borderline"
    return "miss"


def _indeed_rows(path: Path) -> list[tuple[str, str, list[str]]]:
    """(id ``in-<line number>``, text, marked titles) of every Indeed resume with a title."""
    out = []
    with path.open(encoding="utf-8") as fh:
        for n, raw in enumerate(fh):
            row = json.loads(raw)
            titles = [row["content"][a:b] for a, b in designation_spans(row)]
            if titles:
                out.append((f"in-{n}", row["content"], titles))
    return out


def _build(spec: Mapping[str, Any], realdata: Path) -> _Built:
    paths = {key: _source(realdata, name) for key, name in spec["sources"].items()}
    if paths["resumes"].suffix == ".jsonl":
        return _build_indeed(spec, paths)
    resume_rows = _sample(_rows(paths["resumes"]), spec["resume_sample"])
    vacancies = _vacancies(spec, paths)
    resumes = [_resume(f"lc-{r['ID']}", r["Resume_text"]) for r in resume_rows]
    categories = {f"lc-{r['ID']}": r["Category"] for r in resume_rows}
    labels = {
        v["vacancy_id"]: {
            f"lc-{r['ID']}": label_pair(v, r["Category"], first_line_title(r["Resume_text"]))
            for r in resume_rows
        }
        for v in spec["vacancies"]
    }
    return _Built(vacancies, resumes, categories, labels, _hashes(paths))


def _hashes(paths: Mapping[str, Path]) -> dict[str, str]:
    return {path.name: file_sha256(path) for path in paths.values()}


def _vacancies(spec: Mapping[str, Any], paths: Mapping[str, Path]) -> list[Vacancy]:
    by_source = {
        "postings_en": {r["job_id"]: r for r in _rows(paths["postings_en"])},
        "vacancies_ru": {r["id"]: r for r in _rows(paths["vacancies_ru"])},
    }
    vacancies = []
    for v in spec["vacancies"]:
        posting = by_source[v["source"]].get(v["row_id"])
        if posting is None:
            raise ValueError(f"{v['vacancy_id']}: row {v['row_id']} not in {v['source']}")
        vacancies.append(_vacancy(v, posting, v["source"]))
    return vacancies


def _build_indeed(spec: Mapping[str, Any], paths: Mapping[str, Path]) -> _Built:
    rows = _indeed_rows(paths["resumes"])
    labels = {
        v["vacancy_id"]: {rid: label_by_titles(v, titles) for rid, _, titles in rows}
        for v in spec["vacancies"]
    }
    categories = {rid: " | ".join(dict.fromkeys(titles)) for rid, _, titles in rows}
    resumes = [_resume(rid, text) for rid, text, _ in rows]
    return _Built(_vacancies(spec, paths), resumes, categories, labels, _hashes(paths))


def freeze_real_golden(
    embedder: CachedEmbedder,
    out_dir: Path | str = REAL_DIR,
    realdata: Path | str | None = None,
    frozen_on: date | None = None,
    force: bool = False,
) -> dict[str, Any]:
    """Apply ``spec.json`` to the realdata files; write labels, vectors and the manifest."""
    out = Path(out_dir)
    if (out / "manifest.json").exists() and not force:
        raise FileExistsError(f"{out} already holds a frozen real golden set (use force)")
    spec = json.loads((out / "spec.json").read_text(encoding="utf-8"))
    built = _build(spec, Path(realdata) if realdata else default_realdata())
    with (out / "labels.csv").open("w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow(["vacancy_id", "resume_id", "label", "category"])
        for vid, labels in built.labels.items():
            for rid, label in labels.items():
                writer.writerow([vid, rid, label, built.categories[rid]])
    passage_chars = int(spec["resume_sample"]["passage_chars"])
    gs = GoldenSet(
        out, {"passage_chars": passage_chars}, built.vacancies, built.resumes, built.labels, {}
    )
    vectors = golden_vectors(gs, embedder, use_snapshot=False)
    write_snapshot(out, gs, vectors, embedder.model_name)
    counts = label_counts(built.labels)
    manifest = {
        "name": spec["name"],
        "frozen_on": (frozen_on or date.today()).isoformat(),
        "sources": built.source_hashes,
        "labelling_rule": spec["labelling_rule"],
        "counts": {
            "vacancies": len(built.vacancies),
            "resumes": len(built.resumes),
            "pairs": sum(len(v) for v in built.labels.values()),
            **counts,
        },
        "embedding_model": embedder.model_name,
        "passage_chars": passage_chars,
        "passage_tokens": gs.passage_tokens,
        "k": K,
        "pool": {"k_vector": K_VECTOR, "k_bm25": K_BM25},
        "pins": cosine_pins(gs, vectors),
        "files": {name: file_sha256(out / name) for name in FROZEN_FILES},
    }
    write_manifest(out, manifest)
    return manifest


def load_real_golden(
    path: Path | str = REAL_DIR, realdata: Path | str | None = None, verify: bool = True
) -> GoldenSet:
    """The frozen real set with its texts read from ``realdata``.

    With ``verify``: every frozen file and every source file must match the manifest's
    SHA-256, and the labelling rule applied to the sources must give the frozen labels.
    """
    path = Path(path)
    manifest_path = path / "manifest.json"
    if not manifest_path.exists():
        raise FileNotFoundError(
            f"no real golden set in {path}: run `hltm judge golden freeze-real`"
        )
    manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    spec = json.loads((path / "spec.json").read_text(encoding="utf-8"))
    source_dir = Path(realdata) if realdata else default_realdata()
    if verify:
        for name, digest in manifest["files"].items():
            if file_sha256(path / name) != digest:
                raise ValueError(f"hltm/evaluation/golden/real/{name} changed since the freeze")
        for name, digest in manifest["sources"].items():
            if file_sha256(_source(source_dir, name)) != digest:
                raise ValueError(f"{source_dir / name} is not the file the set was frozen from")
    built = _build(spec, source_dir)
    frozen: dict[str, dict[str, str]] = {}
    with (path / "labels.csv").open(encoding="utf-8", newline="") as fh:
        for row in csv.DictReader(fh):
            frozen.setdefault(row["vacancy_id"], {})[row["resume_id"]] = row["label"]
    if verify and frozen != built.labels:
        raise ValueError("the labelling rule no longer gives the frozen labels.csv")
    return GoldenSet(path, manifest, built.vacancies, built.resumes, frozen, {})

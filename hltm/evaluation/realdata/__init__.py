"""Evaluations on public real data this project did not generate (`../shared/realdata/`).

Each loads a real set into a fresh data directory as ordinary sources (the free text only: the
structured columns stay out and serve as the reference), runs the real ingest, memory build and
query path on it, and scores the result beside baselines.

* `postings` — facet extraction precision / recall / F1 per field on LinkedIn (EN) and hh.ru
  (RU) postings, against their structured columns;
* `locomo` — conversation retrieval on LoCoMo: evidence-session recall of retrieved and cited
  projects, answer Token-F1 and leakage, for HLTM beside plain vector RAG over the raw turns.
"""

from __future__ import annotations

import hashlib
import json
import re
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from hltm.memory import RefreshReport, builder_from_settings
from hltm.settings import REALDATA_SOURCES_HINT, Settings, realdata_dir
from hltm.sources.ingest import ingest_directory
from hltm.sources.report import IngestReport


def realdata_file(name: str, directory: Path | str | None = None) -> Path:
    """A file of the real-data directory, or a clear error naming where it was looked for."""
    path = Path(directory or realdata_dir()) / name
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} not found: the real-data evaluations read ../shared/realdata/ beside the "
            "repository (or $HLTM_REALDATA, or the directory given with --data); "
            + REALDATA_SOURCES_HINT
        )
    return path


@contextmanager
def scratch_settings(base: Settings, keep: Path | None = None) -> Iterator[Settings]:
    """`base` on a fresh data directory (a temporary one unless `keep` is given; a kept one
    also keeps its embedding cache, so a second run re-embeds nothing)."""
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        yield replace(base, data_dir=keep.resolve(), chroma_host=None)
        return
    with tempfile.TemporaryDirectory(prefix="hltm-realdata-") as tmp:
        yield replace(base, data_dir=Path(tmp), chroma_host=None)


def ingest_rows(settings: Settings, tables: dict[str, list[dict[str, Any]]]) -> IngestReport:
    """Write each table as JSONL and load it through the ordinary ingest (all rows must load)."""
    with tempfile.TemporaryDirectory(prefix="hltm-realdata-src-") as tmp:
        for name, rows in tables.items():
            with (Path(tmp) / f"{name}.jsonl").open("w", encoding="utf-8") as out:
                for row in rows:
                    out.write(json.dumps(row, ensure_ascii=False) + "\n")
        report = ingest_directory(tmp, settings.sources_db)
    if report.quarantined:
        raise ValueError(f"real data did not load cleanly: {report.summary()}")
    return report


def build_memory(settings: Settings) -> RefreshReport:
    """The whole memory tree of the loaded sources, built from scratch with the configured
    models (a kept directory's old nodes go first: the extractors' code is not part of a node's
    version, and an evaluation measures the code as it is)."""
    builder = builder_from_settings(settings)
    builder.delete(sorted(builder.store.built()))
    return builder.full_build()


def slug(text: str, fallback: str) -> str:
    """A stable ASCII id fragment for a name (vector collections are named after contract ids,
    so a Cyrillic name gets its readable ASCII part plus a short hash of the whole)."""
    words = re.findall(r"[a-z0-9]+", text.casefold())
    digest = hashlib.sha1(text.encode("utf-8")).hexdigest()[:8]
    return ("-".join(words)[:32] + "-" + digest).strip("-") if text else fallback

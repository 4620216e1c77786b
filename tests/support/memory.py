"""The memory tree's test world: the ingested sample sources, a fresh memory on them, and the
Dagster harness that runs the memory assets and the sensor on a test's own stores."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path
from typing import Any

import dagster as dg
import numpy as np
import pytest
from dagster._core.storage.tags import RUN_KEY_TAG

from hltm.embeddings import CachedEmbedder, EmbeddingStats
from hltm.memory import MemoryConfig, builder_from_settings
from hltm.memory.planner import memory_partitions
from hltm.settings import Settings
from hltm.sources.ingest import ingest_directory
from hltm_dagster.defs.memory.assets import MEMORY_ASSETS, MEMORY_CHECKS, MEMORY_JOBS, refresh_tags
from hltm_dagster.defs.memory.sensors import source_changes
from hltm_dagster.defs.sources.assets import source_tables
from hltm_dagster.resources import MemoryTreeResource, build_resources


@pytest.fixture(scope="session")
def ingested_sources(world_files: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The small shared world ingested once; each test gets a copy of the file."""
    path = tmp_path_factory.mktemp("memory-sources") / "sources.duckdb"
    report = ingest_directory(world_files, path)
    assert report.quarantined == 0, report.summary()
    return path


@pytest.fixture
def memory_world(settings: Settings, ingested_sources: Path) -> Settings:
    """`memory_world` without re-ingesting: a fresh data directory with a copy of the sources."""
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    shutil.copy(ingested_sources, settings.sources_db)
    return settings


def memory_resources(settings: Settings, **tree: Any) -> dict[str, Any]:
    return build_resources(settings, memory_tree=MemoryTreeResource(**tree))


def memory_definitions(settings: Settings, **tree: Any) -> dg.Definitions:
    return dg.Definitions(
        assets=[source_tables, *MEMORY_ASSETS],
        asset_checks=MEMORY_CHECKS,
        jobs=MEMORY_JOBS,
        sensors=[source_changes],
        resources=memory_resources(settings, **tree),
    )


def make_harness(settings: Settings, **tree: Any) -> Harness:
    return Harness(memory_definitions(settings, **tree), memory_resources(settings, **tree))


class Harness:
    """Drives the sensor like the daemon does: apply partition requests, launch the run."""

    def __init__(self, defs: dg.Definitions, resources: dict[str, Any]) -> None:
        self.defs = defs
        self.resources = resources
        self.instance = dg.DagsterInstance.ephemeral()
        self.cursor: str | None = None

    def tick(self) -> dg.SensorResult | dg.SkipReason:
        with dg.build_sensor_context(
            instance=self.instance, cursor=self.cursor, resources=self.resources
        ) as context:
            result = source_changes(context)
            if context.cursor_updated:  # `update_cursor` beside a SkipReason
                self.cursor = context.cursor
        if isinstance(result, dg.SensorResult):
            self.cursor = result.cursor or self.cursor
            for request in result.dynamic_partitions_requests or []:
                if isinstance(request, dg.AddDynamicPartitionsRequest):
                    self.instance.add_dynamic_partitions(
                        request.partitions_def_name, list(request.partition_keys)
                    )
                else:
                    for key in request.partition_keys:
                        self.instance.delete_dynamic_partition(request.partitions_def_name, key)
        return result

    def run(self, request: dg.RunRequest) -> dg.ExecuteInProcessResult:
        """The requested run (a range of memory partitions), tagged with its run key as the
        daemon tags it."""
        job = self.defs.resolve_job_def(request.job_name or "refresh_memory_tree")
        return job.execute_in_process(
            instance=self.instance,
            raise_on_error=False,
            tags={**request.tags, RUN_KEY_TAG: request.run_key or ""},
        )

    def contracts(self, request: dg.RunRequest) -> list[str]:
        """The memory partitions (contracts) a requested run covers, in the partitions' order."""
        order = list(self.instance.get_dynamic_partitions("contracts"))
        start = order.index(request.tags["dagster/asset_partition_range_start"])
        return order[start : order.index(request.tags["dagster/asset_partition_range_end"]) + 1]

    def tick_and_run(self) -> tuple[dg.SensorResult | dg.SkipReason, list[Any]]:
        result = self.tick()
        runs = []
        if isinstance(result, dg.SensorResult):
            for request in result.run_requests or []:
                runs.append(self.run(request))
        return result, runs


def refresh_all(
    defs: dg.Definitions, instance: dg.DagsterInstance, settings: Settings, **run: Any
) -> dg.ExecuteInProcessResult:
    """A run of `refresh_memory_tree` over every contract's partition (as `hltm refresh` runs
    it), `run`: more `execute_in_process` arguments."""
    (tags,) = refresh_tags(instance, memory_partitions(settings.sources_db, settings.derived_db))
    job = defs.resolve_job_def("refresh_memory_tree")
    return job.execute_in_process(instance=instance, tags=tags, **run)


def level_metadata(result: dg.ExecuteInProcessResult) -> dict[tuple[str, str], dict[str, Any]]:
    """(asset, contract partition) → the metadata values of the run's materialization."""
    return {
        (e.asset_key.to_user_string(), str(e.partition)): {
            k: v.value for k, v in e.metadata.items()
        }
        for e in (
            ev.event_specific_data.materialization  # type: ignore[union-attr]
            for ev in result.get_asset_materialization_events()
        )
    }


def rebuilt(result: dg.ExecuteInProcessResult) -> list[str]:
    """The nodes the run rebuilt, as each level's materialization of each contract lists them."""
    return sorted(n for meta in level_metadata(result).values() for n in meta["rebuilt"])


class HashingEmbedder:
    """Deterministic feature hashing of words into 384 dimensions.

    The property under test is the pipeline's (same sources → same bytes), not the model's; the
    bundled e5 model costs ~20–50 ms per string on two cores, which a 3-seed random walk cannot
    afford in a test budget. The Dagster and deletion tests use the real model."""

    model_name = "test-feature-hashing-384"
    dim = 384

    def _one(self, text: str) -> np.ndarray:
        vector = np.zeros(self.dim, dtype=np.float32)
        for word in re.findall(r"\w+", text.lower()):
            digest = hashlib.sha1(word.encode()).digest()
            vector[int.from_bytes(digest[:4], "little") % self.dim] += (
                1.0 if digest[4] & 1 else -1.0
            )
        norm = float(np.linalg.norm(vector))
        return vector / norm if norm else vector

    def passages(self, texts: list[str]) -> np.ndarray:
        return np.stack([self._one(t) for t in texts]) if texts else np.zeros((0, self.dim))

    def query(self, text: str) -> np.ndarray:
        return self._one(text)


class MemoEmbedder(CachedEmbedder):
    """`CachedEmbedder`'s interface with an in-memory cache only (no DuckDB round trips)."""

    def __init__(self, inner: HashingEmbedder) -> None:  # noqa: D107 - no cache file on purpose
        self.inner = inner  # type: ignore[assignment]
        self.model_name = inner.model_name
        self.dim = inner.dim
        self.stats = EmbeddingStats()
        self._vectors: dict[str, np.ndarray] = {}

    def passages(self, texts: list[str]) -> np.ndarray:
        todo = [t for t in dict.fromkeys(texts) if t not in self._vectors]
        if todo:
            self._vectors.update(zip(todo, self.inner.passages(todo), strict=True))
            self.stats.calls += len(todo)
        self.stats.cache_hits += len(texts) - len(todo)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([self._vectors[t] for t in texts]).astype(np.float32)


def hashing_builder(settings: Settings, config: MemoryConfig):  # type: ignore[no-untyped-def]
    """A memory builder with the hashing embedder: fast, and exact between runs."""
    return builder_from_settings(settings, config=config, embedder=MemoEmbedder(HashingEmbedder()))


def one_project_per_contract(src: Path, contracts: list[str]) -> Path:
    """Source files of the smallest tree per contract: one seat, one project, one posting (seat
    `s<i>`, project `p<i>`, document `d<i>` under the i-th contract)."""
    tables = {
        "contracts": [{"contract_id": c, "name": f"Org {c}"} for c in contracts],
        "seats": [
            {"seat_id": f"s{i}", "contract_id": c, "recruiter_name": "Ann"}
            for i, c in enumerate(contracts)
        ],
        "projects": [
            {
                "project_id": f"p{i}",
                "seat_id": f"s{i}",
                "title": "Backend engineer",
                "status": "open",
            }
            for i in range(len(contracts))
        ],
        "project_documents": [
            {
                "document_id": f"d{i}",
                "project_id": f"p{i}",
                "kind": "job_description",
                "text": "Senior backend engineer in Berlin, hybrid, Python and PostgreSQL.",
            }
            for i in range(len(contracts))
        ],
    }
    src.mkdir()
    for table, rows in tables.items():
        text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
        (src / f"{table}.jsonl").write_text(text, encoding="utf-8")
    return src

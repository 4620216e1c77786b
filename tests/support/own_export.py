"""The README's own-export example (`examples/own-export`: one contract, two recruiters, four
projects, no resumes) with its memory really built (offline backend, bundled e5), once per test
session: small enough to build in seconds, real enough that its questions are a user's."""

from __future__ import annotations

from pathlib import Path

import pytest

from hltm.settings import E5_ONNX_BACKEND, Settings
from tests.support import REPO

OWN_EXPORT = REPO / "examples" / "own-export"
_BUILT: dict[str, Settings] = {}


def build_own_export(data: Path) -> Settings:
    if "own" in _BUILT:
        return _BUILT["own"]
    from hltm.memory import builder_from_settings
    from hltm.sources.ingest import ingest_directory

    settings = Settings.from_env(
        data_dir=data, llm_backend="offline", embeddings_backend=E5_ONNX_BACKEND, chroma_host=None
    )
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    assert ingest_directory(OWN_EXPORT, settings.sources_db).quarantined == 0
    builder_from_settings(settings).full_build().raise_for_failures()
    _BUILT["own"] = settings
    return settings


@pytest.fixture(scope="session")
def own_export(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    """Offline settings on the built own-export world (read it; copy it to change it)."""
    return build_own_export(tmp_path_factory.mktemp("own-export") / "data")


@pytest.fixture(scope="session")
def own_engine(own_export: Settings):  # type: ignore[no-untyped-def]
    from hltm.query.engine import QueryEngine

    return QueryEngine(own_export, log_queries=False)

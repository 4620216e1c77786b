"""Shared fixtures: a temporary data directory, a small and a tiny generated world, and how
`--dist loadgroup` (pyproject) splits the suite between the xdist workers."""

from __future__ import annotations

import itertools
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from hltm.embeddings import CachedEmbedder, OnnxE5Embedder
from hltm.judge.candidates import QueryVectors
from hltm.judge.data import load_resumes, load_vacancies
from hltm.settings import (
    DATABASE_URL_ENV,
    E5_ONNX_BACKEND,
    REALDATA_SOURCES_HINT,
    REQUIRE_POSTGRES_ENV,
    REQUIRE_REALDATA_ENV,
    Settings,
    realdata_dir,
)
from hltm.sources.ingest import ingest_directory
from hltm_dagster import ACCEPTED_BETA_WARNINGS
from hltm_devkit.generator import WorldSize, generate_world
from hltm_devkit.postgres import LocalPostgres, PostgresUnavailable
from tests.support.shared_vectors import SharedVectors

# Small enough for fast tests, big enough for every kind of node, trap and label.
SMALL_WORLD = WorldSize(
    contracts=2, seats_per_contract=2, projects_per_seat=3, resumes=160, vacancies=19
)
# The judge's Dagster tests: a few vacancies, enough resumes for pools and a deferring budget.
TINY_WORLD = WorldSize(
    contracts=1, seats_per_contract=2, projects_per_seat=2, resumes=36, vacancies=3
)

# Session worlds expensive to build (memory trees, embedded resumes): every file using one runs
# on one worker, so each is built and embedded once per run, not once per worker. They are the
# heaviest work units, so they start first, and the rest fills in around them.
SHARED_WORLDS = ("built_world", "tiny_world", "own_export")
# The small world's sources, on which each memory test builds its own tree: cheap to ingest in
# each worker, and the tree's e5 vectors are handed from worker to worker (SharedVectors), so
# each file using them is a unit of its own. Ranked just after the first two worlds (the
# longest work first), they keep both workers busy to the end instead of all on one.
SPREAD_WORLDS = ("ingested_sources",)


def require_realdata(*names: str) -> Path:
    """The real-data folder holding `names`; without them the test skips with one line naming
    the folder and where the sets come from (fails instead under `HLTM_REQUIRE_REALDATA=1`)."""
    folder = realdata_dir()
    missing = [name for name in names if not (folder / name).is_file()]
    if missing:
        message = (
            f"needs the public real data: {', '.join(missing)} not in {folder} (set HLTM_REALDATA"
            f" to the folder; {REALDATA_SOURCES_HINT})"
        )
        if os.environ.get(REQUIRE_REALDATA_ENV) == "1":
            pytest.fail(f"{REQUIRE_REALDATA_ENV}=1 and the test {message}", pytrace=False)
        pytest.skip(message)
    return folder


@pytest.fixture(scope="session")
def world_files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("world")
    generate_world(out, seed=11, size=SMALL_WORLD)
    return out


@pytest.fixture(scope="session")
def tiny_world(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Path:
    """The tiny world's source files, its resume and vacancy vectors in the process-wide memo
    (warmed from pytest's cache directory, so a second session embeds nothing)."""
    out = tmp_path_factory.mktemp("tiny-world")
    generate_world(out, seed=5, size=TINY_WORLD)
    pytest_cache = getattr(request.config, "cache", None)  # absent with -p no:cacheprovider
    cache_dir = (
        Path(pytest_cache.mkdir("hltm-judge-embeddings"))
        if pytest_cache is not None
        else tmp_path_factory.mktemp("embeddings")
    )
    cache = cache_dir / "embeddings.duckdb"
    scratch = tmp_path_factory.mktemp("tiny-sources") / "sources.duckdb"
    ingest_directory(out, scratch)
    embedder = CachedEmbedder(OnnxE5Embedder(), cache)
    embedder.passages([r.passage() for r in load_resumes(scratch)])
    queries = QueryVectors(embedder, cache)
    for v in load_vacancies(scratch):
        queries.get(v.vector_query())
    return out


@pytest.fixture
def settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """Offline settings on a fresh data directory and its own Dagster home, the pair a deployment
    keeps together (also exported, for code that reads the env)."""
    monkeypatch.setenv("HLTM_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    monkeypatch.setenv("HLTM_LLM_BACKEND", "offline")
    monkeypatch.setenv("HLTM_EMBEDDINGS", E5_ONNX_BACKEND)
    monkeypatch.delenv("CHROMA_HOST", raising=False)
    return Settings.from_env()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[LocalPostgres]:
    """This machine's PostgreSQL, started once for the session's server-profile tests (group
    `postgres`: one worker starts it). Without it they skip with what to install, and fail
    instead under `HLTM_REQUIRE_POSTGRES=1` (CI)."""
    server = LocalPostgres(durable=False)
    try:
        server.start()
    except PostgresUnavailable as err:
        if os.environ.get(REQUIRE_POSTGRES_ENV) == "1":
            pytest.fail(f"{REQUIRE_POSTGRES_ENV}=1 and PostgreSQL cannot start: {err}")
        pytest.skip(f"the server profile needs PostgreSQL: {err}")
    yield server
    server.stop()
    if server.root is not None:
        shutil.rmtree(server.root, ignore_errors=True)


@pytest.fixture
def server_profile(
    postgres_server: LocalPostgres, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Settings]:
    """`settings` on the server profile: its stores in a database of their own (dropped after)."""
    name = f"t{os.getpid()}_{next(_databases)}"
    url = postgres_server.create_database(name)
    monkeypatch.setenv(DATABASE_URL_ENV, url)
    yield Settings.from_env()
    postgres_server.drop_database(name)


_databases = itertools.count()


@pytest.fixture(scope="session")
def golden_settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    """Offline settings on one data directory for the tests that judge the frozen golden set
    (group `golden-set`): the second to judge it reads the score cache the first filled, as a
    rerun does, instead of judging every pair again."""
    return Settings.from_env(
        data_dir=tmp_path_factory.mktemp("golden") / "data",
        llm_backend="offline",
        embeddings_backend=E5_ONNX_BACKEND,
        chroma_host=None,
    )


@pytest.fixture
def loaded_world(world_files: Path, settings: Settings) -> Settings:
    """`settings` whose sources hold the small world."""
    report = ingest_directory(world_files, settings.sources_db)
    assert report.quarantined == 0, report.summary()
    return settings


def pytest_configure(config: pytest.Config) -> None:
    """pytest resets warning filters around each test: it gets the code location's accepted
    beta warnings (`hltm_dagster/__init__.py`) as its own filters."""
    for message in ACCEPTED_BETA_WARNINGS:
        config.addinivalue_line("filterwarnings", f"ignore:{message}:dagster.BetaWarning")


def _shared_vectors(config: pytest.Config) -> SharedVectors | None:
    """This xdist worker's exchange of e5 vectors with the others (None without xdist)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker is None:
        return None
    found = config.stash.get(_SHARED_VECTORS, None)
    if found is None:
        run_temp = config._tmp_path_factory.getbasetemp().parent  # type: ignore[attr-defined]
        found = config.stash[_SHARED_VECTORS] = SharedVectors(run_temp / "e5-vectors", worker)
    return found


_SHARED_VECTORS = pytest.StashKey[SharedVectors]()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Before a test's fixtures: the vectors the other workers computed so far."""
    if (shared := _shared_vectors(item.config)) is not None:
        shared.receive()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Iterator[None]:
    """After a test's fixtures are gone (monkeypatched memos restored): what it computed."""
    try:
        return (yield)
    finally:
        if (shared := _shared_vectors(item.config)) is not None:
            shared.publish()


def _group(item: pytest.Item, sharing: dict[Path, str]) -> str:
    marker = item.get_closest_marker("xdist_group")
    if marker is not None:
        return str(marker.args[0] if marker.args else marker.kwargs["name"])
    return sharing.get(item.path, item.nodeid.split("::", 1)[0])


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Work units for `--dist loadgroup`: a file's tests stay on one worker, as with `loadfile`
    (its module fixtures are built once), every file using one of the `SHARED_WORLDS` joins that
    world's unit, and files marked with one `xdist_group` share a worker (and the process's
    embedding memo). The shared worlds' units come first (the files of the `SPREAD_WORLDS` after
    the first two), then the marked groups (also built around something expensive), then the
    files in their order (`--no-loadscope-reorder` keeps it), so the long units are under way
    early and the short ones even out the end."""
    sharing: dict[Path, str] = {}
    spread: set[Path] = set()
    for item in items:
        for world in SHARED_WORLDS:
            if world in item.fixturenames:
                sharing.setdefault(item.path, world.replace("_", "-"))
        if any(world in item.fixturenames for world in SPREAD_WORLDS):
            spread.add(item.path)
    groups = {item.nodeid: _group(item, sharing) for item in items}
    worlds = [world.replace("_", "-") for world in SHARED_WORLDS]
    worlds.insert(2, "spread")  # after the first two worlds

    def rank(item: pytest.Item) -> int:
        group = groups[item.nodeid]
        if group in worlds:
            return worlds.index(group)
        if item.path in spread and item.get_closest_marker("xdist_group") is None:
            return worlds.index("spread")
        return len(worlds) + (item.get_closest_marker("xdist_group") is None)

    items.sort(key=rank)
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(groups[item.nodeid]))


def pytest_collection_finish(session: pytest.Session) -> None:
    """On an xdist worker, every test must carry its group in its node id, or `loadgroup`
    scatters the groups and each worker rebuilds the shared worlds without a word (pytest 9.2's
    node ids dropped the suffix: pytest-dev/pytest-xdist#1386)."""
    if not getattr(session.config.option, "loadgroup", False):
        return
    lost = [item.nodeid for item in session.items if "@" not in item.nodeid]
    if lost:
        raise pytest.UsageError(
            f"--dist loadgroup: {len(lost)} tests lost their xdist group (first: {lost[0]}); "
            "this pytest / pytest-xdist pair ignores groups (pytest-dev/pytest-xdist#1386)"
        )


@pytest.fixture
def cli_jobs_from(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """`use(defs)`: the CLI's runs (`hltm_cli.dagster_runs.run_job`) execute `defs`' jobs in process on
    the persistent instance, on this test's stores; the code location's module would bind the
    first test's stores for the whole session. `test_cli_runs` covers the location's origin."""
    from hltm_dagster import instance as dagster_instance

    def use(defs) -> None:  # type: ignore[no-untyped-def]
        monkeypatch.setattr(
            dagster_instance, "located_job", lambda name: (defs.resolve_job_def(name), None)
        )
        monkeypatch.setattr(
            dagster_instance,
            "execute_located",
            lambda instance, job, origin, config, tags, selection=None: job.execute_in_process(
                instance=instance,
                run_config=config,
                tags=tags,
                asset_selection=selection,
                raise_on_error=False,
            ),
        )

    return use

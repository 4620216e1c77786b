"""The built world on the server profile: its stores copied into PostgreSQL by `hltm
migrate-to-server`, served from a data dir that holds no DuckDB file at all (only the Chroma
index), so every read below is PostgreSQL's.

* every identity gets the answer it gets on the embedded profile, and sees nothing outside its
  subtree; the leakage test finds no leak;
* the HTTP endpoint answers every request while a writer holds the memory tree's rows in an
  open transaction (a DuckDB file answers 503 to readers of other processes meanwhile), and a
  seat's token still reads its own subtree only;
* once a project's deletion returned, no file of the database (tables, indexes, TOAST, the
  planner's statistics) holds a byte of its id, and its token is refused.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient

from hltm.deletion import delete_everywhere
from hltm.evaluation.memory.baselines import Baselines, RawCorpus
from hltm.evaluation.memory.leakage import leakage_questions, run_leakage
from hltm.query.access import create_token, identity_for_token
from hltm.query.engine import QueryEngine
from hltm.query.log import flush_pending
from hltm.query.scope import Identity
from hltm.serving.http import create_app
from hltm.settings import DATABASE_URL_ENV, Settings
from hltm_cli import main
from hltm_devkit.postgres import LocalPostgres
from tests.support.query import BuiltWorld, built_world, engine, private_copy  # noqa: F401

QUESTIONS = ("Where do I usually hire?", "Which projects are for a solution architect?")


@pytest.fixture(scope="module")
def server_world(
    built_world: BuiltWorld,  # noqa: F811
    postgres_server: LocalPostgres,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Settings]:
    copy = private_copy(built_world, tmp_path_factory.mktemp("server-world"))
    url = postgres_server.create_database("server_world")
    with pytest.MonkeyPatch.context() as env:
        env.setenv(DATABASE_URL_ENV, url)
        env.setenv("HLTM_DATA_DIR", str(copy.data_dir))
        migrated = CliRunner().invoke(main, ["migrate-to-server"])
        again = CliRunner().invoke(main, ["migrate-to-server"])
    assert migrated.exit_code == 0, migrated.output
    assert "sources" in migrated.output and "derived" in migrated.output
    assert again.exit_code == 1 and "--replace" in again.output  # never mixes two stores
    for store in copy.data_dir.glob("*.duckdb*"):
        store.unlink()
    yield replace(copy, database_url=url)
    postgres_server.drop_database("server_world")


@pytest.fixture
def on_server(server_world: Settings, monkeypatch: pytest.MonkeyPatch) -> Settings:
    monkeypatch.setenv(DATABASE_URL_ENV, server_world.database_url or "")
    return server_world


def test_every_identity_answers_as_embedded_and_nothing_leaks(
    built_world: BuiltWorld,  # noqa: F811
    engine: QueryEngine,  # noqa: F811
    on_server: Settings,
) -> None:
    corpus = RawCorpus.load(built_world.settings.sources_db)
    identities = built_world.identities(projects=2)
    embedded: dict[tuple[Identity, str], tuple[str, list[str]]] = {}
    with pytest.MonkeyPatch.context() as env:
        env.delenv(DATABASE_URL_ENV)
        for i, identity in enumerate(identities):
            question = QUESTIONS[i % 2]
            result = engine.ask(identity, question, log=False)
            embedded[(identity, question)] = (result.answer, result.citations)
    server = QueryEngine(on_server)
    for (identity, question), expected in embedded.items():
        result = server.ask(identity, question, log=False)
        assert (result.answer, result.citations) == expected, (identity, question)
        seen = set(result.citations) | set(result.context_ids)
        assert not [n for n in seen if not corpus.node_in_scope(identity, n)]
    questions = leakage_questions(built_world.ground_truth, corpus, per_identity=1)
    report = run_leakage(server, Baselines(server, corpus), corpus, questions)
    ours = report.get("HLTM (subtree filter)", "all")
    assert ours.queries > 0 and (ours.query_wise, ours.entity_wise) == (0.0, 0.0)


def test_serving_never_waits_on_a_writer_and_keeps_each_seat_in_its_subtree(
    built_world: BuiltWorld,  # noqa: F811
    on_server: Settings,
) -> None:
    seats = built_world.seats()[:2]
    tokens = {seat: create_token(on_server.derived_db, Identity("seat", seat))[1] for seat in seats}
    foreign_project = next(p for p in built_world.projects() if not p.startswith(seats[0]))

    def ask(seat: str) -> tuple[int, set[str]]:
        response = client.post(
            "/v1/ask",
            json={"question": QUESTIONS[0]},
            headers={"Authorization": f"Bearer {tokens[seat]}"},
        )
        body = response.json()
        return response.status_code, set(body.get("citations", []))

    with (
        TestClient(create_app(QueryEngine(on_server))) as client,
        psycopg.connect(on_server.database_url or "") as writer,
    ):
        # A refresh's write, held open for the whole burst: every node row is locked.
        writer.execute("UPDATE derived.memory_nodes SET label = label")
        with ThreadPoolExecutor(4) as pool:
            results = list(pool.map(ask, [seats[i % 2] for i in range(24)]))
        widened = client.post(
            "/v1/ask",
            json={"question": QUESTIONS[0], "project": foreign_project},
            headers={"Authorization": f"Bearer {tokens[seats[0]]}"},
        )
    assert [status for status, _ in results] == [200] * 24
    for i, (_, citations) in enumerate(results):
        seat = seats[i % 2]
        assert citations and all(seat in c for c in citations), (seat, citations)
    assert widened.status_code == 403


def test_the_migration_names_what_it_copied(server_world: Settings, tmp_path: Path) -> None:
    assert not list(server_world.data_dir.glob("*.duckdb"))
    with pytest.MonkeyPatch.context() as env:
        env.delenv(DATABASE_URL_ENV, raising=False)
        env.setenv("HLTM_DATA_DIR", str(tmp_path))
        unset = CliRunner().invoke(main, ["migrate-to-server"])
    assert unset.exit_code == 1 and "HLTM_DATABASE_URL is not set" in unset.output


def test_a_deleted_project_leaves_no_byte_in_the_database(
    built_world: BuiltWorld,  # noqa: F811
    on_server: Settings,
    postgres_server: LocalPostgres,
) -> None:
    """Last in the file: it deletes from the module's database."""
    project = built_world.projects()[-1]
    _, token = create_token(on_server.derived_db, Identity("project", project))
    QueryEngine(on_server).ask(Identity("project", project), QUESTIONS[0])
    flush_pending(on_server.derived_db)
    delete_everywhere(on_server, "project", project)
    assert identity_for_token(on_server.derived_db, token) is None
    assert postgres_server.root is not None
    with psycopg.connect(on_server.database_url or "", autocommit=True) as con:
        con.execute("CHECKPOINT")
        row = con.execute("SELECT oid FROM pg_database WHERE datname = current_database()")
        folder = postgres_server.root / "data" / "base" / str(row.fetchone()[0])  # type: ignore[index]
    id_bytes = re.compile(rb"(?<![\w-])" + re.escape(project.encode()) + rb"(?![\w-])")
    files = [f for f in folder.iterdir() if f.is_file()]
    assert len(files) > 100  # every table, index and catalog of the database
    assert not [f.name for f in files if id_bytes.search(f.read_bytes())]

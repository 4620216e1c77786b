"""The built world on the server profile: its stores copied into PostgreSQL by `hltm
migrate-to-server`, served from a data dir that holds no DuckDB file at all (only the Chroma
index), so every read below is PostgreSQL's.

* every identity gets the answer it gets on the embedded profile, and sees nothing outside its
  subtree; the leakage test finds no leak;
* two `hltm serve` processes answer 50 concurrent clients with 200 for the whole duration of a
  real memory refresh (a DuckDB file answers 503 to readers of other processes meanwhile), a
  seat's token reads its own subtree only, and both servers then answer from the new version;
* once a project's deletion returned, no file of the database (tables, indexes, TOAST, the
  planner's statistics) holds a byte of its id, and its token is refused.
"""

from __future__ import annotations

import itertools
import random
import re
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from click.testing import CliRunner

from hltm.deletion import delete_everywhere
from hltm.evaluation.memory.baselines import Baselines, RawCorpus
from hltm.evaluation.memory.leakage import leakage_questions, run_leakage
from hltm.memory import builder_from_settings
from hltm.query.access import create_token, identity_for_token
from hltm.query.engine import QueryEngine
from hltm.query.log import flush_pending
from hltm.query.scope import Identity
from hltm.settings import DATABASE_URL_ENV, Settings
from hltm_cli import main
from hltm_devkit.postgres import LocalPostgres
from hltm_devkit.scenarios import change_project
from tests.support.query import BuiltWorld, built_world, engine, private_copy  # noqa: F401
from tests.support.serving import chroma_server, serve_processes

QUESTIONS = ("Where do I usually hire?", "Which projects are for a solution architect?")
ASK = {"question": QUESTIONS[0]}
CLIENTS = 50
LOOPBACK = "127.0.0.1"


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


@dataclass(frozen=True)
class Answer:
    server: str
    seat: str
    started: float
    finished: float
    status: int  # 0: no HTTP answer (a hang past the timeout, a dropped connection)
    body: dict[str, Any]


def test_two_serve_processes_answer_every_client_through_a_real_refresh(
    built_world: BuiltWorld,  # noqa: F811
    on_server: Settings,
) -> None:
    """50 clients, each request to the other of two `hltm serve` processes (and the Chroma
    server, as `hltm stack up` runs them), for the whole duration of a memory refresh that
    rebuilds an edited project's chain: every answer is 200 and cites the asking seat's subtree
    only, and both servers then answer from the new version. A token never widens (403)."""
    corpus = RawCorpus.load(built_world.settings.sources_db)
    seats = built_world.seats()
    tokens = {seat: create_token(on_server.derived_db, Identity("seat", seat))[1] for seat in seats}
    edited = next(
        p for p in built_world.projects() if built_world.project(p)["seat_id"] == seats[0]
    )
    foreign = next(
        p for p in built_world.projects() if built_world.project(p)["seat_id"] != seats[0]
    )
    old = _stored_summary(on_server, f"project:{edited}")
    answers: list[Answer] = []
    warm, enough, stop = threading.Event(), threading.Event(), threading.Event()
    written_at = [float("inf")]

    def client(i: int) -> None:
        seat = seats[i % len(seats)]
        headers = {"Authorization": f"Bearer {tokens[seat]}"}
        with httpx.Client(timeout=30) as http:
            for n in itertools.count():
                if stop.is_set():
                    return
                base = bases[(i + n) % 2]
                started = time.monotonic()
                try:
                    response = http.post(f"{base}/v1/ask", json=ASK, headers=headers)
                    status, body = response.status_code, response.json()
                except (httpx.HTTPError, ValueError) as err:
                    status, body = 0, {"error": repr(err)}
                answers.append(Answer(base, seat, started, time.monotonic(), status, body))
                if len(answers) >= CLIENTS:
                    warm.set()
                if sum(a.started > written_at[0] for a in answers[-CLIENTS:]) >= CLIENTS // 2:
                    enough.set()

    with (
        chroma_server(on_server.chroma_path) as port,
        serve_processes(
            served := replace(on_server, chroma_host=LOOPBACK, chroma_port=port), 2
        ) as bases,
        ThreadPoolExecutor(CLIENTS) as pool,
    ):
        clients = [pool.submit(client, i) for i in range(CLIENTS)]
        try:
            assert warm.wait(60), "the servers answered fewer requests than there are clients"
            refresh_started = time.monotonic()
            change_project(served.sources_db, random.Random(0), edited, "edit")
            report = builder_from_settings(served).refresh()
            written_at[0] = time.monotonic()
            assert enough.wait(60), "too few answers after the refresh"
        finally:
            stop.set()
            for future in clients:
                future.result()
        seen = {base: _summary_served(base, tokens[seats[0]], edited) for base in bases}
        widened = httpx.post(
            f"{bases[0]}/v1/ask",
            json={**ASK, "project": foreign},
            headers={"Authorization": f"Bearer {tokens[seats[0]]}"},
            timeout=30,
        )
    report.raise_for_failures()
    new = _stored_summary(on_server, f"project:{edited}")
    assert f"project:{edited}" in {r.node_id for r in report.rebuilt} and new != old
    assert seen == dict.fromkeys(bases, new[1])  # both servers noticed the write
    assert not [(a.server, a.status, a.body) for a in answers if a.status != 200]
    for a in answers:
        assert a.body["citations"], a
        nodes = set(a.body["citations"]).union(*a.body["retrieved"].values())
        assert not [n for n in nodes if not corpus.node_in_scope(Identity("seat", a.seat), n)]
    assert {a.server for a in answers} == set(bases)
    # The load overlapped the write: answers before the refresh began, during it, and after.
    assert any(a.finished < refresh_started for a in answers)
    assert any(refresh_started < a.started and a.finished < written_at[0] for a in answers)
    assert any(a.started > written_at[0] for a in answers)
    assert widened.status_code == 403


def _stored_summary(settings: Settings, node_id: str) -> tuple[str, str]:
    """A node's version and long summary, as the memory store holds them."""
    with psycopg.connect(settings.database_url or "") as con:
        row = con.execute(
            "SELECT version, summary_long FROM derived.memory_nodes WHERE node_id = %s",
            [node_id],
        ).fetchone()
    assert row is not None, node_id
    return str(row[0]), str(row[1])


def _summary_served(base: str, token: str, project: str) -> str:
    """The summary of `project`'s node a server puts in the answer's context."""
    response = httpx.post(
        f"{base}/v1/ask",
        json={**ASK, "project": project, "context": True},
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    )
    assert response.status_code == 200, response.text
    (summary,) = response.json()["context"]["summaries"]
    return str(summary["summary"])


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

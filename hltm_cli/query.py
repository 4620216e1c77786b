"""`hltm ask`, `hltm serve`, `hltm token …`, `hltm eval memory`, `hltm queries`: the query path."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import click

from hltm_cli.common import fail, realdata_option, require_known, settings, uses_data

_LEVELS = ("contract", "seat", "project")
T = TypeVar("T")


def _identity(contract: str | None, seat: str | None, project: str | None, as_json: bool = False):  # type: ignore[no-untyped-def]
    """The one identity given, which must name a contract / seat / project the memory or the
    sources know (a typo is an error naming the nearest ids, not an empty scope)."""
    from hltm.query.access import known_ids
    from hltm.query.scope import Identity

    given = [(lvl, v) for lvl, v in zip(_LEVELS, (contract, seat, project), strict=True) if v]
    if len(given) != 1:
        fail("give exactly one of --contract, --seat, --project", as_json)
    level, value = given[0]
    cfg = settings()
    require_known(level, value, known_ids(level, cfg.derived_db, cfg.sources_db), as_json)
    return Identity(level, value)


def _identity_options(fn):  # type: ignore[no-untyped-def]
    fn = click.option("--project", help="Ask as this project (its memory only).")(fn)
    fn = click.option("--seat", help="Ask as this seat (recruiter): the seat and its projects.")(fn)
    fn = click.option("--contract", help="Ask as this contract: the whole organisation.")(fn)
    return fn


@click.command()
@_identity_options
@click.argument("question")
@click.option("--json", "as_json", is_flag=True, help="Print the full result as JSON.")
@click.option("--context", "with_context", is_flag=True, help="Include the retrieved context.")
@click.option("--k-facet", type=int, default=None, help="Nodes the facet retriever returns.")
@click.option("--k-qa", type=int, default=None, help="Nodes the QA retriever returns.")
@click.option("--k-summary", type=int, default=None, help="Nodes the summary retriever returns.")
@uses_data
def ask(
    contract: str | None,
    seat: str | None,
    project: str | None,
    question: str,
    as_json: bool,
    with_context: bool,
    k_facet: int | None,
    k_qa: int | None,
    k_summary: int | None,
) -> None:
    """Answer QUESTION from the memory the given identity may read, with citations.

    Exit status 3 when the answer is unsupported (no valid citation, or a value its citations do
    not state); 0 for an answer, "not in memory" and an empty scope alike (the status says
    which). With --json every outcome, an error included, is one JSON object on stdout."""
    from dataclasses import replace

    from hltm.llm import LLMError
    from hltm.query.demo import format_result
    from hltm.query.engine import QueryEngine
    from hltm.query.scope import ScopeError
    from hltm.vectors import VectorIndexUnavailable
    from hltm.warehouse import DatabaseBusy

    identity = _identity(contract, seat, project, as_json)
    overrides = {
        k: v
        for k, v in (("k_facet", k_facet), ("k_qa", k_qa), ("k_summary", k_summary))
        if v is not None
    }
    try:
        engine = QueryEngine(settings())
        config = replace(engine.config, **overrides)
        result = engine.ask(identity, question, config=config, channel="cli")
    except (ScopeError, LLMError, ValueError, DatabaseBusy, VectorIndexUnavailable) as err:
        logged = [note for note in getattr(err, "__notes__", []) if "logged" in note]
        extra = {"status": "failed", "note": logged[0]} if logged else {"status": "error"}
        fail(str(err), as_json, **extra)
        return
    if as_json:
        click.echo(
            json.dumps(result.as_dict(with_context=with_context), ensure_ascii=False, indent=2)
        )
    else:
        click.echo(format_result(result))
        if with_context:
            click.echo(json.dumps(result.context, ensure_ascii=False, indent=2))
    if result.warning:
        click.echo(f"warning: {result.warning}", err=True)
    if result.unsupported:
        raise SystemExit(3)


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8765, show_default=True, type=int)
@click.option(
    "--workers",
    default=None,
    type=click.IntRange(1),
    help="Serving processes, each with its own engine and socket on the port [default: one per"
    " core, up to 4].",
)
@click.option(
    "--concurrency",
    default=None,
    type=click.IntRange(1),
    help="Queries run at once, per worker [default: 8 with a model server, 1 with the offline"
    " backend, whose queries are CPU only].",
)
@click.option(
    "--queue", default=64, show_default=True, help="Queries waiting before 503, per worker."
)
@click.option(
    "--db-wait", default=2.0, show_default=True, help="Seconds to wait for a locked DB (then 503)."
)
@click.option(
    "--log-flush",
    default=5.0,
    show_default=True,
    help="Seconds between query-log inserts (into the log's own file, `query_log.duckdb`).",
)
@click.option(
    "--access-log/--no-access-log",
    default=False,
    show_default=True,
    help="uvicorn's line per request (every question is in the query log either way).",
)
@uses_data
def serve(
    host: str,
    port: int,
    workers: int | None,
    concurrency: int | None,
    queue: int,
    db_wait: float,
    log_flush: float,
    access_log: bool,
) -> None:
    """Serve the HTTP API with uvicorn; every /v1/ request needs a bearer token from `hltm
    token create`, and reads only the subtree of the token's identity:

    \b
      POST /v1/ask                    a cited answer from the memory, with its cost
      GET  /v1/whoami                 the token's identity and scope
      GET  /v1/rankings/{vacancy_id}  a vacancy's current ranking (?top=10)
      GET  /healthz                   liveness, no token
      GET  /openapi.json              the OpenAPI description of all of these
    """
    from hltm.serving.http import ServeLimits, default_concurrency, default_workers
    from hltm.serving.http import serve as run

    config = settings()
    workers = workers or default_workers()
    concurrency = concurrency or default_concurrency(config)
    click.echo(
        f"query endpoint on http://{host}:{port}/v1/ask, {workers} worker(s) (Ctrl-C to stop)"
    )
    try:
        limits = ServeLimits(concurrency, queue, db_wait, log_flush)
        run(config, host, port, limits, workers, access_log)
    except SystemExit as err:
        if isinstance(err.code, str):
            fail(err.code)
        raise
    except KeyboardInterrupt:
        pass  # uvicorn re-raises the interrupt it shut down on
    click.echo("query endpoint stopped")


@click.group()
def token() -> None:
    """Bearer tokens of the HTTP endpoint, each mapped to one contract, seat or project."""


@token.command("create")
@_identity_options
@click.option("--label", default="", help="A note on who holds the token.")
@uses_data
def token_create(contract: str | None, seat: str | None, project: str | None, label: str) -> None:
    """Create a token; it is printed once and only its hash is stored."""
    from hltm.query.access import create_token

    identity = _identity(contract, seat, project)
    token_id, secret = create_token(settings().derived_db, identity, label)
    click.echo(f"token {token_id} for {identity}:\n{secret}\n(store it now: it is not shown again)")


@token.command("list")
@uses_data
def token_list() -> None:
    """List tokens (ids and identities, never the tokens themselves)."""
    from hltm.query.access import list_tokens

    rows = list_tokens(settings().derived_db)
    if not rows:
        click.echo("no tokens")
    for info in rows:
        state = "active" if info.active else f"revoked {info.revoked_at:%Y-%m-%d %H:%M}"
        click.echo(f"{info.token_id}  {info.identity!s:<28} {state:<24} {info.label}")


@token.command("revoke")
@click.argument("token_id")
@uses_data
def token_revoke(token_id: str) -> None:
    """Revoke a token by its id (from `hltm token list`)."""
    from hltm.query.access import revoke_token

    if not revoke_token(settings().derived_db, token_id):
        fail(f"no active token {token_id}")
    click.echo(f"revoked {token_id}")


def _evaluated(run: Callable[[], T]) -> T:
    """An evaluation's report, or a clear error (missing data, bad option) and exit."""
    try:
        return run()
    except (FileNotFoundError, ValueError) as err:
        fail(str(err))
        raise  # unreachable: fail() exits


def _progress(message: str) -> None:
    click.echo(f"  … {message}", err=True)


@click.group(name="eval")
def eval_group() -> None:
    """Evaluations."""


@eval_group.command("memory")
@click.option(
    "--world",
    type=click.Path(path_type=Path),
    default=None,
    help="Directory with ground_truth.json (default: $HLTM_DATA_DIR/world).",
)
@click.option("--limit", type=int, default=None, help="At most N questions of each kind.")
@click.option("--leakage/--no-leakage", default=True, show_default=True)
@click.option("--judge/--no-judge", default=None, help="LLM-as-judge (default: if LLM is real).")
@click.option("--system", "systems", multiple=True, help="Only these systems (repeatable).")
@click.option(
    "--json",
    "json_path",
    type=click.Path(path_type=Path),
    default=None,
    help="Also write the figures and per-question results as JSON.",
)
@uses_data
def eval_memory(
    world: Path | None,
    limit: int | None,
    leakage: bool,
    judge: bool | None,
    systems: tuple[str, ...],
    json_path: Path | None,
) -> None:
    """HLTM vs baselines and ablations on the sample world's ground truth, plus leakage."""
    from hltm.evaluation.memory.questions import ALL_SYSTEMS, evaluate

    cfg = settings()
    world = world or cfg.data_dir / "world"
    report = _evaluated(
        lambda: evaluate(
            cfg,
            world,
            systems=systems or ALL_SYSTEMS,
            judge=judge,
            leakage=leakage,
            limit=limit,
            progress=_progress,
        )
    )
    click.echo(report.table())
    if json_path:
        data = report.metadata() | {"per_question": {r.name: r.per_question for r in report.rows}}
        json_path.write_text(json.dumps(data, ensure_ascii=False, indent=1, default=str))
        click.echo(f"\nwrote {json_path}")


_KEEP_HELP = "Keep the evaluation's data directory here (its embedding cache makes reruns fast)."


def _write_json(path: Path | None, data: object) -> None:
    if path:
        path.write_text(json.dumps(data, ensure_ascii=False, indent=1, default=str))
        click.echo(f"\nwrote {path}")


@eval_group.command("facets")
@click.option(
    "--set", "which", type=click.Choice(["en", "ru", "both"]), default="both", show_default=True
)
@click.option("--limit", type=int, default=None, help="Only the first N postings of each set.")
@realdata_option
@click.option("--keep", type=click.Path(path_type=Path), default=None, help=_KEEP_HELP)
@click.option("--json", "json_path", type=click.Path(path_type=Path), default=None)
def eval_facets(
    which: str, limit: int | None, realdata: Path | None, keep: Path | None, json_path: Path | None
) -> None:
    """Facet extraction P/R/F1 per field on real EN and RU postings vs their structured columns."""
    from hltm.evaluation.realdata.postings import evaluate_postings

    out = {}
    for name in ("en", "ru") if which == "both" else (which,):
        report = _evaluated(
            lambda name=name: evaluate_postings(
                settings(), name, data_dir=realdata, limit=limit, keep=keep / name if keep else None
            )
        )
        click.echo(report.table() + "\n")
        out[name] = report.as_dict()
    _write_json(json_path, out)


@eval_group.command("locomo")
@click.option("--conversations", type=int, default=None, help="Only the first N conversations.")
@click.option("--questions", type=int, default=None, help="At most N questions in all.")
@click.option("--leakage", "leakage_n", type=int, default=50, show_default=True)
@click.option(
    "--rag-k", type=int, default=8, show_default=True, help="Turns the RAG baseline reads."
)
@realdata_option
@click.option("--keep", type=click.Path(path_type=Path), default=None, help=_KEEP_HELP)
@click.option("--json", "json_path", type=click.Path(path_type=Path), default=None)
def eval_locomo(
    conversations: int | None,
    questions: int | None,
    leakage_n: int,
    rag_k: int,
    realdata: Path | None,
    keep: Path | None,
    json_path: Path | None,
) -> None:
    """Conversation retrieval on LoCoMo: HLTM beside vector RAG over raw turns, plus leakage."""
    from hltm.evaluation.realdata.locomo import evaluate_locomo

    report = _evaluated(
        lambda: evaluate_locomo(
            settings(),
            data_dir=realdata,
            conversations=conversations,
            questions=questions,
            leakage=leakage_n,
            rag_k=rag_k,
            keep=keep,
            progress=_progress,
        )
    )
    click.echo(report.table())
    _write_json(json_path, report.as_dict())


@click.command()
@click.option("--limit", default=20, show_default=True)
@uses_data
def queries(limit: int) -> None:
    """The newest entries of the query log with their cost."""
    from hltm.query.log import read_query_log

    for row in read_query_log(settings().derived_db, limit=limit):
        outcome = row["rationale"] if row["status"] == "failed" else row["answer"]
        click.echo(
            f"{row['asked_at']:%Y-%m-%d %H:%M:%S} {row['identity_level']}:{row['identity_id']:<14}"
            f" {row['status'] or '':<13} {row['llm_calls']} calls"
            f" {row['prompt_tokens'] + row['completion_tokens']:>6} tok"
            f" {row['total_ms']:7.1f} ms  {row['question'][:60]!r} → {outcome[:60]!r}"
        )


COMMANDS = [ask, serve, token, eval_group, queries]

"""`hltm demo`: the whole product on the embedded default stack, end to end, with a summary.

Every step runs through the same Dagster definitions the UI shows, on the persistent instance in
$DAGSTER_HOME, so after the demo `dagster dev` shows its runs, partitions and lineage.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

import hltm
from hltm.cli import dagster_home, fail, settings
from hltm.sources.generator import SIZES, generate_world
from hltm.sources.ingest import ingest_directory

QUIET_RUN = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}


def load_definitions():  # type: ignore[no-untyped-def]
    """The code location lives at the project root, beside the installed `hltm` package."""
    root = str(Path(hltm.__file__).resolve().parent.parent)
    if root not in sys.path:
        sys.path.insert(0, root)
    from definitions import defs

    return defs


def run_job(name: str, run_config: dict | None = None, tags: dict | None = None):  # type: ignore[no-untyped-def]
    """Execute a job of the code location in-process on the persistent instance."""
    import dagster as dg

    defs = load_definitions()

    config = {**QUIET_RUN, **(run_config or {})}
    with dg.DagsterInstance.get() as instance:
        result = defs.resolve_job_def(name).execute_in_process(
            instance=instance, run_config=config, tags=tags, raise_on_error=False
        )
    if not result.success:
        reasons = (
            step_failures(result)
            or [e.message or "" for e in result.all_events if e.is_failure][-1:]
        )
        fail(f"Dagster job '{name}' failed: " + ("\n".join(reasons) or "see dagster dev"))
    return result


def step_failures(result: Any) -> list[str]:
    """Each failed step's own message: a `dg.Failure`'s description (e.g. the quote gate's
    "blocked: 0/11 mandatory quotes survived"), else the exception that ended the step — not
    the run's "Steps failed: [...]"."""
    lines = []
    for event in result.get_step_failure_events():
        data = event.step_failure_data
        reason = data.user_failure_data.description if data.user_failure_data else None
        if not reason:
            error = data.error
            while error is not None and error.cause is not None:
                error = error.cause
            reason = error.message.strip() if error is not None else "failed"
        lines.append(f"{event.step_key}: {reason}")
    return lines


def _step(title: str, fn: Callable[[], str]) -> str:
    click.secho(f"▶ {title}", bold=True)
    started = time.perf_counter()
    text = fn()
    seconds = time.perf_counter() - started
    click.echo("\n".join(f"  {line}" for line in text.splitlines()) + f"  [{seconds:.1f}s]")
    return f"{title}: {text.splitlines()[0] if text else ''}"


@click.command()
@click.option("--seed", default=7, show_default=True)
@click.option("--size", type=click.Choice(sorted(SIZES)), default="demo", show_default=True)
def demo(seed: int, size: str) -> None:
    """Generate a sample world, ingest it, and run every part of the platform on it."""
    cfg = settings()
    home = dagster_home()
    world = cfg.data_dir / "world"
    click.echo(f"data: {cfg.data_dir}   dagster instance: {home}   LLM: {cfg.llm_backend}")

    def sources() -> str:
        counts = generate_world(world, seed=seed, size=SIZES[size])
        report = ingest_directory(world, cfg.sources_db)
        return (
            f"{counts['projects']} projects, {counts['resumes']} resumes, "
            f"{counts['vacancies']} vacancies; loaded {report.loaded} rows "
            f"({report.changed} new or changed), quarantined {report.quarantined}"
        )

    def observe() -> str:
        run_job("observe_sources")
        return "observed 8 source tables (row counts and data versions in the UI)"

    def memory() -> str:
        from assets.memory import rebuild_memory_tree

        result = run_job(rebuild_memory_tree.name)
        built: dict[str, int] = {}
        totals = {"llm_calls": 0, "prompt_tokens": 0, "completion_tokens": 0, "embedding_calls": 0}
        for event in result.get_asset_materialization_events():
            level = event.asset_key.to_user_string().removesuffix("_memory")
            built[level] = built.get(level, 0) + 1
            metadata = event.materialization.metadata
            for key in totals:
                totals[key] += int(metadata[key].value) if key in metadata else 0
        if not built:
            return "already current: nothing to rebuild"
        nodes = ", ".join(
            f"{built.get(level, 0)} {level}" for level in ("project", "seat", "contract")
        )
        return (
            f"built {nodes} nodes; {totals['llm_calls']} LLM calls, "
            f"{totals['prompt_tokens'] + totals['completion_tokens']} tokens (o200k_base), "
            f"{totals['embedding_calls']} texts embedded"
        )

    def ask() -> str:
        from hltm.query.demo import demo_question

        return demo_question(cfg)

    def judge() -> str:
        from hltm.cli.judge import demo_judge

        return demo_judge()

    summary = [
        _step("sample world → sources.duckdb", sources),
        _step("observe sources in Dagster", observe),
        _step("memory tree: projects → seats → contracts (Dagster: rebuild_memory_tree)", memory),
        _step("a cited answer from the memory, scoped to one seat", ask),
        _step("judge and rank every vacancy (union pool → judge → gate → journal)", judge),
    ]
    click.secho("\nSummary", bold=True)
    for line in summary:
        click.echo(f"  • {line}")
    click.echo(f"\nOpen the UI: DAGSTER_HOME={home} dagster dev   (then http://127.0.0.1:3000)")


COMMANDS = [demo]

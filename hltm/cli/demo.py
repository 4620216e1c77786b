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

QUIET_RUN = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}
# Small settings for the demo's evaluation runs, so they fit the demo's few minutes; the full
# runs are `hltm stats report`, `hltm probe` and `hltm eval memory`. The memory evaluation runs
# the systems that need no chunk index, and HLTM's leakage without unfiltered RAG beside it:
# embedding every document's chunks is ~1 CPU-minute on the demo world (its metadata says so).
DEMO_MEMORY_SYSTEMS = ["HLTM", "baseline: full context", "baseline: schema filter"]
DEMO_EVALUATION = {
    "ops": {
        "judge_stats_report": {"config": {"n_permutations": 100, "n_resamples": 500}},
        "memory_evaluation": {
            "config": {"limit": 8, "leakage_baseline": False, "systems": DEMO_MEMORY_SYSTEMS}
        },
    }
}
DEMO_EVALUATED = ("golden_evaluation", "memory_evaluation", "judge_stats_report")
DEMO_PROBE = {"ops": {"recall_probe": {"config": {"sample_size": 4}}}}


def load_definitions():  # type: ignore[no-untyped-def]
    """The code location lives at the project root, beside the installed `hltm` package."""
    root = str(Path(hltm.__file__).resolve().parent.parent)
    if root not in sys.path:
        sys.path.insert(0, root)
    from definitions import defs

    return defs


def run_job(  # type: ignore[no-untyped-def]
    name: str,
    run_config: dict | None = None,
    tags: dict | None = None,
    fail_on_error: bool = True,
    **options: Any,
):
    """Execute a job of the code location in-process on the persistent instance (`options`:
    `partition_key`, `asset_selection`, … of `execute_in_process`); a failed run exits with
    its steps' reasons, or is returned as it is (`fail_on_error=False`). Dagster's console
    shows nothing below CRITICAL: a failure is printed once, as each failed step's own line,
    not as the event log's stack traces (`dagster dev` keeps them)."""
    import dagster as dg

    defs = load_definitions()

    config = {**QUIET_RUN, **(run_config or {})}
    from hltm.dagster_instance import fail_dead_runs

    with dg.DagsterInstance.get() as instance:
        fail_dead_runs(instance)  # a run killed earlier must not stay STARTED
        result = defs.resolve_job_def(name).execute_in_process(
            instance=instance, run_config=config, tags=tags, raise_on_error=False, **options
        )
    if fail_on_error and not result.success:
        reasons = (
            step_failures(result)
            or [e.message or "" for e in result.all_events if e.is_failure][-1:]
        )
        fail(f"Dagster job '{name}' failed: " + ("\n".join(reasons) or "see dagster dev"))
    return result


def step_failures(result: Any) -> list[str]:
    """Each failed step's own message, one line: a `dg.Failure`'s description (e.g. the quote
    gate's "blocked: 0/11 mandatory quotes survived") with the totals in its metadata, else the
    exception that ended the step — not the run's "Steps failed: [...]"."""
    lines = []
    for event in result.get_step_failure_events():
        data = event.step_failure_data
        failure = data.user_failure_data
        reason = failure.description if failure else None
        totals = {k: v.value for k, v in (failure.metadata if failure else {}).items()}
        numbers = [f"{k} {v}" for k, v in totals.items() if isinstance(v, int | float)]
        if reason and numbers:
            reason = f"{reason} ({', '.join(numbers)})"
        if not reason:
            error = data.error
            while error is not None and error.cause is not None:
                error = error.cause
            reason = error.message.strip() if error is not None else "failed"
        lines.append(f"{event.step_key}: {reason}")
    return lines


def _step(title: str, fn: Callable[[], str]) -> str:
    click.secho(f"▶ {title}", bold=True)
    started, cpu_started = time.perf_counter(), time.process_time()
    text = fn()
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    click.echo(
        "\n".join(f"  {line}" for line in text.splitlines())
        + f"  [{seconds:.1f}s, {cpu:.1f} CPU-s]"
    )
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

    def patterns() -> str:
        result = run_job("mine_query_patterns_job", {"ops": {"mine_query_patterns": {
            "config": {"merge_similar": False}}}})  # fmt: skip
        meta = {
            e.asset_key.to_user_string(): e.materialization.metadata
            for e in result.get_asset_materialization_events()
        }
        found = meta["query_patterns"]["queries"].value
        hints = meta["memory_hints"]["hints_version"].value
        return (
            f"{found} logged queries mined: no pattern has the minimum support yet, so the memory"
            f" is built with the released hints {hints} (query_patterns → memory_hints)"
        )

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

    def calibrate() -> str:
        from hltm.judge.calibration import load_calibrations

        run_job("calibrate_vacancies")
        calibrations = load_calibrations(cfg.derived_db)
        proposed = sum(len(c.proposals) for c in calibrations.values())
        settled = sum(len(c.skipped) for c in calibrations.values())
        shown = next((c for c in calibrations.values() if c.proposals), None)
        lines = [
            f"{len(calibrations)} vacancies: {proposed} soft items proposed from memory,"
            f" {settled} usual values left out because the vacancy already settles them"
        ]
        if shown is not None:
            lines.append(f"{shown.vacancy_id}: {shown.sentence()}")
        return "\n".join(lines)

    def judge() -> str:
        from hltm.cli.judge import demo_judge

        return demo_judge()

    def evaluate() -> str:
        import dagster as dg

        selection = [dg.AssetKey(k) for k in DEMO_EVALUATED]
        result = run_job("evaluate_platform", DEMO_EVALUATION, asset_selection=selection)
        from assets.probe import monthly  # the code location is importable once loaded

        meta = {
            e.asset_key.to_user_string(): e.materialization.metadata
            for e in result.get_asset_materialization_events()
        }
        golden, memory = meta["golden_evaluation"], meta["memory_evaluation"]
        memory_f1 = "; ".join(
            f"{name} summary Token-F1 {memory[f'{name}/summary_token_f1'].value:.3f},"
            f" retrieval F1 {memory[f'{name}/retrieval_f1'].value:.3f}"
            for name in (s.removeprefix("baseline: ") for s in DEMO_MEMORY_SYSTEMS)
        )
        month = monthly.get_last_partition_key()
        probe = run_job("recall_probe_job", DEMO_PROBE, partition_key=month)
        (probed,) = [e.materialization.metadata for e in probe.get_asset_materialization_events()]
        report = meta["judge_stats_report"]["report"].value
        return "\n".join(
            [
                "golden set, union + judge (closed): strict P@10"
                f" {golden['closed_union_judge_strict_p10'].value:.1%}, soft"
                f" {golden['closed_union_judge_soft_p10'].value:.1%} (cosine strict"
                f" {golden['closed_cosine_strict_p10'].value:.1%})",
                f"memory evaluation on a bounded subset ({memory['questions'].value} questions, see"
                f" `scope` in its metadata; full: `hltm eval memory`): {memory_f1}; HLTM leakage"
                f" {memory['leakage/HLTM (subtree filter)/all/query_wise'].value:.1%} of queries",
                f"judge statistics report (100 shuffles; full: `hltm stats report`): {report}",
                f"recall probe {month[:7]} (4 per vacancy; full: `hltm probe`):"
                f" {probed['scored'].value} scored, {probed['displacing_finds'].value} displacing",
            ]
        )

    summary = [
        _step("sample world → sources.duckdb", sources),
        _step("observe sources in Dagster", observe),
        _step("adaptation: mine the query log for patterns → memory hints", patterns),
        _step("memory tree: projects → seats → contracts (Dagster: rebuild_memory_tree)", memory),
        _step("a cited answer from the memory, scoped to one seat", ask),
        _step("calibrate every vacancy from its recruiter's memory (no LLM call)", calibrate),
        _step("judge and rank every vacancy (union pool → judge → gate → journal)", judge),
        _step("evaluate: golden set, memory, statistics, recall probe (small settings)", evaluate),
    ]
    click.secho("\nSummary", bold=True)
    for line in summary:
        click.echo(f"  • {line}")
    click.echo(
        "\nEvery asset of the graph is materialised. Open the UI: make ui   (or DAGSTER_HOME="
        f"{home} .venv/bin/dagster dev -w workspace.yaml; then http://127.0.0.1:3000)"
    )


COMMANDS = [demo]

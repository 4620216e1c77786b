"""`hltm demo`: the whole product on the embedded default stack, end to end, with a summary.

Every step runs through the same Dagster definitions the UI shows, on the persistent instance in
$DAGSTER_HOME, so after the demo `dagster dev` shows its runs, partitions and lineage.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import click

from hltm.sources.ingest import OtherWorld, ingest_directory
from hltm_cli.common import fail, settings, uses_data
from hltm_cli.dagster_runs import (
    calibrate_vacancies,
    dagster_home,
    last_probe_month,
    refresh_memory,
    run_job,
)
from hltm_devkit.sizes import SIZES

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


def build_memory(from_scratch: bool = False) -> str:
    """Make the whole memory tree current (`refresh_memory_tree` over every contract's
    partition, as the sensor runs it) and say what it rebuilt and what it cost."""
    results = refresh_memory(from_scratch=from_scratch)
    repairs: list[str] = []
    built = {level: 0 for level in ("project", "seat", "contract")}
    totals = {"llm_calls": 0, "prompt_tokens": 0, "completion_tokens": 0, "embedding_calls": 0}
    for result in results:
        for event in result.get_asset_materialization_events():
            level = event.asset_key.to_user_string().removesuffix("_memory")
            metadata = {k: v.value for k, v in event.materialization.metadata.items()}
            built[level] += int(metadata.get("rebuilt_nodes", 0))
            for key in totals:
                totals[key] += int(metadata.get(key, 0))
            repairs += [r for r in metadata.get("repairs", []) if r not in repairs]
    said = "".join(f"repaired: {line}\n" for line in repairs)
    if not any(built.values()):
        return said + "already current: nothing to rebuild"
    nodes = ", ".join(f"{n} {level}" for level, n in built.items())
    return said + (
        f"built {nodes} nodes; {totals['llm_calls']} LLM calls, "
        f"{totals['prompt_tokens'] + totals['completion_tokens']} tokens (o200k_base), "
        f"{totals['embedding_calls']} texts embedded"
    )


def calibrate_all() -> str:
    """Calibrate every vacancy (`calibrate_vacancies`) and say what memory proposed."""
    from hltm.judge.calibration import load_calibrations

    calibrate_vacancies()
    calibrations = load_calibrations(settings().derived_db)
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


@dataclass(frozen=True)
class StepTime:
    title: str
    seconds: float
    cpu_seconds: float


def run_step(title: str, fn: Callable[[], str]) -> StepTime:
    """Print a step's title, then what it did, with its wall and CPU time."""
    click.secho(f"▶ {title}", bold=True)
    started, cpu_started = time.perf_counter(), time.process_time()
    text = fn()
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    click.echo(
        "\n".join(f"  {line}" for line in text.splitlines())
        + f"  [{seconds:.1f}s, {cpu:.1f} CPU-s]"
    )
    return StepTime(title, seconds, cpu)


def print_summary(steps: list[StepTime]) -> None:
    """Where the time went, step by step (what each step did is printed above it)."""
    click.secho("\nSummary", bold=True)
    width = max(len(s.title) for s in steps)
    for step in steps:
        click.echo(f"  {step.title:<{width}}  {step.seconds:6.1f} s  {step.cpu_seconds:6.1f} CPU-s")
    wall, cpu = sum(s.seconds for s in steps), sum(s.cpu_seconds for s in steps)
    click.echo(f"  {'total':<{width}}  {wall:6.1f} s  {cpu:6.1f} CPU-s")


def golden_summary(golden: Mapping[str, Any], vacancies: int) -> list[str]:
    """The golden set's precision@10: what it measures, and the judge beside the baselines."""
    judge = golden["closed_union_judge_strict_p10"]
    baselines = {
        name: golden[f"closed_{key}_strict_p10"]
        for name, key in (("cosine", "cosine"), ("BM25", "bm25"), ("RRF", "rrf"))
    }
    best = max(baselines, key=lambda name: baselines[name])
    gap = (judge - baselines[best]) * 100
    versus = (
        f"{gap:.1f} points above {best}, the best of them"
        if gap >= 0.05
        else f"{-gap:.1f} points below {best}, the best of them"
        if gap <= -0.05
        else f"level with {best}, the best of them"
    )
    return [
        f"golden set ({vacancies} frozen vacancies, resumes labelled fit / borderline / miss):"
        " precision@10, the share of each top 10 that is a fit (strict) or a fit or borderline"
        " (soft), averaged over the vacancies",
        f"  union pool + judge: strict {judge:.1%}, soft"
        f" {golden['closed_union_judge_soft_p10']:.1%}",
        "  the same resumes ranked without the judge (strict): "
        + ", ".join(f"{name} {value:.1%}" for name, value in baselines.items())
        + f"; the judge is {versus}",
    ]


def memory_summary(memory: Mapping[str, Any]) -> list[str]:
    """The memory evaluation: what Token-F1, retrieval F1 and leakage say, HLTM beside the
    baselines, and why full context leads where everything fits in one prompt."""
    systems = [s.removeprefix("baseline: ") for s in DEMO_MEMORY_SYSTEMS]

    def figures(key: str, digits: int = 3) -> str:
        return ", ".join(f"{name} {memory[f'{name}/{key}']:.{digits}f}" for name in systems)

    hltm, full = (memory[f"{name}/tokens_per_query"] for name in ("HLTM", "full context"))
    lines = [
        f"memory, {memory['questions']} questions on the sample world's ground truth (a bounded"
        " subset; full: `hltm eval memory`):",
        "  summary Token-F1, the share of words an answer has in common with the true one: "
        + figures("summary_token_f1"),
        "  retrieval F1, the right projects cited: " + figures("retrieval_f1"),
    ]
    if memory["full context/summary_token_f1"] > memory["HLTM/summary_token_f1"]:
        lines.append(
            f"  full context puts every document in scope into the prompt ({full:,.0f} tokens a"
            f" question, HLTM {hltm:,.0f}): a world this small fits whole, so it is the ceiling;"
            " HLTM reads a bounded context from its memory, whose cost does not grow with it"
        )
    lines.append(
        "  leakage, questions whose answer read another contract's memory: HLTM"
        f" {memory['leakage/HLTM (subtree filter)/all/query_wise']:.1%}"
    )
    return lines


def probe_summary(probed: Mapping[str, Any], month: str, sample: int) -> list[str]:
    """The recall probe: what was judged, and what a displacing find is."""
    top, floor = probed.get("top_k", 10), probed.get("min_overall", 80)
    return [
        f"recall probe {month[:7]} ({sample} resumes from outside each vacancy's pool; full:"
        f" `hltm probe`): {probed['scored']} judged, {probed['displacing_finds']} displacing —"
        f" candidates the pools left out that would enter a current top {top} with overall ≥"
        f" {floor} (the check displacing_finds warns of them; `hltm probe` lists them)",
    ]


@click.command()
@click.option("--seed", default=7, show_default=True)
@click.option("--size", type=click.Choice(sorted(SIZES)), default="demo", show_default=True)
@uses_data
def demo(seed: int, size: str) -> None:
    """Generate a sample world, ingest it, and run every part of the platform on it."""
    cfg = settings()
    home = dagster_home()
    world = cfg.data_dir / "world"
    click.echo(f"dagster instance: {home}   LLM: {cfg.llm_backend}")

    def sources() -> str:
        from hltm_devkit.generator import generate_world  # 3.7k lines: only here

        counts = generate_world(world, seed=seed, size=SIZES[size])
        try:
            report = ingest_directory(world, cfg.sources_db)
        except OtherWorld as err:
            fail(
                f"{cfg.data_dir} {err}, the sample world's: the demo runs in a data dir of its"
                " own. Give it one (HLTM_DATA_DIR=$PWD/demo-data make demo), or empty this one"
                f" first (rm -r {cfg.data_dir} {cfg.dagster_home})"
            )
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
        found = int(meta["query_patterns"]["queries"].value)
        hints = meta["memory_hints"]["hints_version"].value
        release = (
            f"with the released hints {hints}"
            if hints and hints != "none"
            else "without hints (none released yet)"
        )
        return (
            f"mined {found} logged {'query' if found == 1 else 'queries'}: no pattern has the"
            f" minimum support yet, so the memory is built {release} (query_patterns →"
            " memory_hints)"
        )

    def ask() -> str:
        from hltm.query.demo import demo_question

        return demo_question(cfg)

    def judge() -> str:
        from hltm_cli.judge import demo_judge

        return demo_judge()

    def evaluate() -> str:
        from hltm.evaluation.judge.golden import load_golden

        result = run_job("evaluate_platform", DEMO_EVALUATION, asset_selection=list(DEMO_EVALUATED))
        meta = {
            e.asset_key.to_user_string(): {
                k: v.value for k, v in e.materialization.metadata.items()
            }
            for e in result.get_asset_materialization_events()
        }
        month = last_probe_month()
        probe = run_job("recall_probe_job", DEMO_PROBE, partition_key=month)
        (probed,) = [e.materialization.metadata for e in probe.get_asset_materialization_events()]
        sample = DEMO_PROBE["ops"]["recall_probe"]["config"]["sample_size"]
        return "\n".join(
            [
                *golden_summary(meta["golden_evaluation"], len(load_golden().vacancies)),
                *memory_summary(meta["memory_evaluation"]),
                "judge statistics report (100 shuffles; full: `hltm stats report`):"
                f" {meta['judge_stats_report']['report']}",
                *probe_summary({k: v.value for k, v in probed.items()}, month, sample),
            ]
        )

    steps = [
        run_step("sample world → the sources store", sources),
        run_step("observe sources in Dagster", observe),
        run_step("adaptation: mine the query log for patterns → memory hints", patterns),
        run_step(
            "memory tree: projects → seats → contracts (Dagster: refresh_memory_tree)",
            build_memory,
        ),
        run_step("a cited answer from the memory, scoped to one seat", ask),
        run_step(
            "calibrate every vacancy from its recruiter's memory (no LLM call)", calibrate_all
        ),
        run_step("judge and rank every vacancy (union pool → judge → gate → journal)", judge),
        run_step(
            "evaluate: golden set, memory, statistics, recall probe (small settings)", evaluate
        ),
    ]
    print_summary(steps)
    click.echo(
        "\nEvery asset of the graph is materialised. Open the UI: make ui   (then"
        " http://127.0.0.1:3000)"
    )


COMMANDS = [demo]

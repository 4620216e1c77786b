"""`hltm refresh`: after an ingest, bring everything derived from the sources up to date.

It runs the Dagster jobs the sensors would start, in their order, as runs of the code location
(so the UI lists them): `refresh_memory_tree` over every contract's memory partition (what
`source_changes` requests for the changed ones; only nodes whose sources, hints or settings
changed are rebuilt), `calibrate_vacancies`
(what `vacancy_changes` and `memory_calibration` request), then `judge_refresh` (what
`judge_nightly` runs: pools, judge scores within the budget of cold evaluations, the quote gate,
published rankings). Each step is a no-op on what is already current.
"""

from __future__ import annotations

from pathlib import Path

import click

from hltm.warehouse import connect, store_exists
from hltm_cli.common import BUDGET_HELP, settings, uses_data
from hltm_cli.dagster_runs import dagster_home
from hltm_cli.demo import build_memory, calibrate_all, print_summary, run_step


@click.command()
@click.option("--budget", type=click.IntRange(min=0), default=None, help=BUDGET_HELP)
@click.option(
    "--workers", type=int, default=0, help="Parallel LLM calls (default: HLTM_LLM_CONCURRENCY)."
)
@click.option(
    "--from-scratch",
    is_flag=True,
    help="Drop every stored memory node first and rebuild each (after a change of embedding model).",
)
@uses_data
def refresh(budget: int | None, workers: int, from_scratch: bool) -> None:
    """Rebuild the memory of what changed, re-calibrate and re-rank every vacancy (Dagster runs
    of the same jobs the sensors start)."""
    from hltm_cli.judge import demo_judge

    cfg = settings()
    if not store_exists(cfg.sources_db):
        raise click.ClickException(f"no sources yet ({cfg.sources_db}): run `hltm ingest DIR`")
    click.echo(f"dagster instance: {dagster_home()}   LLM: {cfg.llm_backend}")
    steps = [
        run_step(
            "memory tree: rebuild what the sources changed (Dagster: refresh_memory_tree)",
            lambda: build_memory(from_scratch),
        ),
        run_step(
            "calibrate every vacancy from its recruiter's memory (Dagster: calibrate_vacancies)",
            calibrate_all,
        ),
        run_step(
            "judge and rank every vacancy within the budget (Dagster: judge_refresh)",
            lambda: demo_judge(budget=budget, workers=workers),
        ),
    ]
    print_summary(steps)
    click.echo(f"\n{next_steps(cfg.sources_db)}")


def next_steps(sources_db: Path) -> str:
    """What to run next, with ids of the world ingested last (its latest vacancy and that
    vacancy's contract), never another's."""
    with connect(sources_db, read_only=True) as con:
        row = con.execute(
            "SELECT v.vacancy_id, s.contract_id FROM vacancies v"
            " JOIN projects p USING (project_id) JOIN seats s USING (seat_id)"
            " ORDER BY v.ingested_at DESC, v.vacancy_id LIMIT 1"
        ).fetchone()
        contract = row[1] if row else None
        if contract is None:
            found = con.execute(
                "SELECT contract_id FROM contracts ORDER BY ingested_at DESC, contract_id LIMIT 1"
            ).fetchone()
            contract = found[0] if found else "CONTRACT_ID"
    vacancy = row[0] if row else "VACANCY_ID"
    return (
        f"next: .venv/bin/hltm judge show {vacancy}   (a ranking with its evidence)\n"
        f'      .venv/bin/hltm ask --contract {contract} "Which roles do we usually hire for?"\n'
        "      make ui   (the runs above, under Jobs and in the timeline)"
    )


COMMANDS = [refresh]

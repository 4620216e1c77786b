"""`hltm`: the command line. One module per domain adds its commands to the `main` group."""

from __future__ import annotations

import logging

import click


@click.group()
@click.option("-v", "--verbose", is_flag=True, help="Show debug logs.")
def main(verbose: bool) -> None:
    """Hierarchical long-term memory and evidence-backed candidate judging, on Dagster."""
    logging.basicConfig(level=logging.DEBUG if verbose else logging.WARNING)


@main.command(name="dagster-home")
def dagster_home_command() -> None:
    """Create $DAGSTER_HOME (default ./.dagster_home) if needed and print it."""
    from hltm.cli.dagster_runs import dagster_home

    click.echo(dagster_home())


def _register() -> None:
    from hltm.cli import analysis, api, demo, judge, query, refresh, sources

    for module in (sources, refresh, demo, query, analysis, judge, api):
        for command in module.COMMANDS:
            main.add_command(command)


_register()

"""`hltm`: the command line. One module per domain adds its commands to the `main` group."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import click

from hltm.settings import Settings


def dagster_home() -> Path:
    """A persistent Dagster instance: runs and dynamic partitions survive restarts, and a killed
    run is detected and failed (`hltm.dagster_instance`)."""
    from hltm.dagster_instance import ensure_dagster_home

    home, warning = ensure_dagster_home()
    if warning:
        click.secho(f"warning: {warning}", fg="yellow", err=True)
    return home


def settings() -> Settings:
    return Settings.from_env()


def fail(message: str) -> None:
    click.secho(f"error: {message}", fg="red", err=True)
    sys.exit(1)


@click.group()
@click.option("-v", "--verbose", is_flag=True, help="Show debug logs.")
def main(verbose: bool) -> None:
    """Hierarchical long-term memory and evidence-backed candidate judging, on Dagster."""
    logging.basicConfig(level=logging.DEBUG if verbose else logging.WARNING)


@main.command(name="dagster-home")
def dagster_home_command() -> None:
    """Create $DAGSTER_HOME (default ./.dagster_home) if needed and print it."""
    click.echo(dagster_home())


def _register() -> None:
    from hltm.cli import analysis, api, demo, judge, query, refresh, sources

    for module in (sources, refresh, demo, query, analysis, judge, api):
        for command in module.COMMANDS:
            main.add_command(command)


_register()

"""`hltm`: the command line. One module per domain adds its commands to the `main` group."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import click

from hltm.errors import StoreError, disk_fault


class _Commands(click.Group):
    """The `hltm` group: a store that cannot be used ends any command with one line naming the
    file, what is wrong and what to do (`hltm.errors.StoreError`), never a traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        from hltm_cli.common import fail, settings

        try:
            return super().invoke(ctx)
        except (StoreError, OSError) as err:
            if isinstance(err, OSError):
                where = Path(err.filename) if err.filename else settings().data_dir
                fault = disk_fault(where, err)
                if fault is None:
                    raise
                err = fault
            logging.getLogger(__name__).debug("the store error in full", exc_info=True)
            fail(str(err))


@click.group(cls=_Commands)
@click.option("-v", "--verbose", is_flag=True, help="Show debug logs.")
def main(verbose: bool) -> None:
    """Hierarchical long-term memory and evidence-backed candidate judging, on Dagster."""
    logging.basicConfig(level=logging.DEBUG if verbose else logging.WARNING)


@main.command(name="dagster-home")
def dagster_home_command() -> None:
    """Create the data dir's Dagster instance if needed and print where it is ($DAGSTER_HOME,
    default: <data dir>.dagster beside the data dir)."""
    from hltm_cli.dagster_runs import dagster_home

    click.echo(dagster_home())


def _register() -> None:
    from hltm_cli import analysis, api, demo, judge, query, refresh, sources

    for module in (sources, refresh, demo, query, analysis, judge, api):
        for command in module.COMMANDS:
            main.add_command(command)


_register()

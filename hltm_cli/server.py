"""The server profile from the command line: `hltm migrate-to-server` copies an embedded data
dir's stores into PostgreSQL; `hltm stack up|status|down` runs the whole topology on this
machine (docs/deployment.md)."""

from __future__ import annotations

import click

from hltm_cli.common import fail, settings, uses_data


@click.command(name="migrate-to-server")
@click.option("--replace", is_flag=True, help="Drop the stores already in the database first.")
@uses_data
def migrate_to_server(replace: bool) -> None:
    """Copy the data dir's sources, derived store and query log (DuckDB files) into the database
    of HLTM_DATABASE_URL, one schema each; the files are left as they were."""
    from hltm.warehouse import migrate_to_server as migrate

    try:
        copied = migrate(settings().data_dir, replace)
    except (ValueError, FileExistsError) as err:
        fail(str(err))
        return
    if not copied:
        fail(f"no DuckDB store in {settings().data_dir}: nothing to copy")
    for schema, tables in copied.items():
        click.echo(f"{schema:10} {len(tables):3} tables {sum(tables.values()):9,} rows")
    click.echo("next: keep HLTM_DATABASE_URL set for every command, server and Dagster process")


@click.group()
def stack() -> None:
    """The server profile's processes on this machine: PostgreSQL, the Chroma server, the
    Dagster code server, daemon and webserver, and two `hltm serve` (beside the data dir, in
    <data dir>.stack/)."""


@stack.command(name="up")
@uses_data
def stack_up() -> None:
    """Start whatever of the stack is not running (the data is kept between runs)."""
    from hltm_devkit.postgres import PostgresUnavailable
    from hltm_devkit.stack import up

    try:
        state = up(settings())
    except (PostgresUnavailable, RuntimeError) as err:
        fail(str(err))
        return
    for name, item in state.items():
        if name != "env":
            click.echo(f"{name:18} pid {item.get('pid', '-'):>7}  {item.get('url', '')}")
    click.echo("\nfor the CLI on this stack:")
    for name, value in state["env"].items():  # type: ignore[union-attr]
        click.echo(f"export {name}={value}")


@stack.command(name="status")
@uses_data
def stack_status() -> None:
    """Which processes of the stack run."""
    from hltm_devkit.stack import status

    states = status(settings())
    if not states:
        click.echo("no stack here (`hltm stack up`)")
    for name, running in states.items():
        click.echo(f"{name:18} {'running' if running else 'STOPPED'}")


@stack.command(name="down")
@uses_data
def stack_down() -> None:
    """Stop every process of the stack; its data stays for the next `up`."""
    from hltm_devkit.stack import down

    stopped = down(settings())
    click.echo(f"stopped: {', '.join(stopped) or 'nothing was running'}")


COMMANDS = [migrate_to_server, stack]

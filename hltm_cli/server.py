"""The server profile from the command line: `hltm migrate-to-server` copies an embedded data
dir's stores into PostgreSQL (docs/deployment.md)."""

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


COMMANDS = [migrate_to_server]

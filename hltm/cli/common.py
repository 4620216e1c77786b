"""What every command of the CLI shares: the settings, and how a command fails."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from hltm.settings import Settings

# The folder of public real data sets, one option name wherever a command reads it.
realdata_option = click.option(
    "--realdata",
    type=click.Path(path_type=Path),
    default=None,
    help="Folder with the public real data sets (default: $HLTM_REALDATA, else ../shared/realdata"
    " beside the repository; the README's 'Try it on real data' says where each set comes from).",
)


def settings() -> Settings:
    return Settings.from_env()


def fail(message: str) -> None:
    click.secho(f"error: {message}", fg="red", err=True)
    sys.exit(1)

"""What every command of the CLI shares: the settings, and how a command fails."""

from __future__ import annotations

import sys

import click

from hltm.settings import Settings


def settings() -> Settings:
    return Settings.from_env()


def fail(message: str) -> None:
    click.secho(f"error: {message}", fg="red", err=True)
    sys.exit(1)

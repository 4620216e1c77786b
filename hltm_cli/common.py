"""What every command of the CLI shares: the settings, how a command fails, and how it names an
id it does not know."""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any, TypeVar

import click
from rapidfuzz import fuzz, process

from hltm.settings import Settings

_NEAREST = 3  # known ids an unknown one is shown beside
_LIKE = 60  # rapidfuzz ratio (0–100) a known id needs to be shown as near
BUDGET_HELP = (
    "Cold judge evaluations for this run (default: HLTM_JUDGE_BUDGET, 3000); 0 judges nothing"
    " new and publishes from the score cache."
)

# The folder of public real data sets, one option name wherever a command reads it.
realdata_option = click.option(
    "--realdata",
    type=click.Path(path_type=Path),
    default=None,
    help="Folder with the public real data sets (default: $HLTM_REALDATA, else ../shared/realdata"
    " beside the repository; the README's 'Try it on real data' says where each set comes from).",
)


F = TypeVar("F", bound=Callable[..., Any])


def settings() -> Settings:
    return Settings.from_env()


def uses_data(command: F) -> F:
    """A command that reads or writes the data dir says which one first (one line on stderr,
    so stdout stays what a caller parses): with one world per data dir, a user sees at once
    which world a command touches."""

    @functools.wraps(command)
    def run(*args: Any, **kwargs: Any) -> Any:
        click.echo(f"data: {settings().data_dir}", err=True)
        return command(*args, **kwargs)

    return run  # type: ignore[return-value]


def fail(message: str, as_json: bool = False, **fields: str) -> None:
    """Exit 1 with `message`: one red line on stderr, or (`as_json`) one JSON object on stdout
    for callers that parse the output, with `fields` beside the error."""
    if as_json:
        click.echo(json.dumps({"error": message, **fields}, ensure_ascii=False))
    else:
        click.secho(f"error: {message}", fg="red", err=True)
    sys.exit(1)


def nearest_ids(given: str, known: Collection[str]) -> list[str]:
    """The known ids most like `given`, best first (a typo's likely meaning)."""
    found = process.extract(
        given, list(known), scorer=fuzz.ratio, limit=_NEAREST, score_cutoff=_LIKE
    )
    return [match for match, _, _ in found]


def require_known(kind: str, given: str, known: Collection[str], as_json: bool = False) -> None:
    """Fail with one line naming an id that is not among `known`, and the nearest known ones."""
    if given in known:
        return
    nearest = nearest_ids(given, known)
    if nearest:
        hint = f"; nearest known: {', '.join(nearest)}"
    elif known:
        hint = f"; {len(known)} {kind}s are known, none like it"
    else:
        hint = f"; no {kind} is known yet (ingest sources, then `hltm refresh`)"
    fail(f"unknown {kind} {given!r}{hint}", as_json)

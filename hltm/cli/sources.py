"""Source data commands: generate a sample world, ingest a directory, delete rows."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from hltm.cli import fail, settings
from hltm.sources.generator import SIZES, generate_world
from hltm.sources.ingest import ingest_directory


@click.command()
@click.option(
    "--out",
    "out_dir",
    type=click.Path(path_type=Path),
    default=None,
    help="Where to write the files (default: $HLTM_DATA_DIR/world).",
)
@click.option("--seed", default=7, show_default=True, help="Same seed, same bytes.")
@click.option("--size", type=click.Choice(sorted(SIZES)), default="demo", show_default=True)
def generate(out_dir: Path | None, seed: int, size: str) -> None:
    """Write a deterministic sample world (one JSONL per table + ground_truth.json)."""
    out_dir = out_dir or settings().data_dir / "world"
    counts = generate_world(out_dir, seed=seed, size=SIZES[size])
    click.echo(f"wrote {out_dir}: " + ", ".join(f"{n} {t}" for t, n in counts.items()))


@click.command()
@click.argument("directory", type=click.Path(path_type=Path))
def ingest(directory: Path) -> None:
    """Load DIRECTORY (CSV / Parquet / JSONL, one file per table) into the sources.

    Bad rows go to the `quarantine` table with their reason; exits non-zero only when nothing
    could be loaded."""
    try:
        report = ingest_directory(directory, settings().sources_db)
    except FileNotFoundError as err:
        fail(str(err))
    click.echo(report.summary())
    if report.loaded == 0:
        fail(f"nothing could be loaded from {directory}")
    sys.exit(0)


@click.group()
def delete() -> None:
    """Delete a project (with its documents, actions and vacancies), a document or a resume."""


def _deleter(kind: str):  # type: ignore[no-untyped-def]
    @delete.command(name=kind)
    @click.argument("row_id")
    def command(row_id: str) -> None:
        from hltm.deletion import delete_everywhere

        try:
            report = delete_everywhere(settings(), kind, row_id)
        except (KeyError, FileNotFoundError) as err:
            fail(str(err).strip("'\""))
        click.echo(
            f"deleted {kind} {row_id}; {report.summary()}; the source_changes sensor rebuilds"
            " the memory it touched"
        )

    command.__doc__ = f"Delete one {kind} by id, and what was derived from it (see hltm.deletion)."
    return command


for _kind in ("project", "document", "resume"):
    _deleter(_kind)

COMMANDS = [generate, ingest, delete]

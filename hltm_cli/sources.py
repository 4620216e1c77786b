"""Source data commands: generate a sample world, ingest a directory, delete rows."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from hltm.memory.models import split_node_id
from hltm.memory.tree import Plan
from hltm.sources.ingest import OtherWorld, ingest_directory
from hltm.sources.schema import LANGUAGES
from hltm_cli.common import fail, settings, uses_data
from hltm_devkit.sizes import SIZES


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
    from hltm_devkit.generator import generate_world  # 3.7k lines: only here

    out_dir = out_dir or settings().data_dir / "world"
    counts = generate_world(out_dir, seed=seed, size=SIZES[size])
    click.echo(f"wrote {out_dir}: " + ", ".join(f"{n} {t}" for t, n in counts.items()))


def observe_sources(redacted: bool = False) -> None:
    """Record a fresh observation of the source tables in the Dagster instance, so the UI's row
    counts follow every ingest and delete, and after a delete that redacted the ranking journal
    the head of its deletion records (best effort: the sources are already committed, and the
    head file beside the journal anchors it too)."""
    from hltm_cli.dagster_runs import observe_sources as record
    from hltm_cli.dagster_runs import record_redactions

    try:
        record(settings().sources_db)
        if redacted:
            record_redactions(settings().derived_db)
    except Exception as err:  # noqa: BLE001 - a stale UI count must not fail a committed ingest
        click.secho(f"warning: could not record the observation in Dagster: {err}", fg="yellow")


@click.command()
@click.argument("directory", type=click.Path(path_type=Path))
@click.option(
    "--encoding",
    default="utf-8",
    show_default=True,
    help="Text encoding of the CSV / JSONL files (e.g. cp1251); lines that do not decode are "
    "quarantined with their line number.",
)
@click.option(
    "--language",
    type=click.Choice(LANGUAGES),
    default=None,
    help="The language of every resume whose file has no language column (default: detected "
    "from each resume's text).",
)
@click.option(
    "--add-contracts",
    is_flag=True,
    help="Load a folder whose contracts are all new to this data dir into it anyway (they then "
    "share its resumes, rankings and UI); without it such a folder is refused.",
)
@uses_data
def ingest(directory: Path, encoding: str, language: str | None, add_contracts: bool) -> None:
    """Load DIRECTORY (CSV / Parquet / JSONL files named after their table) into the sources.

    Bad rows are quarantined with their reason and line (`hltm quarantine`); the summary is
    printed whatever happened. A folder that shares no contract with the ones this data dir
    holds is another world and is refused (see --add-contracts). Exits non-zero when nothing
    could be loaded or a table failed."""
    cfg = settings()
    defaults = {"language": language} if language else None
    try:
        report = ingest_directory(directory, cfg.sources_db, encoding, defaults, add_contracts)
    except OtherWorld as err:
        own = Path.cwd() / f"{directory.resolve().name}-data"
        fail(
            f"{cfg.data_dir} {err}. To keep the two worlds apart, ingest into a data dir"
            f" of its own: HLTM_DATA_DIR={own} .venv/bin/hltm ingest {directory} (and the same"
            " HLTM_DATA_DIR for every later hltm command and make ui). To add these contracts to"
            f" {cfg.data_dir} (sharing its resumes, rankings and UI): .venv/bin/hltm ingest"
            f" {directory} --add-contracts"
        )
    except (FileNotFoundError, LookupError) as err:
        fail(str(err))
    click.echo(report.summary())
    if report.changed:
        observe_sources()
    if report.failed:
        fail(f"{len(report.failed)} table(s) failed: {', '.join(t.table for t in report.failed)}")
    if report.loaded == 0:
        fail(f"nothing could be loaded from {directory}")
    if report.changed:
        click.echo(
            "next: .venv/bin/hltm refresh   (memory tree, calibrations, judge scores and rankings"
            " of what changed; or start the UI, whose sensors do the same: make ui)"
        )
    sys.exit(0)


@click.command()
@click.option("--all", "show_all", is_flag=True, help="Also the rows a later ingest resolved.")
@uses_data
def quarantine(show_all: bool) -> None:
    """The rows ingest quarantined: which file and line, why, and what resolves each (a good
    row with the same id in a later ingest, or the same file read without the problem)."""
    from hltm.sources.ingest import quarantined
    from hltm.sources.report import reason_kind, remedy

    rows = quarantined(settings().sources_db, include_resolved=show_all)
    open_rows = [r for r in rows if r.resolved_at is None]
    if not rows:
        click.echo("nothing is quarantined")
        return
    if not open_rows:
        click.echo("nothing is quarantined now")
    groups: dict[tuple[str, str], list] = {}
    for row in rows:
        groups.setdefault((row.table, reason_kind(row.reason)), []).append(row)
    for (table, kind), found in groups.items():
        click.secho(f"{table}: {len(found)} × {kind}", bold=True)
        click.echo(f"  what resolves it: {remedy(found[0].reason, table)}")
        for row in found:
            where = f"{row.file} line {row.line}" if row.line is not None else row.file
            state = f"  (resolved {row.resolved_at:%Y-%m-%d %H:%M})" if row.resolved_at else ""
            click.echo(f"  {row.key or '-':<16} {where:<28} {row.reason}{state}")
    click.echo(
        f"{len(open_rows)} open"
        + (f", {len(rows) - len(open_rows)} resolved" if show_all else " (--all: resolved too)")
    )


def rebuild_purged_memory(plan: Plan) -> None:
    """Rebuild the memory nodes a deletion purged (a `refresh_memory_tree` run of their
    contracts' partitions), or say exactly what is missing and how to finish. Readers never saw
    the deleted rows meanwhile: the purged nodes were gone before this starts."""
    if not plan.rebuilds:
        return
    from hltm_cli.dagster_runs import refresh_memory, step_failures

    nodes = ", ".join(plan.rebuilds)
    contracts = {split_node_id(n)[1] for n in plan.contracts}
    results = refresh_memory(contracts, fail_on_error=False)
    runs = ", ".join(r.run_id[:8] for r in results)
    if all(r.success for r in results):
        click.echo(f"rebuilt the memory it held without it: {nodes} (run {runs})")
        return
    reasons = "\n".join(line for r in results for line in step_failures(r))
    click.secho(
        f"warning: the memory of {nodes} was purged with the deleted rows, and its rebuild"
        f" (run {runs}) failed:\n{reasons or 'see the run in dagster dev'}\nUntil it is"
        " rebuilt, answers about them say there is no memory (nothing deleted is ever served)."
        " The source_changes sensor rebuilds them on its next tick when the daemon runs;"
        " without it, run `hltm refresh`.",
        fg="yellow",
        err=True,
    )
    sys.exit(4)


# What each `hltm delete KIND` removes with the row (hltm.deletion does it in every store).
DELETES = {
    "project": "its documents, recruiter actions, vacancies (with their scores and rankings) and"
    " its memory; its seat's and contract's memory is rebuilt without it",
    "document": "its text in its project's memory, which is rebuilt without it",
    "resume": "the recruiter actions that reference it, its judge scores, its place in every"
    " ranking (the journal redacted, still verifiable) and its vectors",
}


@click.group()
def delete() -> None:
    """Delete a project (with its documents, actions and vacancies), a document or a resume."""


def _say_waiting(what: str) -> None:
    click.secho(f"waiting: {what}; the delete's purge goes on when it ends", fg="yellow", err=True)


def _deleter(kind: str):  # type: ignore[no-untyped-def]
    @delete.command(
        name=kind,
        help=f"Delete one {kind} by id, and what was derived from it: {DELETES[kind]}.",
    )
    @click.argument("row_id", metavar=f"{kind.upper()}_ID")
    @uses_data
    def command(row_id: str) -> None:
        from hltm.deletion import delete_everywhere, zero_unused_slots

        config = settings()
        try:
            report = delete_everywhere(config, kind, row_id, _say_waiting)
        except (KeyError, FileNotFoundError) as err:
            fail(str(err.args[0] if err.args else err))  # str() of a KeyError adds quotes
        observe_sources(redacted=bool(report.purged.get("ranking_journal rows redacted")))
        click.echo(f"deleted {kind} {row_id}; {report.summary()}")
        try:
            rebuild_purged_memory(report.memory_to_rebuild)
        finally:
            # The rebuild runs in this process, which read the deleted text: an index segment
            # it created (a contract whose collection the purge dropped) wrote freed memory.
            if report.memory_to_rebuild.rebuilds and not config.chroma_host:
                zero_unused_slots(config.chroma_path)

    return command


for _kind in ("project", "document", "resume"):
    _deleter(_kind)

COMMANDS = [generate, ingest, quarantine, delete]

"""The CLI's one module that imports Dagster: it runs jobs of the code location on the
persistent instance and reads what only the instance knows (the journal's anchor, the source
observations, the recall probe's months). Every other command stays Dagster-free, so `hltm ask`
or `hltm serve` never pay for loading Dagster."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from hltm.errors import StoreError, disk_fault
from hltm.runlock import JUDGE_RUN, MEMORY_REFRESH, running
from hltm_cli.common import fail, settings

QUIET_RUN = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}
# Jobs whose work runs one at a time per data dir (`hltm.runlock`): a second one waits.
EXCLUSIVE = {
    "refresh_memory_tree": MEMORY_REFRESH,
    "rebuild_memory_tree": MEMORY_REFRESH,
    "judge_refresh": JUDGE_RUN,
}


def dagster_home() -> Path:
    """A persistent Dagster instance: runs and dynamic partitions survive restarts, and a killed
    run is detected and failed (`hltm_dagster.instance`)."""
    from hltm_dagster.instance import OtherWorld, ensure_dagster_home

    try:
        home, warning = ensure_dagster_home()
    except OtherWorld as err:
        fail(str(err))
    if warning:
        click.secho(f"warning: {warning}", fg="yellow", err=True)
    return home


def run_job(  # type: ignore[no-untyped-def]
    name: str,
    run_config: dict | None = None,
    tags: dict | None = None,
    asset_selection: list[str] | None = None,
    partition_key: str | None = None,
    fail_on_error: bool = True,
):
    """Run a job of the code location on the persistent instance, in this process: a run of the
    code location (`hltm_dagster.instance.execute_located`), listed under its job in the UI and
    re-executable there. A failed run exits with its steps' reasons, or is returned as it is
    (`fail_on_error=False`). Dagster's console shows nothing below CRITICAL: a failure is
    printed once, as each failed step's own line, not as the event log's stack traces
    (`dagster dev` keeps them)."""
    import dagster as dg

    from hltm_dagster.instance import execute_located, fail_dead_runs, located_job

    job, origin = located_job(name)
    if name in EXCLUSIVE and (what := running(settings().data_dir, EXCLUSIVE[name])):
        click.secho(f"waiting: {what}; this run starts when it ends", fg="yellow", err=True)
    selection = [dg.AssetKey(key) for key in asset_selection] if asset_selection else None
    config = {**QUIET_RUN, **(run_config or {})}
    run_tags = {**(tags or {}), **({"dagster/partition": partition_key} if partition_key else {})}
    with dg.DagsterInstance.get() as instance:
        fail_dead_runs(instance)  # a run killed earlier must not stay STARTED
        result = execute_located(instance, job, origin, config, run_tags, selection)
    for line in failed_checks(result):
        click.secho(f"warning: {line}", fg="yellow", err=True)
    if fail_on_error and not result.success:
        reasons = (
            step_failures(result)
            or [e.message or "" for e in result.all_events if e.is_failure][-1:]
        )
        fail(f"Dagster job '{name}' failed: " + ("\n".join(reasons) or "see dagster dev"))
    return result


def op_output(result: Any, op: str) -> Any:
    """An op's output, read back through the run's IO manager: a run of the code location opens
    its context for that (`with result`), an in-process test run needs none."""
    if not hasattr(result, "__enter__"):
        return result.output_for_node(op)
    with result:
        return result.output_for_node(op)


def refresh_memory(plan: Any) -> Any:
    """A `refresh_memory_tree` run of a refresh plan, returned whether it failed or not."""
    from hltm_dagster.defs.memory.assets import refresh_run_config

    return run_job("refresh_memory_tree", refresh_run_config(plan), fail_on_error=False)


def calibrate_vacancies() -> None:
    """Runs of the calibration asset over every vacancy of the sources: their partitions added
    first, then one run per contiguous range of them (one run, unless vacancies were deleted)."""
    import dagster as dg

    from hltm.judge.data import vacancy_ids
    from hltm_dagster.defs.sources.assets import VACANCIES
    from hltm_dagster.instance import partition_range_tags, partition_ranges

    wanted = set(vacancy_ids(settings().sources_db))
    dagster_home()
    with dg.DagsterInstance.get() as instance:
        known = set(instance.get_dynamic_partitions(str(VACANCIES.name)))
        if missing := sorted(wanted - known):
            instance.add_dynamic_partitions(str(VACANCIES.name), missing)
        order = list(instance.get_dynamic_partitions(str(VACANCIES.name)))
    for start, end in partition_ranges(order, wanted):
        run_job("calibrate_vacancies", tags=partition_range_tags(start, end))


def failed_checks(result: Any) -> list[str]:
    """One line per check that failed in the run (a WARN check, or an ERROR one that did not
    stop it), with how many of its evaluations failed and the first one's description: the
    command that ran the check says so, not only the UI."""
    evaluations: dict[tuple[str, str], list[Any]] = {}
    for evaluation in result.get_asset_check_evaluations():
        key = (evaluation.check_name, evaluation.asset_key.to_user_string())
        evaluations.setdefault(key, []).append(evaluation)
    lines = []
    for (check, asset), found in evaluations.items():
        failed = [e for e in found if not e.passed]
        if not failed:
            continue
        partitions = [e.partition for e in failed if getattr(e, "partition", None)]
        where = f", partitions {', '.join(partitions[:3])}{' …' * (len(partitions) > 3)}"
        lines.append(
            f"check {check} on {asset} failed ({len(failed)} of {len(found)} evaluations"
            f"{where if partitions else ''}, run {result.run_id[:8]}):"
            f" {failed[0].description or 'no description'}"
        )
    return lines


def step_failures(result: Any) -> list[str]:
    """Each failed step's own message, one line: a `dg.Failure`'s description (e.g. the quote
    gate's "blocked: 0/11 mandatory quotes survived") with the totals in its metadata, else the
    exception that ended the step — not the run's "Steps failed: [...]"."""
    lines = []
    for event in result.get_step_failure_events():
        data = event.step_failure_data
        failure = data.user_failure_data
        reason = failure.description if failure else None
        totals = {k: v.value for k, v in (failure.metadata if failure else {}).items()}
        numbers = [f"{k} {v}" for k, v in totals.items() if isinstance(v, int | float)]
        if reason and numbers:
            reason = f"{reason} ({', '.join(numbers)})"
        if not reason:
            reason = _root_cause(data.error)
        lines.append(f"{event.step_key}: {reason}")
    return lines


def _root_cause(error: Any) -> str:
    """The message of the exception that ended a step: a `StoreError` it raised (which names
    the file and what to do), else the innermost cause."""
    names = {cls.__name__ for cls in (StoreError, *StoreError.__subclasses__())}
    while error is not None and error.cls_name not in names and error.cause is not None:
        error = error.cause
    if error is None:
        return "failed"
    message = error.message.strip()
    if error.cls_name in names:  # its own words, without the class's dotted name
        return message.split(": ", 1)[-1]
    fault = disk_fault(settings().data_dir, RuntimeError(message))  # an OSError's errno text
    return str(fault) if fault else message


def journal_anchor_report(derived_db: Path, reanchor: bool = False) -> Any:
    """The ranking journal checked against its head file and the instance's anchors; with
    `reanchor`, the head file written anew first if the journal verifies without it."""
    import dagster as dg

    from hltm_dagster.defs.judge.assets import chain_check

    dagster_home()
    with dg.DagsterInstance.get() as instance:
        return chain_check(instance, derived_db, reanchor)


def record_redactions(derived_db: Path) -> None:
    """The ranking journal's deletion records, anchored in the instance (after a delete)."""
    import dagster as dg

    from hltm_dagster.defs.judge.assets import record_redactions as record

    dagster_home()
    with dg.DagsterInstance.get() as instance:
        record(instance, derived_db)


def observe_sources(sources_db: Path) -> None:
    """A fresh observation of the source tables in the instance (the UI's row counts)."""
    import dagster as dg

    from hltm_dagster.defs.sources.assets import record_source_observations

    dagster_home()
    with dg.DagsterInstance.get() as instance:
        record_source_observations(instance, sources_db)


def last_probe_month() -> str:
    """The recall probe's latest monthly partition."""
    from hltm_dagster.defs.probe.assets import monthly

    return monthly.get_last_partition_key()

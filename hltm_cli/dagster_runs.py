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
# Jobs whose work runs one at a time (`hltm.runlock`; a refresh per contract on the server
# profile): a second one waits.
EXCLUSIVE = {
    "refresh_memory_tree": MEMORY_REFRESH,
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
    contracts: set[str] | None = None,
):
    """Run a job of the code location on the persistent instance, in this process: a run of the
    code location (`hltm_dagster.instance.execute_located`), listed under its job in the UI and
    re-executable there. A failed run exits with its steps' reasons, or is returned as it is
    (`fail_on_error=False`). Dagster's console shows nothing below CRITICAL: a failure is
    printed once, as each failed step's own line, not as the event log's stack traces
    (`dagster dev` keeps them). `contracts`: those a memory refresh covers (what it would wait
    for is said first)."""
    import dagster as dg

    from hltm_dagster.instance import execute_located, fail_dead_runs, located_job

    job, origin = located_job(name)
    exclusive = EXCLUSIVE.get(name)
    if exclusive and (what := running(settings().data_dir, exclusive, contracts)):
        click.secho(f"waiting: {what}; this run starts when it ends", fg="yellow", err=True)
    selection = [dg.AssetKey(key) for key in asset_selection] if asset_selection else None
    config = {**QUIET_RUN, **(run_config or {})}
    run_tags = {**(tags or {}), **({"dagster/partition": partition_key} if partition_key else {})}
    with dg.DagsterInstance.get() as instance:
        fail_dead_runs(instance)  # a run killed earlier must not stay STARTED
        result = execute_located(instance, job, origin, config, run_tags, selection)
    for line in failed_checks(result):
        click.secho(f"warning: {line}", fg="yellow", err=True)
    if fail_on_error:
        raise_failed(name, result)
    return result


def raise_failed(name: str, result: Any, totals: dict[str, Any] | None = None) -> None:
    """Exit with the failed run's steps' reasons, and the numbers of `totals` (what the run did
    before it failed); nothing, when it succeeded."""
    if result.success:
        return
    reasons = (
        step_failures(result) or [e.message or "" for e in result.all_events if e.is_failure][-1:]
    )
    numbers = [f"{k} {v}" for k, v in (totals or {}).items() if isinstance(v, int | float)]
    done = f" ({', '.join(numbers)})" if numbers else ""
    fail(f"Dagster job '{name}' failed: " + ("\n".join(reasons) or "see dagster dev") + done)


def refresh_memory(
    contracts: set[str] | None = None, from_scratch: bool = False, fail_on_error: bool = True
) -> list[Any]:
    """Runs of the memory's asset job over these contracts' partitions (None: every contract
    the sources or the store holds), one per contiguous range of them: what the
    `source_changes` sensor requests, and the UI's Materialize of those partitions. The
    partitions of contracts neither holds any more (purged by the runs) are dropped after. Each
    run is returned (whether it failed or not, with `fail_on_error=False`)."""
    import dagster as dg

    from hltm.memory.planner import memory_partitions
    from hltm_dagster.defs.memory.assets import CONTRACTS, REFRESH_JOB, refresh_tags

    cfg, name = settings(), str(CONTRACTS.name)
    wanted = memory_partitions(cfg.sources_db, cfg.derived_db) if contracts is None else contracts
    dagster_home()
    with dg.DagsterInstance.get() as instance:
        runs = refresh_tags(instance, wanted)
    config = {"ops": {"memory_tree": {"config": {"from_scratch": True}}}} if from_scratch else None
    results = [
        run_job(REFRESH_JOB, config, tags=tags, fail_on_error=False, contracts=wanted)
        for tags in runs
    ]
    kept = memory_partitions(cfg.sources_db, cfg.derived_db)
    with dg.DagsterInstance.get() as instance:
        for key in sorted(set(instance.get_dynamic_partitions(name)) - kept):
            instance.delete_dynamic_partition(name, key)
    for result in results if fail_on_error else []:
        raise_failed(REFRESH_JOB, result)
    return results


def vacancy_runs(job: str, wanted: set[str], run_config: dict | None = None) -> list[Any]:
    """Runs of a per-vacancy asset job over these vacancies: their partitions added first, then
    one run per contiguous range of them (one run, unless vacancies were deleted in between).
    Each run is returned whether it failed or not."""
    import dagster as dg

    from hltm_dagster.defs.sources.assets import vacancy_ranges
    from hltm_dagster.instance import partition_range_tags

    dagster_home()
    with dg.DagsterInstance.get() as instance:
        ranges = vacancy_ranges(instance, wanted)
    return [
        run_job(job, run_config, tags=partition_range_tags(start, end), fail_on_error=False)
        for start, end in ranges
    ]


def calibrate_vacancies() -> None:
    """Runs of the calibration asset over every vacancy of the sources."""
    from hltm.judge.data import vacancy_ids

    for result in vacancy_runs("calibrate_vacancies", set(vacancy_ids(settings().sources_db))):
        raise_failed("calibrate_vacancies", result)


def partition_metadata(result: Any, asset: str) -> dict[str, dict[str, Any]]:
    """partition → the metadata values of the run's materialization of `asset`."""
    return {
        str(m.partition): {k: v.value for k, v in m.metadata.items()}
        for m in (e.materialization for e in result.get_asset_materialization_events())
        if m.asset_key.to_user_string() == asset
    }


def failed_checks(result: Any) -> list[str]:
    """One line per check that failed in the run (a WARN check, or an ERROR one that did not
    stop it), with how many of its evaluations failed and the first one's description: the
    command that ran the check says so, not only the UI."""
    evaluations: dict[tuple[str, str], list[Any]] = {}
    for evaluation in result.get_asset_check_evaluations():
        key = (evaluation.check_name, evaluation.asset_key.to_user_string())
        evaluations.setdefault(key, []).append(evaluation)
    stopped = [  # the steps of blocking checks that stopped the run: its error line says them
        e.step_key
        for e in result.get_step_failure_events()
        if e.step_failure_data.error and e.step_failure_data.error.cls_name == _CHECK_FAILED
    ]
    lines = []
    for (check, asset), found in evaluations.items():
        failed = [e for e in found if not e.passed]
        if not failed or any(step.endswith(f"_{check}") for step in stopped):
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
        if not reason and data.error is not None and data.error.cls_name == _CHECK_FAILED:
            reason = "; ".join(_blocking_failures(result))
        if not reason:
            reason = _root_cause(data.error)
        lines.append(f"{event.step_key}: {reason}")
    return lines


_CHECK_FAILED = "DagsterAssetCheckFailedError"


def _blocking_failures(result: Any) -> list[str]:
    """What each failed ERROR check of the run says (a blocking one stopped the run)."""
    import dagster as dg

    return [
        e.description or e.check_name
        for e in result.get_asset_check_evaluations()
        if not e.passed and e.severity == dg.AssetCheckSeverity.ERROR
    ]


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

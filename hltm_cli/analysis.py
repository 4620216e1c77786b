"""`hltm patterns …` (mining and approval), `hltm probe` (monthly recall probe), `hltm stats`
(the judge's statistics report and model tender)."""

from __future__ import annotations

import getpass
import json

import click

from hltm_cli.common import fail, settings, uses_data

# --------------------------------------------------------------------------- patterns


@click.group(name="patterns")
def patterns_group() -> None:
    """Query-pattern mining: recurring templates and asked attributes → memory hints."""


def _print_patterns(rows, as_json: bool) -> None:  # type: ignore[no-untyped-def]
    if as_json:
        click.echo(json.dumps([p.as_dict() for p in rows], ensure_ascii=False, indent=1))
        return
    if not rows:
        click.echo("no patterns")
        return
    for p in rows:
        flag = "" if p.current else " (below min support now)"
        if not p.releasable:
            flag += " (not releasable: no answer field or a slot facets cannot fill)"
        answers = f" → {p.answer_field}" if p.kind == "template" and p.answer_field else ""
        click.echo(
            f"{p.pattern_id}  {p.status:<8}  support {p.support:>3} ({p.occurrences} uses)  "
            f"{p.kind:<9}  {p.text}{answers}{flag}"
        )


@patterns_group.command(name="mine")
@click.option("--min-support", type=int, default=None, help="Distinct identities a pattern needs.")
@click.option(
    "--auto-approve/--no-auto-approve", default=None, help="Approve new patterns at once."
)
@click.option("--window-days", type=int, default=None, help="Only queries of the last N days.")
@click.option("--no-release", is_flag=True, help="Do not release approved patterns as hints.")
@click.option("--merge-similar", is_flag=True, help="Merge near-identical templates (embeds them).")
@click.option("--json", "as_json", is_flag=True)
@uses_data
def patterns_mine(
    min_support: int | None,
    auto_approve: bool | None,
    window_days: int | None,
    no_release: bool,
    merge_similar: bool,
    as_json: bool,
) -> None:
    """Mine the query log now (the `query_patterns` asset does the same on its schedule)."""
    from hltm.patterns import PatternSettings, mine_query_log

    overrides = {
        k: v
        for k, v in {
            "min_support": min_support,
            "auto_approve": auto_approve,
            "window_days": window_days,
        }.items()
        if v is not None
    }
    config = PatternSettings.from_env(**overrides)
    embedder = None
    if merge_similar:
        from hltm.embeddings import make_embedder

        embedder = make_embedder(settings())
    outcome = mine_query_log(
        settings().derived_db, config, embedder=embedder, do_release=not no_release
    )
    if as_json:
        click.echo(json.dumps(outcome.summary(), ensure_ascii=False, indent=1, default=str))
        return
    s = outcome.summary()
    click.echo(
        f"{s['queries']} queries ({s['unanswered']} not in memory) from {s['identities']}"
        f" identities → {s['templates']} templates, "
        f"{s['attributes']} attributes with support ≥ {config.min_support} "
        f"({s['new']} new, {s['auto_approved']} auto-approved)"
    )
    _print_patterns([p for p in outcome.stored if p.current], False)
    if outcome.release is not None:
        r = outcome.release
        state = "released" if r.changed else "unchanged"
        click.echo(f"hints {r.hints.version} {state} ({len(r.pattern_ids)} patterns)")


@patterns_group.command(name="list")
@click.option("--status", type=click.Choice(["proposed", "approved", "released", "rejected"]))
@click.option("--kind", type=click.Choice(["template", "attribute"]))
@click.option("--all", "show_all", is_flag=True, help="Include patterns below min support now.")
@click.option("--json", "as_json", is_flag=True)
@uses_data
def patterns_list(status: str | None, kind: str | None, show_all: bool, as_json: bool) -> None:
    """Stored patterns, best supported first."""
    from hltm.patterns import list_patterns
    from hltm.warehouse import connect

    with connect(settings().derived_db) as con:
        rows = list_patterns(con, status=status, kind=kind, current_only=not show_all)
    _print_patterns(rows, as_json)


def _decide(ids: tuple[str, ...], status: str, by: str | None, note: str, do_release: bool) -> None:
    from hltm.patterns import decide, release, resolve_ids
    from hltm.warehouse import connect

    actor = by or getpass.getuser()
    with connect(settings().derived_db) as con:
        try:
            full = resolve_ids(con, ids)
            changed = decide(con, full, status, actor, note)
        except (KeyError, ValueError) as err:
            fail(str(err.args[0] if err.args else err))
            return
        click.echo(f"{status} by {actor}: {len(changed)} of {len(full)} pattern(s) changed")
        if do_release:
            r = release(con, actor=actor)
            state = "released" if r.changed else "unchanged"
            click.echo(
                f"hints {r.hints.version} {state}: {len(r.hints.qa_templates)} QA templates, "
                f"{len(r.hints.attributes)} attributes"
                + (" — the next memory refresh uses them" if r.changed else "")
            )


@patterns_group.command(name="approve")
@click.argument("ids", nargs=-1, required=True)
@click.option("--by", default=None, help="Who approves (default: the OS user).")
@click.option("--note", default="", help="Why.")
@click.option("--no-release", is_flag=True, help="Approve only; release with the next mining.")
@uses_data
def patterns_approve(ids: tuple[str, ...], by: str | None, note: str, no_release: bool) -> None:
    """Approve patterns (ids or unambiguous id prefixes) and release them as memory hints."""
    _decide(ids, "approved", by, note, not no_release)


@patterns_group.command(name="reject")
@click.argument("ids", nargs=-1, required=True)
@click.option("--by", default=None, help="Who rejects (default: the OS user).")
@click.option("--note", default="", help="Why.")
@click.option("--no-release", is_flag=True, help="Keep the current hints until the next mining.")
@uses_data
def patterns_reject(ids: tuple[str, ...], by: str | None, note: str, no_release: bool) -> None:
    """Reject patterns; a released one leaves the hints with the next release."""
    _decide(ids, "rejected", by, note, not no_release)


@patterns_group.command(name="release")
@uses_data
def patterns_release() -> None:
    """Release the approved patterns as memory hints (a no-op when nothing changed)."""
    from hltm.patterns import release
    from hltm.warehouse import connect

    with connect(settings().derived_db) as con:
        r = release(con, actor=getpass.getuser())
    state = "released" if r.changed else "unchanged"
    click.echo(
        f"hints {r.hints.version} {state}: {len(r.hints.qa_templates)} QA templates, "
        f"{len(r.hints.attributes)} attributes"
    )


# --------------------------------------------------------------------------- probe


@click.command(name="probe")
@click.option("--month", default=None, help="YYYY-MM (default: the month that just ended).")
@click.option("--vacancy", "vacancies", multiple=True, help="Only these vacancies (repeatable).")
@click.option("--sample-size", type=int, default=None, help="Candidates per vacancy (default 20).")
@click.option("--min-overall", type=int, default=None, help="Alert threshold (default 80).")
@click.option("--budget", type=int, default=None, help="Cold evaluations for this run.")
@click.option("--estimate", is_flag=True, help="Only pick the samples and estimate the cost.")
@click.option("--json", "as_json", is_flag=True)
@uses_data
def probe_command(
    month: str | None,
    vacancies: tuple[str, ...],
    sample_size: int | None,
    min_overall: int | None,
    budget: int | None,
    estimate: bool,
    as_json: bool,
) -> None:
    """The monthly recall probe: candidates from outside each pool (archive included), judged
    through the score cache; lists only displacing finds."""
    import logging
    from datetime import date

    from hltm.judge import probe

    logging.getLogger("bm25s").setLevel(logging.WARNING)
    from hltm.judge.pipeline import judge_config
    from hltm.llm import make_llm

    if month is None:
        today = date.today().replace(day=1)
        month = f"{today.year - (today.month == 1)}-{(today.month - 2) % 12 + 1:02d}"
    overrides = {
        k: v
        for k, v in {
            "sample_size": sample_size,
            "min_overall": min_overall,
            "budget": budget,
        }.items()
        if v is not None
    }
    s = settings()
    config = probe.ProbeSettings.from_env(**overrides)
    llm = make_llm(s, model=s.judge_model)
    judge_cfg = judge_config(llm, s.reasoning_effort)
    try:
        plan = probe.plan(s.sources_db, s.derived_db, judge_cfg, month, config, vacancies or None)
    except FileNotFoundError as err:
        fail(str(err))
        return
    est = plan.estimate()
    if not as_json:
        click.echo(
            f"probe {month}: {est['pairs']} pairs over {est['vacancies']} vacancies "
            f"({est['skipped_vacancies']} without a ranking skipped); {est['cold_pairs']} not "
            f"cached, {est['pairs_within_budget']} within the budget; ≈{est['est_tokens']:,} "
            f"tokens, cost {est['est_usd']}"
        )
    if estimate:
        if as_json:
            click.echo(json.dumps(est, ensure_ascii=False, indent=1))
        return
    result = probe.judge(plan, s.derived_db, llm, run_id=f"cli-probe-{month}")
    probe.store(result, s.derived_db)
    if as_json:
        click.echo(
            json.dumps(
                {**result.summary(), "finds": [r.as_find() for r in result.finds]},
                ensure_ascii=False,
                indent=1,
            )
        )
        return
    summary = result.summary()
    click.echo(
        f"{summary['scored']} scored, {summary['deferred_by_budget']} deferred by the budget, "
        f"{summary['strong_outside']} strong (≥ {config.min_overall}), "
        f"{summary['displacing_finds']} displacing"
    )
    for f in result.finds:
        click.secho(
            f"  {f.vacancy_id}: {f.resume_id} ({f.layer}) overall {f.overall} > top-"
            f"{config.top_k} minimum {f.top_min} — {f.actual_role or ''}",
            fg="yellow",
        )


# --------------------------------------------------------------------------- stats


@click.group(name="stats")
def stats_group() -> None:
    """The judge's statistics toolkit."""


@stats_group.command(name="report")
@click.option("--out", "out_dir", type=click.Path(), default=None,
              help="Report directory (default: <data dir>/reports/judge_stats).")  # fmt: skip
@click.option("--models", default=None, help="Comma-separated judge models for the tender.")
@click.option("--permutations", type=int, default=None, help="Label shuffles (default 1000).")
@click.option("--resamples", type=int, default=None, help="Bootstrap resamples (default 10000).")
@click.option("--golden", "golden_dir", type=click.Path(), default=None, help="Golden set dir.")
@click.option("--vacancy", "vacancies", multiple=True, help="Only these vacancies (repeatable).")
@uses_data
def stats_report(
    out_dir: str | None,
    models: str | None,
    permutations: int | None,
    resamples: int | None,
    golden_dir: str | None,
    vacancies: tuple[str, ...],
) -> None:
    """Judge the golden set with every tender model, run the weight study, write the report."""
    from pathlib import Path

    from hltm.evaluation.judge.golden import GOLDEN_DIR, load_golden
    from hltm.evaluation.judge.tender import ReportSettings, build_report, tender_table

    s = settings()
    rs = ReportSettings.from_env(
        models=tuple(m.strip() for m in models.split(",") if m.strip()) if models else None,
        n_permutations=permutations,
        n_resamples=resamples,
    )
    try:
        gs = load_golden(Path(golden_dir) if golden_dir else GOLDEN_DIR)
    except (FileNotFoundError, ValueError) as err:
        fail(str(err))
        return
    target = Path(out_dir) if out_dir else s.data_dir / "reports" / "judge_stats"
    report = build_report(s, target, rs, gs=gs, vacancy_ids=vacancies or None)
    h = report.headline()
    click.echo(f"report: {report.path}")
    click.echo(tender_table(report.tender, report.cosine))
    d = h["paired_difference"]
    click.echo(
        f"sort by overall {h['sort_by_overall_p10']:.1%}, weighted (LOOCV) "
        f"{h['weighted_loocv_p10']:.1%}, permutation ceiling {h['permutation_p95']:.1%}, "
        f"paired difference {d[0] * 100:+.1f} pt [{d[1] * 100:+.1f}, {d[2] * 100:+.1f}] → "
        + ("weights help" if h["weights_needed"] else "sort by overall")
    )


COMMANDS = [patterns_group, probe_command, stats_group]

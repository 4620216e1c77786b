"""`hltm judge …`: run the judge, read rankings and their evidence, reconstruct the past, and
evaluate / re-freeze the golden set.

`hltm judge run` executes the same `judge_refresh` asset job the nightly schedule, the sensor
and the UI's Materialize run, in process on the persistent instance ($DAGSTER_HOME), so the run
and its per-vacancy materialisations show in the UI afterwards.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click

from hltm_cli.common import BUDGET_HELP, fail, realdata_option, require_known, settings, uses_data
from hltm_cli.query import eval_group


@click.group()
def judge() -> None:
    """The evidence-backed candidate judge: rankings, journal, golden set."""


def _parse_moment(text: str | None) -> datetime:
    if not text:
        return datetime.now(UTC).replace(tzinfo=None)
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        fail(f"--at {text!r}: expected an ISO date or timestamp, e.g. 2026-01-05T03:00")
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC).replace(tzinfo=None)
    return moment


def _require_vacancies(vacancy_ids: list[str]) -> None:
    """Fail on a vacancy id neither the sources nor the ranking journal know, naming the
    nearest known ones."""
    if not vacancy_ids:
        return
    from hltm.judge.data import load_vacancies
    from hltm.judge.journal import journal_entries
    from hltm.warehouse import store_exists

    cfg = settings()

    def in_sources(ids: list[str] | None) -> set[str]:
        if not store_exists(cfg.sources_db):
            return set()
        return {v.vacancy_id for v in load_vacancies(cfg.sources_db, ids)}

    # The given ids alone first: the whole sources and journal are read only to name the
    # nearest ids of one that neither knows.
    found = in_sources(vacancy_ids)
    missing = [v for v in vacancy_ids if v not in found and not journal_entries(cfg.derived_db, v)]
    if not missing:
        return
    known = in_sources(None) | {e.vacancy_id for e in journal_entries(cfg.derived_db)}
    for vacancy_id in missing:
        require_known("vacancy", vacancy_id, known)


def run_judge(
    vacancies: list[str] | None = None,
    budget: int | None = None,
    workers: int = 0,
    rejudge_failed: bool = False,
) -> dict[str, Any]:
    """Run the `judge_refresh` asset job over the vacancies' partitions (all by default) in
    process on the persistent instance; its totals."""
    from hltm.judge.data import vacancy_ids
    from hltm_cli.dagster_runs import partition_metadata, raise_failed, vacancy_runs

    known = vacancy_ids(settings().sources_db)  # one only the journal knows is not judged
    wanted = set(known).intersection(vacancies) if vacancies else set(known)
    config = {"budget": budget, "workers": workers, "rejudge_failed": rejudge_failed}
    runs = vacancy_runs("judge_refresh", wanted, {"ops": {"judge_scores": {"config": config}}})
    scores: dict[str, dict[str, Any]] = {}
    published: dict[str, dict[str, Any]] = {}
    for result in runs:
        scores.update(partition_metadata(result, "judge_scores"))
        published.update(partition_metadata(result, "rankings"))
    totals = judge_run_totals(scores, published)
    for result in runs:
        raise_failed("judge_refresh", result, totals)
    return totals


def judge_run_totals(
    scores: dict[str, dict[str, Any]], rankings: dict[str, dict[str, Any]]
) -> dict[str, Any]:
    """A judge run's totals from its partitions' metadata (`judge_scores`, `rankings`)."""

    def total(key: str) -> int:
        return sum(int(m.get(key, 0)) for m in scores.values())

    outcomes = {vid: m.get("outcome", "") for vid, m in rankings.items()}

    def reasons(outcome: str) -> dict[str, str]:
        return {
            v: str(rankings[v]["decision"]) for v, o in sorted(outcomes.items()) if o == outcome
        }

    budgets = [m["run_budget"] for m in scores.values() if "run_budget" in m]
    return {
        "vacancies": len(scores),
        "pool_pairs": total("pool"),
        "cached": total("cached_pairs"),
        "judged": total("judged_now"),
        "failed": total("failed_now"),
        "deferred": total("deferred_by_budget"),
        "rejudged": total("rejudged"),
        "llm_calls": total("llm_calls"),
        "tokens": total("prompt_tokens") + total("completion_tokens"),
        **{
            o: list(outcomes.values()).count(o)
            for o in ("published", "unchanged", "held", "blocked")
        },
        "budget": budgets[0] if budgets else 0,
        "held_reasons": reasons("held"),
        "blocked_reasons": reasons("blocked"),
    }


def _top_lines(vacancy_id: str, top: int = 3, quotes: int = 2) -> list[str]:
    from hltm.judge.store import ensure_judge_schema
    from hltm.warehouse import connect

    cfg = settings()
    with connect(cfg.derived_db) as con:
        ensure_judge_schema(con)
        rows = con.execute(
            "SELECT DISTINCT ON (r.rank) r.rank, r.resume_id, r.overall, s.actual_role,"
            " s.verdict FROM rankings r"
            " JOIN ranking_journal j ON j.seq = r.journal_seq"
            " LEFT JOIN judge_scores s ON s.vacancy_id = r.vacancy_id"
            " AND s.resume_id = r.resume_id AND s.vacancy_version = j.vacancy_version"
            " AND s.model = j.model AND s.prompt_version = j.prompt_version"
            " WHERE r.vacancy_id = ?"
            " ORDER BY r.rank, s.created_at DESC NULLS LAST LIMIT ?",
            [vacancy_id, top],
        ).fetchall()
    lines = []
    for rank, rid, overall, actual, verdict in rows:
        lines.append(f"  #{rank} {rid}  overall {overall}  — {actual}")
        if verdict and quotes:
            checklist = json.loads(verdict).get("checklist", [])
            shown = [c for c in checklist if c.get("quote") and c.get("mandatory")][:quotes]
            for item in shown:
                quote = " ".join(str(item["quote"]).split())  # ≤ 200 characters: all of it
                lines.append(f"      {item['status']:9} {item['requirement'][:50]!r}: “{quote}”")
    return lines


def judge_totals_line(totals: dict[str, Any]) -> str:
    """A judge run's totals, each saying what it counts."""
    deferred = totals["deferred"]
    return (
        f"{totals['vacancies']} vacancies, {totals['pool_pairs']} pool pairs (a vacancy's"
        f" candidates × the vacancy): {totals['judged']} judged now, {totals['cached']} from the"
        f" score cache, {totals['failed']} failed"
        + (
            f", {deferred} deferred (past this run's budget of {totals['budget']} evaluations:"
            " the next `hltm judge run`, `hltm refresh` or nightly run judges them first)"
            if deferred
            else ""
        )
        + f"; {totals['llm_calls']} LLM calls, {totals['tokens']:,} tokens;"
        f" {totals['published']} rankings published"
        + (
            f", {totals['unchanged']} unchanged (already in the journal)"
            if totals["unchanged"]
            else ""
        )
        + (
            f", {totals['held']} held (the live ranking was more complete)"
            if totals["held"]
            else ""
        )
    )


def demo_judge(vacancy: str | None = None, budget: int | None = None, workers: int = 0) -> str:
    """Judge and rank one vacancy (or all), through Dagster; a printable summary.

    For `hltm demo`: the nightly job's totals, then the top candidates of one vacancy with the
    verbatim quotes behind their mandatory requirements.
    """
    totals = run_judge([vacancy] if vacancy else None, budget, workers)
    from hltm.judge.data import load_vacancies

    shown = vacancy or next(iter(v.vacancy_id for v in load_vacancies(settings().sources_db)), None)
    lines = [judge_totals_line(totals)]
    lines += [
        f"{vid}: ranking not published, {why}" for vid, why in totals["blocked_reasons"].items()
    ]
    if shown:
        lines.append(calibration_line(shown))
        lines.append(f"top of {shown}:")
        lines += _top_lines(shown)
    return "\n".join(lines)


@judge.command(name="run")
@click.option("--vacancy", "vacancies", multiple=True, help="Only these (default: all).")
@click.option("--budget", type=click.IntRange(min=0), default=None, help=BUDGET_HELP)
@click.option(
    "--workers", type=int, default=0, help="Parallel LLM calls (default: HLTM_LLM_CONCURRENCY)."
)
@click.option(
    "--rejudge-failed",
    is_flag=True,
    help="Also judge again the cached evaluations that failed the evidence check (a mandatory"
    " quote lost to validation, requirements left out, a mandatory 'met' without a quote) and,"
    " when the quote gate has no mandatory quote to measure, those that quoted none (clears a"
    " gate blocked by a bad spell of the model).",
)
@uses_data
def run_cmd(
    vacancies: tuple[str, ...], budget: int | None, workers: int, rejudge_failed: bool
) -> None:
    """Refresh the index and pools, judge new pairs within the budget, publish rankings."""
    _require_vacancies(list(vacancies))
    totals = run_judge(list(vacancies), budget, workers, rejudge_failed)
    held = totals.pop("held_reasons", {})
    blocked = totals.pop("blocked_reasons", {})
    click.echo(", ".join(f"{k} {v}" for k, v in totals.items()))
    for vid, reason in sorted(held.items()):
        click.secho(f"{vid}: ranking held, {reason}", fg="yellow")
    for vid, reason in sorted(blocked.items()):
        click.secho(f"{vid}: ranking not published, {reason}", fg="red")


@judge.command()
@click.argument("vacancy_id")
@click.option("--top", default=10, show_default=True)
@click.option("--quotes", default=2, show_default=True, help="Quotes shown per candidate.")
@uses_data
def show(vacancy_id: str, top: int, quotes: int) -> None:
    """The current ranking of VACANCY_ID with the evidence behind it and what memory added
    (refused when the `rankings` table no longer matches the journal)."""
    from hltm.judge.journal import ranking_problems

    _require_vacancies([vacancy_id])
    problems = ranking_problems(settings().derived_db, vacancy_id)
    if problems:
        fail("; ".join(problems) + " — not served (run `hltm judge verify`)")
    lines = _top_lines(vacancy_id, top, quotes)
    if not lines:
        fail(f"no published ranking for {vacancy_id} (run `hltm judge run --vacancy {vacancy_id}`)")
    click.echo(calibration_line(vacancy_id))
    click.echo("\n".join(lines))


def calibration_line(vacancy_id: str) -> str:
    """ "from your past projects: usually …" for a vacancy, or why there is nothing."""
    from hltm.judge.calibration import load_calibrations

    cal = load_calibrations(settings().derived_db, [vacancy_id]).get(vacancy_id)
    if cal is None:
        return f"{vacancy_id}: not calibrated yet (the `vacancy_calibration` asset)"
    return f"{vacancy_id} — {cal.sentence()}"


@judge.command(name="as-of")
@click.argument("vacancy_id")
@click.option(
    "--at", "at", default=None, help="ISO moment (UTC), e.g. 2026-12-06T09:30; default: now."
)
@click.option("--top", default=10, show_default=True)
@uses_data
def as_of(vacancy_id: str, at: str | None, top: int) -> None:
    """Reconstruct the ranking of VACANCY_ID as it was published at a past moment."""
    from hltm.judge.journal import journal_entries, ranking_as_of, verify_chain

    cfg = settings()
    moment = _parse_moment(at)
    chain = verify_chain(cfg.derived_db)
    if not chain.ok:
        click.secho(f"warning: {chain.summary()}", fg="yellow", err=True)
    entry = ranking_as_of(cfg.derived_db, vacancy_id, moment)
    if entry is None:
        published = journal_entries(cfg.derived_db, vacancy_id)
        first = (
            f"the first was published {published[0].computed_at.isoformat(timespec='seconds')}"
            if published
            else "none was published yet"
        )
        fail(
            f"no ranking of {vacancy_id} was published at or before {moment.isoformat()}: {first}"
            f" (`hltm judge journal {vacancy_id}` lists each publication)"
        )
    click.echo(
        f"{vacancy_id} as of {moment.isoformat()} — journal #{entry.seq}, computed"
        f" {entry.computed_at.isoformat(timespec='seconds')} (run {entry.run_id or '-'},"
        f" {entry.model}, {entry.prompt_version}), {entry.judged} ranked, {entry.pending} pending"
    )
    for i, r in enumerate(entry.top(top), start=1):
        click.echo(
            f"  #{i} {r.resume_id}  overall {r.overall}  (role {r.role}, level {r.level},"
            f" skills {r.skills}, experience {r.experience})"
        )


@judge.command()
@click.argument("vacancy_id", required=False)
@uses_data
def journal(vacancy_id: str | None) -> None:
    """List ranking journal rows (all, or one vacancy's) and verify the hash chain."""
    from hltm.judge.journal import journal_entries, verify_chain

    _require_vacancies([vacancy_id] if vacancy_id else [])
    cfg = settings()
    for e in journal_entries(cfg.derived_db, vacancy_id):
        top = ", ".join(f"{r.resume_id}:{r.overall}" for r in e.top(3))
        click.echo(
            f"#{e.seq:<5} {e.computed_at.isoformat(timespec='seconds')}  {e.vacancy_id}"
            f"  v{e.vacancy_version}  {e.judged:>4} ranked  {e.row_hash[:12]}  top: {top}"
        )
    click.echo(verify_chain(cfg.derived_db).summary())


@judge.command()
@click.option(
    "--reanchor",
    is_flag=True,
    help="Write the head file anew (lost or damaged) once the journal verifies without it.",
)
@uses_data
def verify(reanchor: bool) -> None:
    """Verify the ranking journal's hash chain, the deletion records that prove its redactions
    and the rankings served, against its head file and the Dagster instance's anchors (exit 1
    when a row was edited, blanked or deleted)."""
    from hltm_cli.dagster_runs import journal_anchor_report

    report = journal_anchor_report(settings().derived_db, reanchor)
    click.echo(report.summary())
    if not report.ok:
        raise SystemExit(1)


@judge.group()
def golden() -> None:
    """The frozen golden set: evaluate, check the pins, re-freeze (on purpose only)."""


_SETS = ["all", "sample", "real", "indeed"]


def _sets(which: str, realdata: Path | None) -> list[tuple[str, Any]]:
    """The golden sets ``--set`` names: the sample world's, the livecareer real set, the
    Indeed real set, or all three."""
    from hltm.evaluation.judge.golden import load_golden
    from hltm.evaluation.judge.golden_real import (
        INDEED_DIR,
        REAL_DIR,
        RealDataMissing,
        load_real_golden,
    )

    out: list[tuple[str, Any]] = []
    if which in ("all", "sample"):
        out.append(("sample", load_golden()))
    for name, path in (("real", REAL_DIR), ("indeed", INDEED_DIR)):
        if which in ("all", name):
            try:
                out.append((name, load_real_golden(path, realdata=realdata)))
            except (RealDataMissing, ValueError) as err:
                fail(f"{name} golden set: {err}")
    return out


def _summary_line(name: str, report) -> str:  # type: ignore[no-untyped-def]
    from hltm.evaluation.judge.golden_eval import METHODS

    cells = ", ".join(
        f"{m} {report.value('closed', m):.1%} (soft {report.value('closed', m, soft=True):.1%})"
        for m in METHODS
    )
    return f"{name}: closed strict P@10 {cells}"


@golden.command()
@click.option("--vacancy", "vacancies", multiple=True, help="Only these vacancies.")
@click.option("--per-vacancy", is_flag=True, help="Also print per-vacancy strict P@10.")
@click.option("--workers", default=0, help="Parallel LLM calls (default: HLTM_LLM_CONCURRENCY).")
@click.option(
    "--set", "which", type=click.Choice(_SETS), default="all", show_default=True,
    help="The sample-world set, the livecareer or the Indeed real set, or all side by side.",
)  # fmt: skip
@realdata_option
@click.option("--json-out", type=click.Path(path_type=Path), default=None)
@uses_data
def evaluate(
    vacancies: tuple[str, ...],
    per_vacancy: bool,
    workers: int,
    which: str,
    realdata: Path | None,
    json_out: Path | None,
) -> None:
    """Cosine / BM25 / RRF / union + judge on the golden sets, closed set and live pool, and what
    the "met" items of the judge's top 10s quote."""
    from hltm.embeddings import make_embedder
    from hltm.evaluation.judge.golden_eval import evaluate_golden, save_report
    from hltm.llm import make_llm

    cfg = settings()
    sets = _sets(which, realdata)
    llm, embedder = make_llm(cfg, model=cfg.judge_model), make_embedder(cfg)
    reports = {}
    for name, gs in sets:
        report = evaluate_golden(
            gs, llm, embedder, cfg.derived_db, reasoning_effort=cfg.reasoning_effort,
            workers=workers, vacancy_ids=list(vacancies) or None, run_id=f"cli-{name}",
        )  # fmt: skip
        save_report(cfg.derived_db, report, f"cli-{name}")
        reports[name] = report
        click.echo(f"## {name} golden set ({gs.path})\n")
        click.echo(report.table())
        if per_vacancy:
            click.echo("")
            click.echo(report.per_vacancy_table())
        click.echo("")
        click.echo(report.checklist_table())
        click.echo("")
        click.echo(report.evidence_table())
        click.echo("")
    for name, report in reports.items():
        click.echo(_summary_line(name, report))
    if json_out:
        out = {name: r.as_dict() for name, r in reports.items()}
        json_out.write_text(json.dumps(out, indent=2, ensure_ascii=False) + "\n")


@golden.command()
@click.option("--full", is_flag=True, help="Re-embed every resume instead of spot-checking.")
@click.option("--set", "which", type=click.Choice(_SETS), default="all", show_default=True)
@realdata_option
@uses_data
def check(full: bool, which: str, realdata: Path | None) -> None:
    """Re-measure the pinned cosine baselines; exit 1 if one no longer reproduces."""
    from hltm.embeddings import make_embedder
    from hltm.evaluation.judge.golden import check_pins

    embedder = make_embedder(settings())
    sets = _sets(which, realdata)
    broken = False
    for name, gs in sets:
        result = check_pins(gs, embedder, full=full)
        head = "pins reproduce: " if result.ok else "PINS BROKEN: "
        click.echo(f"{name}: {head}{result.message}")
        broken = broken or not result.ok
    if broken:
        raise SystemExit(1)


@golden.command()
@click.option(
    "--set", "which", type=click.Choice(_SETS[1:]), default="sample", show_default=True
)  # fmt: skip
@realdata_option
@click.option("--per-vacancy", default=5, show_default=True, help="Fit pairs sampled per vacancy.")
def relevance(which: str, realdata: Path | None, per_vacancy: int) -> None:
    """Measure the quote relevance threshold: e5 cosine of supporting vs foreign quotes."""
    from hltm.evaluation.judge.golden_eval import measure_relevance
    from hltm.judge.evidence import RELEVANCE_THRESHOLD

    [(_, gs)] = _sets(which, realdata)
    result = measure_relevance(gs, per_vacancy=per_vacancy)
    click.echo(result.summary())
    click.echo(f"in use: evidence.RELEVANCE_THRESHOLD = {RELEVANCE_THRESHOLD}")


@golden.command(name="freeze-real")
@click.option("--set", "which", type=click.Choice(_SETS[2:]), default="real", show_default=True)
@realdata_option
@click.option("--force", is_flag=True, help="Overwrite the existing frozen real set.")
@uses_data
def freeze_real(which: str, realdata: Path | None, force: bool) -> None:
    """Label a real set by the rule in its spec.json and pin its cosine baseline.

    Re-freezing moves the yardstick: it refuses to overwrite unless --force is given."""
    from hltm.embeddings import make_embedder
    from hltm.evaluation.judge.golden_real import (
        INDEED_DIR,
        REAL_DIR,
        RealDataMissing,
        freeze_real_golden,
    )

    out = INDEED_DIR if which == "indeed" else REAL_DIR
    try:
        manifest = freeze_real_golden(
            make_embedder(settings()), out, realdata=realdata, force=force
        )
    except (FileExistsError, RealDataMissing) as err:
        fail(str(err))
    pins, counts = manifest["pins"], manifest["counts"]
    click.echo(
        f"froze {counts['pairs']} pairs ({counts['fit']} fit, {counts['borderline']} borderline,"
        f" {counts['miss']} miss) over {counts['vacancies']} vacancies on {manifest['frozen_on']};"
        f" pinned cosine strict P@10 {pins['cosine_strict_p10']['hits']}"
        f"/{pins['cosine_strict_p10']['shown']}"
    )


@golden.command()
@click.option("--seed", default=7, show_default=True)
@click.option("--size", default="demo", show_default=True)
@click.option("--out", "out_dir", type=click.Path(path_type=Path), default=None,
              help="Default: the bundled set, hltm/evaluation/golden/.")  # fmt: skip
@click.option("--force", is_flag=True, help="Overwrite an existing frozen set.")
@uses_data
def freeze(seed: int, size: str, out_dir: Path | None, force: bool) -> None:
    """Build the golden set from the sample world and pin its cosine baseline.

    Re-freezing moves the yardstick every later result is compared with: it refuses to
    overwrite an existing set unless --force is given."""
    from hltm.embeddings import make_embedder
    from hltm.evaluation.judge.golden import GOLDEN_DIR
    from hltm.evaluation.judge.golden_freeze import freeze_golden

    try:
        manifest = freeze_golden(out_dir or GOLDEN_DIR, make_embedder(settings()), seed, size,
                                 force=force)  # fmt: skip
    except FileExistsError as err:
        fail(str(err))
    pins = manifest["pins"]
    click.echo(
        f"froze {manifest['counts']['pairs']} pairs over {manifest['counts']['vacancies']}"
        f" vacancies on {manifest['frozen_on']}; pinned cosine strict P@10"
        f" {pins['cosine_strict_p10']['hits']}/{pins['cosine_strict_p10']['shown']},"
        f" soft {pins['cosine_soft_p10']['hits']}/{pins['cosine_soft_p10']['shown']}"
    )


@judge.group()
def calibration() -> None:
    """Vacancy calibration from memory: what past projects usually want."""


@calibration.command(name="evaluate")
@click.option("--world", "world_dir", type=click.Path(path_type=Path), default=None,
              help="Directory with ground_truth.json (default: <data dir>/world).")  # fmt: skip
@click.option("--workers", default=0, help="Parallel LLM calls (default: HLTM_LLM_CONCURRENCY).")
@uses_data
def calibration_evaluate(world_dir: Path | None, workers: int) -> None:
    """Preference precision/recall against the world's seats, and golden P@10 with and without
    calibration (run after `hltm demo`: the memory must be the golden world's)."""
    from hltm.embeddings import make_embedder
    from hltm.evaluation.judge.calibration import evaluate_calibration
    from hltm.evaluation.judge.golden import load_golden
    from hltm.evaluation.judge.golden_eval import evaluate_golden
    from hltm.llm import make_llm

    cfg = settings()
    llm, embedder = make_llm(cfg, model=cfg.judge_model), make_embedder(cfg)

    def judge_set(gs):  # type: ignore[no-untyped-def]
        return evaluate_golden(
            gs, llm, embedder, cfg.derived_db, reasoning_effort=cfg.reasoning_effort,
            workers=workers, run_id="calibration",
        )  # fmt: skip

    try:
        report = evaluate_calibration(
            load_golden(), world_dir or cfg.data_dir / "world", cfg.sources_db, cfg.derived_db,
            judge_set,
        )  # fmt: skip
    except FileNotFoundError as err:
        fail(str(err))
    click.echo(report.table())


@eval_group.command("titles")
@realdata_option
def eval_titles(realdata: Path | None) -> None:
    """How well the resume reader finds job titles: precision and recall on the Indeed resumes'
    human Designation spans and on the livecareer resumes' first lines."""
    from hltm.evaluation.judge.titles import measure_indeed, measure_livecareer

    for measure in (measure_indeed, measure_livecareer):
        try:
            click.echo(measure(realdata).line())
        except FileNotFoundError as err:
            fail(f"title evaluation: {err}")


COMMANDS = [judge]

"""Query-pattern mining: templates with slots, support over distinct identities, the approval
flow, and the adaptation loop end to end (log → patterns → approval → hints → rebuilt memory →
QA retriever hit rate on held-back paraphrases)."""

from __future__ import annotations

import json
import shutil
import time

import pytest
from click.testing import CliRunner

from hltm.memory.hints import load_hints
from hltm.patterns import (
    APPROVED,
    PROPOSED,
    REJECTED,
    RELEASED,
    MiningConfig,
    PatternSettings,
    QueryRecord,
    decide,
    list_patterns,
    mine,
    mine_query_log,
    record_mining,
    release,
    templatize,
)
from hltm.query.log import log_path
from hltm.warehouse import connect
from tests.support.query import BuiltWorld, built_world  # noqa: F401

# ---- templates ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("question", "template", "asked"),
    [
        (
            "Which work mode do I prefer for senior backend engineers in Berlin?",
            "Which work mode do I prefer for {title} in {location}?",
            "work_mode",
        ),
        (
            "What's the notice period for the Data Engineer role?",
            "What's the notice period for the {title} role?",
            "notice_period",
        ),
        (
            "Какой формат работы обычно у вакансий Java-разработчиков в Москве?",
            "Какой формат работы обычно у вакансий {title} в {location}?",
            "work_mode",
        ),
        ("Where do I usually hire?", "Where do I usually hire?", "location"),
        (
            "What salary do we offer Python developers with 5+ years?",
            "What salary do we offer {title} with {years_experience}?",
            "salary",
        ),
        (
            "Is the QA Lead role remote, hybrid or in the office?",
            "Is the {title} role remote, hybrid or in the office?",
            "work_mode",
        ),
        (
            "Which projects hire remote Go developers?",
            "Which projects hire {work_mode} {title}?",
            None,
        ),
    ],
)
def test_templatize_replaces_entities_with_facet_slots(
    question: str, template: str, asked: str | None
) -> None:
    t = templatize(question)
    assert t.template == template
    assert t.answer_field == asked


def test_known_facet_values_become_slots_and_keys_ignore_case_and_punctuation() -> None:
    known = {"title": ["Senior Solutions Architect (Mobile App)"]}
    a = templatize("What is the headcount for Senior Solutions Architect (Mobile App)?", known)
    b = templatize("what is the headcount for data analysts", known)
    assert a.template == "What is the headcount for {title}?"
    assert a.key == b.key and a.answer_field == "headcount"


# ---- support ----------------------------------------------------------------------------------


def _log(template: str, identities: list[str], titles: list[str]) -> list[QueryRecord]:
    return [
        QueryRecord(identity, template.format(title=title))
        for identity, title in zip(identities, titles, strict=True)
    ]


def test_support_counts_distinct_identities_and_min_support_filters() -> None:
    shared = _log(
        "What is the work arrangement for the {title} role?",
        ["seat:a", "seat:b", "seat:c", "seat:d", "contract:x"],
        ["Backend Engineer", "data analyst", "QA engineer", "iOS developer", "Product Designer"],
    )
    lone = _log(
        "What is the notice period for the {title} role?",
        ["seat:a"] * 6,
        ["Backend Engineer", "data analyst", "QA engineer", "SRE engineer", "ML engineer", "CTO"],
    )
    patterns = mine(shared + lone, MiningConfig(min_support=3))
    templates = [p for p in patterns if p.kind == "template"]
    assert [(p.text, p.support, p.occurrences) for p in templates] == [
        ("What is the work arrangement for the {title} role?", 5, 5)
    ]
    assert templates[0].answer_field == "work_mode" and templates[0].releasable
    # Six uses by one recruiter are one independent use: neither the template nor its attribute.
    attributes = {p.key: p.support for p in patterns if p.kind == "attribute"}
    assert attributes == {"work_mode": 5}
    assert mine(shared + lone, MiningConfig(min_support=1))  # sanity: both appear at support 1
    assert {p.key for p in mine(shared + lone, MiningConfig(min_support=1))} >= {
        "what is the notice period for the {title} role",
        "notice_period",
    }


def test_log_rows_are_accepted_and_asked_fields_from_the_parser_count() -> None:
    rows = [
        {
            "identity_level": "seat",
            "identity_id": f"s{i}",
            "question": f"Tell me about relocation for project {i}",
            "asked_at": None,
            "pairs": [{"field": "relocation", "value": ""}],
        }
        for i in range(3)
    ]
    patterns = mine(rows, MiningConfig(min_support=3))
    assert {(p.kind, p.key, p.support) for p in patterns} >= {("attribute", "relocation", 3)}
    template = next(p for p in patterns if p.kind == "template")
    assert template.slots == ("number",) and not template.releasable


def test_patterns_count_the_asks_the_memory_could_not_answer() -> None:
    statuses = ("not_in_memory", "answered", "no_memory", "failed")
    rows = [
        {
            "identity_level": "seat",
            "identity_id": f"s{i}",
            "question": "What notice period do we usually accept?",
            "pairs": [{"field": "notice_period", "value": ""}],
            "status": status,
        }
        for i, status in enumerate(statuses)
    ]
    patterns = mine(rows, MiningConfig(min_support=3))
    attribute = next(p for p in patterns if (p.kind, p.key) == ("attribute", "notice_period"))
    template = next(p for p in patterns if p.kind == "template")
    assert attribute.unanswered == template.unanswered == 2 and attribute.occurrences == 4
    assert template.as_dict()["unanswered"] == 2


def test_near_identical_templates_merge_but_different_meanings_do_not(settings) -> None:  # type: ignore[no-untyped-def]
    from hltm.embeddings import make_embedder

    records = [
        QueryRecord("seat:a", "Which work mode do I prefer for backend engineers?"),
        QueryRecord("seat:b", "Which work mode do I prefer for data analysts?"),
        QueryRecord("seat:c", "Which work mode do we prefer for QA engineers?"),
        QueryRecord("seat:a", "Which skills are required for the QA engineer role?"),
        QueryRecord("seat:b", "Which skills are required for the data analyst role?"),
        QueryRecord("seat:c", "Which skills are nice to have for the iOS developer role?"),
    ]
    patterns = mine(records, MiningConfig(min_support=3), embedder=make_embedder(settings))
    templates = {p.text: (p.support, p.variants) for p in patterns if p.kind == "template"}
    assert templates == {
        "Which work mode do I prefer for {title}?": (
            3,
            ("which work mode do we prefer for {title}",),
        )
    }


# ---- approval flow ------------------------------------------------------------------------------


def test_only_approved_patterns_are_released(settings) -> None:  # type: ignore[no-untyped-def]
    records = _log(
        "What is the work arrangement for the {title} role?",
        ["seat:a", "seat:b", "seat:c"],
        ["Backend Engineer", "data analyst", "QA engineer"],
    ) + _log(
        "Which skills matter most for {title}?",
        ["seat:a", "seat:b", "seat:c"],
        ["Backend Engineers", "data analysts", "QA engineers"],
    )
    patterns = mine(records, MiningConfig(min_support=3))
    with connect(settings.derived_db) as con:
        record_mining(con, patterns, min_support=3)
        stored = list_patterns(con)
        assert {p.status for p in stored} == {PROPOSED}
        first = release(con)
        assert not first.changed and load_hints(con).empty  # nothing approved: nothing released

        work = next(p for p in stored if p.kind == "template" and p.answer_field == "work_mode")
        skills = next(p for p in stored if p.kind == "template" and p.answer_field == "skill")
        assert decide(con, [work.pattern_id], APPROVED, "alice") == [work.pattern_id]
        decide(con, [skills.pattern_id], REJECTED, "alice")
        second = release(con, actor="alice")
        hints = load_hints(con)
        assert second.changed and hints.version == second.hints.version
        assert [(t.template, t.answer_field) for t in hints.qa_templates] == [
            ("What is the work arrangement for the {title} role?", "work_mode")
        ]
        assert hints.attributes == ()  # attribute patterns were not approved
        by_id = {p.pattern_id: p for p in list_patterns(con)}
        assert by_id[work.pattern_id].status == RELEASED
        assert by_id[skills.pattern_id].status == REJECTED
        # Releasing again changes nothing (the hints version, hence every node version, stays).
        assert not release(con).changed
        # A re-mining keeps decisions; a pattern that loses its support is not released.
        record_mining(con, mine(records[3:], MiningConfig(min_support=3)), min_support=3)
        after = {p.pattern_id: p for p in list_patterns(con)}
        assert after[work.pattern_id].status == RELEASED and not after[work.pattern_id].current
        third = release(con)
        assert third.changed and load_hints(con).empty
        assert {p.pattern_id: p.status for p in list_patterns(con)}[work.pattern_id] == APPROVED
        events = con.execute(
            "SELECT status, actor FROM query_pattern_events WHERE pattern_id = ? ORDER BY event_at",
            [work.pattern_id],
        ).fetchall()
    assert ("approved", "alice") in events and ("released", "alice") in events


def test_auto_approval_setting(settings, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("HLTM_PATTERNS_AUTO_APPROVE", "1")
    monkeypatch.setenv("HLTM_PATTERNS_MIN_SUPPORT", "2")
    config = PatternSettings.from_env()
    assert config.auto_approve and config.min_support == 2
    records = _log(
        "Which work mode do I prefer for {title}?",
        ["seat:a", "seat:b"],
        ["QA engineers", "site reliability engineers"],
    )
    outcome = mine_query_log(settings.derived_db, config, records=records)
    assert outcome.release is not None and outcome.release.changed
    with connect(settings.derived_db) as con:
        hints = load_hints(con)
        statuses = {p.kind: (p.status, p.decided_by) for p in list_patterns(con)}
    assert hints.attributes == ("work_mode",)
    assert [t.template for t in hints.qa_templates] == ["Which work mode do I prefer for {title}?"]
    assert statuses == {"template": (RELEASED, "auto"), "attribute": (RELEASED, "auto")}


def test_cli_approve_and_list(settings) -> None:  # type: ignore[no-untyped-def]
    from hltm_cli import main

    records = _log(
        "What is the work arrangement for the {title} role?",
        ["seat:a", "seat:b", "seat:c"],
        ["Backend Engineer", "data analyst", "QA engineer"],
    )
    mine_query_log(settings.derived_db, PatternSettings(min_support=3), records=records)
    runner = CliRunner()
    listed = runner.invoke(main, ["patterns", "list", "--json"])
    assert listed.exit_code == 0, listed.output
    rows = json.loads(listed.stdout)
    template = next(r for r in rows if r["kind"] == "template")
    assert template["status"] == PROPOSED
    approved = runner.invoke(
        main, ["patterns", "approve", template["pattern_id"][:8], "--by", "bob"]
    )
    assert approved.exit_code == 0, approved.output
    assert "released" in approved.output
    with connect(settings.derived_db) as con:
        hints = load_hints(con)
    assert [t.answer_field for t in hints.qa_templates] == ["work_mode"]
    bad = runner.invoke(main, ["patterns", "approve", "t-doesnotexist"])
    assert bad.exit_code != 0


# ---- the adaptation loop, end to end ---------------------------------------------------------

# The template five recruiters use — Russian-speaking recruiters, while the QA generator writes
# its default questions in English — and one only a single recruiter uses (however often).
SHARED = "Какой формат работы у вакансии {title}: удалёнка, гибрид или офис?"
SHARED_VARIANTS = (
    "Какой формат работы у вакансии {title}: удалёнка, гибрид или офис?",
    "какой формат работы у вакансии {title}: удаленка, гибрид или офис",
)
LONE = "What is the notice period for the {title} role?"
# Held back: never logged, never mined; worded differently from SHARED.
PARAPHRASES = (
    "Работа на позиции {title} удалённая, гибрид или в офисе?",
    "{title}: можно работать удалённо или нужно ходить в офис?",
    "В каком формате работает {title} — офис, гибрид, удалёнка?",
    "Для вакансии {title} какой режим работы: дистанционно или в офисе?",
    "Сотрудник на позицию {title} будет работать удалённо, в гибриде или в офисе?",
)


def _project_nodes(settings) -> list[tuple[str, str, str, dict[str, list[str]]]]:  # type: ignore[no-untyped-def]
    with connect(settings.derived_db) as con:
        rows = con.execute(
            "SELECT node_id, contract_id, seat_id, facets, qa FROM memory_nodes"
            " WHERE level = 'project' ORDER BY node_id"
        ).fetchall()
    out = []
    for node_id, contract_id, seat_id, facets, _qa in rows:
        values: dict[str, list[str]] = {}
        for f in json.loads(facets):
            values.setdefault(f["field"], []).append(f["value"])
        out.append((node_id, contract_id, seat_id, values))
    return out


def _probes(settings):  # type: ignore[no-untyped-def]
    from hltm.patterns.evaluate import Probe

    probes = []
    for node_id, _c, seat_id, values in _project_nodes(settings):
        if "title" not in values or "work_mode" not in values:
            continue
        for text in PARAPHRASES:
            probes.append(
                Probe(
                    f"seat:{seat_id}",
                    text.format(title=values["title"][0]),
                    node_id,
                    values["work_mode"][0],
                )
            )
    return probes


def _hints(settings):  # type: ignore[no-untyped-def]
    with connect(settings.derived_db) as con:
        return load_hints(con)


def _copy_of_built_world(world: BuiltWorld, settings) -> None:  # type: ignore[no-untyped-def]
    """The session's full build of the small world (sources, memory, embedding cache) in this
    test's own data directory, without the queries other tests logged into it."""
    shutil.copytree(world.settings.data_dir, settings.data_dir, dirs_exist_ok=True)
    log_path(settings.derived_db).unlink(missing_ok=True)


def test_mined_template_becomes_qa_pairs_and_lifts_qa_hit_rate(built_world, settings) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    from hltm.embeddings import make_embedder
    from hltm.memory import builder_from_settings
    from hltm.patterns.evaluate import qa_hit_rate
    from hltm.query.engine import QueryEngine
    from hltm.query.retrieve import QueryEmbeddings
    from hltm.query.scope import Identity

    started = time.perf_counter()
    _copy_of_built_world(built_world, settings)  # the first full build, shared
    embedder = make_embedder(settings)
    first = builder_from_settings(settings, embedder=embedder)
    assert first.plan().empty and _hints(settings).empty  # current, built without hints
    with connect(settings.derived_db) as con:
        unhinted = dict(con.execute("SELECT node_id, version FROM memory_nodes").fetchall())
    probes = _probes(settings)
    assert len(probes) >= 25
    embed = QueryEmbeddings(embedder)
    before = qa_hit_rate(settings, probes, embedder, embed=embed)

    # The query log: real queries through the query path, by 5 identities and by 1.
    nodes = _project_nodes(settings)
    seats = sorted({(c, s) for _n, c, s, _v in nodes})
    askers = [Identity("seat", s) for _c, s in seats][:4] + [Identity("contract", seats[0][0])]
    assert len({a.node_id for a in askers}) == 5
    engine = QueryEngine(settings, embedder=embedder)
    for i, who in enumerate(askers):
        titles = [
            v["title"][0]
            for _n, c, s, v in nodes
            if "title" in v and (s == who.id or (who.level == "contract" and c == who.id))
        ]
        engine.ask(who, SHARED_VARIANTS[i % 2].format(title=titles[i % len(titles)]))
    lone = askers[0]
    lone_titles = [v["title"][0] for _n, _c, s, v in nodes if s == lone.id and "title" in v]
    for title in (lone_titles * 2)[:4]:  # four times, one identity
        engine.ask(lone, LONE.format(title=title))

    outcome = mine_query_log(settings.derived_db, PatternSettings(min_support=3))
    templates = [p for p in outcome.patterns if p.kind == "template"]
    assert [(p.text, p.support, p.answer_field) for p in templates] == [(SHARED, 5, "work_mode")], [
        p.as_dict() for p in outcome.patterns
    ]
    assert "notice_period" not in {p.key for p in outcome.patterns}
    assert outcome.release is not None and not outcome.release.changed  # nothing approved yet

    with connect(settings.derived_db) as con:
        stored = list_patterns(con, kind="template")
        assert [p.status for p in stored] == [PROPOSED]
        decide(con, [stored[0].pattern_id], APPROVED, "test")
        released = release(con)
        assert released.changed
        hints_version = load_hints(con).version

    report = builder_from_settings(settings, embedder=embedder).full_build()
    report.raise_for_failures()
    with connect(settings.derived_db) as con:
        versions = dict(con.execute("SELECT node_id, version FROM memory_nodes").fetchall())
    # The release reached every node: each was rebuilt under the new hints, none left as it was.
    assert hints_version and versions.keys() == unhinted.keys()
    assert all(versions[n] != unhinted[n] for n in versions)
    carried = 0
    for node_id, _c, _s, values in _project_nodes(settings):
        if "title" not in values or "work_mode" not in values:
            continue
        with connect(settings.derived_db) as con:
            (qa,) = con.execute(
                "SELECT qa FROM memory_nodes WHERE node_id = ?", [node_id]
            ).fetchone()
        expected = SHARED.format(title=values["title"][0])
        pair = next((q for q in json.loads(qa) if q["question"] == expected), None)
        assert pair is not None, f"{node_id} lacks the mined QA pair"
        assert values["work_mode"][0] in pair["answer"]
        carried += 1
    assert carried >= 5

    after = qa_hit_rate(settings, probes, embedder, embed=embed)
    elapsed = time.perf_counter() - started
    print(
        f"\nQA retriever hit@1 on {before.total} held-back paraphrases: "
        f"before {before.hits}/{before.total} = {before.rate:.1%}, "
        f"after {after.hits}/{after.total} = {after.rate:.1%} "
        f"({carried} project nodes carry the mined QA pair; {elapsed:.1f}s)"
    )
    for i, text in enumerate(PARAPHRASES):
        b = before.results[i :: len(PARAPHRASES)]
        a = after.results[i :: len(PARAPHRASES)]
        print(f"  {sum(r.hit for r in b):>2} → {sum(r.hit for r in a):>2} of {len(a)}  {text}")
    assert after.rate > before.rate


# ---- Dagster --------------------------------------------------------------------------------


def _write_log(db, records: list[QueryRecord]) -> None:  # type: ignore[no-untyped-def]
    """Logged queries for `records`, written into the DuckDB file `db`."""
    from datetime import datetime

    from hltm.query.log import COLUMN_NAMES, QUERY_LOG_TABLE, ensure_query_log

    defaults = {
        "asked_at": datetime(2026, 1, 5), "channel": "python", "scope_root": "",
        "intent": "lookup", "pairs": "[]", "retrieved": "{}", "answer": "", "rationale": "",
        "citations": "[]", "dropped_citations": "[]", "no_memory": False, "status": "answered",
        "mapped_citations": "{}",
        "llm_calls": 2,
        "prompt_tokens": 0, "completion_tokens": 0, "embed_ms": 0.0, "retrieval_ms": 0.0,
        "parse_ms": 0.0, "answer_ms": 0.0, "llm_ms": 0.0, "total_ms": 0.0,
        "backend": "offline", "model": "m", "prompt_versions": "{}", "retrieval_config": "{}",
    }  # fmt: skip
    with connect(db) as con:
        ensure_query_log(con)
        for i, rec in enumerate(records):
            level, ident = rec.identity.split(":", 1)
            row = {**defaults, "query_id": f"q{i}-{rec.identity}", "identity_level": level,
                   "identity_id": ident, "scope_root": rec.identity, "question": rec.question}  # fmt: skip
            con.execute(
                f"INSERT INTO {QUERY_LOG_TABLE} ({', '.join(COLUMN_NAMES)})"
                f" VALUES ({', '.join('?' for _ in COLUMN_NAMES)})",
                [row[c] for c in COLUMN_NAMES],
            )


def test_query_patterns_asset_and_schedule(settings, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import dagster as dg

    from hltm_dagster.defs.patterns.assets import (
        MEMORY_HINTS_KEY,
        QUERY_PATTERNS_KEY,
        mine_query_patterns,
        query_log,
    )
    from hltm_dagster.resources import build_resources

    _write_log(
        log_path(settings.derived_db),
        _log(
            "What is the work arrangement for the {title} role?",
            ["seat:a", "seat:b", "seat:c", "seat:d"],
            ["Backend Engineer", "data analyst", "QA engineer", "iOS developer"],
        )
        + _log("Who approved the {title} budget?", ["seat:a"], ["Backend Engineer"]),
    )
    monkeypatch.setenv("HLTM_PATTERNS_AUTO_APPROVE", "1")
    result = dg.materialize(
        [query_log, mine_query_patterns],
        resources=build_resources(settings),
        run_config={"ops": {"mine_query_patterns": {"config": {"merge_similar": False}}}},
    )
    assert result.success
    mats = {
        m.asset_key: m.metadata
        for m in result.asset_materializations_for_node("mine_query_patterns")
    }
    meta = mats[QUERY_PATTERNS_KEY]
    assert meta["queries"].value == 5 and meta["identities"].value == 4
    assert meta["templates"].value == 1 and meta["released"].value == 2
    assert "work arrangement" in meta["patterns"].value
    assert set(meta["support"].value.values()) == {4}
    hints = mats[MEMORY_HINTS_KEY]
    assert hints["changed"].value is True
    assert [t["answer_field"] for t in hints["qa_templates"].value] == ["work_mode"]

    from hltm_dagster.defs.patterns.schedules import query_patterns_schedule

    assert query_patterns_schedule.cron_schedule == PatternSettings().cron

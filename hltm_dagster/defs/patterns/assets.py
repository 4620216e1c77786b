"""Query-pattern mining in Dagster: the query log → `query_patterns` → `memory_hints`.

`query_patterns` (on the `query_patterns_schedule`, weekly by default) mines the query log for
recurring question templates and frequently asked attribute names with at least the minimum
support of distinct identities, stores them (`proposed` until a person runs
`hltm patterns approve`, or `approved` at once with auto-approval), and releases the approved
ones as memory hints. `memory_hints` is materialised with the released hints' version as its
data version: the memory build reads the newest release and puts its version into every node's
version, so the `source_changes` sensor sees the new build config and refreshes the tree.

All the work is in `hltm.patterns`; this module only wires resources, config and metadata.
"""

from typing import Any

import dagster as dg

from hltm.patterns import PatternSettings, mine_query_log
from hltm_dagster.resources import PlatformResource

PATTERNS_GROUP = "adaptation"
QUERY_LOG_KEY = dg.AssetKey("query_log")
QUERY_PATTERNS_KEY = dg.AssetKey("query_patterns")
MEMORY_HINTS_KEY = dg.AssetKey("memory_hints")

# Written by the query path (`hltm ask`, the HTTP endpoint, `hltm.query.ask`), not by a run.
query_log = dg.AssetSpec(
    QUERY_LOG_KEY,
    group_name=PATTERNS_GROUP,
    kinds={"duckdb"},
    description="Every answered question: identity, question, retrieved ids per retriever, "
    "answer, citations and cost (table `query_log` in its own DuckDB file, `query_log.duckdb`).",
)


class QueryPatternsConfig(dg.Config):
    """Overrides of the `HLTM_PATTERNS_*` settings for one run."""

    min_support: int | None = None
    auto_approve: bool | None = None
    window_days: int | None = None
    merge_similar: bool = True  # merge near-identical templates (embeds template texts)


def _table(rows: list[dict[str, Any]]) -> dg.MetadataValue:
    lines = [
        "| id | kind | pattern | answers | support | uses | status |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        text = str(r["text"]).replace("|", "\\|")
        lines.append(
            f"| `{r['pattern_id']}` | {r['kind']} | {text} | {r['answer_field'] or '—'} "
            f"| {r['support']} | {r['occurrences']} | {r['status']} |"
        )
    if not rows:
        lines.append("| — | — | no pattern reaches the minimum support yet | — | — | — | — |")
    return dg.MetadataValue.md("\n".join(lines))


@dg.multi_asset(
    name="mine_query_patterns",
    group_name=PATTERNS_GROUP,
    specs=[
        dg.AssetSpec(
            QUERY_PATTERNS_KEY,
            deps=[QUERY_LOG_KEY],
            kinds={"duckdb"},
            description="Recurring question templates (entities replaced by facet-field slots) "
            "and frequently asked attribute names, with support = distinct identities; "
            "proposed → approved → released (table `query_patterns`).",
        ),
        dg.AssetSpec(
            MEMORY_HINTS_KEY,
            deps=[QUERY_PATTERNS_KEY],
            kinds={"duckdb"},
            description="The released hints (approved patterns only) the memory extractors read: "
            "QA templates for the QA generator, attribute names for facets and summaries "
            "(table `memory_hints`; its version is part of every memory node's version).",
        ),
    ],
)
def mine_query_patterns(
    context: dg.AssetExecutionContext,
    config: QueryPatternsConfig,
    platform: PlatformResource,
):
    overrides = {
        k: v
        for k, v in {
            "min_support": config.min_support,
            "auto_approve": config.auto_approve,
            "window_days": config.window_days,
        }.items()
        if v is not None
    }
    settings = PatternSettings.from_env(**overrides)
    outcome = mine_query_log(
        platform.derived_db.path,
        settings,
        embedder=platform.embeddings.get() if config.merge_similar else None,
    )
    summary = outcome.summary()
    stored = [p.as_dict() for p in outcome.stored if p.current]
    context.log.info(
        f"{summary['queries']} queries from {summary['identities']} identities → "
        f"{summary['patterns']} patterns (min support {settings.min_support}); "
        f"by status {summary['by_status']}"
    )
    yield dg.MaterializeResult(
        asset_key=QUERY_PATTERNS_KEY,
        metadata={
            "queries": summary["queries"],
            "identities": summary["identities"],
            "min_support": settings.min_support,
            "auto_approve": settings.auto_approve,
            "templates": summary["templates"],
            "attributes": summary["attributes"],
            "new_patterns": summary["new"],
            "auto_approved": summary["auto_approved"],
            "no_longer_current": summary["no_longer_current"],
            "proposed": summary["by_status"].get("proposed", 0),
            "approved": summary["by_status"].get("approved", 0),
            "released": summary["by_status"].get("released", 0),
            "rejected": summary["by_status"].get("rejected", 0),
            "patterns": _table(stored),
            "support": dg.MetadataValue.json({p["pattern_id"]: p["support"] for p in stored}),
        },
    )
    release = outcome.release
    assert release is not None
    yield dg.MaterializeResult(
        asset_key=MEMORY_HINTS_KEY,
        data_version=dg.DataVersion(release.hints.version),
        metadata={
            "hints_version": release.hints.version,
            "previous_version": release.previous_version,
            "changed": release.changed,
            "attributes": dg.MetadataValue.json(list(release.hints.attributes)),
            "qa_templates": dg.MetadataValue.json(
                [t.as_dict() for t in release.hints.qa_templates]
            ),
            "released_patterns": len(release.pattern_ids),
        },
    )


query_patterns_job = dg.define_asset_job(
    "mine_query_patterns_job",
    selection=[QUERY_PATTERNS_KEY, MEMORY_HINTS_KEY],
    description="Mine the query log, store patterns, release approved ones as memory hints.",
)

PATTERN_ASSETS = [query_log, mine_query_patterns]
PATTERN_JOBS = [query_patterns_job]

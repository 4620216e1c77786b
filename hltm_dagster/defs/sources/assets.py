"""Source tables as observable source assets: lineage in the UI starts here.

Users load sources with `hltm ingest` (or `hltm demo`); observing the sources records each
table's row count, quarantine count and a data version (the hash of its rows' content hashes),
so a change in any table is visible in the UI before any memory or ranking is rebuilt.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import dagster as dg

from hltm.sources.ingest import ensure_sources_schema, quarantine_counts, table_counts
from hltm.sources.schema import TABLES
from hltm.warehouse import connect
from hltm_dagster.instance import DATA_VERSION_TAG, added_ranges
from hltm_dagster.resources import PlatformResource, WarehouseResource

SOURCES_GROUP = "sources"
# One partition per vacancy of the source table: calibration and the judge are partitioned by it.
VACANCIES = dg.DynamicPartitionsDefinition(name="vacancies")


def vacancy_ranges(instance: dg.DagsterInstance, wanted: set[str]) -> list[tuple[str, str]]:
    """The `vacancies` partitions of these vacancies (the missing ones added first), as
    contiguous ranges: a run of a per-vacancy asset job each."""
    return added_ranges(instance, str(VACANCIES.name), wanted)


def source_key(table: str) -> dg.AssetKey:
    return dg.AssetKey(["sources", table])


SOURCE_SPECS = [
    dg.AssetSpec(
        source_key(t.name),
        description=t.description,
        group_name=SOURCES_GROUP,
        metadata={
            "dagster/column_schema": dg.TableSchema(
                columns=[dg.TableColumn(c.name, c.sql_type) for c in t.columns]
            ),
            "primary_key": t.key,
        },
    )
    for t in TABLES
]


def _observations(sources_db: WarehouseResource | Path) -> list[tuple[str, str, dict[str, Any]]]:
    """(table, data version, metadata) of every source table, as it stands now."""
    path = sources_db.path if isinstance(sources_db, WarehouseResource) else Path(sources_db)
    with connect(path) as con:
        ensure_sources_schema(con)
        rows = table_counts(con)
        bad = quarantine_counts(con)
        out = []
        for table in TABLES:
            hashes = con.execute(
                f"SELECT string_agg(content_hash, ',' ORDER BY {table.key}) FROM {table.name}"
            ).fetchone()
            version = hashlib.sha1(str(hashes[0] if hashes else "").encode()).hexdigest()[:16]
            metadata = {
                "dagster/row_count": rows[table.name],
                "quarantined_rows": bad.get(table.name, 0),
                "database": str(path),
            }
            out.append((table.name, version, metadata))
    return out


@dg.multi_observable_source_asset(specs=SOURCE_SPECS, name="source_tables")
def source_tables(platform: PlatformResource):
    for table, version, metadata in _observations(platform.sources_db):
        yield dg.ObserveResult(
            asset_key=source_key(table), data_version=dg.DataVersion(version), metadata=metadata
        )


def record_source_observations(instance: dg.DagsterInstance, sources_db: Path) -> None:
    """What `hltm ingest` and `hltm delete` call after they change the sources: a fresh
    observation of every table, so the UI's row counts and data versions are never stale."""
    for table, version, metadata in _observations(sources_db):
        instance.report_runless_asset_event(
            dg.AssetObservation(
                source_key(table),
                metadata=metadata,
                tags={DATA_VERSION_TAG: version},
                description="observed by the CLI after it changed the sources",
            )
        )


observe_sources_job = dg.define_asset_job("observe_sources", selection=[source_tables])

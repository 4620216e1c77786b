"""Source tables as observable source assets: lineage in the UI starts here.

Users load sources with `hltm ingest` (or `hltm demo`); observing the sources records each
table's row count, quarantine count and a data version (the hash of its rows' content hashes),
so a change in any table is visible in the UI before any memory or ranking is rebuilt.
"""

from __future__ import annotations

import hashlib

import dagster as dg

from hltm.sources.ingest import ensure_sources_schema, quarantine_counts, table_counts
from hltm.sources.schema import TABLES
from resources import WarehouseResource

SOURCES_GROUP = "sources"


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


@dg.multi_observable_source_asset(specs=SOURCE_SPECS, name="source_tables")
def source_tables(sources_db: WarehouseResource):
    with sources_db.get_connection() as con:
        ensure_sources_schema(con)
        rows = table_counts(con)
        bad = quarantine_counts(con)
        for table in TABLES:
            hashes = con.execute(
                f"SELECT string_agg(content_hash, ',' ORDER BY {table.key}) FROM {table.name}"
            ).fetchone()
            version = hashlib.sha1(str(hashes[0] if hashes else "").encode()).hexdigest()[:16]
            yield dg.ObserveResult(
                asset_key=source_key(table.name),
                data_version=dg.DataVersion(version),
                metadata={
                    "dagster/row_count": rows[table.name],
                    "quarantined_rows": bad.get(table.name, 0),
                    "database": str(sources_db.path),
                },
            )


observe_sources_job = dg.define_asset_job("observe_sources", selection=[source_tables])

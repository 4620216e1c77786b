"""The refresh planner, without Dagster: a first evaluation diffs the whole tree and asks for
every node and partition; the next one, with nothing changed, skips on the watermark; a refresh
whose run ended badly is asked for again from the change its diff started from."""

from __future__ import annotations

import json

from hltm.memory import builder_from_settings
from hltm.memory.models import LEVELS
from hltm.memory.planner import plan_refresh
from hltm.settings import Settings
from tests.support import memory as _shared

ingested_sources = _shared.ingested_sources
memory_world = _shared.memory_world


def test_first_diff_then_skip_then_ask_again_after_a_failed_run(memory_world: Settings) -> None:
    config = builder_from_settings(memory_world).version_config()
    sources, derived = memory_world.sources_db, memory_world.derived_db
    partitions: dict[str, set[str]] = {level: set() for level in LEVELS}

    def existing(level: str, keys: set[str] | None) -> set[str]:
        return partitions[level] if keys is None else partitions[level] & keys

    first = plan_refresh(None, sources, derived, config, existing, lambda _: False, now=100.0)
    assert first.plan is not None and first.plan.projects and first.skip is None
    assert first.tags["hltm/diff"] == "full" and "no cursor" in first.notes[0]
    assert {c.level for c in first.partitions} == set(LEVELS)
    assert not any(c.deletes for c in first.partitions)
    requested = json.loads(first.cursor or "{}")["requested"]
    assert requested["run_key"] == first.run_key
    for change in first.partitions:
        partitions[change.level] |= set(change.adds)

    quiet = plan_refresh(first.cursor, sources, derived, config, existing, lambda _: False, 101.0)
    assert quiet.plan is None and quiet.cursor is None and not quiet.partitions
    assert quiet.skip is not None and quiet.skip.startswith("no source changes")

    failed = plan_refresh(first.cursor, sources, derived, config, existing, lambda _: True, 102.0)
    assert failed.plan is not None and failed.plan.projects == first.plan.projects
    assert failed.notes[0].startswith("the refresh requested last did not succeed")
    assert failed.run_key != first.run_key  # a new sequence: the retry is a new run

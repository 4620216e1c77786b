"""bench/scale.py's full-build stage at a tiny scale: the real build path against the protocol
server, every concurrency level paying for its own embeddings (none served from the process
memo a previous level filled)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

SCALE = Path(__file__).resolve().parent.parent / "bench" / "scale.py"


def test_every_level_of_the_build_stage_builds_and_embeds_the_whole_sample(
    capsys: pytest.CaptureFixture[str],
) -> None:
    spec = importlib.util.spec_from_file_location("bench_scale", SCALE)
    assert spec is not None and spec.loader is not None
    scale = importlib.util.module_from_spec(spec)
    sys.modules["bench_scale"] = scale
    spec.loader.exec_module(scale)
    scale.main(
        ["--build", "--projects", "12", "--seats", "4", "--contracts", "2", "--in-flight", "2,4"]
        + ["--llm-delay-ms", "0", "--embedding-delay-ms", "0"]
    )
    figures = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    # One contract of the world's shape: its 6 projects, 2 seats and itself.
    assert figures["build_nodes_2"] == figures["build_nodes_4"] == 9
    assert figures["build_embedding_calls_2"] > 0
    assert figures["build_embedding_calls_4"] == figures["build_embedding_calls_2"]
    assert figures["build_nodes_per_s_4"] > 0

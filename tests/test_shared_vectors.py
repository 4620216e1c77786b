"""The test run's exchange of e5 vectors between xdist workers (`tests/support/shared_vectors`):
a worker receives exactly the bytes another computed, and sends each vector once."""

from __future__ import annotations

from pathlib import Path

import pytest

from hltm import embeddings
from tests.support.shared_vectors import SharedVectors


def test_a_worker_receives_the_vectors_another_computed_byte_for_byte(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(embeddings, "_PROCESS_MEMO", {})
    monkeypatch.setattr(embeddings, "_SHORT_MEMO", {})
    first, second = SharedVectors(tmp_path, "gw0"), SharedVectors(tmp_path, "gw1")
    computed = embeddings.OnnxE5Embedder().passages(["location: Berlin", "work mode: remote"])
    embeddings._PROCESS_MEMO.update({("e5", "h1"): computed[0], ("e5", "h2"): computed[1]})
    embeddings.remember_short_texts(["python developer"], [computed[0]])
    assert first.publish() == 3
    assert first.publish() == 0  # nothing new: no second file
    assert first.receive() == 0  # its own file is not read back

    monkeypatch.setattr(embeddings, "_PROCESS_MEMO", {})
    monkeypatch.setattr(embeddings, "_SHORT_MEMO", {})
    assert second.receive() == 3
    assert embeddings._PROCESS_MEMO[("e5", "h1")].tobytes() == computed[0].tobytes()
    assert embeddings._PROCESS_MEMO[("e5", "h2")].tobytes() == computed[1].tobytes()
    assert embeddings._SHORT_MEMO["python developer"].tobytes() == computed[0].tobytes()
    assert second.publish() == 0  # what it received is not sent back
    assert second.receive() == 0
    assert [p.name for p in tmp_path.iterdir()] == ["gw0-0.npz"]

"""The frozen golden set: its files, the pin test, and the evaluation table's headline claim."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hltm.embeddings import make_embedder
from hltm.evaluation.judge.golden import GOLDEN_DIR, check_pins, load_golden
from hltm.evaluation.judge.golden_eval import evaluate_golden
from hltm.evaluation.judge.golden_freeze import freeze_golden
from hltm.llm import make_llm
from hltm.settings import Settings

pytestmark = pytest.mark.xdist_group("golden-set")  # with test_stats_report: one embedding


@pytest.fixture(scope="module")
def golden():  # type: ignore[no-untyped-def]
    return load_golden(GOLDEN_DIR, verify=True)  # every file must match the manifest's sha256


def test_golden_set_is_frozen_with_its_date_labels_and_traps(golden) -> None:  # type: ignore[no-untyped-def]
    manifest = golden.manifest
    assert manifest["frozen_on"] and manifest["built_from"]["seed"] == 7
    assert len(golden.labels) >= 19
    counts = manifest["counts"]
    assert (
        counts["pairs"] == golden.pairs() == counts["fit"] + counts["borderline"] + counts["miss"]
    )
    assert min(counts["fit"], counts["borderline"], counts["miss"]) > 50
    kinds = set(golden.traps.values())
    assert {"keyword_twin", "headline_mismatch"} <= kinds
    # traps are labelled by the truth, not by their keywords: a keyword twin is never a fit
    for (vid, rid), kind in golden.traps.items():
        if kind == "keyword_twin":
            assert golden.labels[vid][rid] != "fit"
    # golden pairs come from the active layer (what a normal pool can contain)
    active = {r.resume_id for r in golden.active}
    assert all(rid in active for labels in golden.labels.values() for rid in labels)


def test_pinned_cosine_baseline_reproduces(golden, settings: Settings) -> None:  # type: ignore[no-untyped-def]
    result = check_pins(golden, make_embedder(settings), sample=3)
    assert result.ok, result.message
    assert result.spot_checked == 4 and result.max_drift < 1e-3
    pins = golden.pins
    assert pins["cosine_strict_p10"]["shown"] == 10 * len(golden.labels)


def test_pin_test_fails_when_numbers_stop_reproducing(
    golden, settings: Settings, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    manifest = json.loads(json.dumps(golden.manifest))
    manifest["pins"]["cosine_strict_p10"]["hits"] += 1
    tampered = type(golden)(
        golden.path, manifest, golden.vacancies, golden.resumes, golden.labels, golden.traps
    )
    result = check_pins(tampered, make_embedder(settings), sample=1)
    assert not result.ok and "cosine_strict_p10" in result.message


def test_golden_evaluation_on_the_sample_set(golden, golden_settings: Settings) -> None:  # type: ignore[no-untyped-def]
    """The evaluation's mechanisms on the sample world: pins, pools, gate, every pair judged.
    The judge's reading is measured on the real sets (`hltm judge golden evaluate`): the sample
    world's labels follow role families, which the general offline judge does not encode."""
    settings = golden_settings
    report = evaluate_golden(
        golden, make_llm(settings, model=settings.judge_model), make_embedder(settings),
        settings.derived_db, workers=2,
    )  # fmt: skip
    for setting in ("closed", "live"):
        shown = report.precision[(setting, "union+judge", "strict")].shown
        assert shown == report.precision[(setting, "cosine", "strict")].shown

    # fit candidates' checklists read "met" more often than misses'
    def met(label: str) -> float:
        counts = report.checklist[label]
        return counts.get("met", 0) / sum(counts.values())

    assert met("fit") > met("borderline") > met("miss")
    # the closed-set cosine numbers are the pins
    closed = report.precision[("closed", "cosine", "strict")]
    assert (closed.hits, closed.shown) == (
        golden.pins["cosine_strict_p10"]["hits"],
        golden.pins["cosine_strict_p10"]["shown"],
    )
    union = report.recall["union (vector 100 ∪ BM25 150)"]
    vector = report.recall["vector top-100"]
    assert union[0] >= vector[0] and report.rescued_fits <= report.invisible_fits
    assert report.gate.passed and report.failed == 0
    assert "| union+judge |" in report.table()


def test_freeze_refuses_to_overwrite_without_force(tmp_path: Path, settings: Settings) -> None:
    (tmp_path / "manifest.json").write_text("{}")
    with pytest.raises(FileExistsError, match="force"):
        freeze_golden(tmp_path, make_embedder(settings))

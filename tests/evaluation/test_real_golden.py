"""The frozen real golden set: sources, labels by the written rule, and its pin test.

It reads its texts from the real-data folder (../shared/realdata, where CI has them); without
it the tests that need the texts skip, and loading fails with a message that says so."""

from __future__ import annotations

from pathlib import Path

import pytest

from hltm.embeddings import make_embedder
from hltm.evaluation.judge.golden import check_pins
from hltm.evaluation.judge.golden_real import (
    REAL_DIR,
    RealDataMissing,
    label_pair,
    load_real_golden,
)
from hltm.settings import REQUIRE_REALDATA_ENV, Settings
from tests.conftest import require_realdata

SOURCES = ("resumes_livecareer.csv", "postings_linkedin_en.csv", "vacancies_hh_ru.csv")


@pytest.fixture(scope="module")
def real():  # type: ignore[no-untyped-def]
    require_realdata(*SOURCES)
    return load_real_golden(REAL_DIR, verify=True)  # hashes + labels re-derived from the rule


def test_real_set_is_frozen_from_real_sources(real) -> None:  # type: ignore[no-untyped-def]
    manifest = real.manifest
    assert manifest["frozen_on"] and set(manifest["sources"]) == set(SOURCES)
    assert len(real.vacancies) == 10 and 150 <= len(real.resumes) <= 250
    assert any(any("а" <= ch <= "я" for ch in v.text.lower()) for v in real.vacancies)
    counts = manifest["counts"]
    assert counts["pairs"] == real.pairs() == counts["fit"] + counts["borderline"] + counts["miss"]
    assert all(any(lab == "fit" for lab in labels.values()) for labels in real.labels.values())
    # no text of the sources is stored in the repository
    stored = " ".join(p.read_text(encoding="utf-8") for p in REAL_DIR.glob("*.csv"))
    assert real.resumes[0].text[:200] not in stored


def test_labelling_rule() -> None:
    spec = {"fit_categories": ["CHEF"], "fit_title": "chef|cook", "related_categories": ["X"]}
    assert label_pair(spec, "CHEF", "EXECUTIVE CHEF") == "fit"
    assert label_pair(spec, "CHEF", "GENERAL MANAGER") == "borderline"
    assert label_pair(spec, "TEACHER", "LEAD COOK") == "borderline"
    assert label_pair(spec, "X", "ANALYST") == "borderline"
    assert label_pair(spec, "TEACHER", "TEACHER") == "miss"


def test_real_pins_reproduce(real, settings: Settings) -> None:  # type: ignore[no-untyped-def]
    result = check_pins(real, make_embedder(settings), sample=1)
    assert result.ok, result.message
    assert real.pins["cosine_strict_p10"]["shown"] == 10 * len(real.vacancies)


def test_missing_realdata_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(RealDataMissing, match="realdata"):
        load_real_golden(REAL_DIR, realdata=tmp_path)


def test_missing_realdata_skips_and_the_ci_guard_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HLTM_REALDATA", str(tmp_path))
    monkeypatch.delenv(REQUIRE_REALDATA_ENV, raising=False)
    with pytest.raises(pytest.skip.Exception, match=f"not in {tmp_path}"):
        require_realdata(SOURCES[0])
    monkeypatch.setenv(REQUIRE_REALDATA_ENV, "1")
    with pytest.raises(pytest.fail.Exception, match=REQUIRE_REALDATA_ENV):
        require_realdata(SOURCES[0])

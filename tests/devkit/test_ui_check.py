"""`make ui-check`'s pages are the screenshots the docs show; without a demo world it says what to
run. The browser itself runs only in `make ui-check` (see docs/development.md)."""

from __future__ import annotations

import re

from hltm.settings import REPO_ROOT, Settings
from hltm_devkit import ui_check


def test_every_screenshot_the_docs_show_is_taken_by_the_check() -> None:
    docs = REPO_ROOT / "docs"
    shown = {
        name
        for page in [REPO_ROOT / "README.md", *docs.glob("*.md")]
        for name in re.findall(r"\((?:docs/)?(ui-[\w-]+)\.png\)", page.read_text(encoding="utf-8"))
    }
    taken = {page.name for page in ui_check.pages("c01")}
    assert shown == taken
    assert {path.stem for path in docs.glob("ui-*.png")} == taken  # none left stale beside them


def test_without_a_demo_world_it_says_to_run_the_demo(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("HLTM_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    assert ui_check.main([]) == 1
    out = capsys.readouterr().out
    assert f"no demo world in {Settings.from_env().data_dir}: run `make demo` first" in out

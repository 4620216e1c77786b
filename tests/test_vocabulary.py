"""Vocabularies are data files beside the code that reads them: each states its format version,
is refused by name when of another, and ships with the package."""

from __future__ import annotations

import fnmatch
import tomllib
from pathlib import Path

import pytest

import hltm
from hltm import vocabulary

ROOT = Path(hltm.__file__).parent


def test_every_vocabulary_file_is_of_the_current_version_and_ships_as_package_data() -> None:
    prompts = ROOT / "llm" / "prompts"  # versioned prompts, not vocabularies
    files = sorted(f for f in ROOT.rglob("*.toml") if prompts not in f.parents)
    assert {f.relative_to(ROOT).as_posix() for f in files} == {
        "memory/lexicon.toml",
        "judge/lexicon.toml",
        "judge/resume.toml",
        "query/parse.toml",
    }
    pyproject = tomllib.loads((ROOT.parent / "pyproject.toml").read_text(encoding="utf-8"))
    shipped = pyproject["tool"]["setuptools"]["package-data"]
    for path in files:
        package = ".".join(("hltm", *path.parent.relative_to(ROOT).parts))
        assert any(fnmatch.fnmatch(path.name, g) for g in shipped.get(package, ())), path
        assert vocabulary.load(package, path.stem)["version"] == vocabulary.VERSION


def test_a_vocabulary_of_another_version_is_refused_by_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "somewords"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "terms.toml").write_text("version = 2\nwords = ['a']\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(vocabulary.VocabularyError, match=r"somewords/terms\.toml .* version 2"):
        vocabulary.load("somewords", "terms")
    with pytest.raises(vocabulary.VocabularyError, match=r"somewords/missing\.toml is missing"):
        vocabulary.load("somewords", "missing")


def test_a_fragment_is_written_out_and_a_regex_keeps_its_dollar() -> None:
    assert vocabulary.expand(r"(?:${dev})$$", {"dev": "engineer"}) == "(?:engineer)$"

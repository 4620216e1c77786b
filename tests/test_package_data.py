"""What an installed wheel needs beside the code is declared as package data: every prompt and
every file of the golden sets matches a pattern of `[tool.setuptools.package-data]`, and the
registry reads the prompts through `importlib.resources`, not from the repository."""

from __future__ import annotations

import tomllib
from importlib import resources

from hltm.llm import registry
from tests.support import REPO


def test_every_data_file_is_package_data() -> None:
    config = tomllib.loads((REPO / "pyproject.toml").read_text("utf-8"))
    declared = config["tool"]["setuptools"]["package-data"]
    for package, folder in (("hltm.llm", "prompts"), ("hltm.evaluation", "golden")):
        root = REPO / package.replace(".", "/")
        files = {p for p in (root / folder).rglob("*") if p.is_file()}
        assert files, folder
        shipped = {p for pattern in declared[package] for p in root.glob(pattern) if p.is_file()}
        assert files == shipped, sorted(str(p.relative_to(root)) for p in files - shipped)


def test_prompts_are_read_as_resources() -> None:
    assert resources.files("hltm.llm") / "prompts" == registry.PROMPTS
    assert (registry.PROMPTS / "judge.toml").is_file()

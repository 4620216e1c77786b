"""Vocabularies are data, not code: each is a TOML file beside the module that reads it, shipped
as package data and read once. A file states the `version` of its format; a file of another
version is refused by name rather than half-understood.

A pattern may name a shared fragment as `${name}`, defined once under the file's `[fragments]`
(a regular expression keeps its own `$`, written `$$`).
"""

from __future__ import annotations

import tomllib
from functools import cache
from importlib.resources import files
from string import Template
from typing import Any

VERSION = 1  # the vocabulary files' format


class VocabularyError(ValueError):
    """A vocabulary file that is missing or of another format version."""


@cache
def load(package: str, name: str) -> dict[str, Any]:
    """The tables of `<package>/<name>.toml` (read once per process)."""
    resource = files(package) / f"{name}.toml"
    try:
        data = tomllib.loads(resource.read_text(encoding="utf-8"))
    except FileNotFoundError as err:
        raise VocabularyError(f"{package}/{name}.toml is missing: reinstall the package") from err
    if data.get("version") != VERSION:
        raise VocabularyError(
            f"{package}/{name}.toml is of format version {data.get('version')!r}, expected"
            f" {VERSION}"
        )
    return data


def expand(pattern: str, fragments: dict[str, str]) -> str:
    """`pattern` with its `${name}` fragments written out."""
    return Template(pattern).substitute(fragments)

"""What `hltm --help` and its subcommands tell a user: every command has help, an option name
means one thing across the whole tree, the real-data folder has one option name, `hltm
settings` labels each line's names, and `serve --help` names every endpoint it serves."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from hltm.serving.api import PATHS
from hltm_cli import main


def _commands(
    group: click.Command = main, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    yield path, group
    if isinstance(group, click.Group):
        for name, command in group.commands.items():
            yield from _commands(command, (*path, name))


def _help(*args: str) -> str:
    out = CliRunner().invoke(main, [*args, "--help"], terminal_width=200)
    assert out.exit_code == 0, out.output
    return out.output


def test_every_command_and_subcommand_has_help() -> None:
    listed = _help("delete")
    for kind in ("project", "document", "resume"):
        assert re.search(rf"^\s+{kind}\s+\S", listed, re.M), listed  # a line of help beside it
        assert f"Delete one {kind}" in _help("delete", kind)
    missing = [" ".join(path) for path, command in _commands() if path and not command.help]
    assert missing == []


def test_a_short_option_means_one_thing_everywhere() -> None:
    meaning: dict[str, set[str]] = {}
    for _, command in _commands():
        for param in command.params:
            if isinstance(param, click.Option):
                longs = [o for o in param.opts if o.startswith("--")]
                for short in (o for o in param.opts if not o.startswith("--")):
                    meaning.setdefault(short, set()).update(longs)
    assert {short: names for short, names in meaning.items() if len(names) > 1} == {}
    assert meaning["-v"] == {"--verbose"}


def test_the_real_data_folder_has_one_option_name() -> None:
    named: dict[str, list[str]] = {}
    for path, command in _commands():
        for param in command.params:
            if isinstance(param, click.Option) and "real data" in (param.help or ""):
                named.setdefault(" ".join(param.opts), []).append(" ".join(path))
    assert set(named) == {"--realdata"}, named
    assert len(named["--realdata"]) >= 5  # golden evaluate/check, titles, facets, locomo …
    every_option = {o for _, c in _commands() for p in c.params for o in getattr(p, "opts", [])}
    assert "--data" not in every_option


def test_settings_label_the_variable_and_the_field_on_every_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("HLTM_DATA_DIR", str(tmp_path))
    out = CliRunner().invoke(main, ["settings"])
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    assert re.match(r"variable\s+field\s+value \(source\)$", lines[0]), lines[0]
    rows = [line for line in lines[1:] if line.startswith("  ")]
    assert rows and all(
        re.match(r"  [A-Z][A-Z0-9_]+\s+[a-z][a-z0-9_]*\s+\S", row) for row in rows
    ), [row for row in rows if not re.match(r"  [A-Z][A-Z0-9_]+\s+[a-z]", row)]
    assert re.search(rf"HLTM_DATA_DIR\s+data_dir\s+{re.escape(str(tmp_path))} \(env\)", out.output)
    assert re.search(r"HLTM_JUDGE_BUDGET\s+budget\s+3000 \(default\)", out.output)


def test_serve_help_names_every_endpoint() -> None:
    shown = _help("serve")
    for path, operations in PATHS.items():
        for method in operations:
            assert re.search(rf"{method.upper()}\s+{re.escape(path)}", shown), (method, path)

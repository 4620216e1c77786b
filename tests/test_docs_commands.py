"""The README's and the docs' printed examples are what their commands print.

A fenced `bash` block preceded by the marker below is run as written — each `.venv/bin/hltm`
line in process, `cp` and `export` as the shell would, `make` skipped (set-up is done; the UI is
not started) — in a scratch folder holding `examples/`: the own-export example with 13 rows of the
livecareer export (`tests/fixtures/ingest/resumes_livecareer_docs.csv`, the empty text included)
in place of the whole export. The `text` block that follows is what the docs say it printed; each of its lines must
appear, in order, among the printed lines with the same shape: the same indentation and the same
first two words once numbers, quoted text and paths are masked. Abridged examples stay valid;
a renamed label, a line the command no longer prints or a reordered summary fails.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import dagster as dg
import pytest
from click.testing import CliRunner

from hltm.settings import Settings
from hltm_cli import main
from tests.support import REPO
from tests.support.own_export import OWN_EXPORT

MARK = "<!-- docs-test: own-export -->"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)
# What the docs copy from the real export, and the small stand-in the test copies instead.
STAND_INS = {
    "../shared/realdata/resumes_livecareer.csv": str(
        REPO / "tests" / "fixtures" / "ingest" / "resumes_livecareer_docs.csv"
    )
}
QUOTED = re.compile(r"“[^”]*”|'[^'\n]*'|\"[^\"\n]*\"|`[^`\n]*`")
PATH = re.compile(r"\S*/\S*")
NUMBER = re.compile(r"\d[\d,.:]*")


@dataclass(frozen=True)
class Example:
    page: str
    commands: list[str]
    printed: list[str]


def examples() -> list[Example]:
    found = []
    for page in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        text = page.read_text(encoding="utf-8")
        for mark in re.finditer(f"^{re.escape(MARK)}$", text, re.MULTILINE):  # a line of its own
            blocks = FENCE.finditer(text, mark.end())
            commands, printed = next(blocks), next(blocks)
            assert (commands[1], printed[1]) == ("bash", "text"), f"{page.name}: {MARK}"
            found.append(Example(page.name, commands[2].splitlines(), printed[2].splitlines()))
    return found


def shape(line: str) -> tuple[int, tuple[str, ...]]:
    masked = NUMBER.sub("#", PATH.sub("PATH", QUOTED.sub("Q", line)))
    return len(masked) - len(masked.lstrip()), tuple(masked.split()[:2])


def missing_lines(documented: list[str], printed: list[str]) -> list[str]:
    """The documented lines with no printed line of their shape after the previous match."""
    shapes = [shape(line) for line in printed]
    missing, at = [], 0
    for line in documented:
        if not line.strip() or line.strip() in {"…", "..."}:
            continue
        try:
            at = shapes.index(shape(line), at) + 1
        except ValueError:
            missing.append(line)
    return missing


def run(
    commands: list[str], monkeypatch: pytest.MonkeyPatch, bind: Callable[[], None]
) -> list[str]:
    """Run `commands`; `bind()` before each `hltm` line puts the CLI's jobs on the stores of the
    data dir the environment names then."""
    printed: list[str] = []
    for line in commands:
        words = shlex.split(line, comments=True)
        if not words or words[0] == "make":
            continue
        if words[0] == "export":
            for assignment in words[1:]:
                name, _, value = assignment.partition("=")
                monkeypatch.setenv(name, os.path.expandvars(value))
        elif words[0] == "cp":
            subprocess.run([STAND_INS.get(word, word) for word in words], check=True)
        elif words[0] == ".venv/bin/hltm":
            bind()
            result = CliRunner().invoke(main, words[1:])
            assert result.exit_code == 0, f"{line}\n{result.output}"
            printed += result.output.splitlines()
        else:
            raise AssertionError(f"the docs test cannot run {line!r}")
    return printed


def documented_hltm_lines() -> list[tuple[str, str]]:
    """Every `.venv/bin/hltm …` line of a shell block of the README and the docs."""
    found = []
    for page in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        for block in FENCE.finditer(page.read_text(encoding="utf-8")):
            if block[1] in ("bash", "sh", "console"):
                found += [
                    (page.name, line.partition(".venv/bin/hltm ")[2])
                    for line in block[2].splitlines()
                    if ".venv/bin/hltm " in line and not line.lstrip().startswith("#")
                ]
    return found


def test_every_documented_command_and_option_exists() -> None:
    """Cheap, for every page: each documented `hltm` command names a command and only options it
    has (the placeholders ID, N … and `[…]` around optional parts are the reader's)."""
    import click

    wrong = []
    for page, line in documented_hltm_lines():
        command: click.Command = main
        for word in shlex.split(line.replace("[", " ").replace("]", " "), comments=True):
            # an option belongs to the command it follows: `hltm -v judge run`, `judge run --x`
            options = {opt for param in command.params for opt in param.opts + param.secondary_opts}
            if word.startswith("-") and word.partition("=")[0] not in options:
                wrong.append(f"{page}: hltm {line}: no option {word.partition('=')[0]}")
            elif isinstance(command, click.Group) and not word.startswith("-"):
                if word not in command.commands:
                    wrong.append(f"{page}: hltm {line}: no command {word!r}")
                    break
                command = command.commands[word]
    assert len(documented_hltm_lines()) > 50
    assert not wrong, "\n".join(wrong)


def test_the_checked_examples_are_found() -> None:
    assert {example.page for example in examples()} >= {"README.md", "data-model.md"}


@pytest.mark.parametrize("example", examples(), ids=lambda example: example.page)
def test_a_documented_example_prints_what_the_docs_show(
    example: Example,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    cli_jobs_from,  # noqa: ANN001
) -> None:
    from hltm_dagster import definitions
    from hltm_dagster.resources import build_resources

    (tmp_path / "examples").symlink_to(OWN_EXPORT.parent)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PWD", str(tmp_path))
    monkeypatch.setenv("HLTM_DATA_DIR", str(tmp_path / "data"))  # until the docs export theirs
    monkeypatch.delenv("DAGSTER_HOME", raising=False)

    def bind() -> None:
        code = definitions.defs  # the code location's jobs, on this test's stores
        cli_jobs_from(
            dg.Definitions(
                assets=code.assets,
                asset_checks=code.asset_checks,
                jobs=code.jobs,
                resources=build_resources(Settings.from_env()),
                executor=code.executor,
            )
        )

    printed = run(example.commands, monkeypatch, bind)

    missing = missing_lines(example.printed, printed)
    assert not missing, (
        f"{example.page}: documented but not printed (in this shape):\n"
        + "\n".join(missing)
        + "\n--- printed:\n"
        + "\n".join(printed)
    )

"""`hltm ask` and `hltm serve` load neither the sample generator nor Dagster: the development kit
and the shell are imported only by the commands that need them."""

from __future__ import annotations

import subprocess
import sys

# Loads the command line as the `hltm` script does, then the modules behind `ask` and `serve`.
PROBE = """
import sys
from hltm_cli import main
for name in ("ask", "serve"):
    main.commands[name].callback
import hltm_cli.api, hltm_cli.query
print(" ".join(sorted(m for m in sys.modules if m.split(".")[0] in {"dagster", "hltm_devkit"}
    and m not in {"hltm_devkit", "hltm_devkit.sizes"})))
"""


def test_ask_and_serve_load_no_generator_and_no_dagster() -> None:
    loaded = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, check=True
    ).stdout.split()
    assert "hltm_devkit.generator" not in loaded
    assert loaded == []

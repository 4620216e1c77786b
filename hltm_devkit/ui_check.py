"""`make ui-check`: the Dagster UI after `make demo`, seen in a real browser.

It starts the UI (`dg dev`, as `make ui` does) for the data dir's Dagster instance on a free
port, opens it in Debian's Chromium driven by Playwright — the installed browser, never one
downloaded at run time — and checks what a user looks at:

* the asset graph: the memory, calibration and judge assets are drawn, their groups open;
* a memory partition: a contract's `project_memory` page lists its nodes (versions, what was
  rebuilt, LLM calls);
* a run under its job: *Jobs → refresh_memory_tree / judge_refresh → Runs* list a successful run;
* the checks: `seat_memory`'s check is evaluated and passed;
* the lineage where memory and judge meet.

Each page is saved as `docs/ui-*.png` (a 64-colour palette), the screenshots the docs show. The
UI is stopped at the end, with every process it started. Not in `make test`: it starts a
webserver, a daemon, a code server and a browser, about a minute of wall time and 15 CPU-s on two
cores, a fifth of the suite's budget; `make ui-check` runs it on demand.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from hltm.settings import REPO_ROOT, Settings

if TYPE_CHECKING:
    from playwright.sync_api import Page as BrowserPage

CHROMIUM = Path("/usr/bin/chromium")  # Debian's package (`apt-get install -y chromium`)
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
VIEWPORT = {"width": 1400, "height": 900}
UI_START_S = 180  # webserver, daemon and code server on a busy two-core machine
PAGE_WAIT_MS = 60_000
SHOWN_WAIT_MS = 5_000  # the rest of a page once its first text is there


GROUPS = ("sources", "memory", "judge")  # the graph's groups drawn open


@dataclass(frozen=True)
class Page:
    """One page of the UI: where it is, what must show on it, and its screenshot's name."""

    name: str
    path: str
    expect: tuple[str, ...]
    what: str


def pages(contract: str) -> list[Page]:
    """Every page the docs show, in the order a user meets them."""
    graph = ("project_memory", "seat_memory", "contract_memory", "calibration", "candidate_pools",
             "judge_scores", "rankings")  # fmt: skip
    return [
        Page(
            "ui-asset-graph",
            "/asset-groups?expanded=" + ",".join(f"global@global:{group}" for group in GROUPS),
            graph,
            "the asset graph: sources, memory and judge",
        ),
        Page(
            "ui-memory-partition",
            f"/assets/project_memory?view=partitions&partition={contract}",
            (contract, "rebuilt_nodes", "versions", "llm_calls"),
            f"the memory partition {contract} and its metadata",
        ),
        Page(
            "ui-runs-refresh-memory-tree",
            "/locations/definitions/jobs/refresh_memory_tree/runs",
            ("refresh_memory_tree", "Success"),
            "a run under its job: Jobs → refresh_memory_tree → Runs",
        ),
        Page(
            "ui-runs-judge-refresh",
            "/locations/definitions/jobs/judge_refresh/runs",
            ("judge_refresh", "Success"),
            "a run under its job: Jobs → judge_refresh → Runs",
        ),
        Page(
            "ui-checks-seat-memory",
            "/assets/seat_memory?view=checks",
            ("seat_memories_not_degraded", "Passed"),
            "the checks of seat_memory, evaluated",
        ),
        Page(
            "ui-lineage-calibration",
            "/assets/vacancy_calibration?view=lineage&lineageScope=neighbors",
            ("seat_memory", "contract_memory", "judge_scores"),
            "vacancy_calibration's lineage: memory in, judge out",
        ),
        Page(
            "ui-lineage-memory-hints",
            "/assets/project_memory?view=lineage&lineageScope=upstream",
            ("memory_hints", "project_documents", "recruiter_actions"),
            "project_memory's upstream: memory_hints and the sources",
        ),
    ]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def running_ui(settings: Settings, port: int, log: Path) -> Iterator[str]:
    """`dg dev` on `port` in a process group of its own, stopped (with every process it
    started) when the block ends; yields the UI's address once it answers."""
    env = {
        **os.environ,
        "DAGSTER_HOME": str(settings.dagster_home),
        "HLTM_DATA_DIR": str(settings.data_dir),
        "VIRTUAL_ENV": str(Path(sys.executable).parents[1]),
    }
    dg = Path(sys.executable).with_name("dg")
    with log.open("w") as out:
        server = subprocess.Popen(
            [str(dg), "dev", "--no-check-yaml", "-p", str(port)],
            cwd=REPO_ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        try:
            base = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + UI_START_S
            while True:
                with contextlib.suppress(OSError):
                    urllib.request.urlopen(f"{base}/server_info", timeout=2)
                    break
                if server.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"the UI did not start: see {log}")
                time.sleep(1)
            yield base
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(server.pid, signal.SIGINT)  # as Ctrl-C: dg stops what it started
            try:
                server.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)
                server.wait()


def check(base: str, shots: Path, contract: str, say: Callable[[str], None]) -> list[str]:
    """Open each page in Chromium, wait for what it must show, save it; the problems found."""
    from playwright.sync_api import Error, sync_playwright

    problems = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_FLAGS)
        try:
            page = browser.new_page(viewport=VIEWPORT)  # type: ignore[arg-type]
            shown_pages = pages(contract)
            for shown in shown_pages:
                page.goto(base + shown.path)
                missing = []
                wait_ms = PAGE_WAIT_MS  # the page's first text: the page loading
                for text in shown.expect:
                    try:
                        page.get_by_text(text, exact=False).first.wait_for(timeout=wait_ms)
                    except Error:
                        missing.append(text)
                    wait_ms = SHOWN_WAIT_MS
                if shown is shown_pages[0]:
                    skip_welcome(page)
                page.wait_for_load_state("networkidle")
                save_small(page.screenshot(), shots / f"{shown.name}.png")
                if missing:
                    problems.append(f"{shown.what}: not shown: {', '.join(missing)}")
                say(f"{'FAILED' if missing else 'ok'}  {shown.what}  ({shown.name}.png)")
        finally:
            browser.close()
    return problems


def save_small(png: bytes, path: Path) -> None:
    """The screenshot in a 64-colour palette: a UI of flat colours reads the same at a third of
    the bytes, which the repository keeps."""
    from PIL import Image

    with Image.open(io.BytesIO(png)) as shot:
        shot.convert("RGB").quantize(colors=64).save(path, optimize=True)


def skip_welcome(page: BrowserPage) -> None:
    """A new instance's first page opens Dagster's "Join the community" dialog over the UI: Skip,
    as a user would (the instance then remembers it)."""
    from playwright.sync_api import Error

    skip = page.get_by_role("button", name="Skip", exact=True)
    with contextlib.suppress(Error):
        skip.wait_for(timeout=SHOWN_WAIT_MS)
        skip.click()
        skip.wait_for(state="hidden", timeout=SHOWN_WAIT_MS)


def first_contract(settings: Settings) -> str | None:
    from hltm.warehouse import connect

    if not settings.sources_db.exists():
        return None
    with connect(settings.sources_db, read_only=True) as con:
        row = con.execute("SELECT min(contract_id) FROM contracts").fetchone()
    return row[0] if row else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "docs", help="where the PNGs go")
    args = parser.parse_args(argv)
    settings = Settings.from_env()
    contract = first_contract(settings)
    if contract is None or not (settings.dagster_home / "history").exists():
        print(f"error: no demo world in {settings.data_dir}: run `make demo` first")
        return 1
    if not CHROMIUM.exists():
        print(f"error: no {CHROMIUM}: install Debian's chromium (apt-get install -y chromium)")
        return 1
    print(f"data: {settings.data_dir}   dagster instance: {settings.dagster_home}")
    log = settings.data_dir / "ui-check.log"
    with running_ui(settings, _free_port(), log) as base:
        print(f"UI on {base} (log: {log})")
        problems = check(base, args.out, contract, print)
    for problem in problems:
        print(f"error: {problem}")
    print(f"{len(pages(contract)) - len(problems)} of {len(pages(contract))} pages as expected")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

"""Helpers the tests share: worlds, stores, servers and data. Test modules import from here,
never from one another."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"

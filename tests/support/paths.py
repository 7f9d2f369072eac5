"""Where the checkout is, for tests that read its files or start its scripts: one place, whatever
directory under tests/ a test lives in."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TESTS = REPO / "tests"

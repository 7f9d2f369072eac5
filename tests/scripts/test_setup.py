"""The README's two commands set up different things (issue 25 item 6): ``scripts/demo.sh`` installs
what the demo runs (the venv with the ``demo`` extra: Hermes Agent and the dashboard), no system
package; ``scripts/test.sh`` adds what only the tests run (Debian's prometheus,
prometheus-alertmanager, chromium; the test extras).

``scripts/setup.sh --dry-run`` says what it would install and changes nothing; it runs here with a
PATH that holds none of those binaries and a venv path that does not exist, so it decides as on a
fresh machine. That the demo itself runs without them: tests/demo/test_demo.py runs it with a PATH
that lacks them.
"""

from __future__ import annotations

import subprocess
import tomllib
from pathlib import Path

import pytest
from support.paths import REPO

from observed_engine import version

SETUP = REPO / "scripts" / "setup.sh"
TEST_ONLY_PACKAGES = ("prometheus", "prometheus-alertmanager", "chromium")


def dry_run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    bare = tmp_path / "bin"                       # a PATH without prometheus, alertmanager, chromium
    bare.mkdir(exist_ok=True)
    for tool in ("dirname",):
        if not (bare / tool).exists():
            (bare / tool).symlink_to(f"/usr/bin/{tool}")
    env = {"PATH": str(bare), "HOME": str(tmp_path), "OBSERVED_VENV": str(tmp_path / "fresh-venv"),
           "OBSERVED_WHEELHOUSE": str(tmp_path / "wheelhouse")}
    return subprocess.run(["/bin/bash", str(SETUP), *args, "--dry-run"], env=env, capture_output=True,
                          text=True, timeout=60)


def test_the_demo_set_up_installs_only_what_the_demo_runs(tmp_path):
    proc = dry_run(tmp_path, "--for", "demo")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "setup: no Debian packages needed (--for demo)" in out
    assert not [p for p in TEST_ONLY_PACKAGES if p in out], out
    assert f"setup: would create {tmp_path / 'fresh-venv'}" in out
    assert f"would pip install -e '{REPO}[demo]'" in out
    assert "[test]" not in out and "tiktoken" not in out and "wheelhouse" not in out
    assert not (tmp_path / "fresh-venv").exists()


def test_the_test_set_up_installs_what_the_tests_run(tmp_path):
    for args in (("--for", "test"), ()):            # test.sh calls it without --for
        proc = dry_run(tmp_path, *args)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert f"setup: would install Debian packages: {' '.join(TEST_ONLY_PACKAGES)}" in proc.stdout
        assert f"would pip install -e '{REPO}[test]'" in proc.stdout
        assert f"would fill the wheelhouse {tmp_path / 'wheelhouse'}" in proc.stdout
    assert not (tmp_path / "fresh-venv").exists()


def test_the_scripts_ask_for_their_purpose():
    demo = (REPO / "scripts" / "demo.sh").read_text()
    test = (REPO / "scripts" / "test.sh").read_text()
    assert 'scripts/setup.sh" --for demo' in demo
    assert 'bash "$ROOT/scripts/setup.sh" || exit 1' in test          # the default purpose: test


def test_the_demo_extra_is_what_the_demo_runs():
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert extras["demo"] == ["observed-engine[dashboard]", f"hermes-agent=={version.HERMES_SUITE}"]
    assert "observed-engine[demo]" in extras["test"]
    assert f"hermes-agent=={version.HERMES_SUITE}" in extras["test"]


@pytest.mark.parametrize("args", [("--for", "everything"), ("--bogus",), ("--for",)])
def test_a_wrong_argument_is_one_line_and_exit_2(tmp_path, args):
    proc = dry_run(tmp_path, *args)
    assert proc.returncode == 2
    assert proc.stdout == "" and proc.stderr.count("\n") == 1 and "fix:" in proc.stderr, proc.stderr
    assert not (tmp_path / "fresh-venv").exists()

"""The built wheel carries the Hermes directory plugin, and ``observed-engine
install`` run from that wheel alone writes the repository's plugin files.

Builds a wheel from a copy of the project (pyproject.toml, README.md,
observed_engine/, dashboard/ -- no plugins/ directory, so nothing can come from the
checkout) into a temporary directory, without build isolation when this Python
can build wheels by itself (``wheel`` installed, or setuptools >= 70.1), else
with pip's isolated build (its build requirements come from the configured
index, as for ``scripts/setup.sh``). Takes about 2 s (6 s isolated).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

from observed_engine.cli import paths as cli_paths

REPO = Path(__file__).resolve().parent.parent
PLUGIN_SRC = REPO / "plugins" / "context_engine" / "observed"
PACKAGED = f"observed_engine/{cli_paths.PLUGIN_FILES_DIR}"


def _can_build_without_isolation() -> bool:
    return (importlib.util.find_spec("wheel") is not None
            or importlib.util.find_spec("setuptools.command.bdist_wheel") is not None)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("wheel")
    src = root / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, src / name)
    for name in ("observed_engine", "dashboard"):       # dashboard/ is installed as observed_engine.dashboard
        shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    out = root / "dist"
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--disable-pip-version-check",
           "-q", "-w", str(out), str(src)]
    if _can_build_without_isolation():
        cmd.insert(4, "--no-build-isolation")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PIP_NO_INPUT": "1"})
    assert proc.returncode == 0, f"{' '.join(cmd)}\n{proc.stdout}\n{proc.stderr}"
    [whl] = out.glob("observed_engine-*.whl")
    return whl


def test_wheel_contains_the_plugin_files(wheel):
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        for name in cli_paths.PLUGIN_FILE_NAMES:
            assert f"{PACKAGED}/{name}" in names, sorted(names)
            assert zf.read(f"{PACKAGED}/{name}") == (PLUGIN_SRC / name).read_bytes()
        cli_modules = sorted(p.name for p in (REPO / "observed_engine" / "cli").glob("*.py"))
        assert "__init__.py" in cli_modules and "doctor.py" in cli_modules
        for name in cli_modules:                               # the CLI package, every module of it
            assert f"observed_engine/cli/{name}" in names, sorted(names)
        assert "observed_engine/__main__.py" in names          # python -m observed_engine


def test_install_from_the_wheel_writes_the_repository_files(wheel, tmp_path):
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(site)
    home = tmp_path / "hermes-home"
    home.mkdir()
    script = textwrap.dedent("""\
        import sys
        from pathlib import Path
        import observed_engine
        from observed_engine import cli
        site = Path(sys.argv[1]).resolve()
        assert Path(observed_engine.__file__).resolve().is_relative_to(site), observed_engine.__file__
        assert Path(cli.__file__).resolve().is_relative_to(site), cli.__file__
        sys.exit(cli.main(["install", "--hermes-home", sys.argv[2], "--route", "user"]))
        """)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OTEL_", "PYTHON"))}
    env["PYTHONPATH"] = str(site)          # before site-packages' editable finder
    env["HERMES_HOME"] = str(home)
    proc = subprocess.run([sys.executable, "-c", script, str(site), str(home)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "route: user" in proc.stdout
    written = home / "plugins" / "observed"
    for name in cli_paths.PLUGIN_FILE_NAMES:
        assert (written / name).read_bytes() == (PLUGIN_SRC / name).read_bytes(), name
    assert (written / cli_paths.MARKER_FILE).exists()

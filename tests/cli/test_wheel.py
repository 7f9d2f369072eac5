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
from support.paths import REPO

from observed_engine.cli import paths as cli_paths

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
    for name in ("pyproject.toml", "README.md", "LICENSE"):
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
        # the user route writes the plugin files into the Hermes home (not into the shared venv's
        # Hermes); 0.19.0 does not load engines from there (install refuses it), head Hermes does:
        # this test is about which files the wheel's install writes, so it plays a head Hermes
        from observed_engine import host
        host.supports_user_engines = lambda: True
        sys.exit(cli.main(["install", "--hermes-home", sys.argv[2], "--route", "user"]))
        """)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OTEL_", "PYTHON"))}
    env["PYTHONPATH"] = str(site)          # before site-packages' editable finder
    env["HERMES_HOME"] = str(home)
    proc = subprocess.run([sys.executable, "-c", script, str(site), str(home)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert "route: user" in proc.stdout, proc.stdout + proc.stderr
    # ...and then checks the host's own selection, which on the real 0.19.0 says the truth
    assert proc.returncode == 1 and "Hermes would not select observed" in proc.stdout, proc.stdout + proc.stderr
    written = home / "plugins" / "observed"
    for name in cli_paths.PLUGIN_FILE_NAMES:
        assert (written / name).read_bytes() == (PLUGIN_SRC / name).read_bytes(), name
    assert (written / cli_paths.MARKER_FILE).exists()


# -- packaging: what the wheel holds and what it pulls in ---------------------------------------

DASHBOARD_STACK = {"streamlit", "pandas", "pyarrow", "numpy", "altair"}


def _declared_packages() -> set:
    import tomllib

    return set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])


def test_the_package_list_names_every_package_directory():
    """pyproject lists its packages (the dashboard comes from another folder): none may be forgotten."""
    found = {".".join(p.parent.relative_to(REPO).parts) for p in (REPO / "observed_engine").rglob("__init__.py")
             if "__pycache__" not in p.parts}
    found |= {"observed_engine." + ".".join(p.parent.relative_to(REPO).parts)
              for p in (REPO / "dashboard").rglob("__init__.py") if "__pycache__" not in p.parts}
    assert found == _declared_packages()


def test_the_wheel_holds_every_module_of_the_tree(wheel):
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
    for root, prefix in ((REPO / "observed_engine", "observed_engine"), (REPO / "dashboard", "observed_engine/dashboard")):
        for path in root.rglob("*.py"):
            if "__pycache__" in path.parts:
                continue
            assert f"{prefix}/{path.relative_to(root).as_posix()}" in names, path


def _requirement_names(requirements, extra=None):
    from packaging.requirements import Requirement

    out = set()
    for text in requirements or ():
        req = Requirement(text)
        env = {"extra": extra or ""}
        if req.marker is None or req.marker.evaluate(env):
            out.add(req.name.lower().replace("_", "-"))
    return out


def test_the_core_install_pulls_in_no_streamlit_pandas_or_pyarrow(wheel):
    """Installing the wheel into Hermes' environment adds no dashboard stack: not in the wheel's own
    requirements, nor in anything they require (walked through the metadata of the installed
    distributions; offline)."""
    import importlib.metadata as md
    from email.parser import Parser

    with zipfile.ZipFile(wheel) as zf:
        [meta] = [n for n in zf.namelist() if n.endswith(".dist-info/METADATA")]
        metadata = Parser().parsestr(zf.read(meta).decode())
    assert metadata["License-Expression"] == "MIT"
    core = _requirement_names(metadata.get_all("Requires-Dist"))
    with_dashboard = _requirement_names(metadata.get_all("Requires-Dist"), extra="dashboard")
    assert {"streamlit", "pandas"} <= with_dashboard
    seen, todo = set(), set(core)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            todo |= _requirement_names(md.requires(name))
        except md.PackageNotFoundError:
            pass
    assert "ruamel.yaml" in seen and "opentelemetry-sdk" in seen
    assert not (seen & DASHBOARD_STACK), sorted(seen & DASHBOARD_STACK)


def test_the_dashboard_is_served_from_the_installed_wheel(wheel, tmp_path):
    """`observed-engine dashboard --store PATH` from the wheel alone (no checkout on the path), on
    127.0.0.1."""
    import socket
    import time
    import urllib.request

    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(site)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "PYTHON", "OBSERVED_"))}
    env["PYTHONPATH"] = str(site)
    env["HERMES_HOME"] = str(tmp_path / "home")
    where = subprocess.run([sys.executable, "-c", "import observed_engine.dashboard as d; print(d.__file__)"],
                           cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert Path(where.stdout.strip()).resolve().is_relative_to(site.resolve()), where.stdout + where.stderr
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    log = tmp_path / "dashboard.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "observed_engine", "dashboard", "--store",
                                 str(tmp_path / "none-yet.sqlite"), "--port", str(port)],
                                cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.3)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as r:
            assert r.status == 200
        assert str(site) in " ".join(psutil_cmdline(proc.pid)), psutil_cmdline(proc.pid)
    finally:
        proc.kill()
        proc.wait(10)


def psutil_cmdline(pid: int) -> list:
    import psutil

    return psutil.Process(pid).cmdline()

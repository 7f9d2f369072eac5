"""A new user's install (issue 25 item 11): the package is not on the package index yet, so the
README installs it from a checkout or from a wheel built there. This builds that wheel from this
checkout with ``pip wheel`` (pip's isolated build, as the README's command does), installs it into a
fresh venv with that venv's own pip, and runs the commands there: ``--version``, ``doctor``,
``dashboard`` and ``demo`` answer as they should without Hermes and without the dashboard extra,
each in its own words, no traceback; nothing of the checkout is on that venv's path.

Offline: the build requirements and the dependencies come from the wheelhouse that
``scripts/setup.sh`` fills once per pyproject.toml (``.ci/state/wheelhouse``; ``--no-index``), so
the test touches no index and takes ~25 s. A dependency the wheel declares but the wheelhouse lacks
fails the install: the wheelhouse is built from the same pyproject.toml.

The build writes the checkout's ``build/`` and ``observed_engine.egg-info`` (both gitignored; a
stale ``build/`` is removed first, as it could carry deleted modules into the wheel) under the lock
that ``scripts/setup_hermes_versions.sh`` takes for its editable installs, which write the same
egg-info and run beside the suite in ``scripts/test.sh``.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from observed_engine import version

REPO = Path(__file__).resolve().parents[2]
LOCK = REPO / ".venv-hermes.lock"
WHEELHOUSE = Path(os.environ.get("OBSERVED_WHEELHOUSE") or REPO / ".ci" / "state" / "wheelhouse")   # setup.sh's
WHEEL_NAME = f"observed_engine-{version.__version__}-py3-none-any.whl"
# an install of the package by its name, as if it were on the index (pip, pipx inject, uv --with)
BY_NAME = re.compile(r"(pip install|pipx inject(?: --include-apps)?\s+hermes-agent[\w-]*|--with)\s+"
                     r"'?observed-engine(\[\w+\])?'?(?![\w/.-])")


def run(cmd, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=kwargs.pop("timeout", 300), **kwargs)


def clean_env(tmp: Path) -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTHON", "OBSERVED_", "OTEL_", "VIRTUAL_ENV", "STREAMLIT_"))
           and k not in ("HERMES_HOME", "TIKTOKEN_CACHE_DIR")}
    env.update(HOME=str(tmp / "home"), HERMES_HOME=str(tmp / "hermes-home"), PIP_NO_INPUT="1")
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep)
                                  if not p.startswith(sys.prefix))     # not this venv's bin/
    return env


@pytest.fixture(scope="module")
def fresh_venv(tmp_path_factory):
    """(the fresh venv, the wheel, its environment): the wheel built from this checkout, installed."""
    if not (WHEELHOUSE / ".complete").exists():
        message = f"no wheelhouse at {WHEELHOUSE}; fix: bash scripts/setup.sh"
        if os.environ.get("OBSERVED_REQUIRE_TOOLS"):
            pytest.fail(message)
        pytest.skip(message)
    tmp = tmp_path_factory.mktemp("fresh-install")
    (tmp / "home").mkdir()
    (tmp / "hermes-home").mkdir()             # a Hermes home, as `hermes setup` leaves one (doctor reads it)
    env = clean_env(tmp)
    offline = ["--no-index", "--find-links", str(WHEELHOUSE)]
    dist = tmp / "dist"
    with open(LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            shutil.rmtree(REPO / "build", ignore_errors=True)
            built = run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", *offline, ".", "-w", str(dist)],
                        cwd=REPO, env=env)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    assert built.returncode == 0, built.stdout + built.stderr
    [wheel] = dist.glob("*.whl")
    venv = tmp / "venv"
    made = run([sys.executable, "-m", "venv", str(venv)], cwd=tmp, env=env)
    assert made.returncode == 0, made.stderr
    installed = run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", *offline, str(wheel)],
                    cwd=tmp, env=env)
    assert installed.returncode == 0, installed.stdout + installed.stderr[-3000:]
    return venv, wheel, env


def command(fresh_venv, *args, **kwargs) -> subprocess.CompletedProcess:
    venv, _, env = fresh_venv
    return run([str(venv / "bin" / "observed-engine"), *args], cwd=venv.parent, env=env, timeout=120, **kwargs)


def test_the_wheel_is_the_one_the_readme_names(fresh_venv):
    _, wheel, _ = fresh_venv
    assert wheel.name == WHEEL_NAME
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    install = readme.split("## Install\n", 1)[1].split("\n## ", 1)[0]
    for line in ("pip install .", "pip install '.[dashboard]'", "pip wheel --no-deps . -w dist",
                 f"pip install dist/{WHEEL_NAME}", f"pip install 'dist/{WHEEL_NAME}[dashboard]'"):
        assert line in install, line
    # nowhere do the documentation or the messages install the package by its name from an index
    for doc in [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md")), REPO / "dashboard" / "README.md",
                REPO / "deploy" / "README.md", *sorted((REPO / "observed_engine").rglob("*.py"))]:
        text = doc.read_text(encoding="utf-8").replace("`pip install observed-engine` finds nothing", "")
        named = [m.group(0) for m in BY_NAME.finditer(text)]
        assert not named, (doc, named)


def test_version_in_the_fresh_venv(fresh_venv):
    venv, _, _ = fresh_venv
    proc = command(fresh_venv, "--version")
    assert proc.returncode == 0, proc.stderr
    first, second = proc.stdout.splitlines()
    assert first == f"observed-engine {version.__version__}"
    assert second.startswith("hermes") and " not " in second and second.endswith(str(venv / "bin" / "python"))


def test_the_package_comes_from_the_venv_not_the_checkout(fresh_venv):
    venv, _, env = fresh_venv
    proc = run([str(venv / "bin" / "python"), "-c",
                "import json, observed_engine, observed_engine.dashboard as d, importlib.metadata as m;"
                "print(json.dumps([observed_engine.__file__, d.__file__, "
                "sorted(x.metadata['Name'].lower() for x in m.distributions())]))"],
               cwd=venv.parent, env=env)
    assert proc.returncode == 0, proc.stderr
    engine, dashboard, installed = json.loads(proc.stdout)
    for path in (engine, dashboard):
        assert Path(path).resolve().is_relative_to(venv.resolve()), path
    assert "observed-engine" in installed and "hermes-agent" not in installed
    assert not {"streamlit", "pandas", "pyarrow"} & set(installed)          # the core install


def test_doctor_in_the_fresh_venv_says_what_is_missing(fresh_venv):
    venv, _, _ = fresh_venv
    proc = command(fresh_venv, "doctor")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    hermes = next(i for i, ln in enumerate(lines) if ln.startswith("[FAIL] hermes:"))
    assert str(venv / "bin" / "python") in lines[hermes] and lines[hermes + 1].strip().startswith("fix:")
    assert "[ OK ] package: observed_engine.observe importable" in lines
    assert re.search(r"^verdict: \d+ problem", proc.stdout, re.M)
    report = command(fresh_venv, "doctor", "--json")
    assert report.returncode == 1 and json.loads(report.stdout)


def test_dashboard_and_demo_in_the_fresh_venv_say_what_to_install(fresh_venv):
    dashboard = command(fresh_venv, "dashboard")
    assert dashboard.returncode == 2 and dashboard.stdout == ""
    assert dashboard.stderr.count("\n") == 1 and "[dashboard]" in dashboard.stderr, dashboard.stderr
    demo = command(fresh_venv, "demo")
    assert demo.returncode == 2 and demo.stdout == ""
    assert demo.stderr.count("\n") == 1 and "Hermes Agent is not installed" in demo.stderr, demo.stderr
    venv, _, env = fresh_venv
    module = run([str(venv / "bin" / "python"), "-m", "observed_engine", "--help"], cwd=venv.parent, env=env)
    assert module.returncode == 0 and "doctor" in module.stdout


def test_install_in_a_python_without_hermes_is_refused_and_writes_nothing(fresh_venv, tmp_path):
    """Run from an environment without Hermes (observed-engine installed beside it rather than
    into it), any route would write where Hermes never looks: one line, exit 2, nothing written."""
    venv, _, _ = fresh_venv
    home = tmp_path / "hermes-home"
    home.mkdir()
    (home / "config.yaml").write_text("model:\n  default: m\n", encoding="utf-8")
    site_before = sorted(p.name for p in venv.glob("lib/python*/site-packages/*"))
    proc = command(fresh_venv, "install", "--hermes-home", str(home))
    assert proc.returncode == 2 and proc.stdout == "", proc.stdout + proc.stderr
    assert proc.stderr.count("\n") == 1 and "Hermes cannot be imported from this Python" in proc.stderr, proc.stderr
    assert str(venv / "bin" / "python") in proc.stderr and "--force" in proc.stderr
    assert sorted(p.name for p in home.iterdir()) == ["config.yaml"]
    assert (home / "config.yaml").read_text(encoding="utf-8") == "model:\n  default: m\n"
    assert sorted(p.name for p in venv.glob("lib/python*/site-packages/*")) == site_before

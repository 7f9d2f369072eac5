"""The alert path of the alerting end-to-end tests (tests/e2e/test_alerting*.py), on 127.0.0.1:
the shipped alerts.yml (optionally with a few ``for:`` lines shortened, nothing else changed) in a
real Prometheus scraping the engines' own /metrics, a real Alertmanager with the shipped routing
(1 s group timings) and the webhook receiver it notifies.

``alert_stack`` (the fixture) starts Alertmanager; a test writes its rules, observes its engines
on their ports, then starts Prometheus on those targets. Everything it starts is stopped by the
test's finalizers, even when start-up fails."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Iterable, Optional, Sequence

import pytest
from support.deploy import ALERT_RULES, alertmanager_config, assert_only_for_lines_differ, shortened_rules
from support.servers import (
    ALERTMANAGER_BIN,
    PROMETHEUS_BIN,
    AlertmanagerServer,
    PrometheusServer,
    http_get,
    require_binary,
)


class AlertStack:
    def __init__(self, tmp_path: Path, request, webhook) -> None:
        self.tmp_path, self.request, self.webhook = tmp_path, request, webhook
        self.prom: Optional[PrometheusServer] = None
        self.am = AlertmanagerServer(tmp_path / "alertmanager", alertmanager_config(webhook.url))
        request.addfinalizer(self.am.stop)   # kills the recorded PID, even if start-up fails
        self.am.start()

    def rules(self, shortened: Iterable[str] = (), seconds: int = 3) -> Path:
        """alerts.yml as shipped, or with the ``for:`` of the ``shortened`` rules set to ``seconds``
        (checked: no other line differs, so the expressions under test are the shipped ones)."""
        shortened = tuple(shortened)
        path = self.tmp_path / "alerts.yml"
        if not shortened:
            shutil.copy(ALERT_RULES, path)
            return path
        shipped = ALERT_RULES.read_text()
        path.write_text(shortened_rules(shipped, shortened, seconds))
        assert_only_for_lines_differ(shipped, path.read_text(), shortened, seconds)
        return path

    def start_prometheus(self, targets: Sequence[str], rules: Path) -> PrometheusServer:
        """A real Prometheus on ``targets`` (job ``hermes``) with ``rules``, notifying Alertmanager;
        returns once it scrapes every target."""
        prom = self.prom = PrometheusServer(self.tmp_path / "prometheus", list(targets), rule_files=[rules],
                                            alertmanager=self.am.address)
        self.request.addfinalizer(prom.stop)
        prom.start()
        n = len(targets)
        assert prom.wait_value('count(up{job="hermes"} == 1)', n, timeout=20) == n, prom.log_tail()
        return prom

    def diagnostics(self) -> str:
        """What a failing assertion prints: the notifications, both servers' alerts and log tails."""
        prom = self.prom
        return (f"\nwebhook: {json.dumps(self.webhook.notifications, default=str)[:6000]}\n"
                f"prometheus alerts: {prom.alerts() if prom else None}\nalertmanager alerts: {self.am.alerts()}\n"
                f"prometheus log:\n{prom.log_tail() if prom else ''}\nalertmanager log:\n{self.am.log_tail()}")

    def webhook_alert(self, alertname: str, status: Optional[str] = "firing", **labels) -> Optional[dict]:
        """The first notified alert of that name, status and labels, or None."""
        hits = [a for a in self.webhook.alerts(alertname, status=status)
                if all(a["labels"].get(k) == v for k, v in labels.items())]
        return hits[0] if hits else None

    def ever(self, selector: str) -> list:
        """Prometheus' ALERTS series matching ``selector`` over the last hour: a rule that never
        even went pending gives []."""
        return self.prom.query(f"max_over_time(ALERTS{{{selector}}}[1h])")

    def loaded_rules(self) -> dict:
        """Prometheus' rules API: the loaded rules by name (duration, health, lastError...)."""
        body = json.loads(http_get(self.prom.url + "/api/v1/rules"))
        return {r["name"]: r for g in body["data"]["groups"] for r in g["rules"]}


@pytest.fixture
def alert_stack(tmp_path, request, webhook) -> AlertStack:
    require_binary(PROMETHEUS_BIN)
    require_binary(ALERTMANAGER_BIN)
    return AlertStack(tmp_path, request, webhook)

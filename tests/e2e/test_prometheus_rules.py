"""End to end: the shipped prometheus.yml + alerts.yml in a real Prometheus fire on real scrapes.

A real /usr/bin/prometheus is started on 127.0.0.1 (random free port, temporary TSDB) with a copy
of deploy/prometheus/prometheus.yml whose Hermes scrape jobs point at a local /metrics endpoint,
1 s scrape/evaluation intervals, and the shipped alerts.yml. The test then polls the HTTP API until
HermesContextCompressionTimeout fires, and checks that the other rules evaluate without errors
and stay silent on healthy series, that every Grafana panel query runs, and (with
/usr/bin/prometheus-alertmanager) that the shipped Alertmanager routing delivers the alert to a
local webhook, grouped by alertname and engine.

The /metrics endpoint is `FakeHermesMetrics` (Prometheus text format, shaped like the
OpenTelemetry Prometheus exporter's output). To run against a real Hermes process or the observed
engine's own exporter instead, set OBSERVED_E2E_METRICS_TARGET=host:port (its timeouts counter must
be increasing) or replace the `metrics_target` fixture.

Skipped when the prometheus binary is absent, unless OBSERVED_REQUIRE_TOOLS=1.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
import urllib.error
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from support.deploy import alertmanager_config, panel_exprs
from support.servers import AlertmanagerServer, PrometheusServer, WebhookReceiver, find_binary, free_port

ROOT = Path(__file__).resolve().parents[2]
PROM_DIR = ROOT / "deploy" / "prometheus"
# Scrape jobs of the shipped config that carry Hermes metrics (the others scrape the stack itself).
HERMES_JOBS = ("otel-collector", "hermes")
FIRE_TIMEOUT_S = 40.0

pytestmark = pytest.mark.prometheus


def _missing(package: str):
    """Skip the test for want of ``package``'s binary, or fail under OBSERVED_REQUIRE_TOOLS=1."""
    reason = (f"{package} binary not found: apt-get install -y {package} "
              "(set OBSERVED_REQUIRE_TOOLS=1 to make this a failure)")
    if os.environ.get("OBSERVED_REQUIRE_TOOLS") == "1":
        pytest.fail(reason)
    pytest.skip(reason)


def _prometheus_binary() -> str:
    return find_binary("prometheus", "/usr/bin/prometheus") or _missing("prometheus")


def _alertmanager_binary():
    return find_binary("prometheus-alertmanager", "/usr/bin/prometheus-alertmanager",
                       "alertmanager", "/usr/bin/alertmanager")


class FakeHermesMetrics:
    """A tiny /metrics endpoint: one process with a compression timing out on every scrape."""

    SCOPE = 'otel_scope_name="observed_engine",otel_scope_version="0.1.0",otel_scope_schema_url=""'

    def __init__(self) -> None:
        self.scrapes = 0
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server API)
                if self.path.split("?")[0] != "/metrics":
                    self.send_error(404)
                    return
                body = outer.render().encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):  # keep pytest output clean
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def address(self) -> str:
        host, port = self.server.server_address[:2]
        return f"{host}:{port}"

    def start(self) -> FakeHermesMetrics:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def render(self) -> str:
        with self._lock:
            self.scrapes += 1
            n = self.scrapes
        s, e = self.SCOPE, 'engine="compressor"'
        return "\n".join([
            "# HELP target_info Target metadata",
            "# TYPE target_info gauge",
            'target_info{service_name="hermes-e2e",telemetry_sdk_language="python"} 1',
            "# HELP hermes_context_compression_timeouts_total Compression past its deadline.",
            "# TYPE hermes_context_compression_timeouts_total counter",
            f'hermes_context_compression_timeouts_total{{{e},kind="deadline_exceeded",{s}}} {n}',
            "# HELP hermes_context_engine_fail_open_total Hook failures the host falls open on.",
            "# TYPE hermes_context_engine_fail_open_total counter",
            f'hermes_context_engine_fail_open_total{{{e},hook="compress",reason="exception",{s}}} 0',
            "# HELP hermes_context_compressions_total compress() results.",
            "# TYPE hermes_context_compressions_total counter",
            f'hermes_context_compressions_total{{{e},outcome="compressed",{s}}} {10 + n}',
            f'hermes_context_compressions_total{{{e},outcome="timeout",{s}}} {n}',
            "# HELP hermes_context_usage_ratio Prompt tokens / context window.",
            "# TYPE hermes_context_usage_ratio gauge",
            f'hermes_context_usage_ratio{{{e},{s}}} 0.5',
            "# TYPE hermes_context_compression_oldest_in_flight_age_seconds gauge",
            f'hermes_context_compression_oldest_in_flight_age_seconds{{{e},{s}}} 3',
            "# TYPE hermes_context_compression_deadline_seconds gauge",
            f'hermes_context_compression_deadline_seconds{{{e},{s}}} 120',
            "# TYPE hermes_context_engine_telemetry_errors_total counter",
            f'hermes_context_engine_telemetry_errors_total{{component="store",{s}}} 0',
            "",
        ])


@pytest.fixture(scope="module")
def metrics_target():
    """host:port of a /metrics endpoint whose hermes_context_compression_timeouts_total increases."""
    external = os.environ.get("OBSERVED_E2E_METRICS_TARGET")
    if external:
        yield external
        return
    fake = FakeHermesMetrics().start()
    try:
        yield fake.address
    finally:
        fake.stop()


def e2e_config(shipped: dict, target: str, rules_path: Path, alertmanager: str | None = None) -> dict:
    """The shipped config with 1 s intervals, its Hermes jobs pointed at `target`, and alerts sent
    to `alertmanager` (host:port) or nowhere."""
    cfg = json.loads(json.dumps(shipped))  # deep copy
    cfg["global"].update({"scrape_interval": "1s", "evaluation_interval": "1s", "scrape_timeout": "1s"})
    cfg["rule_files"] = [str(rules_path)]
    if alertmanager:
        cfg["alerting"]["alertmanagers"] = [{"static_configs": [{"targets": [alertmanager]}]}]
    else:
        cfg.pop("alerting", None)
    jobs = []
    for job in cfg["scrape_configs"]:
        if job["job_name"] not in HERMES_JOBS:
            continue
        job.pop("file_sd_configs", None)
        job["static_configs"] = [{"targets": [target]}]
        job["scrape_interval"] = "1s"
        job["scrape_timeout"] = "1s"
        jobs.append(job)
    cfg["scrape_configs"] = jobs
    return cfg


@pytest.fixture(scope="module")
def alertmanager(tmp_path_factory, request):
    """The shipped Alertmanager config on a real Alertmanager posting to a local webhook, or None
    when the binary is absent (only the test that needs it then skips)."""
    binary = _alertmanager_binary()
    if not binary:
        return None
    webhook = WebhookReceiver()
    request.addfinalizer(webhook.stop)
    workdir = tmp_path_factory.mktemp("alertmanager")
    am = AlertmanagerServer(workdir, alertmanager_config(webhook.url), binary=binary,
                            log_level="info")
    request.addfinalizer(am.stop)  # always kill the recorded PID, even if startup fails
    am.start()
    am.webhook = webhook
    return am


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory, metrics_target, alertmanager, request):
    binary = _prometheus_binary()
    tmp_path = tmp_path_factory.mktemp("prometheus")
    rules = tmp_path / "alerts.yml"
    shutil.copy(PROM_DIR / "alerts.yml", rules)
    shipped = yaml.safe_load((PROM_DIR / "prometheus.yml").read_text())
    assert {j["job_name"] for j in shipped["scrape_configs"]} >= set(HERMES_JOBS)
    config = e2e_config(shipped, metrics_target, rules, alertmanager.address if alertmanager else None)
    prom = PrometheusServer(tmp_path, config=config, binary=binary, log_level="info")
    request.addfinalizer(prom.stop)  # always kill the recorded PID, even if startup fails
    prom.start()
    return prom


def grafana_exprs() -> list:
    """PromQL of every panel of the generated Grafana board, template variables filled in."""
    board = json.loads((ROOT / "deploy" / "grafana" / "dashboards" / "hermes-context-engine.json").read_text())
    exprs = panel_exprs(board)
    subst = {"$__rate_interval": "1m", "$job": ".*", "$instance": ".*", "$engine": ".*", "$hook": ".*"}
    out = []
    for e in exprs:
        for k, v in subst.items():
            e = e.replace(k, v)
        assert "$" not in e, e
        out.append(e)
    return out


def _firing(alerts: list, name: str) -> list:
    return [a for a in alerts if a["labels"].get("alertname") == name and a["state"] == "firing"]


def test_compression_timeout_alert_fires_in_real_prometheus(prometheus):
    deadline = time.monotonic() + FIRE_TIMEOUT_S
    alerts: list = []
    while time.monotonic() < deadline:
        alerts = prometheus.api("/api/v1/alerts")["alerts"]
        if _firing(alerts, "HermesContextCompressionTimeout"):
            break
        time.sleep(0.5)
    firing = _firing(alerts, "HermesContextCompressionTimeout")
    assert firing, (f"HermesContextCompressionTimeout did not fire within {FIRE_TIMEOUT_S}s; "
                    f"alerts={alerts}\n{prometheus.log_tail()}")

    # The alert names the engine and the process, and carries the operator-facing text.
    jobs = set()
    for alert in firing:
        assert alert["labels"]["engine"] == "compressor"
        assert alert["labels"]["severity"] == "warning"
        assert alert["labels"].get("instance")
        jobs.add(alert["labels"]["job"])
        assert "compressor" in alert["annotations"]["summary"]
        assert "compress_timeout_seconds" in alert["annotations"]["description"]
    assert jobs <= set(HERMES_JOBS) and jobs

    # The counter really increases between scrapes, so the increase() half of the rule sees it too
    # (not only the "new series" half).
    # (The alert may fire on the first scrape already, via the new-series half: wait for 2 samples.)
    query = "increase(hermes_context_compression_timeouts_total[30s])"
    result: list = []
    while time.monotonic() < deadline + 10 and not result:
        result = prometheus.api("/api/v1/query", query=query)["result"]
        time.sleep(0.5)
    assert result and all(float(r["value"][1]) > 0 for r in result), result

    # Healthy series stay silent: fail-opens and telemetry errors are flat at 0, usage is 50 %,
    # the oldest compression is 3 s old with a 120 s deadline.
    for name in ("HermesContextEngineFailOpen", "HermesObservedTelemetryErrors",
                 "HermesContextCompressionStuck", "HermesContextNearWindow",
                 "HermesContextCompressionErrors"):
        assert not [a for a in alerts if a["labels"].get("alertname") == name], (name, alerts)

    # Every shipped rule evaluates without error against real scraped data.
    groups = prometheus.api("/api/v1/rules")["groups"]
    rules = {r["name"]: r for g in groups for r in g["rules"]}
    assert set(rules) >= {
        "HermesContextCompressionTimeout", "HermesContextEngineFailOpen", "HermesContextCompressionStuck",
        "HermesContextNearWindow", "HermesContextCompressionErrors", "HermesObservedTelemetryErrors",
    }
    for name, rule in rules.items():
        assert rule["health"] == "ok", (name, rule.get("lastError"))


def test_grafana_board_queries_run_in_real_prometheus(prometheus):
    """Every panel's PromQL parses and evaluates; panels fed by the local endpoint return data."""
    exprs = grafana_exprs()
    assert len(exprs) > 20
    # Wait for a couple of scrapes so rate()/increase() have two samples.
    deadline = time.monotonic() + FIRE_TIMEOUT_S
    while time.monotonic() < deadline:
        counts = prometheus.api("/api/v1/query", query="count_over_time(hermes_context_usage_ratio[1m])")["result"]
        if counts and min(float(c["value"][1]) for c in counts) >= 3:
            break
        time.sleep(0.5)
    with_data = 0
    for expr in exprs:
        try:
            result = prometheus.api("/api/v1/query", query=expr)["result"]
        except urllib.error.HTTPError as exc:  # 400 = bad PromQL
            raise AssertionError(f"{expr}\n{exc.read().decode(errors='replace')}") from None
        with_data += bool(result)
    assert with_data >= 5, "expected the usage, timeout and compression panels to show the served series"


def test_alert_reaches_the_webhook_through_alertmanager(prometheus, alertmanager):
    """Prometheus -> shipped Alertmanager routing -> webhook: grouped by alertname and engine."""
    if alertmanager is None:
        _missing("prometheus-alertmanager")
    deadline = time.monotonic() + FIRE_TIMEOUT_S
    timeout_groups: list = []
    while time.monotonic() < deadline and not timeout_groups:
        timeout_groups = [p for p in list(alertmanager.webhook.notifications)
                          if p.get("groupLabels", {}).get("alertname") == "HermesContextCompressionTimeout"]
        time.sleep(0.5)
    assert timeout_groups, (f"no webhook notification within {FIRE_TIMEOUT_S}s; got {alertmanager.webhook.notifications}\n"
                            f"{alertmanager.log_tail()}")
    payload = timeout_groups[0]
    assert payload["status"] == "firing"
    assert payload["groupLabels"] == {"alertname": "HermesContextCompressionTimeout", "engine": "compressor"}
    assert payload["receiver"] == "hermes-webhook"
    for alert in payload["alerts"]:
        assert alert["labels"]["severity"] == "warning"
        assert alert["labels"]["instance"] and alert["labels"]["job"] in HERMES_JOBS
        assert alert["annotations"]["summary"] and alert["annotations"]["description"]


# --------------------------------------------------------------------------- the real observed engine

@pytest.fixture
def real_engine():
    """An observed engine serving its own /metrics (observed.prometheus) around an inner engine
    whose compress() blocks until released: a compression stuck past a 1 s deadline."""
    from agent.context_engine import ContextEngine

    import observed_engine
    from observed_engine import observe

    release = threading.Event()

    class BlockingEngine(ContextEngine):
        name = "e2e-blocking"

        def __init__(self):
            self.context_length = 100_000
            self.threshold_percent = 0.5
            self.threshold_tokens = 50_000
            self.last_prompt_tokens = 95_000     # 95 % of the window: HermesContextNearWindow pending

        def update_from_response(self, usage):
            pass

        def should_compress(self, prompt_tokens=None):
            return True

        def compress(self, messages, current_tokens=None, focus_topic=None):
            release.wait(60)
            return messages[-1:]

    port = free_port()
    engine = observe(BlockingEngine(), settings={
        "prometheus": {"enabled": True, "host": "127.0.0.1", "port": port},
        "compress_timeout_seconds": 1,
        "store": {"enabled": False},
    })
    try:
        yield SimpleNamespace(engine=engine, address=f"127.0.0.1:{port}", release=release)
    finally:
        release.set()
        observed_engine.shutdown()


def test_real_engine_stuck_compression_fires_timeout_and_stuck(real_engine, tmp_path, request):
    binary = _prometheus_binary()
    rules = tmp_path / "alerts.yml"
    shutil.copy(PROM_DIR / "alerts.yml", rules)
    shipped = yaml.safe_load((PROM_DIR / "prometheus.yml").read_text())
    prom = PrometheusServer(tmp_path, config=e2e_config(shipped, real_engine.address, rules), binary=binary,
                            log_level="info")
    request.addfinalizer(prom.stop)
    prom.start()

    worker = threading.Thread(target=real_engine.engine.compress,
                              args=([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}],),
                              daemon=True)
    worker.start()
    wanted = {"HermesContextCompressionTimeout", "HermesContextCompressionStuck"}
    deadline = time.monotonic() + FIRE_TIMEOUT_S
    alerts: list = []
    while time.monotonic() < deadline:
        alerts = prom.api("/api/v1/alerts")["alerts"]
        if all(_firing(alerts, name) for name in wanted):
            break
        time.sleep(0.5)
    for name in wanted:
        firing = _firing(alerts, name)
        assert firing, f"{name} did not fire within {FIRE_TIMEOUT_S}s; alerts={alerts}\n{prom.log_tail()}"
        assert {a["labels"]["engine"] for a in firing} == {"e2e-blocking"}
        assert {a["labels"]["job"] for a in firing} <= set(HERMES_JOBS)
    # Usage is 95 % of the window: the rule matches, waiting out its 5 minutes.
    near = [a for a in alerts if a["labels"].get("alertname") == "HermesContextNearWindow"]
    assert near and all(a["state"] == "pending" for a in near), near

    real_engine.release.set()
    worker.join(10)
    assert not worker.is_alive()

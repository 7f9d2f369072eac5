"""End to end: the shipped prometheus.yml + alerts.yml in a real Prometheus fire on real scrapes.

A real /usr/bin/prometheus is started on 127.0.0.1 (random free port, temporary TSDB) with a copy
of deploy/prometheus/prometheus.yml whose Hermes scrape jobs point at a local /metrics endpoint,
1 s scrape/evaluation intervals, and the shipped alerts.yml. The test then polls the HTTP API until
HermesContextCompressionTimeout fires, and checks that the other rules evaluate without errors
and stay silent on healthy series.

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
import socket
import subprocess
import threading
import time
import urllib.parse
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
PROM_DIR = ROOT / "deploy" / "prometheus"
# Scrape jobs of the shipped config that carry Hermes metrics (the others scrape the stack itself).
HERMES_JOBS = ("otel-collector", "hermes")
FIRE_TIMEOUT_S = 40.0

pytestmark = pytest.mark.prometheus


def _prometheus_binary() -> str:
    path = shutil.which("prometheus") or ("/usr/bin/prometheus" if os.access("/usr/bin/prometheus", os.X_OK) else None)
    if path:
        return path
    reason = ("prometheus binary not found: apt-get install -y prometheus "
              "(set OBSERVED_REQUIRE_TOOLS=1 to make this a failure)")
    if os.environ.get("OBSERVED_REQUIRE_TOOLS") == "1":
        pytest.fail(reason)
    pytest.skip(reason)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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

    def start(self) -> "FakeHermesMetrics":
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


def e2e_config(shipped: dict, target: str, rules_path: Path) -> dict:
    """The shipped config with 1 s intervals, its Hermes jobs pointed at `target`, no Alertmanager."""
    cfg = json.loads(json.dumps(shipped))  # deep copy
    cfg["global"].update({"scrape_interval": "1s", "evaluation_interval": "1s", "scrape_timeout": "1s"})
    cfg["rule_files"] = [str(rules_path)]
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


class PrometheusProcess:
    def __init__(self, binary: str, workdir: Path, config: dict) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.config_path = workdir / "prometheus.yml"
        self.config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        self.log_path = workdir / "prometheus.log"
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [binary, f"--config.file={self.config_path}", f"--storage.tsdb.path={workdir / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=info"],
            stdout=self._log, stderr=subprocess.STDOUT, cwd=workdir,
        )
        self.pid = self.proc.pid

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self._log.close()

    def log_tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return "(no log)"

    def api(self, path: str, **params) -> dict:
        url = f"{self.url}{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        with urllib.request.urlopen(url, timeout=5) as resp:
            body = json.load(resp)
        assert body.get("status") == "success", body
        return body["data"]

    def wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"prometheus exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as resp:
                    if resp.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.2)
        raise AssertionError(f"prometheus not ready after {timeout}s:\n{self.log_tail()}")


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory, metrics_target, request):
    binary = _prometheus_binary()
    tmp_path = tmp_path_factory.mktemp("prometheus")
    rules = tmp_path / "alerts.yml"
    shutil.copy(PROM_DIR / "alerts.yml", rules)
    shipped = yaml.safe_load((PROM_DIR / "prometheus.yml").read_text())
    assert {j["job_name"] for j in shipped["scrape_configs"]} >= set(HERMES_JOBS)
    prom = PrometheusProcess(binary, tmp_path, e2e_config(shipped, metrics_target, rules))
    request.addfinalizer(prom.stop)  # always kill the recorded PID, even if startup fails
    prom.wait_ready()
    return prom


def grafana_exprs() -> list:
    """PromQL of every panel of the generated Grafana board, template variables filled in."""
    board = json.loads((ROOT / "deploy" / "grafana" / "dashboards" / "hermes-context-engine.json").read_text())
    exprs = []

    def walk(panels):
        for p in panels:
            for t in p.get("targets", []):
                if t.get("expr"):
                    exprs.append(t["expr"])
            walk(p.get("panels", []))
    walk(board["panels"])
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

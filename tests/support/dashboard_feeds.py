"""The swappable data feeds of the dashboard checks, with one job each (see
tests/dashboard/test_apptest.py for the list): a filled store (``fed``; tests that write get
``own_store``), a /metrics target (``metrics_endpoint``) and a real Prometheus scraping it with
deploy/'s alert rules (``prometheus``). Fixtures of module scope: a test module imports the
ones it uses, and gets one of each."""

from __future__ import annotations

import gc
import os
import shutil
import threading
import time
from pathlib import Path
from typing import Callable, Optional

import pytest
from observed_engine.dashboard.sample_data import scenario_rows
from support.paths import REPO
from support.real_feeds import (
    EngineExporter,
    StoreFacts,
    copy_store,
    feed_real_session,
    prometheus_ready_for,
    store_facts,
)
from support.servers import PrometheusServer, free_port

from observed_engine.contract import catalogue
from observed_engine.store import StoreWriter

ALERT_RULES = REPO / "deploy" / "prometheus" / "alerts.yml"
SCRAPE_INTERVAL = 0.25             # seconds; short, so increase() extrapolates little


# --- store feeds (swappable) ------------------------------------------------------

def feed_rows_with_store_writer(path: Path, now: float) -> StoreFacts:
    writer = StoreWriter(path, retention_days=0)
    try:
        writer.submit(scenario_rows(now))
        assert writer.flush(20), "store writer did not flush"
    finally:
        writer.close()
    gc.collect()        # the writer's connection goes away now (its last close checkpoints the WAL)
    return store_facts(path)


STORE_FEEDS: dict = {"real": feed_real_session, "rows": feed_rows_with_store_writer}
STORE_FEED = os.environ.get("OBSERVED_DASHBOARD_STORE_FEED", "real")


def feed_store(path: Path, now: float) -> StoreFacts:
    return STORE_FEEDS[STORE_FEED](path, now)


@pytest.fixture(scope="module")
def fed(tmp_path_factory) -> StoreFacts:
    """One filled store per module (read-only: tests that write use ``own_store``)."""
    path = tmp_path_factory.mktemp("fed") / "hermes" / "observed" / "telemetry.sqlite"
    return feed_store(path, time.time())


@pytest.fixture
def facts(fed) -> StoreFacts:
    return fed


@pytest.fixture
def filled_store(fed) -> Path:
    return fed.path


@pytest.fixture
def own_store(fed, tmp_path) -> Path:
    return copy_store(fed.path, tmp_path / "own" / "observed" / "telemetry.sqlite")


# --- metrics feeds (swappable) ------------------------------------------------------

class MetricsFeed:
    """A /metrics target for Prometheus. ``exporter`` is the engine's own (None: prometheus_client)."""

    def __init__(self, target: str, stop: Callable[[], None], exporter: Optional[EngineExporter] = None,
                 engines=("compressor",)) -> None:
        self.target = target
        self.stop = stop
        self.exporter = exporter
        self.engines = list(engines)


class _Exposition:
    """catalogue series that move every 0.25 s, served by prometheus_client."""

    def __init__(self):
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        m = catalogue.BY_KEY
        reg = self.registry = CollectorRegistry()

        def counter(key):
            return Counter(m[key].prom_name[: -len("_total")], m[key].description, m[key].labels, registry=reg)

        def hist(key, buckets):
            return Histogram(m[key].prom_name, m[key].description, m[key].labels, buckets=buckets, registry=reg)

        def gauge(key):
            return Gauge(m[key].prom_name, m[key].description, m[key].labels, registry=reg)

        self.calls = counter("hook_calls")
        self.duration = hist("hook_duration", catalogue.HOOK_LATENCY_BUCKETS)
        self.compressions = counter("compressions")
        self.c_duration = hist("compression_duration", catalogue.COMPRESSION_LATENCY_BUCKETS)
        self.c_tokens = hist("compression_tokens", catalogue.TOKEN_BUCKETS)
        self.selections = counter("selections")
        self.lost = counter("cache_prefix_lost")
        self.fail_open = counter("fail_open")
        self.timeouts = counter("compression_timeouts")
        self.summary_failures = counter("summary_failures")
        self.prompt, self.threshold, self.window = gauge("prompt_tokens"), gauge("threshold_tokens"), \
            gauge("window_tokens")
        self.ratio = gauge("usage_ratio")
        self.ticks = 0
        self._stop = threading.Event()

    def tick(self):
        e = "compressor"
        self.ticks += 1
        self.calls.labels(e, "should_compress", "ok").inc(4)
        for _ in range(4):
            self.duration.labels(e, "should_compress").observe(0.00003)
        self.calls.labels(e, "select_context", "ok").inc(2)
        self.duration.labels(e, "select_context").observe(0.002)
        self.duration.labels(e, "select_context").observe(0.004)
        self.calls.labels(e, "compress", "ok").inc()
        self.duration.labels(e, "compress").observe(8.0)
        self.compressions.labels(e, "compressed").inc()
        self.c_duration.labels(e).observe(8.0)
        self.c_tokens.labels(e, "before").observe(100_000)
        self.c_tokens.labels(e, "after").observe(25_000)
        self.selections.labels(e, "unchanged").inc()
        self.selections.labels(e, "changed_selection").inc()
        self.lost.labels(e).inc(3_000)
        if self.ticks % 4 == 0:
            self.compressions.labels(e, "noop").inc()
            self.fail_open.labels(e, "select_context", "exception").inc()
            self.selections.labels(e, "fail_open").inc()
            self.timeouts.labels(e, "deadline_exceeded").inc()
            self.summary_failures.labels(e, "fallback_summary", "other").inc()
        p = 20_000 + (self.ticks % 10) * 8_000
        self.prompt.labels(e).set(p)
        self.threshold.labels(e).set(100_000)
        self.window.labels(e).set(128_000)
        self.ratio.labels(e).set(p / 128_000)

    def run(self):
        while not self._stop.wait(0.25):
            self.tick()

    def stop(self):
        self._stop.set()


def serve_prometheus_client(workdir: Path) -> MetricsFeed:
    from prometheus_client import start_http_server

    expo = _Exposition()
    expo.tick()
    port = free_port()
    server, thread = start_http_server(port, addr="127.0.0.1", registry=expo.registry)
    ticker = threading.Thread(target=expo.run, daemon=True)
    ticker.start()
    return MetricsFeed(f"127.0.0.1:{port}", lambda: (expo.stop(), server.shutdown()))


def serve_engine_exporter(workdir: Path) -> MetricsFeed:
    exporter = EngineExporter(workdir, free_port())
    try:
        exporter.start()             # the warm-up pass has run: every series exists
    except BaseException:
        exporter.stop()
        raise
    return MetricsFeed(exporter.target, exporter.stop, exporter, exporter.engines())


ENDPOINT_FEEDS = {"engine": serve_engine_exporter, "prometheus_client": serve_prometheus_client}
METRICS_FEED = os.environ.get("OBSERVED_DASHBOARD_METRICS_FEED", "engine")


@pytest.fixture(scope="module")
def metrics_endpoint(tmp_path_factory, request) -> MetricsFeed:
    feed = ENDPOINT_FEEDS[METRICS_FEED](tmp_path_factory.mktemp("metrics-feed"))
    request.addfinalizer(feed.stop)
    return feed


def _firing(prom: PrometheusServer) -> set:
    return {a["labels"]["alertname"] for a in prom.alerts() if a["state"] == "firing"}


def _wait(what: str, predicate, timeout: float, prom: PrometheusServer) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if prom.proc.poll() is not None:
            pytest.fail("prometheus exited: " + prom.log_tail())
        try:
            if predicate():
                return
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.2)
    pytest.fail(f"prometheus never had {what}: " + prom.log_tail())


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory, metrics_endpoint, request) -> str:
    """A real Prometheus scraping the feed every SCRAPE_INTERVAL, with deploy/'s alert rules.

    The engine feed: once Prometheus holds the warm-up values, the main pass runs; the fixture
    returns when Prometheus holds the final values and the fail-open and summary-failure alerts fire."""
    tmp_path = tmp_path_factory.mktemp("prometheus")
    shutil.copy(ALERT_RULES, tmp_path / "rules.yml")
    interval = f"{int(SCRAPE_INTERVAL * 1000)}ms"
    # PrometheusServer skips without the binary, or fails under OBSERVED_REQUIRE_TOOLS (CI)
    prom = PrometheusServer(tmp_path, [metrics_endpoint.target], job_name="observed", rule_files=["rules.yml"],
                            scrape_interval=interval, scrape_timeout=interval, evaluation_interval="1s")
    request.addfinalizer(prom.stop)  # kills the recorded PID, even if startup fails
    prom.start()
    query = prom.query
    exporter = metrics_endpoint.exporter
    if exporter is not None:
        _wait("the warm-up values", lambda: prometheus_ready_for(exporter, query), 90, prom)
        exporter.baseline_seen = time.time()
        time.sleep(3.0)              # flat samples first: increase() then extrapolates less
        exporter.drive()             # the main pass, scraped as it runs
        _wait("the final values", lambda: prometheus_ready_for(exporter, query), 60, prom)
        _wait("the fail-open and summary-failure alerts", lambda: {
            "HermesContextEngineFailOpen", "HermesContextSummaryFailing"} <= _firing(prom), 60, prom)
    else:
        _wait("moving series and a firing alert", lambda: query(
            "increase(hermes_context_compressions_total[1m]) > 0") and query(
            "increase(hermes_context_engine_fail_open_total[1m]) > 0") and "HermesContextEngineFailOpen"
            in _firing(prom), 90, prom)
    return prom.url

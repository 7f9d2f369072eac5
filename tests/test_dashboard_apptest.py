"""The Streamlit dashboard under AppTest: empty state, a filled store, a real Prometheus.

The data feeds are fixtures with one job each, so they can be swapped for the
engine itself later:

* ``feed_store(path, now)`` writes the scenario of ``dashboard.sample_data``
  into a store (today with ``StoreWriter`` + ``make_row``; later: run the
  observed engine over a scripted inner engine). ``STORE_FEEDS`` maps a name to
  a feed; ``OBSERVED_DASHBOARD_STORE_FEED`` picks one.
* ``metrics_endpoint`` serves a /metrics exposition with catalogue series
  (today ``prometheus_client``; later the engine's own exporter). It yields the
  scrape target ``host:port``.

Expected numbers come from ``dashboard.sample_data.SCENARIO``.
"""

from __future__ import annotations

import gc
import hashlib
import json
import os
import shutil
import socket
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from dashboard.sample_data import SCENARIO, scenario_rows
from observed_engine import catalogue
from observed_engine.store import StoreWriter, connect, make_row

APP = "../dashboard/app.py"        # relative to this file: <repo>/dashboard/app.py
TIMEOUT = 120

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


# --- feeds (swappable) ------------------------------------------------------

def feed_rows_with_store_writer(path: Path, now: float) -> None:
    writer = StoreWriter(path, retention_days=0)
    try:
        writer.submit(scenario_rows(now))
        assert writer.flush(20), "store writer did not flush"
    finally:
        writer.close()


STORE_FEEDS = {"rows": feed_rows_with_store_writer}


def feed_store(path: Path, now: float) -> None:
    STORE_FEEDS[os.environ.get("OBSERVED_DASHBOARD_STORE_FEED", "rows")](path, now)


@pytest.fixture
def filled_store(tmp_path) -> Path:
    path = tmp_path / "hermes" / "observed" / "telemetry.sqlite"
    feed_store(path, time.time())
    gc.collect()        # the writer's connection goes away now (its last close checkpoints the WAL)
    return path


# --- AppTest helpers ------------------------------------------------------------

def app(monkeypatch, *, store=None, prometheus=None, refresh="5"):
    from streamlit.testing.v1 import AppTest

    for var in ("OBSERVED_STORE", "OBSERVED_PROMETHEUS_URL", "OBSERVED_SOURCE"):
        monkeypatch.delenv(var, raising=False)
    if store is not None:
        monkeypatch.setenv("OBSERVED_STORE", str(store))
    if prometheus is not None:
        monkeypatch.setenv("OBSERVED_PROMETHEUS_URL", prometheus)
    monkeypatch.setenv("OBSERVED_REFRESH_SECONDS", refresh)
    return AppTest.from_file(APP, default_timeout=TIMEOUT)


def run_ok(at):
    at.run(timeout=TIMEOUT)
    assert not at.exception, [e.value for e in at.exception]
    return at


def show(at, tab: str):
    at.session_state["view"] = tab
    return run_ok(at)


def metrics(at) -> dict:
    return {m.label: m.value for m in at.metric}


def texts(at) -> str:
    parts = [m.value for m in at.markdown] + [c.value for c in at.caption] + [i.value for i in at.info]
    parts += [e.value for e in at.error] + [w.value for w in at.warning] + [s.value for s in at.success]
    return "\n".join(str(p) for p in parts)


def frames(at) -> list:
    return [d.value for d in at.dataframe]


def frame_with(at, column: str):
    for df in frames(at):
        if column in df.columns:
            return df
    raise AssertionError(f"no table with column {column!r}: {[list(d.columns) for d in frames(at)]}")


def chart_specs(at) -> list:
    return [json.loads(c.proto.spec) for c in at.get("vega_lite_chart")]


def chart_titles(at) -> list:
    out = []
    for spec in chart_specs(at):
        t = spec.get("title")
        if isinstance(t, dict):
            t = t.get("text")
        if t:
            out.append(t)
    return out


def file_digest(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


# --- (a) no store yet -------------------------------------------------------------

def test_missing_store_shows_how_to_enable(monkeypatch, tmp_path):
    store = tmp_path / "home" / "observed" / "telemetry.sqlite"
    at = run_ok(app(monkeypatch, store=store))
    body = texts(at)
    assert "No telemetry store yet" in body
    assert "engine: observed" in body and "context:" in body
    assert "$HERMES_HOME/config.yaml" in body
    assert "observed-engine install" in body
    assert "observed-engine demo" in body
    assert str(store) in body
    # read-only: looking for the store never creates it (nor its directory)
    assert not store.exists() and not store.parent.exists()
    assert not at.metric                      # no views without data


def test_empty_store_shows_empty_state(monkeypatch, tmp_path):
    store = tmp_path / "telemetry.sqlite"
    connect(store).close()                    # schema, no rows
    at = run_ok(app(monkeypatch, store=store))
    body = texts(at)
    assert "The telemetry store is empty" in body
    assert "observed-engine install" in body and "observed-engine demo" in body


def test_store_appears_later(monkeypatch, tmp_path):
    store = tmp_path / "later" / "observed" / "telemetry.sqlite"
    at = run_ok(app(monkeypatch, store=store))
    assert "No telemetry store yet" in texts(at)
    feed_store(store, time.time())
    gc.collect()
    run_ok(at)                      # the next refresh finds it
    assert metrics(at)["Active sessions"] == "3"
    assert at.multiselect(key="engines").options == ["compressor", "lcm"]


def test_source_cannot_write(filled_store):
    import sqlite3

    from dashboard.sqlite_source import SQLiteSource

    src = SQLiteSource(filled_store)
    with src.snapshot() as conn:
        with pytest.raises(sqlite3.OperationalError):
            conn.execute("DELETE FROM events")
    src.close()


# --- (b) a filled store ------------------------------------------------------------

def test_headline_and_sawtooth(monkeypatch, filled_store):
    before = file_digest(filled_store)
    at = run_ok(app(monkeypatch, store=filled_store))
    m = metrics(at)
    assert m["Active sessions"] == "3"
    c = SCENARIO["compressor_compressions"]
    assert m["Compressions"] == str(sum(c.values()))
    assert m["Compression timeouts"] == "1"
    assert m["Fail-opens"] == "1"
    assert m["Highest context usage"] == "69%"          # sess-alpha: 88,000 of 128,000
    # the alert banner (store-derived: both incidents are in the last 15 minutes)
    banner = " ".join(e.value for e in at.error)
    assert "HermesContextCompressionTimeout" in banner and "HermesContextEngineFailOpen" in banner
    # the sawtooth: one chart per session, sess-alpha with its two compressions
    titles = chart_titles(at)
    assert len(titles) == 3, titles
    alpha = [t for t in titles if t.startswith("sess-alpha")]
    assert alpha and "compressor" in alpha[0] and "2 compressions" in alpha[0] and "(69%)" in alpha[0]
    assert any(t.startswith("sess-gamma") and "lcm" in t for t in titles)
    # read-only: the store file is byte-for-byte unchanged
    assert file_digest(filled_store) == before


def test_sawtooth_data_of_one_session(monkeypatch, filled_store):
    at = app(monkeypatch, store=filled_store)
    run_ok(at)
    at.selectbox(key="session").set_value("sess-alpha")
    run_ok(at)
    specs = chart_specs(at)
    assert len(specs) == 1
    # the compressions of this session, newest first
    table = frame_with(at, "outcome")
    assert list(table["outcome"]) == ["noop", "timeout", "compressed", "compressed"]
    compressed = table[table["outcome"] == "compressed"]
    assert sorted(compressed["tokens before"]) == sorted(SCENARIO["compressor_tokens_before"])
    assert sorted(compressed["tokens after"]) == sorted(SCENARIO["compressor_tokens_after"])
    # no message text without capture_content
    assert "capture_content is off" in texts(at)
    assert not at.expander


def test_sawtooth_rises_and_drops_in_the_source(filled_store):
    from dashboard.sources import make_filters
    from dashboard.sqlite_source import SQLiteSource

    src = SQLiteSource(filled_store)
    f = make_filters(3600, time.time())
    lines, marks = src.usage(f, ["sess-alpha"])
    prompts = list(lines["prompt_tokens"])
    assert prompts == [20_000, 40_000, 60_000, 75_000, 90_000, 30_000, 55_000, 88_000]
    assert set(lines["threshold_tokens"]) == {85_000} and set(lines["window_tokens"]) == {128_000}
    first = marks[marks["outcome"] == "compressed"].iloc[0]
    # the compression sits between the 90k peak and the 30k restart
    assert lines["ts"].iloc[4] < first["ts"] < lines["ts"].iloc[5]
    assert (first["tokens_before"], first["tokens_after"]) == (90_000, 18_000)


def test_compressions_view(monkeypatch, filled_store):
    at = show(run_ok(app(monkeypatch, store=filled_store)), "Compressions")
    m = metrics(at)
    c = SCENARIO["compressor_compressions"]
    assert (m["Compressed"], m["Noop"], m["Error"], m["Timeout"]) == tuple(
        str(c[k]) for k in ("compressed", "noop", "error", "timeout"))
    assert m["Tokens after / before"] == "22%"          # (18k + 22k) / (90k + 88k)
    table = frame_with(at, "p95 s").set_index("engine")
    row = table.loc["compressor"]
    assert (row["compressed"], row["noop"], row["error"], row["timeout"]) == (2, 1, 0, 1)
    # call durations 12 s, 20 s, 0.5 s -> nearest-rank p50 12 s, p95 and p99 20 s
    assert (row["p50 s"], row["p95 s"], row["p99 s"]) == (12.0, 20.0, 20.0)
    assert row["avg tokens before"] == 89_000 and row["avg tokens after"] == 20_000
    assert "lcm" not in table.index                      # lcm never compressed
    assert len(chart_specs(at)) == 2


def test_selection_view(monkeypatch, filled_store):
    at = show(run_ok(app(monkeypatch, store=filled_store)), "select_context")
    comp, lcm = SCENARIO["compressor_selections"], SCENARIO["lcm_selections"]
    total = sum(comp.values()) + sum(lcm.values())
    changed = comp["changed_selection"] + lcm["changed_selection"]
    m = metrics(at)
    assert m["Selections"] == str(total)
    assert m["Churn rate"] == f"{100 * changed / total:.1f}%"
    assert m["Fail-open"] == str(comp["fail_open"] + lcm["fail_open"])
    assert m["Prompt-cache tokens lost"] == f"{SCENARIO['compressor_cache_lost'] + SCENARIO['lcm_cache_lost']:,}"
    table = frame_with(at, "churn").set_index("engine")
    for engine, expected in (("compressor", comp), ("lcm", lcm)):
        for result, n in expected.items():
            assert table.loc[engine, result] == n, (engine, result)
    assert table.loc["compressor", "churn"] == pytest.approx(2 / 8)
    assert table.loc["compressor", "cache tokens lost"] == SCENARIO["compressor_cache_lost"]
    assert len(chart_specs(at)) == 3


def test_alerts_and_incident_table(monkeypatch, filled_store):
    at = show(run_ok(app(monkeypatch, store=filled_store)), "Alerts & incidents")
    alerts = frame_with(at, "alert")
    assert set(alerts["alert"]) == {"HermesContextCompressionTimeout", "HermesContextEngineFailOpen"}
    assert set(alerts["state"]) == {"firing"}
    m = metrics(at)
    assert m["deadline_exceeded"] == "1" and m["fail_open"] == "1"
    inc = frame_with(at, "reason")
    assert len(inc) == SCENARIO["incidents"]
    assert list(inc["time"]) == sorted(inc["time"], reverse=True)           # newest first
    for key in ("deadline", "fail_open"):
        exp = SCENARIO[key]
        row = inc[inc["event"] == exp["event"]].iloc[0]
        assert {k: row[k] for k in ("session", "engine", "hook", "event", "reason")} == exp
    assert "content" not in inc.columns                  # capture_content was off


def test_hook_latency_view(monkeypatch, filled_store):
    at = show(run_ok(app(monkeypatch, store=filled_store)), "Hook latency")
    table = frame_with(at, "p95 ms").set_index(["engine", "hook"])
    # select_context of compressor: 8 calls of 2..9 ms -> nearest-rank p50 5 ms, p95 = p99 = 9 ms
    row = table.loc[("compressor", "select_context")]
    assert row["calls"] == 8 and row["errors"] == 0
    assert row["p50 ms"] == pytest.approx(5.0) and row["p95 ms"] == pytest.approx(9.0)
    # the fail-open and deadline rows are events, not calls
    assert table.loc[("compressor", "compress"), "calls"] == 3
    assert table.loc[("compressor", "update_from_response"), "calls"] == 16
    assert table.loc[("lcm", "select_context"), "calls"] == 2
    assert (table["calls/s"] > 0).all()
    assert len(chart_specs(at)) == 2


def test_compare_engines_view(monkeypatch, filled_store):
    at = show(run_ok(app(monkeypatch, store=filled_store)), "Compare engines")
    side = frame_with(at, "metric").set_index("metric")
    assert list(side.columns) == ["compressor", "lcm"]
    assert side.loc["compressions", "compressor"] == "4" and side.loc["compressions", "lcm"] == "0"
    assert side.loc["churn rate", "compressor"] == "25.0%" and side.loc["churn rate", "lcm"] == "50.0%"
    assert side.loc["fail-opens", "compressor"] == "1" and side.loc["fail-opens", "lcm"] == "0"
    assert side.loc["compress p95", "compressor"] == "20.00 s" and side.loc["compress p95", "lcm"] == "–"
    # swap the order: the picks are widgets
    at.selectbox(key="compare_a").set_value("lcm")
    run_ok(at)
    assert list(frame_with(at, "metric").columns)[1:] == ["lcm", "compressor"]


def test_engine_filter(monkeypatch, filled_store):
    at = run_ok(app(monkeypatch, store=filled_store))
    at.multiselect(key="engines").set_value(["lcm"])
    run_ok(at)
    m = metrics(at)
    assert m["Active sessions"] == "1" and m["Compressions"] == "0" and m["Fail-opens"] == "0"
    assert [t.split()[0] for t in chart_titles(at)] == ["sess-gamma"]


def test_content_only_when_captured(monkeypatch, tmp_path):
    store = tmp_path / "telemetry.sqlite"
    now = time.time()
    rows = scenario_rows(now) + [
        make_row(ts=now - 100, host="h", pid=1, session="sess-text", engine="compressor", hook="select_context",
                 event="fail_open", reason="exception", content="the user asked about the lighthouse"),
        make_row(ts=now - 99, host="h", pid=1, session="sess-text", engine="compressor",
                 hook="update_from_response", event="call", outcome="ok", prompt_tokens=1000,
                 threshold_tokens=5000, window_tokens=8000),
    ]
    w = StoreWriter(store, retention_days=0)
    w.submit(rows)
    assert w.flush(20)
    w.close()
    at = show(run_ok(app(monkeypatch, store=store)), "Alerts & incidents")
    inc = frame_with(at, "reason")
    assert "content" in inc.columns
    assert "lighthouse" in inc.loc[inc["session"] == "sess-text", "content"].iloc[0]
    at.selectbox(key="session").set_value("sess-text")
    show(at, "Context usage")
    assert len(at.expander) == 1 and "capture_content was on" in at.expander[0].label


def test_live_refresh_picks_up_new_rows(monkeypatch, filled_store):
    at = run_ok(app(monkeypatch, store=filled_store, refresh="1"))
    assert metrics(at)["Fail-opens"] == "1"
    w = StoreWriter(filled_store, retention_days=0)
    w.submit([make_row(ts=time.time(), host="h", pid=1, session="sess-beta", engine="compressor",
                       hook="select_context", event="fail_open", reason="exception")])
    assert w.flush(20)
    w.close()
    time.sleep(1.1)                    # next refresh tick
    run_ok(at)
    assert metrics(at)["Fail-opens"] == "2"


# --- (c) Prometheus -----------------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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


def serve_prometheus_client():
    from prometheus_client import start_http_server

    expo = _Exposition()
    expo.tick()
    port = _free_port()
    server, thread = start_http_server(port, addr="127.0.0.1", registry=expo.registry)
    ticker = threading.Thread(target=expo.run, daemon=True)
    ticker.start()
    return f"127.0.0.1:{port}", lambda: (expo.stop(), server.shutdown())


ENDPOINT_FEEDS = {"prometheus_client": serve_prometheus_client}


@pytest.fixture(scope="module")
def metrics_endpoint(request):
    target, stop = ENDPOINT_FEEDS[os.environ.get("OBSERVED_DASHBOARD_METRICS_FEED", "prometheus_client")]()
    request.addfinalizer(stop)
    return target


RULES = """
groups:
- name: observed-engine-test
  rules:
  - alert: HermesContextEngineFailOpen
    expr: sum by (engine, hook) (increase(hermes_context_engine_fail_open_total[1m])) > 0
    labels: {severity: warning}
    annotations:
      summary: "{{ $labels.engine }} fell open in {{ $labels.hook }}"
"""


def _prom_get(url, path, **params):
    with urllib.request.urlopen(f"{url}{path}?{urllib.parse.urlencode(params)}", timeout=3) as r:
        return json.loads(r.read())


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory, metrics_endpoint, request):
    binary = shutil.which("prometheus") or "/usr/bin/prometheus"
    if not os.path.exists(binary):
        pytest.skip("prometheus binary not installed")
    tmp_path = tmp_path_factory.mktemp("prometheus")
    port = _free_port()
    (tmp_path / "rules.yml").write_text(RULES)
    (tmp_path / "prometheus.yml").write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "rule_files: [rules.yml]\n"
        "scrape_configs:\n"
        f"- job_name: observed\n  static_configs: [{{targets: ['{metrics_endpoint}']}}]\n")
    log = open(tmp_path / "prometheus.log", "wb")
    proc = subprocess.Popen(
        [binary, f"--config.file={tmp_path / 'prometheus.yml'}", f"--storage.tsdb.path={tmp_path / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
        stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path)
    pid = proc.pid

    def stop():
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                os.kill(pid, 9)
                proc.wait(5)
        log.close()

    request.addfinalizer(stop)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 90
    ready = False
    while time.time() < deadline:
        if proc.poll() is not None:
            pytest.fail("prometheus exited: " + (tmp_path / "prometheus.log").read_text()[-2000:])
        try:
            have = _prom_get(url, "/api/v1/query",
                             query="increase(hermes_context_compressions_total[1m]) > 0")["data"]["result"]
            fail = _prom_get(url, "/api/v1/query",
                             query="increase(hermes_context_engine_fail_open_total[1m]) > 0")["data"]["result"]
            alerts = _prom_get(url, "/api/v1/alerts")["data"]["alerts"]
            if have and fail and any(a["state"] == "firing" for a in alerts):
                ready = True
                break
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.5)
    assert ready, "prometheus never had the series: " + (tmp_path / "prometheus.log").read_text()[-2000:]
    return url


@pytest.mark.prometheus
def test_prometheus_source(monkeypatch, prometheus):
    at = app(monkeypatch, prometheus=prometheus)
    run_ok(at)
    at.selectbox(key="range").set_value("Last 15 minutes")
    run_ok(at)
    assert "Prometheus" in texts(at) and prometheus in texts(at)
    m = metrics(at)
    assert m["Engines"] == "1"
    assert int(m["Compressions"].replace(",", "")) > 0
    assert int(m["Fail-opens"]) >= 1
    assert int(m["Compression timeouts"]) >= 1
    assert m["Highest context usage"].endswith("%") and m["Highest context usage"] != "–"
    assert "HermesContextEngineFailOpen" in " ".join(e.value for e in at.error)
    # usage: no sessions in Prometheus, said so; the engine's gauges are drawn
    assert "never metric labels" in texts(at)
    assert any(t.startswith("compressor") for t in chart_titles(at))

    show(at, "Compressions")
    row = frame_with(at, "p95 s").set_index("engine").loc["compressor"]
    assert row["compressed"] > 0 and row["noop"] > 0
    assert 5.0 <= row["p50 s"] <= 10.0                    # every observation was 8 s: bucket (5, 10]
    assert row["after / before"] == pytest.approx(0.25, rel=0.05)

    show(at, "select_context")
    sel = frame_with(at, "churn").set_index("engine").loc["compressor"]
    assert sel["unchanged"] > 0 and sel["changed_selection"] > 0 and sel["fail_open"] > 0
    assert 0.3 < sel["churn"] < 0.6

    show(at, "Alerts & incidents")
    alerts = frame_with(at, "alert")
    fired = alerts[alerts["alert"] == "HermesContextEngineFailOpen"].iloc[0]
    assert fired["state"] == "firing" and fired["severity"] == "warning" and "select_context" in fired["detail"]
    assert "needs the SQLite store" in texts(at)
    counts = frame_with(at, "count")
    assert {"fail_open", "deadline_exceeded"} <= set(counts["event"])

    show(at, "Hook latency")
    lat = frame_with(at, "p95 ms").set_index(["engine", "hook"])
    assert lat.loc[("compressor", "should_compress"), "calls"] > lat.loc[("compressor", "compress"), "calls"]
    assert 1.0 <= lat.loc[("compressor", "select_context"), "p50 ms"] <= 5.0      # bucket (1 ms, 5 ms]


@pytest.mark.prometheus
def test_store_with_prometheus_alerts(monkeypatch, filled_store, prometheus):
    at = run_ok(app(monkeypatch, store=filled_store, prometheus=prometheus))
    assert metrics(at)["Active sessions"] == "3"          # the store is the source ...
    banner = " ".join(e.value for e in at.error)
    assert "HermesContextEngineFailOpen" in banner and "HermesContextCompressionTimeout" in banner
    show(at, "Alerts & incidents")
    alerts = frame_with(at, "alert")
    assert set(alerts["from"]) == {"store", "prometheus"}   # ... and Prometheus adds its rule alerts
    prom = alerts[alerts["from"] == "prometheus"].iloc[0]
    assert prom["alert"] == "HermesContextEngineFailOpen" and prom["state"] == "firing"
    assert prometheus in texts(at)


def test_prometheus_unreachable(monkeypatch):
    at = run_ok(app(monkeypatch, prometheus=f"http://127.0.0.1:{_free_port()}"))
    body = texts(at)
    assert "Cannot reach Prometheus" in body
    assert "engine: observed" in body

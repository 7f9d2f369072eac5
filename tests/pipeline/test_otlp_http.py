"""Our OTLP/HTTP exporters (observed_engine.pipeline.otlp_http) against the official ones.

- Configuration: for the same arguments and OTEL_EXPORTER_OTLP_* variables, the endpoint,
  headers, timeout, compression, CA and client certificates and the metric temporality and
  aggregation are what opentelemetry-exporter-otlp-proto-http resolves.
- Sending, to HTTP servers on 127.0.0.1: gzip and deflate bodies the official receiver decodes,
  retries of 429/502/503/504 (Retry-After honoured), no retry of other statuses, a refused port
  and a server that never answers fail within the timeout, shutdown stops a backoff.
- A process that exports OTLP/HTTP never imports protobuf; with a credential-provider variable
  set the official exporter is used.
"""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.metrics import Counter, Histogram, MeterProvider, ObservableCounter, UpDownCounter
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    MetricExportResult,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from support.otlp_receiver import OtlpReceiver
from support.paths import TESTS
from support.servers import BlackHole, refused_port

from observed_engine.pipeline import otlp_http

OTLP_VARS = [
    "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
    "OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS", "OTEL_EXPORTER_OTLP_METRICS_HEADERS",
    "OTEL_EXPORTER_OTLP_TIMEOUT", "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_METRICS_TIMEOUT",
    "OTEL_EXPORTER_OTLP_COMPRESSION", "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", "OTEL_EXPORTER_OTLP_METRICS_COMPRESSION",
    "OTEL_EXPORTER_OTLP_CERTIFICATE", "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE", "OTEL_EXPORTER_OTLP_CLIENT_KEY",
    "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", "OTEL_EXPORTER_OTLP_METRICS_CLIENT_KEY",
    "OTEL_EXPORTER_OTLP_METRICS_CLIENT_CERTIFICATE", "OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE",
    "OTEL_EXPORTER_OTLP_METRICS_DEFAULT_HISTOGRAM_AGGREGATION", "OTEL_PYTHON_EXPORTER_OTLP_HTTP_CREDENTIAL_PROVIDER",
    "OTEL_PYTHON_EXPORTER_OTLP_HTTP_TRACES_CREDENTIAL_PROVIDER", "OTEL_PYTHON_SDK_INTERNAL_METRICS_ENABLED",
]


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    for name in OTLP_VARS:
        monkeypatch.delenv(name, raising=False)


def some_spans(n=3):
    finished = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(finished))
    tracer = provider.get_tracer("observed-engine-test")
    for i in range(n):
        with tracer.start_as_current_span(f"context_engine.hook{i}", attributes={"i": i, "engine": "compressor"}):
            pass
    return finished.get_finished_spans()


# -- configuration, against the official exporter ------------------------------------------------

ENVIRONMENTS = [
    {},
    {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318/"},
    {"OTEL_EXPORTER_OTLP_ENDPOINT": "https://collector:4318", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://t:1/x",
     "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "http://m:2/y"},
    {"OTEL_EXPORTER_OTLP_HEADERS": "Authorization=Bearer%20abc,x-tenant=42",
     "OTEL_EXPORTER_OTLP_TRACES_HEADERS": "x-only=traces"},
    {"OTEL_EXPORTER_OTLP_HEADERS": "api-key=not url encoded value=1, other = 2"},
    {"OTEL_EXPORTER_OTLP_TIMEOUT": "2.5", "OTEL_EXPORTER_OTLP_METRICS_TIMEOUT": "7"},
    {"OTEL_EXPORTER_OTLP_TIMEOUT": "soon"},
    {"OTEL_EXPORTER_OTLP_COMPRESSION": "gzip"},
    {"OTEL_EXPORTER_OTLP_COMPRESSION": " Deflate ", "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION": "none"},
    {"OTEL_EXPORTER_OTLP_COMPRESSION": "brotli"},
    {"OTEL_EXPORTER_OTLP_CERTIFICATE": "/etc/ca.pem", "OTEL_EXPORTER_OTLP_CLIENT_KEY": "/k.pem",
     "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE": "/c.pem", "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE": "/t-ca.pem"},
    {"OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE": "/c.pem"},
    {"OTEL_EXPORTER_OTLP_METRICS_CLIENT_KEY": "/mk.pem", "OTEL_EXPORTER_OTLP_METRICS_CLIENT_CERTIFICATE": "/mc.pem"},
]
ARGUMENTS = [
    {},
    {"endpoint": "http://127.0.0.1:4318/v1/custom", "timeout": 3, "headers": {"X-Given": "yes", "Content-Type": "x"}},
    {"compression": "gzip", "certificate_file": "/given-ca.pem", "client_key_file": "/gk.pem",
     "client_certificate_file": "/gc.pem"},
]


def official_view(exporter):
    """(endpoint, headers without user-agent, timeout, compression, verify, cert) of an official exporter."""
    client = exporter._client
    session = client._transport._session
    headers = {k.lower(): v for k, v in client._headers.items() if k.lower() != "user-agent"}
    return (client._endpoint, headers, client._timeout, client._compression.value, session.verify,
            getattr(session, "cert", None))


def our_view(exporter):
    target = exporter._sender.target
    session = exporter._sender._session
    headers = {k: v for k, v in target.headers.items() if k != "user-agent"}
    return (target.endpoint, headers, target.timeout, target.compression, session.verify, session.cert)


def official_compression(value):
    if value is None:
        return None
    from opentelemetry.exporter.otlp.proto.http import Compression

    return {"gzip": Compression.Gzip, "deflate": Compression.Deflate, "none": Compression.NoCompression}[value]


@pytest.mark.parametrize("env", ENVIRONMENTS)
@pytest.mark.parametrize("args", ARGUMENTS)
def test_configuration_is_resolved_as_the_official_exporters_resolve_it(monkeypatch, env, args):
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    for name, value in env.items():
        monkeypatch.setenv(name, value)
    official_args = dict(args, compression=official_compression(args.get("compression")))
    pairs = [(OTLPSpanExporter(**official_args), otlp_http.OtlpHttpSpanExporter(**args)),
             (OTLPMetricExporter(**official_args), otlp_http.OtlpHttpMetricExporter(**args))]
    for official, ours in pairs:
        assert our_view(ours) == official_view(official)
        assert ours._sender.target.headers["user-agent"].startswith("observed-engine/")
    official_metrics, our_metrics = pairs[1]
    assert our_metrics._preferred_temporality == official_metrics._preferred_temporality
    assert {k: type(v) for k, v in our_metrics._preferred_aggregation.items()} == \
        {k: type(v) for k, v in official_metrics._preferred_aggregation.items()}


@pytest.mark.parametrize("preference", ["CUMULATIVE", "delta", "LowMemory", "sideways"])
@pytest.mark.parametrize("histograms", ["explicit_bucket_histogram", "base2_exponential_bucket_histogram", "odd"])
def test_metric_temporality_and_aggregation_follow_the_environment(monkeypatch, preference, histograms):
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

    monkeypatch.setenv("OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE", preference)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_METRICS_DEFAULT_HISTOGRAM_AGGREGATION", histograms)
    given = {UpDownCounter: AggregationTemporality.DELTA}
    official, ours = OTLPMetricExporter(preferred_temporality=given), \
        otlp_http.OtlpHttpMetricExporter(preferred_temporality=given)
    assert ours._preferred_temporality == official._preferred_temporality
    assert ours._preferred_temporality[UpDownCounter] is AggregationTemporality.DELTA
    assert {k: type(v) for k, v in ours._preferred_aggregation.items()} == \
        {k: type(v) for k, v in official._preferred_aggregation.items()}
    if preference == "delta":
        assert ours._preferred_temporality[Counter] is AggregationTemporality.DELTA
        assert ours._preferred_temporality[ObservableCounter] is AggregationTemporality.DELTA
    assert Histogram in ours._preferred_aggregation


def test_official_exporter_is_named_where_only_it_can_do_what_is_asked(monkeypatch):
    assert otlp_http.official_exporter_needed("traces") is None
    monkeypatch.setenv("OTEL_PYTHON_EXPORTER_OTLP_HTTP_TRACES_CREDENTIAL_PROVIDER", "my_session")
    assert "CREDENTIAL_PROVIDER" in otlp_http.official_exporter_needed("traces")
    assert otlp_http.official_exporter_needed("metrics") is None
    monkeypatch.setenv("OTEL_PYTHON_SDK_INTERNAL_METRICS_ENABLED", "True")
    assert "INTERNAL_METRICS" in otlp_http.official_exporter_needed("metrics")


# -- sending, to servers on 127.0.0.1 -----------------------------------------------------------

class ScriptedCollector:
    """An HTTP server on 127.0.0.1 answering POSTs with the next status of ``script`` (then 200),
    recording each request's headers and decompressed body."""

    def __init__(self, script=(), retry_after=None):
        self.script = list(script)
        self.retry_after = retry_after
        self.requests = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                encoding = self.headers.get("Content-Encoding")
                body = gzip.decompress(raw) if encoding == "gzip" else zlib.decompress(raw) \
                    if encoding == "deflate" else raw
                outer.requests.append((time.monotonic(), self.headers, body))   # case-insensitive
                status = outer.script.pop(0) if outer.script else 200
                self.send_response(status)
                if status != 200 and outer.retry_after is not None:
                    self.send_header("Retry-After", outer.retry_after)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self):
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1/traces"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.parametrize("compression", ["gzip", "deflate", "none"])
def test_spans_arrive_at_the_official_receiver_compressed_as_configured(monkeypatch, compression):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "x-tenant=blue")
    spans = some_spans()
    with ScriptedCollector() as collector:
        exporter = otlp_http.OtlpHttpSpanExporter(endpoint=collector.url, compression=compression, timeout=5)
        assert exporter.export(spans) is SpanExportResult.SUCCESS
        exporter.shutdown()
    [(_, headers, body)] = collector.requests
    assert headers.get("Content-Encoding") == (None if compression == "none" else compression)
    assert headers["Content-Type"] == "application/x-protobuf"
    assert headers["x-tenant"] == "blue"
    request = ExportTraceServiceRequest.FromString(body)
    assert [s.name for s in request.resource_spans[0].scope_spans[0].spans] == [s.name for s in spans]
    with OtlpReceiver(grpc_enabled=False) as rx:      # and the test receiver, as a Collector, decodes it
        exporter = otlp_http.OtlpHttpSpanExporter(endpoint=rx.http_endpoint + "/v1/traces", compression=compression)
        assert exporter.export(spans) is SpanExportResult.SUCCESS
        assert rx.wait_for(lambda: rx.span_count() == 3, 5)


def test_metrics_arrive_at_the_official_receiver():
    with OtlpReceiver(grpc_enabled=False) as rx:
        exporter = otlp_http.OtlpHttpMetricExporter(endpoint=rx.http_endpoint + "/v1/metrics")
        reader = PeriodicExportingMetricReader(exporter, export_interval_millis=3_600_000)
        provider = MeterProvider(metric_readers=[reader], shutdown_on_exit=False)
        meter = provider.get_meter("observed-engine-test")
        meter.create_counter("hermes.test.calls").add(5, {"hook": "compress"})
        meter.create_histogram("hermes.test.duration", unit="s").record(0.25, {"hook": "compress"})
        provider.force_flush()
        assert rx.wait_for(lambda: rx.latest_value("hermes.test.calls", hook="compress") == 5, 5)
        assert rx.latest_value("hermes.test.duration", hook="compress")[0] == 1
        provider.shutdown()


@pytest.mark.parametrize("status", [429, 502, 503, 504])
def test_retryable_statuses_are_retried_honouring_retry_after(status):
    with ScriptedCollector([status, status], retry_after="0") as collector:
        exporter = otlp_http.OtlpHttpSpanExporter(endpoint=collector.url, timeout=5)
        t0 = time.monotonic()
        assert exporter.export(some_spans(1)) is SpanExportResult.SUCCESS
        assert time.monotonic() - t0 < 1.0          # Retry-After: 0, not the 1 s and 2 s backoff
    assert len(collector.requests) == 3


def test_backoff_without_retry_after_is_exponential():
    with ScriptedCollector([503]) as collector:
        exporter = otlp_http.OtlpHttpSpanExporter(endpoint=collector.url, timeout=5)
        assert exporter.export(some_spans(1)) is SpanExportResult.SUCCESS
    (t_first, _, _), (t_second, _, _) = collector.requests
    assert 0.75 <= t_second - t_first <= 2.0        # 2**0 s with 20 % jitter


@pytest.mark.parametrize("status", [400, 401, 404, 413, 500])
def test_other_statuses_fail_at_once(status):
    with ScriptedCollector([status] * 3) as collector:
        exporter = otlp_http.OtlpHttpMetricExporter(endpoint=collector.url, timeout=5)
        reader_data = _metrics_data()
        assert exporter.export(reader_data) is MetricExportResult.FAILURE
    assert len(collector.requests) == 1


def test_retries_stop_at_the_timeout():
    with ScriptedCollector([503] * 10) as collector:
        exporter = otlp_http.OtlpHttpSpanExporter(endpoint=collector.url, timeout=1.5)
        t0 = time.monotonic()
        assert exporter.export(some_spans(1)) is SpanExportResult.FAILURE
        elapsed = time.monotonic() - t0
    assert elapsed < 1.6
    assert len(collector.requests) == 2              # at 0 s and about 1 s; the next backoff (2 s) is past the timeout


def test_refused_port_and_silent_server_fail_within_the_timeout():
    exporter = otlp_http.OtlpHttpSpanExporter(endpoint=f"http://127.0.0.1:{refused_port()}/v1/traces", timeout=1)
    t0 = time.monotonic()
    assert exporter.export(some_spans(1)) is SpanExportResult.FAILURE
    assert time.monotonic() - t0 < 1.5
    with BlackHole() as hole:
        exporter = otlp_http.OtlpHttpSpanExporter(endpoint=f"http://127.0.0.1:{hole.port}/v1/traces", timeout=0.5)
        t0 = time.monotonic()
        assert exporter.export(some_spans(1)) is SpanExportResult.FAILURE
        assert time.monotonic() - t0 < 1.5


def test_shutdown_stops_a_backoff_and_later_exports():
    with ScriptedCollector([503] * 10) as collector:
        exporter = otlp_http.OtlpHttpSpanExporter(endpoint=collector.url, timeout=30)
        results = []
        worker = threading.Thread(target=lambda: results.append(exporter.export(some_spans(1))))
        worker.start()
        time.sleep(0.3)
        t0 = time.monotonic()
        exporter.shutdown()
        worker.join(5)
        assert time.monotonic() - t0 < 1.0 and results == [SpanExportResult.FAILURE]
        assert exporter.export(some_spans(1)) is SpanExportResult.FAILURE


def _metrics_data():
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader], shutdown_on_exit=False)
    provider.get_meter("t").create_counter("c").add(1)
    return reader.get_metrics_data()


# -- what a process imports ----------------------------------------------------------------------

PROBE = """
import sys
import observed_engine
from observed_engine import observe
sys.path.insert(0, {tests!r})
from support.engines import ScriptedEngine
eng = observe(ScriptedEngine("probe"), settings={{
    "otlp": {{"enabled": True, "protocol": "http/protobuf", "endpoint": "http://127.0.0.1:{port}"}},
    "store": {{"enabled": False}}}})
eng.should_compress(10)
observed_engine.flush(5)
observed_engine.shutdown(1)
print(sorted(m for m in sys.modules if m.startswith(("google.protobuf", "opentelemetry.proto",
                                                     "opentelemetry.exporter"))))
"""


@pytest.mark.parametrize("credential_provider", [False, True])
def test_an_otlp_http_process_does_not_import_protobuf(credential_provider):
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    if credential_provider:   # only the official exporter loads such a session: it is used for traces
        env["OTEL_PYTHON_EXPORTER_OTLP_HTTP_TRACES_CREDENTIAL_PROVIDER"] = "not-installed"
    tests = str(TESTS)
    out = subprocess.run([sys.executable, "-c", PROBE.format(tests=tests, port=refused_port())], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    imported = eval(out.stdout.strip().splitlines()[-1])
    if credential_provider:
        assert "opentelemetry.exporter.otlp.proto.http.trace_exporter" in imported
    else:
        assert imported == []

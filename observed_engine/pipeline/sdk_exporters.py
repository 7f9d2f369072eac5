"""The OpenTelemetry SDK side of the providers built from settings (Prometheus reader, OTLP
exporters, the counting exporters and batch processor). Imported only when a setting asks for
an exporter (exporters.build_providers): a process with the defaults never imports the SDK
(55-85 ms of CPU at start, paid by every ``hermes -z`` one-shot).
"""

from __future__ import annotations

import logging
import os
import socket
from typing import Callable, Optional

from .sdk_resources import import_sdk_resources

# Before the SDK's first import: its resources module then leaves psutil unimported until
# ProcessResourceDetector uses it (~8 ms of CPU per one-shot process). E402 is off for this file
# (pyproject.toml), so the imports below need no noqa.
import_sdk_resources()

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from .. import failsafe
from ..settings import Settings
from .providers import BuiltProviders, ErrorCounter

logger = logging.getLogger(__name__)


def process_resource() -> Resource:
    """service.name / service.instance.id / host.name: tells processes apart, one value per process."""
    host = socket.gethostname()
    attrs = {
        "service.name": os.environ.get("OTEL_SERVICE_NAME") or "hermes-agent",
        "service.instance.id": f"{host}-{os.getpid()}",
        "host.name": host,
    }
    return Resource.create(attrs)   # OTEL_RESOURCE_ATTRIBUTES / OTEL_SERVICE_NAME still override


class _FailureCounting:
    """Shared by the counting exporters: every failed export counted, the first one logged."""

    _signal = "telemetry"

    def _init_counting(self, inner, count_error: ErrorCounter, component: str) -> None:
        self._inner = inner
        self._count_error = count_error
        self._component = component
        self._logged = False
        self._abandoned = False   # the pipeline stopped waiting for it (abandon)
        self._inner_shut = False
        self.failing = False      # the last export failed; cleared by the next one that succeeds

    def _failed(self, exc) -> None:
        self.failing = True
        self._count_error(self._component)
        if not self._logged and not self._abandoned:
            self._logged = True
            logger.warning("observed-engine: %s export failed (%s); %s are dropped, hooks are not slowed",
                           self._component, exc or "exporter returned failure", self._signal)

    def _shutdown_inner(self, **kwargs) -> None:
        """The wrapped exporter's shutdown, once (the SDK's exporters warn on a second call)."""
        if self._inner_shut:
            return
        self._inner_shut = True
        try:
            self._inner.shutdown(**kwargs)
        except Exception:  # teardown: the SDK's exporter logs its own failure
            pass

    def abandon(self) -> None:
        """The pipeline's shutdown budget is spent: the export in flight stops retrying now (the
        wrapped exporter's shutdown interrupts its backoff) and nothing more is logged; what it
        held is already counted and said as lost by the pipeline."""
        self._abandoned = True
        self._shutdown_inner()

    def _flush_failed(self, exc: BaseException) -> bool:
        """The wrapped exporter's force_flush raised: counted as this component's error and logged
        once per kind (failsafe.note); what it held may not have been sent. False: not flushed."""
        failsafe.note(self._component, exc, self._count_error)
        return False


class CountingSpanExporter(_FailureCounting, SpanExporter):
    """Counts and logs (once) failed exports of the wrapped exporter."""

    _signal = "spans"

    def __init__(self, inner: SpanExporter, count_error: ErrorCounter, component: str) -> None:
        self._init_counting(inner, count_error, component)

    def export(self, spans):
        try:
            result = self._inner.export(spans)
        except Exception as exc:
            self._failed(exc)
            return SpanExportResult.FAILURE
        if result is not SpanExportResult.SUCCESS:
            self._failed(None)
        else:
            self.failing = False
        return result

    def shutdown(self):
        self._shutdown_inner()

    def force_flush(self, timeout_millis: int = 30000):
        try:
            return self._inner.force_flush(timeout_millis)
        except Exception as exc:  # the SDK's "not flushed", and the exporter's fault counted
            return self._flush_failed(exc)


class CountingMetricExporter(_FailureCounting, MetricExporter):
    _signal = "metrics"

    def __init__(self, inner: MetricExporter, count_error: ErrorCounter, component: str) -> None:
        super().__init__(
            preferred_temporality=getattr(inner, "_preferred_temporality", None),
            preferred_aggregation=getattr(inner, "_preferred_aggregation", None),
        )
        self._init_counting(inner, count_error, component)

    def export(self, metrics_data, timeout_millis: float = 10_000, **kwargs):
        try:
            result = self._inner.export(metrics_data, timeout_millis=timeout_millis, **kwargs)
        except Exception as exc:
            self._failed(exc)
            return MetricExportResult.FAILURE
        if result is not MetricExportResult.SUCCESS:
            self._failed(None)
        else:
            self.failing = False
        return result

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        try:
            return self._inner.force_flush(timeout_millis)
        except Exception as exc:  # the SDK's "not flushed", and the exporter's fault counted
            return self._flush_failed(exc)

    def shutdown(self, timeout_millis: float = 30_000, **_kwargs) -> None:
        self._shutdown_inner(timeout_millis=timeout_millis)


class CountingBatchSpanProcessor(BatchSpanProcessor):
    """A BatchSpanProcessor that counts the spans it drops because its bounded queue is full.

    With a dead or black-holed endpoint the export thread is stuck in the exporter and the
    queue fills up; spans that do not fit are dropped here (logged once) and counted in
    ``hermes_context_engine_telemetry_dropped_total{signal="span"}``.
    """

    def __init__(self, span_exporter: SpanExporter, count_drop: Optional[Callable[[str, int], None]] = None,
                 **kwargs) -> None:
        super().__init__(span_exporter, **kwargs)
        self._count_drop = count_drop
        inner = getattr(self, "_batch_processor", None)      # SDK internals; absent: no counting
        self._bsp_queue = getattr(inner, "_queue", None)
        self._bsp_max = getattr(inner, "_max_queue_size", None)
        self._logged_full = False

    def on_end(self, span) -> None:
        queue, limit = self._bsp_queue, self._bsp_max
        if (queue is not None and limit is not None and len(queue) >= limit
                and span.context is not None and span.context.trace_flags.sampled):
            # Full: drop this span here. Handing it to the SDK would evict an older one and
            # build a "Queue full" log record per span (filtered afterwards) on the worker
            # thread -- CPU that a dead endpoint would add, competing with hooks for the GIL.
            if not self._logged_full:
                self._logged_full = True
                logger.warning("observed-engine: span export queue full (%d spans; is the OTLP endpoint "
                               "reachable?); further spans are dropped and counted", limit)
            if self._count_drop is not None:
                try:
                    self._count_drop("span", 1)
                except Exception:  # the counter is the last resort: nothing is left to tell
                    pass
            return
        super().on_end(span)


def _otlp_protocol(settings: Settings) -> str:
    proto = settings.otlp.protocol or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "grpc"
    return "http/protobuf" if proto.startswith("http") else "grpc"


def _otlp_exporters(settings: Settings):
    timeout = settings.otlp.timeout_seconds
    endpoint = settings.otlp.endpoint
    if _otlp_protocol(settings) == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        kw = {"timeout": timeout}
        if endpoint:
            kw["endpoint"] = endpoint
            kw["insecure"] = endpoint.startswith("http://") or "://" not in endpoint
        return OTLPSpanExporter(**kw), OTLPMetricExporter(**kw)
    base = endpoint.rstrip("/") if endpoint else None
    return (_otlp_http_class("traces")(endpoint=f"{base}/v1/traces" if base else None, timeout=timeout),
            _otlp_http_class("metrics")(endpoint=f"{base}/v1/metrics" if base else None, timeout=timeout))


def _otlp_http_class(signal: str):
    """The OTLP/HTTP exporter class for ``signal`` ("traces" or "metrics"): ours (``otlp_http``: no
    protobuf to import), unless the environment asks for what only the official exporter does."""
    from . import otlp_http

    why = otlp_http.official_exporter_needed(signal)
    if why is None:
        return otlp_http.OtlpHttpSpanExporter if signal == "traces" else otlp_http.OtlpHttpMetricExporter
    logger.info("observed-engine: OTLP/HTTP %s sent by opentelemetry-exporter-otlp-proto-http: %s", signal, why)
    if signal == "traces":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

    return OTLPMetricExporter


class RepeatedRecordFilter(logging.Filter):
    """Lets the first record of each kind through, then one per ``interval`` seconds.

    The OTLP exporters log every failed export attempt (about one line a second per
    signal with a dead endpoint); the failures are counted in
    ``hermes_context_engine_telemetry_errors_total``, so the log needs them only once in a
    while. A suppressed run is summarised ("N similar messages suppressed") on the next
    record let through.
    """

    def __init__(self, interval: float = 300.0) -> None:
        super().__init__()
        self.interval = interval
        self._last: dict = {}
        self._suppressed: dict = {}

    def filter(self, record: logging.LogRecord) -> bool:
        import time

        key = (record.name, record.levelno, str(record.msg)[:80])
        now = time.monotonic()
        last = self._last.get(key)
        if last is not None and now - last < self.interval:
            self._suppressed[key] = self._suppressed.get(key, 0) + 1
            return False
        self._last[key] = now
        skipped = self._suppressed.pop(key, 0)
        if skipped:
            record.msg = f"{record.msg} ({skipped} similar messages suppressed by observed-engine)"
        return True


OTLP_EXPORTER_LOGGERS = (
    "observed_engine.exporters.otlp",
    "opentelemetry.exporter.otlp.proto.grpc.exporter",
    "opentelemetry.exporter.otlp.proto.http.trace_exporter",
    "opentelemetry.exporter.otlp.proto.http.metric_exporter",
    "opentelemetry.exporter.otlp.proto.http._common",
    "opentelemetry.sdk.metrics._internal.export",
    "opentelemetry.sdk.trace.export",
)
_REPEAT_FILTER = RepeatedRecordFilter()


def quiet_repeated_exporter_logs() -> None:
    """Install the repeat filter on the OTLP exporter loggers (idempotent)."""
    for name in OTLP_EXPORTER_LOGGERS:
        log = logging.getLogger(name)
        if _REPEAT_FILTER not in log.filters:
            log.addFilter(_REPEAT_FILTER)


def build(settings: Settings, count_error: ErrorCounter,
          count_drop: Optional[Callable[[str, int], None]], *,
          want_metrics: bool, want_traces: bool, want_prom: bool, want_otlp: bool) -> BuiltProviders:
    built = BuiltProviders()
    resource = process_resource()
    readers: list = []
    if want_prom:
        reader = _prometheus_reader(settings, built, count_error)
        if reader is not None:
            readers.append(reader)
    span_exporter = metric_exporter = None
    if want_otlp:
        quiet_repeated_exporter_logs()
        try:
            span_exporter, metric_exporter = _otlp_exporters(settings)
        except Exception as exc:
            count_error("exporter_otlp")
            logger.warning("observed-engine: cannot build the OTLP exporters (%s); OTLP is off", exc)
    if metric_exporter is not None and want_metrics:
        counting = CountingMetricExporter(metric_exporter, count_error, "exporter_otlp_metrics")
        built.metric_exporters.append(counting)
        readers.append(PeriodicExportingMetricReader(
            counting,
            export_interval_millis=settings.otlp.export_interval_seconds * 1000,
            export_timeout_millis=settings.otlp.timeout_seconds * 1000,
        ))
    if readers:
        # shutdown_on_exit=False: the SDK's own atexit shutdown would run before the registry's atexit
        # flush (registered earlier, so run later), which then exported into shut-down exporters and
        # logged a bogus 'export failed' at every exit. pipeline.registry flushes at exit, then shuts down.
        mp = MeterProvider(resource=resource, metric_readers=readers, shutdown_on_exit=False)
        built.meter_provider = mp
        built.closers.append(lambda: mp.shutdown(timeout_millis=2000))
        if built.prometheus_detach is not None:
            built.closers.append(built.prometheus_detach)
    if span_exporter is not None and want_traces:
        tp = TracerProvider(resource=resource, shutdown_on_exit=False)
        counting = CountingSpanExporter(span_exporter, count_error, "exporter_otlp_traces")
        built.span_exporters.append(counting)
        processor = CountingBatchSpanProcessor(
            counting, count_drop,
            max_queue_size=4096, max_export_batch_size=512,
            schedule_delay_millis=1000, export_timeout_millis=settings.otlp.timeout_seconds * 1000,
        )
        tp.add_span_processor(processor)
        built.span_processors.append(processor)
        built.tracer_provider = tp
        built.closers.append(tp.shutdown)
    return built


def _prometheus_reader(settings: Settings, built: BuiltProviders, count_error: Optional[ErrorCounter] = None):
    """A reader whose collector is served on the process's endpoint for the configured address
    (prometheus.py: one server per address, shared by every pipeline). None when it cannot listen."""
    from . import prometheus

    host, port = settings.prometheus.host, settings.prometheus.port
    reader = _latest_only_reader_class()(registry=prometheus.NotARegistry())
    collector = reader._collector
    try:
        endpoint = prometheus.attach(host, port, collector, count_error)
    except OSError as exc:
        if count_error is not None:
            count_error("exporter_prometheus")     # seen by the other exporters (OTLP metrics), if any
        logger.warning(
            "observed-engine: Prometheus /metrics cannot listen on %s:%s (%s); "
            "the engine goes on without it (set observed.prometheus.port to a free port)", host, port, exc)
        return None
    built.prometheus_address = endpoint.address
    # run by BuiltProviders.shutdown before the meter provider's shutdown (closers run in reverse):
    # the last collection of this pipeline's counters stays on the endpoint
    built.prometheus_detach = lambda: endpoint.detach(collector, keep_counters=True)
    return reader


def _latest_only_reader_class():
    from opentelemetry.exporter.prometheus import PrometheusMetricReader

    class LatestOnlyPrometheusMetricReader(PrometheusMetricReader):
        """Serves only the newest collection on a scrape.

        ``MeterProvider.force_flush()`` (``observed_engine.flush()``, the atexit flush) makes
        every reader collect; the stock reader queues each such collection and the next
        scrape yields all of them: the same series several times, older values first, which
        Prometheus rejects as duplicate samples. Metrics are cumulative, so the newest
        collection holds everything: older queued ones are dropped.
        """

        def _receive_metrics(self, metrics_data, timeout_millis: float = 10_000, **kwargs) -> None:
            if metrics_data is None:
                return
            queued = getattr(getattr(self, "_collector", None), "_metrics_datas", None)
            if queued is not None:
                queued.clear()
            super()._receive_metrics(metrics_data, timeout_millis, **kwargs)

    return LatestOnlyPrometheusMetricReader

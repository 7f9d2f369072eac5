"""In-memory OpenTelemetry providers (``Providers``: the one bundle every test uses, the conftest
fixtures included) and readers of exact metric values and span texts."""

from __future__ import annotations

import threading
from typing import Any, Dict, Iterable, List, Optional

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter


class StartedSpans(SpanProcessor):
    """Keeps every span at start, so tests can look at spans that have not ended yet."""

    def __init__(self) -> None:
        self.spans: List[Any] = []

    def on_start(self, span, parent_context=None) -> None:
        self.spans.append(span)

    def named(self, name: str) -> List[Any]:
        return [s for s in list(self.spans) if s.name == name]


def metrics(reader: InMemoryMetricReader) -> List[Any]:
    """Every metric the reader collects now, across resources and scopes."""
    data = reader.get_metrics_data()
    if data is None:
        return []
    return [metric for rm in data.resource_metrics for sm in rm.scope_metrics for metric in sm.metrics]


def metric_points(reader: InMemoryMetricReader, name: str) -> List[tuple]:
    """[(attributes dict, point)] of the metric with OTel name ``name``."""
    return [(dict(dp.attributes or {}), dp)
            for metric in metrics(reader) if metric.name == name for dp in metric.data.data_points]


class CountingSpans(SpanProcessor):
    """Counts finished spans by name without keeping them (for load tests)."""

    def __init__(self) -> None:
        self.by_name: Dict[str, int] = {}
        self._lock = threading.Lock()

    def on_end(self, span) -> None:
        with self._lock:
            self.by_name[span.name] = self.by_name.get(span.name, 0) + 1


class Providers:
    """SDK providers with in-memory readers, and ``observe()`` bound to them.

    Spans are counted by name (``counting``) and, unless ``keep_spans`` is false, kept at start
    (``started``: spans that have not ended yet) and at end (``exporter``); ``extra_span_processors``
    come after the counting and before the exporter. Metrics are read exactly from ``reader``
    (``metric_readers`` are added beside it). Readers do not flush unless asked (``flush=True``).
    """

    def __init__(self, settings: Optional[dict] = None, *, keep_spans: bool = True,
                 extra_span_processors: Iterable[SpanProcessor] = (), metric_readers: Iterable = ()) -> None:
        self.settings = dict(settings or {})
        self.exporter = InMemorySpanExporter()
        self.started = StartedSpans()
        self.counting = CountingSpans()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(self.counting)
        if keep_spans:
            self.tracer_provider.add_span_processor(self.started)
        for processor in extra_span_processors:
            self.tracer_provider.add_span_processor(processor)
        if keep_spans:
            self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader, *metric_readers])

    # -- the pipeline ------------------------------------------------------------

    def observe(self, inner, **overrides):
        """``observed_engine.observe(inner)`` with these providers and ``settings`` (updated by ``overrides``)."""
        from observed_engine import observe

        settings = dict(self.settings)
        settings.update(overrides)
        return observe(inner, tracer_provider=self.tracer_provider, meter_provider=self.meter_provider,
                       settings=settings)

    @property
    def telemetry(self):
        """The pipeline of these providers and ``settings``."""
        from observed_engine.api import pipeline_for

        return pipeline_for(self.tracer_provider, self.meter_provider, self.settings)

    def flush(self, timeout: float = 30.0) -> None:
        """``observed_engine.flush()``; on a timeout an AssertionError says where every pipeline stands."""
        import observed_engine
        from observed_engine import REGISTRY

        if observed_engine.flush(timeout):
            return
        details = []
        for telemetry in REGISTRY.pipelines():
            recorder, store = telemetry.recorder, telemetry.store
            details.append(dict(
                ours=telemetry is self.telemetry, worker_alive=recorder._thread.is_alive(),
                queued=len(recorder.queue), processed=recorder.processed, dropped=recorder.dropped,
                store_queue=len(store._queue) if store else None, store_pending=len(store._pending) if store else None,
                store_busy=store._busy if store else None, store_written=store.rows_written if store else None))
        raise AssertionError(f"observed_engine.flush() timed out: {details}")

    def shutdown(self) -> None:
        for p in (self.tracer_provider, self.meter_provider):
            try:
                p.shutdown()
            except Exception:
                pass

    # -- spans ---------------------------------------------------------------------

    def spans(self, timeout: float = 30.0) -> list:
        """Every finished span, after a flush."""
        self.flush(timeout)
        return list(self.exporter.get_finished_spans())

    # -- metric values ----------------------------------------------------------

    def points(self, name: str, flush: bool = False) -> List[tuple]:
        """[(attributes dict, point)] of the metric with OTel name ``name``."""
        if flush:
            self.flush()
        return metric_points(self.reader, name)

    def value(self, name: str, flush: bool = False, **attrs) -> Optional[float]:
        """The value of the point whose attributes are exactly ``attrs`` (None when absent).

        Counters / gauges: the value; histograms: the count.
        """
        for a, dp in self.points(name, flush):
            if a == attrs:
                v = getattr(dp, "value", None)
                return v if v is not None else dp.count
        return None

    def total(self, name: str, flush: bool = False, **attrs) -> float:
        """Sum over every point whose attributes include ``attrs`` (0 when none)."""
        t = 0
        for a, dp in self.points(name, flush):
            if all(a.get(k) == v for k, v in attrs.items()):
                v = getattr(dp, "value", None)
                t += v if v is not None else dp.count
        return t

    def by_attributes(self, name: str, flush: bool = False) -> Dict[frozenset, float]:
        """{frozenset of attributes: value (counters, gauges) or count (histograms)}."""
        out: Dict[frozenset, float] = {}
        for a, dp in self.points(name, flush):
            key = frozenset(a.items())
            v = getattr(dp, "value", None)
            out[key] = out.get(key, 0) + (v if v is not None else dp.count)
        return out

    def histogram(self, name: str, flush: bool = False, **attrs):
        """(count, sum, min, max) of the histogram point with exactly ``attrs``."""
        for a, dp in self.points(name, flush):
            if a == attrs:
                return dp.count, dp.sum, dp.min, dp.max
        return None

    def by_label(self, name: str, label: str, flush: bool = False) -> Dict[Any, float]:
        out: Dict[Any, float] = {}
        for a, dp in self.points(name, flush):
            v = getattr(dp, "value", None)
            out[a.get(label)] = out.get(a.get(label), 0) + (v if v is not None else dp.count)
        return out

    def metric_names_and_labels(self) -> List[str]:
        """Every metric name, description, label key and label value, after a flush (for leak checks)."""
        self.flush()
        out: List[str] = []
        for metric in metrics(self.reader):
            out.append(metric.name)
            out.append(metric.description or "")
            for dp in metric.data.data_points:
                for k, v in dict(dp.attributes or {}).items():
                    out.extend((str(k), str(v)))
        return out



def span_texts(span) -> List[str]:
    """Every string a span carries: name, attributes, events, links, status."""
    out = [span.name, str(span.status.description or "")]
    for k, v in dict(span.attributes or {}).items():
        out.extend((str(k), str(v)))
    for event in span.events:
        out.append(event.name)
        for k, v in dict(event.attributes or {}).items():
            out.extend((str(k), str(v)))
    for link in span.links:
        for k, v in dict(link.attributes or {}).items():
            out.extend((str(k), str(v)))
    return out

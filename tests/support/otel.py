"""In-memory OpenTelemetry providers and readers of exact metric values."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional

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


@dataclass
class Providers:
    tracer_provider: TracerProvider
    meter_provider: MeterProvider
    reader: InMemoryMetricReader
    exporter: InMemorySpanExporter
    started: StartedSpans

    def shutdown(self) -> None:
        for p in (self.tracer_provider, self.meter_provider):
            try:
                p.shutdown()
            except Exception:
                pass

    # -- metric values ----------------------------------------------------------

    def points(self, name: str) -> List[tuple]:
        """[(attributes dict, point)] of the metric with OTel name ``name``."""
        return metric_points(self.reader, name)

    def value(self, name: str, **attrs) -> Optional[float]:
        """The value of the point whose attributes are exactly ``attrs`` (None when absent).

        Counters / gauges: the value; histograms: the count.
        """
        for a, dp in self.points(name):
            if a == attrs:
                v = getattr(dp, "value", None)
                return v if v is not None else dp.count
        return None

    def total(self, name: str, **attrs) -> float:
        """Sum over every point whose attributes include ``attrs`` (0 when none)."""
        t = 0
        for a, dp in self.points(name):
            if all(a.get(k) == v for k, v in attrs.items()):
                v = getattr(dp, "value", None)
                t += v if v is not None else dp.count
        return t

    def histogram(self, name: str, **attrs):
        """(count, sum, min, max) of the histogram point with exactly ``attrs``."""
        for a, dp in self.points(name):
            if a == attrs:
                return dp.count, dp.sum, dp.min, dp.max
        return None

    def by_label(self, name: str, label: str) -> Dict[Any, float]:
        out: Dict[Any, float] = {}
        for a, dp in self.points(name):
            v = getattr(dp, "value", None)
            out[a.get(label)] = out.get(a.get(label), 0) + (v if v is not None else dp.count)
        return out


def make_providers() -> Providers:
    exporter = InMemorySpanExporter()
    started = StartedSpans()
    tp = TracerProvider()
    tp.add_span_processor(started)
    tp.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    mp = MeterProvider(metric_readers=[reader])
    return Providers(tp, mp, reader, exporter, started)

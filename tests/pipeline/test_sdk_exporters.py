"""The counting exporters around the SDK's: a failure of the wrapped exporter is counted, never raised."""

from __future__ import annotations

import logging

import pytest
from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from observed_engine.pipeline.sdk_exporters import CountingMetricExporter, CountingSpanExporter


class FlushRaisingSpans(SpanExporter):
    def export(self, spans):
        return SpanExportResult.SUCCESS

    def force_flush(self, timeout_millis=30000):
        raise ConnectionError("collector went away")


class FlushRaisingMetrics(MetricExporter):
    def export(self, metrics_data, timeout_millis=10_000, **kwargs):
        return MetricExportResult.SUCCESS

    def force_flush(self, timeout_millis=10_000):
        raise ConnectionError("collector went away")

    def shutdown(self, timeout_millis=30_000, **kwargs):
        pass


@pytest.mark.parametrize(("make", "component"), [
    (lambda count: CountingSpanExporter(FlushRaisingSpans(), count, "otlp_spans"), "otlp_spans"),
    (lambda count: CountingMetricExporter(FlushRaisingMetrics(), count, "otlp_metrics"), "otlp_metrics"),
])
def test_a_force_flush_that_raises_is_counted_and_logged_once(make, component, caplog):
    counted = []
    exporter = make(counted.append)
    with caplog.at_level(logging.WARNING, logger="observed_engine"):
        assert exporter.force_flush(1000) is False
        assert exporter.force_flush(1000) is False
    assert counted == [component, component]          # every failure counted
    lines = [r for r in caplog.records if "ConnectionError" in r.getMessage()]
    assert len(lines) == 1                            # logged once per kind
    assert exporter.failing is False                  # exports themselves did not fail

"""Differential tests of ``observed_engine.pipeline.otlp_wire`` against the official OTLP encoders.

otlp_wire writes the ``ExportTraceServiceRequest`` / ``ExportMetricsServiceRequest`` protobuf bytes
by hand, so that a process exporting OTLP/HTTP never imports protobuf nor the official encoders.
Every case here builds real OpenTelemetry SDK objects (a ``TracerProvider`` with an in-memory
exporter, a ``MeterProvider`` with an ``InMemoryMetricReader``, or the SDK's own data classes built
by hand where the SDK cannot produce the shape), encodes them with both encoders, parses our bytes
with the official pb2 classes and asserts the two *messages* are equal (field order may differ, so
raw bytes are not compared, except where they happen to match). Equality of upb messages is strict:
a sub-message set but empty differs from one not set, ``-0.0`` from ``0.0``, ``as_int=0`` from no
value; the canonical re-serialization is compared as well, so unknown fields in our bytes fail too.

The official behaviour reproduced (opentelemetry/exporter/otlp/proto/common/_internal/): spans
grouped by resource then by instrumentation scope (SDK equality, first-seen order), span flags
(HAS_IS_REMOTE, IS_REMOTE of the parent / the link's context), an attribute whose value cannot be
encoded is left out of its list (only that key), a metric's data field only set when it has data
points, optional histogram fields present even when zero, and encode_metrics raising where the
official one raises (an exemplar value neither int nor float, a number out of range).

The cases are split by signal: spans in test_otlp_wire_spans.py, metrics in
test_otlp_wire_metrics.py, their shared parts in tests/support/otlp_wire_cases.py; here, what
the encoder is for: it imports no protobuf.
"""

from __future__ import annotations

import subprocess
import sys

from support.paths import REPO

# ---------------------------------------------------------------------------------------------
# the point of the module: no protobuf
# ---------------------------------------------------------------------------------------------


def test_encoding_imports_neither_protobuf_nor_the_official_encoders():
    code = """
import sys
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from observed_engine.pipeline import otlp_wire
exporter = InMemorySpanExporter()
provider = TracerProvider(shutdown_on_exit=False)
provider.add_span_processor(SimpleSpanProcessor(exporter))
with provider.get_tracer("t").start_as_current_span("s", attributes={"a": [1, 2]}) as span:
    span.add_event("e")
reader = InMemoryMetricReader()
meter = MeterProvider(metric_readers=[reader], shutdown_on_exit=False).get_meter("m")
meter.create_counter("c").add(1)
meter.create_histogram("h").record(2.5)
assert otlp_wire.encode_spans(exporter.get_finished_spans())
assert otlp_wire.encode_metrics(reader.get_metrics_data())
loaded = [m for m in sys.modules if m.startswith(("google.protobuf", "opentelemetry.proto",
                                                   "opentelemetry.exporter.otlp"))]
assert not loaded, loaded
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                            cwd=REPO)
    assert result.returncode == 0, result.stderr

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
"""

from __future__ import annotations

import difflib
import enum
import math
import random
import subprocess
import sys
import types
from collections import OrderedDict

import pytest
from google.protobuf import text_format
from opentelemetry import trace as trace_api
from opentelemetry.attributes import BoundedAttributes
from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics as official_encode_metrics
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans as official_encode_spans
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.metrics import (
    AlwaysOnExemplarFilter,
    Counter,
    Exemplar,
    Histogram,
    MeterProvider,
    ObservableCounter,
    ObservableGauge,
    ObservableUpDownCounter,
    UpDownCounter,
)
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    Buckets,
    ExponentialHistogram,
    ExponentialHistogramDataPoint,
    Gauge,
    HistogramDataPoint,
    InMemoryMetricReader,
    Metric,
    MetricsData,
    NumberDataPoint,
    ResourceMetrics,
    ScopeMetrics,
    Sum,
)
from opentelemetry.sdk.metrics.export import Histogram as HistogramData
from opentelemetry.sdk.metrics.view import (
    ExplicitBucketHistogramAggregation,
    ExponentialBucketHistogramAggregation,
    View,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan, SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.util import BoundedList
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, NonRecordingSpan, SpanContext, SpanKind, TraceFlags, TraceState
from opentelemetry.trace.status import Status, StatusCode
from support.paths import REPO

from observed_engine.pipeline import otlp_wire

# ---------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------

INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)
UINT64_MAX = 2**64 - 1
HAS_IS_REMOTE = 0x100      # SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK
IS_REMOTE = 0x200          # SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK

RESOURCE = Resource({"service.name": "otlp-wire-test", "host.name": "h1"})
SCOPE = InstrumentationScope("test.scope", "1.2.3", "https://opentelemetry.io/schemas/1.21.0", {"scope.attr": "x"})
T0 = 1_700_000_000_000_000_000


def _diff(ours, official) -> str:
    expected = text_format.MessageToString(official, as_utf8=True).splitlines()
    got = text_format.MessageToString(ours, as_utf8=True).splitlines()
    lines = list(difflib.unified_diff(expected, got, "official", "otlp_wire", lineterm="", n=3))
    return "parsed otlp_wire message differs from the official one:\n" + "\n".join(lines[:120])


def assert_same_message(ours, official) -> None:
    if ours != official:
        pytest.fail(_diff(ours, official), pytrace=False)
    if ours.SerializeToString(deterministic=True) != official.SerializeToString(deterministic=True):
        pytest.fail("equal messages but different canonical bytes (unknown fields in our payload?)", pytrace=False)


def _match(encode, message, official_encode, data):
    """Encode with both encoders, assert equal after parsing ours; return (ours, official, our bytes)."""
    payload = encode(data)
    assert isinstance(payload, bytes)
    ours = message.FromString(payload)
    official = official_encode(data)
    assert_same_message(ours, official)
    return ours, official, payload


def spans_match(spans):
    return _match(otlp_wire.encode_spans, ExportTraceServiceRequest, official_encode_spans, spans)


def metrics_match(data: MetricsData):
    return _match(otlp_wire.encode_metrics, ExportMetricsServiceRequest, official_encode_metrics, data)


def both_raise(data: MetricsData) -> None:
    with pytest.raises(Exception):
        official_encode_metrics(data)
    with pytest.raises(Exception):
        otlp_wire.encode_metrics(data)


def zero_nans(message) -> int:
    """Replace every NaN double (singular or repeated, at any depth) by 0.0; return how many."""
    count = 0
    for field, value in message.ListFields():
        repeated = field.is_repeated
        if field.type == field.TYPE_MESSAGE:
            for item in (value if repeated else [value]):
                count += zero_nans(item)
        elif field.type in (field.TYPE_DOUBLE, field.TYPE_FLOAT):
            if repeated:
                for i, v in enumerate(value):
                    if math.isnan(v):
                        value[i] = 0.0
                        count += 1
            elif math.isnan(value):
                setattr(message, field.name, 0.0)
                count += 1
    return count


def attr(kvs, key):
    """The AnyValue of ``key`` in a parsed repeated KeyValue (None when absent)."""
    for kv in kvs:
        if kv.key == key:
            return kv.value
    return None


def all_spans(request):
    """Every parsed span, in request order (resource, then scope, then span)."""
    return [span for rs in request.resource_spans for ss in rs.scope_spans for span in ss.spans]


def only_span(request):
    (rs,) = request.resource_spans
    (ss,) = rs.scope_spans
    (span,) = ss.spans
    return span


def first_scope_metrics(request):
    """The metrics of the first scope of the first resource."""
    return request.resource_metrics[0].scope_metrics[0].metrics


def only_metric(request):
    (rm,) = request.resource_metrics
    (sm,) = rm.scope_metrics
    (metric,) = sm.metrics
    return metric


class Tracing:
    """A real TracerProvider exporting into memory, one span at a time."""

    def __init__(self, resource: Resource = RESOURCE, span_limits: SpanLimits | None = None) -> None:
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider(resource=resource, span_limits=span_limits, shutdown_on_exit=False)
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))

    def tracer(self, name="test.tracer", version=None, schema_url=None, attributes=None):
        return self.provider.get_tracer(name, version, schema_url=schema_url, attributes=attributes)

    def spans(self):
        return list(self.exporter.get_finished_spans())


class Metering:
    """A real MeterProvider read by an InMemoryMetricReader."""

    def __init__(self, *, views=(), temporality=None, aggregation=None, resource: Resource = RESOURCE,
                 exemplar_filter=None) -> None:
        self.reader = InMemoryMetricReader(preferred_temporality=temporality, preferred_aggregation=aggregation)
        self.provider = MeterProvider(metric_readers=[self.reader], resource=resource, views=list(views),
                                      exemplar_filter=exemplar_filter, shutdown_on_exit=False)

    def meter(self, name="test.meter", version=None, schema_url=None, attributes=None):
        return self.provider.get_meter(name, version, schema_url, attributes)

    def collect(self) -> MetricsData:
        data = self.reader.get_metrics_data()
        assert data is not None and data.resource_metrics, "the SDK collected nothing"
        return data


def ctx(trace_id=0x0AF7651916CD43DD8448EB211C80319C, span_id=0x00F067AA0BA902B7, *, remote=False,
        state=None, flags=TraceFlags.SAMPLED) -> SpanContext:
    return SpanContext(trace_id, span_id, remote, TraceFlags(flags), TraceState(state or []))


def readable(name="span", **overrides) -> ReadableSpan:
    """A ReadableSpan built directly (values the SDK Span API would refuse are allowed here)."""
    fields = dict(context=ctx(), resource=RESOURCE, instrumentation_scope=SCOPE, start_time=T0,
                  end_time=T0 + 1_500_000)
    fields.update(overrides)
    return ReadableSpan(name, **fields)


def number_metric(name, points, *, gauge=False, temporality=AggregationTemporality.CUMULATIVE,
                  monotonic=True, description="a metric", unit="1") -> Metric:
    data = Gauge(points) if gauge else Sum(points, temporality, monotonic)
    return Metric(name, description, unit, data)


def point(value, attributes=None, exemplars=(), start=T0, time=T0 + 10) -> NumberDataPoint:
    return NumberDataPoint(attributes or {}, start, time, value, list(exemplars))


def metrics_data(*metrics, resource=RESOURCE, scope=SCOPE) -> MetricsData:
    return MetricsData([ResourceMetrics(resource, [ScopeMetrics(scope, list(metrics), scope.schema_url)],
                                        resource.schema_url)])


class Colour(enum.IntEnum):
    RED = 1
    BLUE = -7


class Tag(str):
    pass


class Ratio(float):
    pass


# ---------------------------------------------------------------------------------------------
# spans: structure
# ---------------------------------------------------------------------------------------------


def test_empty_span_list():
    ours, official, payload = spans_match([])
    assert len(ours.resource_spans) == 0
    assert payload == official.SerializeToString() == b""


def test_root_and_child_spans_from_the_sdk():
    tracing = Tracing()
    tracer = tracing.tracer()
    with tracer.start_as_current_span("root") as root:
        root.set_attribute("level", 0)
        with tracer.start_as_current_span("child") as child:
            child.set_attribute("level", 1)
    ours, _, _ = spans_match(tracing.spans())
    child_pb, root_pb = ours.resource_spans[0].scope_spans[0].spans
    assert (child_pb.name, root_pb.name) == ("child", "root")
    assert root_pb.parent_span_id == b""
    assert child_pb.parent_span_id == root_pb.span_id and len(root_pb.span_id) == 8
    assert child_pb.trace_id == root_pb.trace_id and len(root_pb.trace_id) == 16
    assert root_pb.flags == child_pb.flags == HAS_IS_REMOTE


def test_remote_and_local_parents_set_the_span_flags():
    remote = ctx(span_id=0x1111, remote=True)
    tracing = Tracing()
    tracer = tracing.tracer()
    with tracer.start_as_current_span("under-remote", context=trace_api.set_span_in_context(NonRecordingSpan(remote))):
        with tracer.start_as_current_span("under-local"):
            pass
    local_child, remote_child = tracing.spans()
    direct = [readable("remote-parent", parent=ctx(span_id=0x2222, remote=True)),
              readable("local-parent", parent=ctx(span_id=0x3333, remote=False)),
              readable("no-parent", parent=None)]
    ours, _, _ = spans_match([local_child, remote_child, *direct])
    flags = {s.name: s.flags for s in all_spans(ours)}
    assert flags == {"under-local": HAS_IS_REMOTE, "under-remote": HAS_IS_REMOTE | IS_REMOTE,
                     "remote-parent": HAS_IS_REMOTE | IS_REMOTE, "local-parent": HAS_IS_REMOTE,
                     "no-parent": HAS_IS_REMOTE}


def test_trace_state_non_empty_and_empty():
    remote = ctx(remote=True, state=[("vendor", "v1"), ("rojo", "00f067aa0ba902b7")])
    tracing = Tracing()
    tracer = tracing.tracer()
    with tracer.start_as_current_span("inherits", context=trace_api.set_span_in_context(NonRecordingSpan(remote))):
        pass
    with tracer.start_as_current_span("empty"):
        pass
    direct = readable("direct", context=ctx(state=[("k", "v")]))
    ours, _, _ = spans_match(tracing.spans() + [direct])
    states = [s.trace_state for s in all_spans(ours)]
    assert states == ["vendor=v1,rojo=00f067aa0ba902b7", "", "k=v"]


@pytest.mark.parametrize("kind", list(SpanKind), ids=lambda k: k.name)
def test_every_span_kind(kind):
    tracing = Tracing()
    with tracing.tracer().start_as_current_span("k", kind=kind):
        pass
    spans_match(tracing.spans())
    ours, _, _ = spans_match([readable(kind=kind)])
    assert only_span(ours).kind == kind.value + 1     # SPAN_KIND_INTERNAL = 1 ...


@pytest.mark.parametrize("status", [
    Status(StatusCode.UNSET),
    Status(StatusCode.OK),
    Status(StatusCode.ERROR),
    Status(StatusCode.ERROR, "boom: ✨ not found"),
], ids=["unset", "ok", "error", "error-with-description"])
def test_status(status):
    tracing = Tracing()
    with tracing.tracer().start_as_current_span("s", set_status_on_exception=False) as span:
        if status.status_code is not StatusCode.UNSET:
            span.set_status(status)
    spans_match(tracing.spans())
    ours, _, _ = spans_match([readable(status=status)])
    span = only_span(ours)
    assert span.HasField("status")      # an UNSET status is still an (empty) Status message
    assert (span.status.code, span.status.message) == (status.status_code.value, status.description or "")


def test_span_without_status_has_no_status_field():
    ours, _, _ = spans_match([readable(status=None)])
    assert not only_span(ours).HasField("status")


def test_exception_recorded_by_the_sdk():
    tracing = Tracing()
    try:
        with tracing.tracer().start_as_current_span("failing"):
            raise ValueError("bad value ✗")
    except ValueError:
        pass
    ours, _, _ = spans_match(tracing.spans())
    span = only_span(ours)
    assert span.status.code == StatusCode.ERROR.value
    assert [e.name for e in span.events] == ["exception"]


def test_events_with_attributes_and_timestamps():
    tracing = Tracing()
    with tracing.tracer().start_as_current_span("s") as span:
        span.add_event("no-attributes", timestamp=T0 + 5)
        span.add_event("with-attributes", {"a": 1, "b": "two", "c": [1.5, 2.5]}, timestamp=T0 + 6)
        span.add_event("now")
    direct = readable(events=[Event("e0", None, timestamp=0), Event("e-max", {"x": True}, timestamp=UINT64_MAX),
                              Event("", {}, timestamp=T0)])
    ours, _, _ = spans_match(tracing.spans() + [direct])
    events = ours.resource_spans[0].scope_spans[0].spans[0].events
    assert [(e.name, e.time_unix_nano) for e in events][:2] == [("no-attributes", T0 + 5), ("with-attributes", T0 + 6)]
    assert attr(events[1].attributes, "b").string_value == "two"


def test_links_with_attributes_and_remote_context():
    remote = ctx(trace_id=0xABC, span_id=0xDEF, remote=True, state=[("a", "b")])
    local = ctx(trace_id=0x123, span_id=0x456, remote=False)
    tracing = Tracing()
    with tracing.tracer().start_as_current_span("linked", links=[Link(remote, {"link.kind": "remote", "n": 3}),
                                                                  Link(local)]):
        pass
    direct = readable(links=[Link(remote), Link(local, {"k": [True, False]})])
    ours, _, _ = spans_match(tracing.spans() + [direct])
    links = ours.resource_spans[0].scope_spans[0].spans[0].links
    assert [link.flags for link in links] == [HAS_IS_REMOTE | IS_REMOTE, HAS_IS_REMOTE]
    assert links[0].trace_id == (0xABC).to_bytes(16, "big") and links[0].span_id == (0xDEF).to_bytes(8, "big")
    assert links[0].trace_state == ""        # the official encoder never sets a link's trace_state


def test_dropped_attribute_event_and_link_counts():
    limits = SpanLimits(max_attributes=2, max_events=1, max_links=1, max_event_attributes=1,
                        max_link_attributes=1)
    tracing = Tracing(span_limits=limits)
    links = [Link(ctx(span_id=1)), Link(ctx(span_id=2)), Link(ctx(span_id=3), {"a": 1, "b": 2, "c": 3})]
    with tracing.tracer().start_as_current_span("limited", links=links) as span:
        span.set_attributes({"a1": 1, "a2": 2, "a3": 3, "a4": 4, "a5": 5})
        span.add_event("e1")
        span.add_event("e2")
        span.add_event("e3", {"x": 1, "y": 2, "z": 3})     # the SDK keeps the newest event (and link)
    ours, _, _ = spans_match(tracing.spans())
    span = only_span(ours)
    assert (span.dropped_attributes_count, span.dropped_events_count, span.dropped_links_count) == (3, 2, 2)
    assert span.events[0].dropped_attributes_count == 2
    assert span.links[0].dropped_attributes_count == 2


def test_dropped_counts_on_a_readable_span():
    attributes = BoundedAttributes(1, {"a": 1, "b": 2})
    events = BoundedList(1)
    events.extend([Event("e1", BoundedAttributes(1, {"x": 1, "y": 2, "z": 3})), Event("e2")])
    links = BoundedList(2)
    links.extend([Link(ctx(span_id=i + 1), BoundedAttributes(0, {"q": i})) for i in range(5)])
    ours, _, _ = spans_match([readable(attributes=attributes, events=events, links=links)])
    span = only_span(ours)
    assert (span.dropped_attributes_count, span.dropped_events_count, span.dropped_links_count) == (1, 1, 3)


def test_two_resources_and_two_scopes_grouped_in_first_seen_order():
    schema = "https://opentelemetry.io/schemas/1.24.0"
    first = Tracing(resource=Resource({"service.name": "first"}, schema_url=schema))
    second = Tracing(resource=Resource({"service.name": "second", "n": 2}))
    tracers = [first.tracer("scope.a", "1.0", "https://schemas/a", {"team": "a"}),
               first.tracer("scope.b"),
               second.tracer("scope.c", "3.1", None, {"team": "c", "k": [1, 2]}),
               second.tracer("scope.a", "1.0", "https://schemas/a", {"team": "a"})]
    for i, tracer in enumerate([tracers[2], tracers[0], tracers[1], tracers[3], tracers[0], tracers[2]]):
        with tracer.start_as_current_span(f"s{i}"):
            pass
    spans = second.spans()[:1] + first.spans()[:2] + second.spans()[1:] + first.spans()[2:]
    ours, _, _ = spans_match(spans)
    layout = [(attr(rs.resource.attributes, "service.name").string_value, rs.schema_url,
               [(ss.scope.name, ss.scope.version, ss.schema_url, [s.name for s in ss.spans]) for ss in rs.scope_spans])
              for rs in ours.resource_spans]
    assert layout == [
        ("second", "", [("scope.c", "3.1", "", ["s0", "s5"]), ("scope.a", "1.0", "https://schemas/a", ["s3"])]),
        ("first", schema, [("scope.a", "1.0", "https://schemas/a", ["s1", "s4"]), ("scope.b", "", "", ["s2"])]),
    ]
    assert attr(ours.resource_spans[0].scope_spans[0].scope.attributes, "k").array_value.values[1].int_value == 2


def test_equal_resources_and_scopes_group_together():
    """Grouping uses SDK equality: distinct but equal Resource objects (attributes and schema_url) are
    one group, so are equal InstrumentationScopes (name, version, schema_url and attributes); a
    scope differing only by its attributes is a group of its own."""
    scope = InstrumentationScope("same", "1", "https://s", {"variant": "one"})
    scope_copy = InstrumentationScope("same", "1", "https://s", {"variant": "one"})
    scope_other = InstrumentationScope("same", "1", "https://s", {"variant": "two"})
    spans = [readable("a", resource=Resource({"r": 1}), instrumentation_scope=scope),
             readable("b", resource=Resource({"r": 1}), instrumentation_scope=scope_other),
             readable("c", resource=Resource({"r": 1}, schema_url="https://other"), instrumentation_scope=scope),
             readable("d", resource=Resource({"r": 1}), instrumentation_scope=scope_copy)]
    ours, _, _ = spans_match(spans)
    layout = [(rs.schema_url, [(attr(ss.scope.attributes, "variant").string_value, [s.name for s in ss.spans])
                               for ss in rs.scope_spans]) for rs in ours.resource_spans]
    assert layout == [("", [("one", ["a", "d"]), ("two", ["b"])]), ("https://other", [("one", ["c"])])]


def test_span_without_instrumentation_scope():
    ours, _, _ = spans_match([readable("no-scope", instrumentation_scope=None),
                              readable("scoped"), readable("no-scope-2", instrumentation_scope=None)])
    no_scope, scoped = ours.resource_spans[0].scope_spans
    assert no_scope.HasField("scope") and no_scope.scope.name == "" and no_scope.schema_url == ""
    assert [s.name for s in no_scope.spans] == ["no-scope", "no-scope-2"]
    assert scoped.scope.name == SCOPE.name


def test_scope_with_empty_name_and_no_version():
    spans_match([readable(instrumentation_scope=InstrumentationScope("")),
                 readable(instrumentation_scope=InstrumentationScope("v", None, None, None))])


def test_resource_without_attributes():
    ours, _, _ = spans_match([readable(resource=Resource({})), readable(resource=Resource.get_empty())])
    assert ours.resource_spans[0].HasField("resource")


def test_span_without_times_and_with_empty_name():
    ours, _, _ = spans_match([readable("", start_time=None, end_time=None), readable("zero", start_time=0, end_time=0)])
    assert ours.resource_spans[0].scope_spans[0].spans[0].start_time_unix_nano == 0


def test_extreme_ids_and_times():
    spans = [readable("max", context=ctx(2**128 - 1, 2**64 - 1), parent=ctx(2**128 - 1, 2**64 - 1, remote=True),
                      start_time=UINT64_MAX, end_time=UINT64_MAX),
             readable("one", context=ctx(1, 1), parent=ctx(1, 1)),
             readable("invalid", context=ctx(0, 0), parent=ctx(0, 0))]
    ours, _, _ = spans_match(spans)
    invalid = ours.resource_spans[0].scope_spans[0].spans[2]
    assert invalid.trace_id == bytes(16) and invalid.span_id == bytes(8) and invalid.parent_span_id == bytes(8)


def test_large_batch_of_spans():
    tracing = Tracing()
    tracer = tracing.tracer()
    for i in range(600):
        with tracer.start_as_current_span(f"span-{i}", kind=list(SpanKind)[i % 5]) as span:
            span.set_attributes({"i": i, "even": i % 2 == 0, "ratio": i / 7, "label": "x" * (i % 40)})
            if i % 3 == 0:
                span.add_event("tick", {"i": i})
    ours, _, payload = spans_match(tracing.spans())
    assert len(ours.resource_spans[0].scope_spans[0].spans) == 600
    assert len(payload) > 2**16


def test_long_name_and_long_values():
    long_list = list(range(-2500, 2500))
    ours, _, _ = spans_match([readable("n" * 300, attributes={"long": "é" * 70_000, "list": long_list,
                                                              "k" * 200: "long key"})])
    span = only_span(ours)
    assert len(span.name) == 300
    assert len(attr(span.attributes, "long").string_value) == 70_000


def test_simple_span_is_byte_identical():
    """Not required by the contract (field order may differ): holds with otlp_wire's field order."""
    tracing = Tracing()
    with tracing.tracer("bytes.scope", "0.1").start_as_current_span("s", kind=SpanKind.CLIENT) as span:
        span.set_attributes({"a": "b", "n": 42, "f": 1.5, "ok": True})
        span.add_event("ev", {"x": 1}, timestamp=T0)
    spans = tracing.spans()
    _, official, payload = spans_match(spans)
    assert payload == official.SerializeToString()


# ---------------------------------------------------------------------------------------------
# spans: attribute values
# ---------------------------------------------------------------------------------------------

EVERY_TYPE = {
    "str": "hello",
    "empty-str": "",
    "unicode": "héllo wörld ✓ 日本語",
    "emoji": "🚀🔥👩‍💻",
    "true": True,
    "false": False,
    "int-zero": 0,
    "int-one": 1,
    "int-negative": -42,
    "int-small-negative": -1,
    "int32-edge": 2**31,
    "int64-max": INT64_MAX,
    "int64-min": INT64_MIN,
    "float": 3.14159,
    "float-zero": 0.0,
    "float-negative-zero": -0.0,
    "float-inf": math.inf,
    "float-negative-inf": -math.inf,
    "float-tiny": 5e-324,
    "float-huge": 1.7976931348623157e308,
    "bytes": b"\x00\x01\xff binary",
    "empty-bytes": b"",
    "str-list": ["a", "", "ü"],
    "int-tuple": (1, -1, INT64_MAX, INT64_MIN, 0),
    "float-list": [0.5, -0.0, math.inf],
    "bool-list": [True, False, True],
    "empty-list": [],
    "nested-list": [[1, 2], ["a", [True]], []],
    "none-in-list": [None, "a", None],
    "mixed-list": [1, "two", 3.0, False, b"5"],
    "dict": {"a": 1, "b": "two", "c": [1.5], "d": {"deep": True}},
    "empty-dict": {},
    "": "empty key",
}


def test_attributes_of_every_type_through_the_sdk():
    tracing = Tracing()
    with tracing.tracer().start_as_current_span("typed", attributes=EVERY_TYPE):
        pass
    ours, _, _ = spans_match(tracing.spans())
    attributes = only_span(ours).attributes
    assert attr(attributes, "int64-min").int_value == INT64_MIN
    assert math.copysign(1.0, attr(attributes, "float-negative-zero").double_value) == -1.0
    assert attr(attributes, "empty-list").HasField("array_value")
    assert attr(attributes, "empty-dict").HasField("kvlist_value")


def test_attributes_of_every_type_on_a_readable_span():
    attributes = dict(EVERY_TYPE, none=None)
    ours, _, _ = spans_match([readable(attributes=attributes,
                                       events=[Event("e", attributes, timestamp=T0)],
                                       links=[Link(ctx(span_id=9), attributes)])])
    span = only_span(ours)
    assert [kv.key for kv in span.attributes] == list(attributes)
    none = attr(span.attributes, "none")
    assert none is not None and none.WhichOneof("value") is None     # an empty AnyValue, still present
    assert attr(span.attributes, "none-in-list").array_value.values[0].WhichOneof("value") is None


def test_attributes_on_resource_and_scope():
    resource = Resource({k: v for k, v in EVERY_TYPE.items() if k != "none"}, schema_url="https://r")
    scope = InstrumentationScope("typed", "9", "https://s", {"scope.list": [1, 2], "scope.dict": {"a": None}})
    spans_match([readable(resource=resource, instrumentation_scope=scope)])


def test_other_sequence_and_mapping_types():
    """The official encoder's isinstance checks: int/str/float subclasses, bytearray / range /
    memoryview are Sequences (arrays of ints), a MappingProxy / OrderedDict is a kvlist, whose
    non-str keys are turned into str."""
    attributes = {
        "int-enum": Colour.BLUE,
        "str-subclass": Tag("tagged"),
        "float-subclass": Ratio(0.25),
        "bytearray": bytearray(b"ab"),
        "range": range(3),
        "memoryview": memoryview(b"xyz"),
        "mapping-proxy": types.MappingProxyType({"m": 1}),
        "ordered": OrderedDict([("z", 1), ("a", 2)]),
        "int-keys": {1: "one", 2.5: "two and a half", None: "none", b"k": "bytes"},
        "tuple-of-tuples": ((1,), ("a", "b")),
    }
    ours, _, _ = spans_match([readable(attributes=attributes)])
    kv = only_span(ours).attributes
    assert [v.int_value for v in attr(kv, "bytearray").array_value.values] == [97, 98]
    assert [v.key for v in attr(kv, "int-keys").kvlist_value.values] == ["1", "2.5", "None", "b'k'"]


def test_nan_attribute_values():
    tracing = Tracing()
    with tracing.tracer().start_as_current_span("nan", attributes={"nan": math.nan, "nans": [math.nan, 1.0]}):
        pass
    spans = tracing.spans() + [readable(attributes={"nan": float("nan"), "d": {"n": math.nan}})]
    ours = ExportTraceServiceRequest.FromString(otlp_wire.encode_spans(spans))
    official = official_encode_spans(spans)
    first, second = all_spans(ours)
    assert math.isnan(attr(first.attributes, "nan").double_value)
    assert math.isnan(attr(first.attributes, "nans").array_value.values[0].double_value)
    assert math.isnan(attr(second.attributes, "d").kvlist_value.values[0].value.double_value)
    assert zero_nans(ours) == zero_nans(official) == 4
    assert_same_message(ours, official)


def test_unencodable_attribute_values_are_skipped():
    """Out-of-int64 ints and values of unknown types: only that key-value is left out (also when
    the bad value is nested), in span, event, link, resource and scope attributes."""
    bad = {
        "before": "kept",
        "too-big": 2**70,
        "int64-max-plus-one": 2**63,
        "int64-min-minus-one": INT64_MIN - 1,
        "object": object(),
        "set": {1, 2},
        "frozenset": frozenset(["a"]),
        "complex": 1 + 2j,
        "generator": (i for i in range(2)),
        "nested-big": [1, 2**70],
        "nested-object": {"a": object()},
        "deep": {"ok": 1, "l": [{"x": 2**64}]},
        "between": 5,
        "after": [1, 2],
    }
    resource = Resource({"service.name": "bad", "big": 2**70, "fine": 1})
    scope = InstrumentationScope("s", "1", None, {"big": 2**70, "fine": True})   # it would turn object() into None
    span = readable(attributes=bad, events=[Event("e", bad, timestamp=T0)], links=[Link(ctx(span_id=5), bad)],
                    resource=resource, instrumentation_scope=scope)
    ours, _, _ = spans_match([span])
    parsed = only_span(ours)
    assert [kv.key for kv in parsed.attributes] == ["before", "between", "after"]
    assert [kv.key for kv in parsed.events[0].attributes] == ["before", "between", "after"]
    assert [kv.key for kv in parsed.links[0].attributes] == ["before", "between", "after"]
    assert [kv.key for kv in ours.resource_spans[0].resource.attributes] == ["service.name", "fine"]
    assert [kv.key for kv in ours.resource_spans[0].scope_spans[0].scope.attributes] == ["fine"]


def test_non_str_top_level_keys():
    """A top-level key goes to KeyValue.key as it is (nested kvlist keys go through str()): an int or
    float key cannot be encoded, so that key-value is left out; a None key is protobuf's "not set",
    the empty key."""
    ours, _, _ = spans_match([readable(attributes={"a": 1, 2: "int key", None: "none key", 3.5: "f", "z": 2})])
    assert [kv.key for kv in only_span(ours).attributes] == ["a", "", "z"]


def test_bytes_top_level_keys_are_decoded_as_utf8():
    """protobuf takes a bytes value for a string field when it is valid UTF-8 (b"k" is the key "k")
    and refuses it otherwise (that key-value is left out)."""
    ours, _, _ = spans_match([readable(attributes={"a": 1, b"k": "bytes key", b"\xff": "bad", "z": 2})])
    assert [kv.key for kv in only_span(ours).attributes] == ["a", "k", "z"]


def test_strings_that_are_not_utf8_encodable_are_skipped():
    attributes = {"ok": "fine", "surrogate": "bad \ud800 value", "\udfff": "bad key", "in-list": ["x", "\ud83d"],
                  "nested-key": {"\ud800": 1}, "last": "kept"}
    ours, _, _ = spans_match([readable(attributes=attributes)])
    assert [kv.key for kv in only_span(ours).attributes] == ["ok", "last"]


# ---------------------------------------------------------------------------------------------
# metrics from the SDK
# ---------------------------------------------------------------------------------------------


def test_counters_int_and_float_with_several_attribute_sets():
    metering = Metering()
    meter = metering.meter()
    ints = meter.create_counter("requests", unit="1", description="requests served")
    floats = meter.create_counter("seconds", unit="s")
    for i in range(5):
        ints.add(i + 1, {"route": f"/r{i % 3}", "ok": i % 2 == 0})
        floats.add(0.25 * i, {"route": f"/r{i % 2}"})
    ints.add(INT64_MAX - 100, {"route": "huge"})
    ours, _, _ = metrics_match(metering.collect())
    requests, seconds = first_scope_metrics(ours)
    assert requests.sum.is_monotonic and requests.sum.aggregation_temporality == 2
    assert {p.WhichOneof("value") for p in requests.sum.data_points} == {"as_int"}
    assert {p.WhichOneof("value") for p in seconds.sum.data_points} == {"as_double"}
    assert len(requests.sum.data_points) == 6


def test_up_down_counter_with_negative_values():
    metering = Metering()
    meter = metering.meter()
    ints = meter.create_up_down_counter("queue")
    floats = meter.create_up_down_counter("balance")
    ints.add(-5, {"q": "a"})
    ints.add(2, {"q": "a"})
    ints.add(-(2**40), {"q": "b"})
    floats.add(-0.5)
    floats.add(-1e300)
    ours, _, _ = metrics_match(metering.collect())
    queue = first_scope_metrics(ours)[0]
    assert not queue.sum.is_monotonic
    assert sorted(p.as_int for p in queue.sum.data_points) == [-(2**40), -3]


def test_histogram_with_default_buckets():
    metering = Metering()
    histogram = metering.meter().create_histogram("latency", unit="ms", description="latency")
    for value in [0, 3, 7.5, 12, 80, 250, 999, 5_000, 20_000]:
        histogram.record(value, {"route": "/a"})
    histogram.record(1.5, {"route": "/b"})
    ours, _, _ = metrics_match(metering.collect())
    point_a = only_metric(ours).histogram.data_points[0]
    assert point_a.count == 9 and point_a.min == 0 and point_a.max == 20_000
    assert sum(1 for c in point_a.bucket_counts if c) > 4


def test_histogram_with_custom_buckets_from_a_view():
    views = [View(instrument_name="int-bounds", aggregation=ExplicitBucketHistogramAggregation((0, 5, 10, 100))),
             View(instrument_name="float-bounds", aggregation=ExplicitBucketHistogramAggregation((0.1, 0.5, 2.5))),
             View(instrument_name="one-bucket", aggregation=ExplicitBucketHistogramAggregation(())),
             View(instrument_name="no-min-max",
                  aggregation=ExplicitBucketHistogramAggregation((1, 2), record_min_max=False))]
    metering = Metering(views=views)
    meter = metering.meter()
    for name in ("int-bounds", "float-bounds", "one-bucket", "no-min-max"):
        histogram = meter.create_histogram(name)
        for value in (0, 0.3, 3, 7, 50, 500):
            histogram.record(value)
    ours, _, _ = metrics_match(metering.collect())
    by_name = {m.name: m.histogram.data_points[0] for m in first_scope_metrics(ours)}
    assert list(by_name["int-bounds"].explicit_bounds) == [0.0, 5.0, 10.0, 100.0]
    assert list(by_name["int-bounds"].bucket_counts) == [1, 2, 1, 1, 1]
    assert list(by_name["one-bucket"].explicit_bounds) == [] and list(by_name["one-bucket"].bucket_counts) == [6]
    assert by_name["no-min-max"].min == math.inf and by_name["no-min-max"].max == -math.inf


def test_histogram_of_ints_and_of_zeros():
    """An int sum / min / max is written as a double; a zero sum, min and max are still present."""
    metering = Metering()
    meter = metering.meter()
    ints = meter.create_histogram("ints")
    for value in (1, 2, 3000):
        ints.record(value)
    meter.create_histogram("zeros").record(0)
    ours, _, _ = metrics_match(metering.collect())
    zeros = first_scope_metrics(ours)[1].histogram.data_points[0]
    assert zeros.HasField("sum") and zeros.HasField("min") and zeros.HasField("max")


def test_gauges_int_and_float():
    metering = Metering()
    meter = metering.meter()
    meter.create_observable_gauge("temperature", callbacks=[lambda options: [
        _observation(21, {"room": "a"}), _observation(-4, {"room": "b"}), _observation(0, {"room": "c"})]])
    meter.create_observable_gauge("ratio", callbacks=[lambda options: [
        _observation(0.75, {"k": 1}), _observation(0.0, {"k": 2}), _observation(-0.0, {"k": 3})]])
    sync = meter.create_gauge("set-gauge")
    sync.set(7, {"x": "int"})
    sync.set(2.5, {"x": "float"})
    ours, _, _ = metrics_match(metering.collect())
    by_name = {m.name: m for m in first_scope_metrics(ours)}
    temperature, ratio = by_name["temperature"], by_name["ratio"]
    assert [p.WhichOneof("value") for p in temperature.gauge.data_points] == ["as_int"] * 3
    assert [p.WhichOneof("value") for p in ratio.gauge.data_points] == ["as_double"] * 3
    assert all(p.start_time_unix_nano == 0 for p in temperature.gauge.data_points)


def _observation(value, attributes=None):
    from opentelemetry.metrics import Observation
    return Observation(value, attributes)


def test_observable_counters():
    metering = Metering()
    meter = metering.meter()
    meter.create_observable_counter("cpu", callbacks=[lambda options: [_observation(12.5, {"cpu": "0"}),
                                                                       _observation(3, {"cpu": "1"})]])
    meter.create_observable_up_down_counter("threads", callbacks=[lambda options: [_observation(-3)]])
    ours, _, _ = metrics_match(metering.collect())
    cpu, threads = first_scope_metrics(ours)
    assert cpu.sum.is_monotonic and not threads.sum.is_monotonic


def test_delta_temporality():
    delta = AggregationTemporality.DELTA
    temporality = {Counter: delta, UpDownCounter: delta, Histogram: delta, ObservableCounter: delta,
                   ObservableUpDownCounter: delta, ObservableGauge: delta}
    metering = Metering(temporality=temporality)
    meter = metering.meter()
    counter = meter.create_counter("c")
    updown = meter.create_up_down_counter("u")
    histogram = meter.create_histogram("h")
    meter.create_observable_counter("oc", callbacks=[lambda options: [_observation(10)]])
    for round_ in range(2):
        counter.add(3 + round_, {"r": "x"})
        updown.add(-2)
        histogram.record(4.5 + round_)
        ours, _, _ = metrics_match(metering.collect())
    metrics = {m.name: m for m in first_scope_metrics(ours)}
    assert metrics["c"].sum.aggregation_temporality == metrics["u"].sum.aggregation_temporality == 1
    assert metrics["h"].histogram.aggregation_temporality == 1


def test_exponential_histograms():
    views = [View(instrument_name="exp", aggregation=ExponentialBucketHistogramAggregation()),
             View(instrument_name="exp-signed", aggregation=ExponentialBucketHistogramAggregation(max_size=20)),
             View(instrument_name="exp-zeros", aggregation=ExponentialBucketHistogramAggregation()),
             View(instrument_name="exp-negative", aggregation=ExponentialBucketHistogramAggregation(max_scale=5))]
    metering = Metering(views=views)
    meter = metering.meter()
    exp = meter.create_histogram("exp")
    for value in (0.001, 0.5, 1, 2, 3, 1000, 1e6):
        exp.record(value, {"kind": "positive"})
    signed = meter.create_up_down_counter("exp-signed")      # the SDK's Histogram refuses negative values
    for value in (0, 0, -1.5, -3, -0.25, 0.001, 2, 1000):
        signed.add(value)
    zeros = meter.create_up_down_counter("exp-zeros")
    zeros.add(0)
    zeros.add(0.0)
    negative = meter.create_up_down_counter("exp-negative")
    for value in (-1, -2, -1e-3):
        negative.add(value)
    ours, _, _ = metrics_match(metering.collect())
    by_name = {m.name: m.exponential_histogram.data_points[0] for m in first_scope_metrics(ours)}
    assert by_name["exp-signed"].zero_count == 2 and by_name["exp-signed"].HasField("negative")
    assert by_name["exp-signed"].positive.offset < 0
    assert by_name["exp-zeros"].zero_count == 2 and by_name["exp-zeros"].count == 2
    assert by_name["exp-negative"].negative.bucket_counts and by_name["exp-negative"].min == -2


def test_exponential_histogram_delta():
    metering = Metering(views=[View(instrument_name="e", aggregation=ExponentialBucketHistogramAggregation())],
                        temporality={Histogram: AggregationTemporality.DELTA})
    histogram = metering.meter().create_histogram("e")
    for round_ in range(2):
        histogram.record(1.5 * (round_ + 1), {"a": round_ % 2 == 0})
        ours, _, _ = metrics_match(metering.collect())
    assert only_metric(ours).exponential_histogram.aggregation_temporality == 1


def test_two_meters_and_resource_schema_url():
    metering = Metering(resource=Resource({"service.name": "m", "service.version": "1"},
                                          schema_url="https://opentelemetry.io/schemas/1.21.0"))
    first = metering.meter("meter.one", "1.0", "https://schemas/one", {"scope.k": "v"})
    second = metering.meter("meter.two", "2.0b1", "https://schemas/two")
    first.create_counter("one").add(1)
    second.create_counter("two").add(2.5)
    first.create_histogram("one-h").record(3)
    ours, _, _ = metrics_match(metering.collect())
    (rm,) = ours.resource_metrics
    assert rm.schema_url == "https://opentelemetry.io/schemas/1.21.0"
    layout = [(sm.scope.name, sm.scope.version, sm.schema_url, [m.name for m in sm.metrics]) for sm in rm.scope_metrics]
    assert layout == [("meter.one", "1.0", "https://schemas/one", ["one", "one-h"]),
                      ("meter.two", "2.0b1", "https://schemas/two", ["two"])]


def test_many_attribute_sets():
    metering = Metering()
    counter = metering.meter().create_counter("series")
    for i in range(300):
        counter.add(i, {"id": i, "name": f"series-{i}-" + "x" * (i % 50)})
    ours, _, payload = metrics_match(metering.collect())
    assert len(only_metric(ours).sum.data_points) == 300 and len(payload) > 16_384


def test_exemplars_from_a_sampled_span():
    tracing = Tracing()
    metering = Metering()
    meter = metering.meter()
    counter = meter.create_counter("with-exemplars")
    histogram = meter.create_histogram("h-with-exemplars")
    with tracing.tracer().start_as_current_span("active"):
        counter.add(5, {"k": "v"})
        counter.add(2.5, {"k": "v"})
        histogram.record(12.5, {"k": "v"})
    ours, _, _ = metrics_match(metering.collect())
    exemplar = first_scope_metrics(ours)[0].sum.data_points[0].exemplars[0]
    assert len(exemplar.trace_id) == 16 and len(exemplar.span_id) == 8


def test_exemplars_always_on_without_a_span():
    metering = Metering(exemplar_filter=AlwaysOnExemplarFilter())
    meter = metering.meter()
    meter.create_counter("c").add(3, {"a": 1, "b": 2})
    meter.create_histogram("h").record(0.5, {"a": 1})
    meter.create_up_down_counter("u").add(-4)
    ours, _, _ = metrics_match(metering.collect())
    exemplar = first_scope_metrics(ours)[0].sum.data_points[0].exemplars[0]
    assert exemplar.span_id == b"" and exemplar.trace_id == b""


# ---------------------------------------------------------------------------------------------
# metrics built by hand
# ---------------------------------------------------------------------------------------------


def test_empty_metrics_data_resource_and_scope():
    metrics_match(MetricsData([]))
    empty_resource = MetricsData([ResourceMetrics(RESOURCE, [], "")])
    ours, _, _ = metrics_match(empty_resource)
    assert len(ours.resource_metrics) == 1 and len(ours.resource_metrics[0].scope_metrics) == 0
    ours, _, _ = metrics_match(metrics_data())
    assert ours.resource_metrics[0].scope_metrics[0].scope.name == SCOPE.name


def test_metrics_with_no_data_points_set_no_data_field():
    metrics = [number_metric("empty-sum", []), number_metric("empty-gauge", [], gauge=True),
               Metric("empty-histogram", "", "", HistogramData([], AggregationTemporality.DELTA)),
               Metric("empty-exp", "", "", ExponentialHistogram([], AggregationTemporality.CUMULATIVE))]
    ours, _, _ = metrics_match(metrics_data(*metrics))
    for metric in first_scope_metrics(ours):
        assert metric.WhichOneof("data") is None, metric.name


def test_unsupported_data_type_gives_a_metric_without_data():
    class Summary:
        data_points = [point(1)]

    ours, _, _ = metrics_match(metrics_data(Metric("summary", "not supported", "1", Summary()),
                                            number_metric("after", [point(2)])))
    unsupported, after = first_scope_metrics(ours)
    assert unsupported.name == "summary" and unsupported.WhichOneof("data") is None
    assert after.sum.data_points[0].as_int == 2


def test_metric_name_description_unit_variants():
    metrics_match(metrics_data(number_metric("ünïcode.名前", [point(1)], description=None, unit=None),
                               number_metric("", [point(1)], description="", unit=""),
                               number_metric("d" * 300, [point(1)], description="✓" * 200, unit="By/s")))


def test_number_points_zero_and_extreme_values():
    """A zero is still written (as_int / as_double are a oneof); -0.0 stays -0.0."""
    points = [point(0), point(0.0), point(-0.0), point(INT64_MAX), point(INT64_MIN), point(-1), point(Colour.BLUE),
              point(math.inf), point(-math.inf), point(5e-324), point(Ratio(0.5))]
    ours, _, _ = metrics_match(metrics_data(number_metric("sum", points), number_metric("gauge", points, gauge=True)))
    sum_points = first_scope_metrics(ours)[0].sum.data_points
    assert sum_points[0].WhichOneof("value") == "as_int" and sum_points[1].WhichOneof("value") == "as_double"
    assert math.copysign(1.0, sum_points[2].as_double) == -1.0 and sum_points[6].as_int == -7


def test_gauge_points_carry_no_start_time():
    ours, _, _ = metrics_match(metrics_data(number_metric("g", [point(3, start=T0 - 99, time=T0)], gauge=True)))
    assert only_metric(ours).gauge.data_points[0].start_time_unix_nano == 0


def test_sum_temporalities_and_monotonicity():
    metrics = [number_metric(f"s-{t.name}-{m}", [point(1)], temporality=t, monotonic=m)
               for t in AggregationTemporality for m in (True, False)]
    ours, _, _ = metrics_match(metrics_data(*metrics))
    seen = {(m.sum.aggregation_temporality, m.sum.is_monotonic) for m in first_scope_metrics(ours)}
    assert seen == {(t.value, m) for t in AggregationTemporality for m in (True, False)}


def test_point_times_extremes():
    points = [point(1, start=0, time=0), point(2, start=UINT64_MAX, time=UINT64_MAX), point(3, start=None, time=None)]
    metrics_match(metrics_data(number_metric("t", points)))


def test_histogram_optional_fields():
    """sum / min / max are proto3 ``optional``: present when zero, absent when None."""
    points = [HistogramDataPoint({"zero": True}, T0, T0 + 1, 0, 0, [0, 0], [1.0], 0, 0),
              HistogramDataPoint({"none": True}, T0, T0 + 1, 2, None, [1, 1], [1.0], None, None),
              HistogramDataPoint({}, T0, T0 + 1, UINT64_MAX, -2.5, [UINT64_MAX, 0, 0], [1, 2], -3, -1),
              HistogramDataPoint({}, T0, T0 + 1, 1, 7, [1], [], 7, 7)]
    ours, _, _ = metrics_match(metrics_data(Metric("h", "", "", HistogramData(points, AggregationTemporality.DELTA))))
    zero, none, *_ = only_metric(ours).histogram.data_points
    assert zero.HasField("sum") and zero.HasField("min") and zero.HasField("max")
    assert not none.HasField("sum") and not none.HasField("min") and not none.HasField("max")


def test_exponential_histogram_points_by_hand():
    points = [
        ExponentialHistogramDataPoint({"a": 1}, T0, T0 + 1, 10, 12.5, -4, 3, Buckets(-(2**31), [1, 2, UINT64_MAX]),
                                      Buckets(2**31 - 1, [0, 4]), 1, -7.5, 900),
        ExponentialHistogramDataPoint({}, T0, T0 + 1, 0, 0, 20, 0, Buckets(0, []), Buckets(5, []), 0, 0, 0),
        ExponentialHistogramDataPoint({}, T0, T0 + 1, 3, None, 0, UINT64_MAX, Buckets(1, [3]), Buckets(-1, []),
                                      2**32 - 1, None, None),
    ]
    ours, _, _ = metrics_match(metrics_data(Metric("exp", "d", "u", ExponentialHistogram(
        points, AggregationTemporality.DELTA))))
    first, second, third = only_metric(ours).exponential_histogram.data_points
    assert (first.scale, first.positive.offset, first.negative.offset) == (-4, -(2**31), 2**31 - 1)
    assert not second.HasField("positive") and not second.HasField("negative") and second.HasField("sum")
    assert third.HasField("positive") and not third.HasField("negative") and not third.HasField("sum")
    assert third.zero_threshold == 0.0     # the official encoder never sets zero_threshold


def test_exemplars_by_hand():
    exemplars = [
        Exemplar({"user": "u1", "n": 1}, 7, T0, span_id=0x00F067AA0BA902B7,
                 trace_id=0x4BF92F3577B34DA6A3CE929D0E0E4736),
        Exemplar({}, 2.5, T0 + 1),
        Exemplar(None, -3, T0 + 2, span_id=5, trace_id=None),          # half an id: neither is written
        Exemplar({"x": [1, 2]}, 0, 0, span_id=None, trace_id=9),
        Exemplar({}, 0.0, UINT64_MAX, span_id=2**64 - 1, trace_id=2**128 - 1),
        Exemplar({}, Colour.RED, T0),
        Exemplar({}, INT64_MIN, T0),
        Exemplar({"big": 2**70, "kept": "yes"}, -0.0, T0),
    ]
    histogram_point = HistogramDataPoint({}, T0, T0 + 1, 3, 10.5, [1, 2], [5.0], 0.5, 7, exemplars)
    exp_point = ExponentialHistogramDataPoint({}, T0, T0 + 1, 1, 2.0, 0, 0, Buckets(0, [1]), Buckets(0, []), 0, 2, 2,
                                              exemplars)
    data = metrics_data(number_metric("sum", [point(1, exemplars=exemplars)]),
                        number_metric("gauge", [point(1.5, exemplars=exemplars)], gauge=True),
                        Metric("h", "", "", HistogramData([histogram_point], AggregationTemporality.CUMULATIVE)),
                        Metric("e", "", "", ExponentialHistogram([exp_point], AggregationTemporality.CUMULATIVE)))
    ours, _, _ = metrics_match(data)
    parsed = first_scope_metrics(ours)[0].sum.data_points[0].exemplars
    assert [(len(e.span_id), len(e.trace_id)) for e in parsed[:5]] == [(8, 16), (0, 0), (0, 0), (0, 0), (8, 16)]
    assert [e.WhichOneof("value") for e in parsed] == ["as_int", "as_double", "as_int", "as_int", "as_double",
                                                       "as_int", "as_int", "as_double"]
    assert [kv.key for kv in parsed[7].filtered_attributes] == ["kept"]


@pytest.mark.parametrize("value", ["12", None, b"1", [1]], ids=["str", "none", "bytes", "list"])
def test_exemplar_value_neither_int_nor_float_raises(value):
    both_raise(metrics_data(number_metric("bad", [point(1, exemplars=[Exemplar({}, value, T0)])])))


@pytest.mark.parametrize("data", [
    pytest.param(lambda: metrics_data(number_metric("str-value", [point("12")])), id="str-number-value"),
    pytest.param(lambda: metrics_data(number_metric("none-value", [point(None)], gauge=True)), id="none-number-value"),
    pytest.param(lambda: metrics_data(number_metric("big", [point(2**63)])), id="int-above-int64"),
    pytest.param(lambda: metrics_data(number_metric("bool", [point(True)])), id="bool-number-value"),
    pytest.param(lambda: metrics_data(number_metric("bool-gauge", [point(False)], gauge=True)), id="bool-gauge-value"),
    pytest.param(lambda: metrics_data(number_metric("exemplar-bool", [point(1, exemplars=[Exemplar({}, True, T0)])])),
                 id="exemplar-bool-value"),
    pytest.param(lambda: metrics_data(number_metric("small", [point(INT64_MIN - 1)], gauge=True)),
                 id="int-below-int64"),
    pytest.param(lambda: metrics_data(number_metric("exemplar-big", [point(1, exemplars=[Exemplar({}, 2**70, T0)])])),
                 id="exemplar-int-above-int64"),
    pytest.param(lambda: MetricsData([ResourceMetrics(RESOURCE, [ScopeMetrics(None, [], "")], "")]), id="no-scope"),
])
def test_values_the_official_encoder_rejects_raise(data):
    both_raise(data())


def test_unencodable_metric_attributes_are_skipped():
    bad = {"ok": 1, "big": 2**70, "obj": object(), "nested": [2**64], "last": "x"}
    histogram_point = HistogramDataPoint(bad, T0, T0 + 1, 1, 1.0, [1], [], 1.0, 1.0)
    resource = Resource({"service.name": "m", "big": -(2**64)})
    scope = InstrumentationScope("s", None, None, {"big": 2**70, "fine": 1})
    ours, _, _ = metrics_match(metrics_data(number_metric("sum", [point(1, bad)]),
                                            Metric("h", "", "", HistogramData([histogram_point],
                                                                              AggregationTemporality.DELTA)),
                                            resource=resource, scope=scope))
    sum_metric, histogram = first_scope_metrics(ours)
    assert [kv.key for kv in sum_metric.sum.data_points[0].attributes] == ["ok", "last"]
    assert [kv.key for kv in histogram.histogram.data_points[0].attributes] == ["ok", "last"]
    assert [kv.key for kv in ours.resource_metrics[0].resource.attributes] == ["service.name"]
    assert [kv.key for kv in ours.resource_metrics[0].scope_metrics[0].scope.attributes] == ["fine"]


@pytest.mark.parametrize("temporality", [0, 1, 2])
def test_temporality_given_as_a_plain_int(temporality):
    """The official encoder assigns aggregation_temporality as it is: a plain int works as well as
    the AggregationTemporality enum."""
    histogram_point = HistogramDataPoint({}, T0, T0 + 1, 1, 1.0, [1], [], 1.0, 1.0)
    exp_point = ExponentialHistogramDataPoint({}, T0, T0 + 1, 1, 2.0, 0, 0, Buckets(0, [1]), Buckets(0, []), 0, 2, 2)
    metrics_match(metrics_data(Metric("s", "", "", Sum([point(1)], temporality, False)),
                               Metric("h", "", "", HistogramData([histogram_point], temporality)),
                               Metric("e", "", "", ExponentialHistogram([exp_point], temporality))))


def test_attributes_of_every_type_on_data_points():
    attributes = dict(EVERY_TYPE, none=None)
    metrics_match(metrics_data(number_metric("typed", [point(1, attributes)]),
                               number_metric("typed-gauge", [point(2.0, attributes)], gauge=True),
                               resource=Resource({k: v for k, v in EVERY_TYPE.items()}, "https://r"),
                               scope=InstrumentationScope("typed", "1", "https://s", attributes)))


def test_nan_metric_values():
    nan_point = HistogramDataPoint({"n": math.nan}, T0, T0 + 1, 1, math.nan, [1], [math.nan], math.nan, math.nan)
    data = metrics_data(number_metric("g", [point(math.nan, exemplars=[Exemplar({}, math.nan, T0)])], gauge=True),
                        Metric("h", "", "", HistogramData([nan_point], AggregationTemporality.CUMULATIVE)))
    ours = ExportMetricsServiceRequest.FromString(otlp_wire.encode_metrics(data))
    official = official_encode_metrics(data)
    gauge, histogram = first_scope_metrics(ours)
    assert math.isnan(gauge.gauge.data_points[0].as_double)
    assert math.isnan(gauge.gauge.data_points[0].exemplars[0].as_double)
    hp = histogram.histogram.data_points[0]
    assert all(math.isnan(v) for v in (hp.sum, hp.min, hp.max, hp.explicit_bounds[0],
                                       hp.attributes[0].value.double_value))
    assert zero_nans(ours) == zero_nans(official) == 7
    assert_same_message(ours, official)


def test_schema_urls_come_from_the_resource_and_the_scope():
    """ResourceMetrics.schema_url and ScopeMetrics.schema_url are ignored by the official encoder:
    it writes resource.schema_url and scope.schema_url."""
    resource = Resource({"r": 1}, schema_url="https://from-resource")
    scope = InstrumentationScope("s", "1", "https://from-scope")
    data = MetricsData([ResourceMetrics(resource, [ScopeMetrics(scope, [number_metric("m", [point(1)])],
                                                                "https://ignored-scope")], "https://ignored-resource")])
    ours, _, _ = metrics_match(data)
    assert ours.resource_metrics[0].schema_url == "https://from-resource"
    assert ours.resource_metrics[0].scope_metrics[0].schema_url == "https://from-scope"


def test_two_resources_in_one_request():
    other = Resource({"service.name": "other"}, schema_url="https://other")
    data = MetricsData([
        ResourceMetrics(RESOURCE, [ScopeMetrics(SCOPE, [number_metric("a", [point(1)])], "")], ""),
        ResourceMetrics(other, [ScopeMetrics(InstrumentationScope("x"), [number_metric("b", [point(2.5)])], ""),
                                ScopeMetrics(SCOPE, [number_metric("c", [point(3)], gauge=True)], "")], ""),
    ])
    ours, _, _ = metrics_match(data)
    names = [[m.name for sm in rm.scope_metrics for m in sm.metrics] for rm in ours.resource_metrics]
    assert names == [["a"], ["b", "c"]]


def test_repeated_equal_resource_or_scope_keeps_the_last_one_in_the_first_place():
    """The official encoder keys resources and scopes by SDK equality: a later ResourceMetrics with an
    equal resource replaces the earlier one's scopes (at the first one's position), and a later
    ScopeMetrics with an equal scope replaces the earlier one's metrics."""
    other = Resource({"service.name": "other"})
    data = MetricsData([
        ResourceMetrics(Resource(dict(RESOURCE.attributes)),
                        [ScopeMetrics(SCOPE, [number_metric("lost", [point(1)])], "")], ""),
        ResourceMetrics(other, [ScopeMetrics(SCOPE, [number_metric("middle", [point(2)])], "")], ""),
        ResourceMetrics(RESOURCE, [
            ScopeMetrics(SCOPE, [number_metric("replaced", [point(3)])], ""),
            ScopeMetrics(InstrumentationScope("b"), [number_metric("b", [point(4)])], ""),
            ScopeMetrics(InstrumentationScope(SCOPE.name, SCOPE.version, SCOPE.schema_url, dict(SCOPE.attributes)),
                         [number_metric("kept", [point(5)])], ""),
            ScopeMetrics(InstrumentationScope(SCOPE.name, SCOPE.version, SCOPE.schema_url, {"other": "attrs"}),
                         [number_metric("own-scope", [point(6)])], ""),
        ], ""),
    ])
    ours, _, _ = metrics_match(data)
    layout = [[(sm.scope.name, [m.name for m in sm.metrics]) for sm in rm.scope_metrics]
              for rm in ours.resource_metrics]
    assert layout == [[(SCOPE.name, ["kept"]), ("b", ["b"]), (SCOPE.name, ["own-scope"])],
                      [(SCOPE.name, ["middle"])]]


# ---------------------------------------------------------------------------------------------
# property-style: random spans and metrics
# ---------------------------------------------------------------------------------------------

_ALPHABET = ("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 _-./:=,"
             "éüßøçñ€£¥©®™°±µ¶·½ΩλπЖжשאعربي日本語中文한국어✓✗★☃♥🚀🔥😀👩‍💻🇫🇷\u0000\u007f\u0080\uffff\U0010ffff")


def _text(rng: random.Random) -> str:
    length = rng.choice([0, 1, 3, 10, 40]) if rng.random() < 0.95 else rng.randint(127, 400)
    return "".join(rng.choice(_ALPHABET) for _ in range(length))


def _int(rng: random.Random) -> int:
    edges = [0, 1, -1, 127, 128, -128, 2**31 - 1, -(2**31), 2**32, 2**53 + 1, INT64_MAX, INT64_MIN]
    return rng.choice(edges) if rng.random() < 0.4 else rng.randint(INT64_MIN, INT64_MAX) >> rng.randrange(64)


def _float(rng: random.Random) -> float:
    edges = [0.0, -0.0, math.inf, -math.inf, 5e-324, 1.7976931348623157e308, 0.1, -2.5]
    return rng.choice(edges) if rng.random() < 0.3 else rng.uniform(-1e6, 1e6) * 10.0 ** rng.randint(-300, 300)


def _value(rng: random.Random, depth: int = 0):
    kind = rng.randrange(13 if depth < 3 else 7)
    if kind == 0:
        return _text(rng)
    if kind == 1:
        return rng.random() < 0.5
    if kind == 2:
        return _int(rng)
    if kind == 3:
        return _float(rng)
    if kind == 4:
        return rng.randbytes(rng.choice([0, 1, 8, 200]))
    if kind == 5:
        return None
    if kind == 6:
        return rng.choice([2**70, -(2**64), object(), {1, 2}, 1j])       # unencodable: the key is skipped
    if kind in (7, 8):
        maker = rng.choice([_text, _int, _float, lambda r: r.random() < 0.5])
        values = [maker(rng) for _ in range(rng.randint(0, 5))]            # homogeneous, like the SDK's
        return values if kind == 7 else tuple(values)
    if kind in (9, 10):
        return [_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    return {_text(rng): _value(rng, depth + 1) for _ in range(rng.randint(0, 4))}


def _attributes(rng: random.Random):
    choice = rng.random()
    if choice < 0.1:
        return None
    attributes = {_text(rng): _value(rng) for _ in range(rng.randint(0, 7))}
    if choice < 0.25:       # bounded: dropped counts; its values must be ones the SDK accepts
        clean = {k: v for k, v in attributes.items() if isinstance(v, (str, bool, int, float, bytes))
                 and not (isinstance(v, int) and not INT64_MIN <= v <= INT64_MAX)}
        return BoundedAttributes(rng.randint(1, 3), clean)
    return attributes


def _time(rng: random.Random):
    return rng.choice([None, 0, UINT64_MAX, T0 + rng.randrange(10**12), rng.randrange(2**64)])


def _context(rng: random.Random) -> SpanContext:
    state = [(rng.choice("abcxyz") + str(i), "v" + str(rng.randrange(1000))) for i in range(rng.choice([0, 0, 1, 3]))]
    return ctx(rng.randrange(2**128), rng.randrange(2**64), remote=rng.random() < 0.5, state=state,
               flags=rng.choice([0, 1]))


def _random_spans(rng: random.Random, resources, scopes):
    spans = []
    for _ in range(rng.randint(0, 6)):
        events = [Event(_text(rng), _attributes(rng), _time(rng) or 1) for _ in range(rng.choice([0, 0, 1, 3]))]
        links = [Link(_context(rng), _attributes(rng)) for _ in range(rng.choice([0, 0, 1, 2]))]
        if rng.random() < 0.2:
            bounded = BoundedList(1)
            bounded.extend(events)
            events = bounded
        status = rng.choice([None, Status(StatusCode.UNSET), Status(StatusCode.OK), Status(StatusCode.ERROR),
                             Status(StatusCode.ERROR, _text(rng))])
        spans.append(ReadableSpan(
            _text(rng), context=_context(rng), parent=rng.choice([None, _context(rng)]),
            resource=rng.choice(resources), attributes=_attributes(rng), events=events, links=links,
            kind=rng.choice(list(SpanKind)), status=status, start_time=_time(rng), end_time=_time(rng),
            instrumentation_scope=rng.choice(scopes)))
    return spans


def test_random_spans_match_the_official_encoder():
    rng = random.Random(20240611)
    resources = [RESOURCE, Resource({"service.name": "b", "k": [1, 2]}, schema_url="https://b"), Resource({})]
    scopes = [SCOPE, None, InstrumentationScope("plain"), InstrumentationScope("v", "2", "https://v", {"a": 1})]
    for iteration in range(200):
        spans = _random_spans(rng, resources, scopes)
        try:
            spans_match(spans)
        except (AssertionError, pytest.fail.Exception) as error:
            pytest.fail(f"iteration {iteration}: {error}", pytrace=False)


def _exemplars(rng: random.Random):
    exemplars = []
    for _ in range(rng.choice([0, 0, 1, 2])):
        value = _int(rng) if rng.random() < 0.5 else _float(rng)
        ids = rng.choice([(None, None), (rng.randrange(2**64), rng.randrange(2**128)), (rng.randrange(2**64), None)])
        exemplars.append(Exemplar(_attributes(rng), value, _time(rng), span_id=ids[0], trace_id=ids[1]))
    return exemplars


def _optional_float(rng: random.Random):
    return None if rng.random() < 0.2 else rng.choice([_float(rng), _int(rng)])


def _random_metric(rng: random.Random) -> Metric:
    kind = rng.randrange(5)
    n = rng.choice([0, 1, 1, 2, 3])
    temporality = rng.choice(list(AggregationTemporality))
    if kind in (0, 1):
        points = [NumberDataPoint(_attributes(rng), _time(rng), _time(rng),
                                  _int(rng) if rng.random() < 0.5 else _float(rng), _exemplars(rng)) for _ in range(n)]
        data = Gauge(points) if kind == 0 else Sum(points, temporality, rng.random() < 0.5)
    elif kind == 2:
        points = []
        for _ in range(n):
            bounds = sorted(_float(rng) for _ in range(rng.randint(0, 6)))
            counts = [rng.choice([0, 1, rng.randrange(2**64)]) for _ in range(len(bounds) + 1)]
            points.append(HistogramDataPoint(_attributes(rng), _time(rng), _time(rng), rng.randrange(2**64),
                                             _optional_float(rng), counts, bounds, _optional_float(rng),
                                             _optional_float(rng), _exemplars(rng)))
        data = HistogramData(points, temporality)
    elif kind == 3:
        points = []
        for _ in range(n):
            def buckets():
                counts = [rng.choice([0, 1, rng.randrange(2**64)]) for _ in range(rng.choice([0, 1, 5, 160]))]
                return Buckets(rng.randint(-(2**31), 2**31 - 1), counts)
            points.append(ExponentialHistogramDataPoint(
                _attributes(rng), _time(rng), _time(rng), rng.randrange(2**64), _optional_float(rng),
                rng.randint(-10, 20), rng.randrange(2**64), buckets(), buckets(), rng.randrange(2**32),
                _optional_float(rng), _optional_float(rng), _exemplars(rng)))
        data = ExponentialHistogram(points, temporality)
    else:
        data = Sum([], temporality, True)
    return Metric(_text(rng), rng.choice([None, _text(rng)]), rng.choice([None, "", "ms", _text(rng)]), data)


def test_random_metrics_match_the_official_encoder():
    rng = random.Random(1234567)
    for iteration in range(200):
        resources = rng.sample([RESOURCE, Resource({"a": 1}, "https://a"), Resource({}), Resource({"b": [True]})],
                               rng.randint(0, 3))
        resource_metrics = []
        for resource in resources:
            pool = [SCOPE, InstrumentationScope("m"), InstrumentationScope("n", "1", "https://n", {"x": 2})]
            scopes = rng.sample(pool, rng.randint(0, 3))
            resource_metrics.append(ResourceMetrics(resource, [
                ScopeMetrics(scope, [_random_metric(rng) for _ in range(rng.randint(0, 4))], "") for scope in scopes],
                ""))
        try:
            metrics_match(MetricsData(resource_metrics))
        except (AssertionError, pytest.fail.Exception) as error:
            pytest.fail(f"iteration {iteration}: {error}", pytrace=False)


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


# -- the encoder's caches ------------------------------------------------------------------------

def test_cached_attribute_pairs_keep_equal_values_of_different_types_apart():
    """Values equal in Python but encoded differently (True == 1 == 1.0, 0.0 == -0.0, a str subclass)
    never share a cached encoding, in one batch and across batches."""
    values = [True, 1, 1.0, "1", Tag("1"), 0.0, -0.0, False, 0, "0", Colour.RED, 1]
    spans = [readable(f"s{i}", attributes={"k": v}) for i, v in enumerate(values)]
    spans_match(spans)
    spans_match(list(reversed(spans)))
    for v in values:
        spans_match([readable("again", attributes={"k": v})])


def test_more_distinct_attribute_values_than_the_cache_holds():
    spans = [readable(f"s{i}", attributes={"tokens": i, "session": f"sess-{i}", "hook": "should_compress"})
             for i in range(otlp_wire._PAIRS_MAX + 500)]
    spans_match(spans)
    assert len(otlp_wire._PAIRS) <= otlp_wire._PAIRS_MAX
    spans_match(spans[:50])


def test_spans_alternating_between_equal_resource_objects_group_together():
    """Grouping looks the resource up again only when the object changes: equal but distinct
    resources (and scopes) alternating still land in one group, as the official encoder groups them."""
    r1, r2 = Resource({"service.name": "a"}), Resource({"service.name": "a"})
    s1, s2 = InstrumentationScope("lib", "1"), InstrumentationScope("lib", "1")
    spans = [readable(f"s{i}", resource=(r1, r2)[i % 2], instrumentation_scope=(s1, s2)[i // 2 % 2])
             for i in range(8)]
    ours, _, _ = spans_match(spans)
    assert len(ours.resource_spans) == 1 and len(ours.resource_spans[0].scope_spans) == 1

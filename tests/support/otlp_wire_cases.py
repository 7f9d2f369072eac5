"""The OTLP wire differential tests' shared parts (tests/pipeline/test_otlp_wire*.py): encode
with ours and with the official encoder, compare the parsed messages; SDK objects built by hand;
seeded random values for the property-style cases."""

from __future__ import annotations

import difflib
import enum
import math
import random

import pytest
from google.protobuf import text_format
from opentelemetry.attributes import BoundedAttributes
from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics as official_encode_metrics
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans as official_encode_spans
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.metrics import (
    MeterProvider,
)
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    Gauge,
    InMemoryMetricReader,
    Metric,
    MetricsData,
    NumberDataPoint,
    ResourceMetrics,
    ScopeMetrics,
    Sum,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, TraceFlags, TraceState

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

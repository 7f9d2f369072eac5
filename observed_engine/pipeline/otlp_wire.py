"""OTLP protobuf payloads written as bytes, without the protobuf runtime.

``encode_spans`` and ``encode_metrics`` build the same messages as the official encoders from
the same SDK objects (grouping, fields, skipped attributes); the official path costs 25-35 ms of
CPU at every process start, this module imports ``struct``. When editing: follow proto3's
presence rules exactly; ``tests/pipeline/test_otlp_wire.py`` parses the output with the official
messages and compares.

The full account: docs/design/internals.md, *observed_engine/pipeline/otlp_wire.py*.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Mapping, Sequence
from typing import Any, Dict, List

logger = logging.getLogger(__name__)

_VARINT_1 = [bytes((n,)) for n in range(0x80)]     # every one-byte varint, made once
_double = struct.Struct("<d").pack
_fixed64 = struct.Struct("<Q").pack
_sfixed64 = struct.Struct("<q").pack
_fixed32 = struct.Struct("<I").pack
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
_UINT64 = (1 << 64) - 1


def _varint(n: int) -> bytes:
    """An unsigned varint (``n`` >= 0)."""
    if n < 0x80:
        return _VARINT_1[n]
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _int64(n: int) -> bytes:
    """An int64 as protobuf writes it: a negative one is its 64-bit two's complement (10 bytes)."""
    if not _INT64_MIN <= n <= _INT64_MAX:
        raise ValueError(f"{n} does not fit an int64")
    return _varint(n & _UINT64)


def _sint32(n: int) -> bytes:
    """A zigzag-encoded sint32."""
    return _varint((n << 1) ^ (n >> 31) if n < 0 else n << 1)


def _tag(field: int, wire_type: int) -> bytes:
    return _varint(field << 3 | wire_type)


def _field_tags(*fields: int) -> tuple:
    return tuple(_tag(f, 2) for f in fields)


def _delimited(tag: bytes, payload: bytes) -> bytes:
    return tag + _varint(len(payload)) + payload


def _string(tag: bytes, text) -> bytes:
    """A string field, left out when empty or None (a proto3 default)."""
    if not text:
        return b""
    data = text.encode("utf-8")
    return tag + _varint(len(data)) + data


# -- common.proto: AnyValue, KeyValue, InstrumentationScope; resource.proto --------------------

_T_ANY_STRING, _T_ANY_ARRAY, _T_ANY_KVLIST, _T_ANY_BYTES = _field_tags(1, 5, 6, 7)
_T_ANY_BOOL, _T_ANY_INT, _T_ANY_DOUBLE = _tag(2, 0), _tag(3, 0), _tag(4, 1)
_T_KV_KEY, _T_KV_VALUE = _field_tags(1, 2)
_T_LIST_VALUES = _tag(1, 2)         # ArrayValue.values, KeyValueList.values
_T_SCOPE_NAME, _T_SCOPE_VERSION, _T_SCOPE_ATTRIBUTES = _field_tags(1, 2, 3)
_T_RESOURCE_ATTRIBUTES = _tag(1, 2)


def _any_value(value: Any) -> bytes:
    """The AnyValue payload; the type checks in the official encoder's order (bool before int,
    str and bytes before Sequence). Raises for a value it cannot hold."""
    if value is None:
        return b""
    if isinstance(value, bool):
        return _T_ANY_BOOL + (b"\x01" if value else b"\x00")
    if isinstance(value, str):
        data = value.encode("utf-8")
        return _T_ANY_STRING + _varint(len(data)) + data
    if isinstance(value, int):
        return _T_ANY_INT + _int64(value)
    if isinstance(value, float):
        return _T_ANY_DOUBLE + _double(value)
    if isinstance(value, bytes):
        return _T_ANY_BYTES + _varint(len(value)) + value
    if isinstance(value, Sequence):
        return _delimited(_T_ANY_ARRAY, b"".join([_delimited(_T_LIST_VALUES, _any_value(v)) for v in value]))
    if isinstance(value, Mapping):
        return _delimited(_T_ANY_KVLIST, b"".join(
            [_delimited(_T_LIST_VALUES, _key_value(str(k), v)) for k, v in value.items()]))
    raise TypeError(f"invalid type {type(value).__name__} of an attribute value")


def _key_value(key: str, value: Any) -> bytes:
    if isinstance(key, bytes):      # protobuf takes UTF-8 bytes for a string field (and rejects others)
        key = key.decode("utf-8")
    return _string(_T_KV_KEY, key) + _delimited(_T_KV_VALUE, _any_value(value))


_logged_keys: set = set()


# The encoded form (length prefix + KeyValue) of str, int and bool attribute values, by (key, type,
# value): a span's attributes repeat from span to span (engine, hook, session, decision), and
# encoding them is most of a span's cost. Exact types only (True == 1 and 0.0 == -0.0 would collide);
# emptied when full, so a run of distinct values (token counts) costs one insert each.
_PAIRS: Dict[tuple, bytes] = {}
_PAIRS_MAX = 4096


def _encoded_pair(key, value) -> bytes:
    kind = type(value)
    if type(key) is str and (kind is str or kind is int or kind is bool):
        cache_key = (key, kind, value)
        encoded = _PAIRS.get(cache_key)
        if encoded is None:
            pair = _key_value(key, value)
            encoded = _varint(len(pair)) + pair
            if len(_PAIRS) >= _PAIRS_MAX:
                _PAIRS.clear()
            _PAIRS[cache_key] = encoded
        return encoded
    pair = _key_value(key, value)
    return _varint(len(pair)) + pair


def _attributes(tag: bytes, attributes) -> bytes:
    """Repeated KeyValue under ``tag``; a pair that cannot be encoded is logged and left out."""
    if not attributes:
        return b""
    parts = []
    for key, value in attributes.items():
        try:
            parts += (tag, _encoded_pair(key, value))
        except Exception as exc:
            if len(_logged_keys) < 64 and key not in _logged_keys:    # once per key, not at every export
                _logged_keys.add(key)
                logger.warning("observed-engine: OTLP: attribute %r left out (%s)", key, exc)
    return b"".join(parts)


def _scope(scope) -> bytes:
    """InstrumentationScope (an empty message for None)."""
    if scope is None:
        return b""
    return (_string(_T_SCOPE_NAME, scope.name) + _string(_T_SCOPE_VERSION, scope.version)
            + _attributes(_T_SCOPE_ATTRIBUTES, scope.attributes))


def _resource(resource) -> bytes:
    return _attributes(_T_RESOURCE_ATTRIBUTES, resource.attributes)


def _uint(tag: bytes, n) -> bytes:
    """A uint32/uint64/enum field, left out at 0."""
    return tag + _varint(n) if n else b""


def _fixed64_field(tag: bytes, n) -> bytes:
    return tag + _fixed64(n) if n else b""


# -- trace.proto ---------------------------------------------------------------------------------

_T_REQ_RESOURCE_SPANS = _tag(1, 2)
_T_RS_RESOURCE, _T_RS_SCOPE_SPANS, _T_RS_SCHEMA = _field_tags(1, 2, 3)
_T_SS_SCOPE, _T_SS_SPANS, _T_SS_SCHEMA = _field_tags(1, 2, 3)
(_T_SPAN_TRACE_ID, _T_SPAN_ID, _T_SPAN_STATE, _T_SPAN_PARENT, _T_SPAN_NAME) = _field_tags(1, 2, 3, 4, 5)
_T_SPAN_KIND, _T_SPAN_START, _T_SPAN_END = _tag(6, 0), _tag(7, 1), _tag(8, 1)
_T_SPAN_ATTRIBUTES, _T_SPAN_EVENTS, _T_SPAN_LINKS, _T_SPAN_STATUS = _field_tags(9, 11, 13, 15)
_T_SPAN_DROPPED_ATTRIBUTES, _T_SPAN_DROPPED_EVENTS, _T_SPAN_DROPPED_LINKS = _tag(10, 0), _tag(12, 0), _tag(14, 0)
_T_SPAN_FLAGS = _tag(16, 5)
_T_EVENT_TIME, _T_EVENT_NAME, _T_EVENT_ATTRIBUTES, _T_EVENT_DROPPED = _tag(1, 1), _tag(2, 2), _tag(3, 2), _tag(4, 0)
_T_LINK_TRACE_ID, _T_LINK_SPAN_ID, _T_LINK_ATTRIBUTES = _field_tags(1, 2, 4)
_T_LINK_DROPPED, _T_LINK_FLAGS = _tag(5, 0), _tag(6, 5)
_T_STATUS_MESSAGE, _T_STATUS_CODE = _tag(2, 2), _tag(3, 0)

_HAS_IS_REMOTE, _IS_REMOTE = 0x100, 0x200       # SpanFlags: what the span (or link) knows of its parent
# trace_api.SpanKind (INTERNAL = 0, SERVER, CLIENT, PRODUCER, CONSUMER) -> Span.SpanKind (INTERNAL = 1, ...)
_SPAN_KIND_OFFSET = 1


def _span_id(span_id: int) -> bytes:
    return span_id.to_bytes(8, "big")


def _trace_id(trace_id: int) -> bytes:
    return trace_id.to_bytes(16, "big")


_KIND = {}           # SpanKind -> its encoded field, made on first use
_UNSET_STATUS = _T_SPAN_STATUS + b"\x00"    # Status{} (code UNSET, no message): most spans
_LOCAL_FLAGS = _T_SPAN_FLAGS + _fixed32(_HAS_IS_REMOTE)
_REMOTE_FLAGS = _T_SPAN_FLAGS + _fixed32(_HAS_IS_REMOTE | _IS_REMOTE)


def _span(span) -> bytes:
    context = span.get_span_context()
    parent = span.parent
    parts = [
        _T_SPAN_TRACE_ID, b"\x10", context.trace_id.to_bytes(16, "big"),
        _T_SPAN_ID, b"\x08", context.span_id.to_bytes(8, "big"),
    ]
    state = context.trace_state
    if state:
        parts.append(_string(_T_SPAN_STATE, ",".join([f"{k}={v}" for k, v in state.items()])))
    if parent:
        parts += (_T_SPAN_PARENT, b"\x08", parent.span_id.to_bytes(8, "big"))
    parts.append(_string(_T_SPAN_NAME, span.name))
    kind = _KIND.get(span.kind)
    if kind is None:
        kind = _KIND[span.kind] = _uint(_T_SPAN_KIND, span.kind.value + _SPAN_KIND_OFFSET)
    parts.append(kind)
    start, end = span.start_time, span.end_time
    if start:
        parts += (_T_SPAN_START, _fixed64(start))
    if end:
        parts += (_T_SPAN_END, _fixed64(end))
    parts.append(_attributes(_T_SPAN_ATTRIBUTES, span.attributes))
    dropped = span.dropped_attributes
    if dropped:
        parts += (_T_SPAN_DROPPED_ATTRIBUTES, _varint(dropped))
    events, links = span.events, span.links
    if events or links:
        parts.append(_events_and_links(span, events, links))
    status = span.status
    if status is not None:
        code, message = status.status_code.value, status.description
        parts.append(_UNSET_STATUS if not code and not message else _delimited(
            _T_SPAN_STATUS, _string(_T_STATUS_MESSAGE, message) + _uint(_T_STATUS_CODE, code)))
    parts.append(_REMOTE_FLAGS if parent is not None and parent.is_remote else _LOCAL_FLAGS)
    return b"".join(parts)


def _events_and_links(span, events, links) -> bytes:
    parts = []
    for event in events or ():
        parts.append(_delimited(_T_SPAN_EVENTS, b"".join((
            _fixed64_field(_T_EVENT_TIME, event.timestamp), _string(_T_EVENT_NAME, event.name),
            _attributes(_T_EVENT_ATTRIBUTES, event.attributes), _uint(_T_EVENT_DROPPED, event.dropped_attributes),
        ))))
    parts.append(_uint(_T_SPAN_DROPPED_EVENTS, span.dropped_events))
    for link in links or ():
        linked = link.context
        parts.append(_delimited(_T_SPAN_LINKS, b"".join((      # the official encoder writes no link trace_state
            _T_LINK_TRACE_ID, b"\x10", _trace_id(linked.trace_id), _T_LINK_SPAN_ID, b"\x08", _span_id(linked.span_id),
            _attributes(_T_LINK_ATTRIBUTES, link.attributes), _uint(_T_LINK_DROPPED, link.dropped_attributes),
            _T_LINK_FLAGS, _fixed32(_HAS_IS_REMOTE | (_IS_REMOTE if linked.is_remote else 0)),
        ))))
    parts.append(_uint(_T_SPAN_DROPPED_LINKS, span.dropped_links))
    return b"".join(parts)


def encode_spans(spans: Sequence[Any]) -> bytes:
    """The serialized ``ExportTraceServiceRequest`` of SDK ``ReadableSpan``s."""
    grouped: Dict[Any, Dict[Any, List[bytes]]] = {}
    last_resource = last_scope = encoded = None
    for span in spans:
        # the spans of a batch share one resource and a few scopes: looked up again only when the
        # object changes (a Resource hashes by serialising its attributes to JSON)
        resource, scope = span.resource, span.instrumentation_scope or None
        if resource is not last_resource or scope is not last_scope or encoded is None:
            by_scope = grouped.get(resource)
            if by_scope is None:
                by_scope = grouped[resource] = {}
            encoded = by_scope.get(scope)
            if encoded is None:
                encoded = by_scope[scope] = []
            last_resource, last_scope = resource, scope
        body = _span(span)
        encoded += (_T_SS_SPANS, _varint(len(body)), body)
    out = []
    for resource, by_scope in grouped.items():
        scope_spans = [
            _delimited(_T_RS_SCOPE_SPANS, _delimited(_T_SS_SCOPE, _scope(scope)) + b"".join(encoded)
                       + _string(_T_SS_SCHEMA, scope.schema_url if scope is not None else None))
            for scope, encoded in by_scope.items()
        ]
        out.append(_delimited(_T_REQ_RESOURCE_SPANS, _delimited(_T_RS_RESOURCE, _resource(resource))
                              + b"".join(scope_spans) + _string(_T_RS_SCHEMA, resource.schema_url)))
    return b"".join(out)


# -- metrics.proto -------------------------------------------------------------------------------

_T_REQ_RESOURCE_METRICS = _tag(1, 2)
_T_RM_RESOURCE, _T_RM_SCOPE_METRICS, _T_RM_SCHEMA = _field_tags(1, 2, 3)
_T_SM_SCOPE, _T_SM_METRICS, _T_SM_SCHEMA = _field_tags(1, 2, 3)
_T_METRIC_NAME, _T_METRIC_DESCRIPTION, _T_METRIC_UNIT = _field_tags(1, 2, 3)
_T_METRIC_GAUGE, _T_METRIC_SUM, _T_METRIC_HISTOGRAM, _T_METRIC_EXP_HISTOGRAM = _field_tags(5, 7, 9, 10)
_T_DATA_POINTS = _tag(1, 2)                        # Gauge, Sum, Histogram, ExponentialHistogram
_T_TEMPORALITY, _T_MONOTONIC = _tag(2, 0), _tag(3, 0)
# NumberDataPoint
_T_NDP_START, _T_NDP_TIME, _T_NDP_DOUBLE, _T_NDP_INT = _tag(2, 1), _tag(3, 1), _tag(4, 1), _tag(6, 1)
_T_NDP_EXEMPLARS, _T_NDP_ATTRIBUTES = _field_tags(5, 7)
# HistogramDataPoint
_T_HDP_START, _T_HDP_TIME, _T_HDP_COUNT, _T_HDP_SUM = _tag(2, 1), _tag(3, 1), _tag(4, 1), _tag(5, 1)
_T_HDP_BUCKETS, _T_HDP_BOUNDS, _T_HDP_EXEMPLARS, _T_HDP_ATTRIBUTES = _field_tags(6, 7, 8, 9)
_T_HDP_MIN, _T_HDP_MAX = _tag(11, 1), _tag(12, 1)
# ExponentialHistogramDataPoint
_T_EDP_ATTRIBUTES = _tag(1, 2)
_T_EDP_START, _T_EDP_TIME, _T_EDP_COUNT, _T_EDP_SUM = _tag(2, 1), _tag(3, 1), _tag(4, 1), _tag(5, 1)
_T_EDP_SCALE, _T_EDP_ZERO_COUNT, _T_EDP_POSITIVE, _T_EDP_NEGATIVE = _tag(6, 0), _tag(7, 1), _tag(8, 2), _tag(9, 2)
_T_EDP_FLAGS, _T_EDP_EXEMPLARS, _T_EDP_MIN, _T_EDP_MAX = _tag(10, 0), _tag(11, 2), _tag(12, 1), _tag(13, 1)
_T_BUCKETS_OFFSET, _T_BUCKETS_COUNTS = _tag(1, 0), _tag(2, 2)
# Exemplar
_T_EX_TIME, _T_EX_DOUBLE, _T_EX_SPAN_ID, _T_EX_TRACE_ID = _tag(2, 1), _tag(3, 1), _tag(4, 2), _tag(5, 2)
_T_EX_INT, _T_EX_ATTRIBUTES = _tag(6, 1), _tag(7, 2)


def _exemplars(tag: bytes, exemplars) -> bytes:
    parts = []
    for ex in exemplars or ():
        body = [_attributes(_T_EX_ATTRIBUTES, ex.filtered_attributes), _fixed64_field(_T_EX_TIME, ex.time_unix_nano)]
        if ex.span_id is not None and ex.trace_id is not None:
            body += (_T_EX_SPAN_ID, b"\x08", _span_id(ex.span_id), _T_EX_TRACE_ID, b"\x10", _trace_id(ex.trace_id))
        value = ex.value
        if isinstance(value, bool):
            raise TypeError("an exemplar value is a bool")      # protobuf rejects a bool for as_int
        if isinstance(value, float):
            body += (_T_EX_DOUBLE, _double(value))
        elif isinstance(value, int):
            body += (_T_EX_INT, _sfixed64(value))
        else:
            raise ValueError("Exemplar value must be an int or float")
        parts.append(_delimited(tag, b"".join(body)))
    return b"".join(parts)


def _number_point(point, with_start: bool) -> bytes:
    value = point.value
    if isinstance(value, bool):
        raise TypeError("a data point value is a bool")      # protobuf rejects a bool for as_int
    return b"".join((
        _attributes(_T_NDP_ATTRIBUTES, point.attributes),
        _fixed64_field(_T_NDP_START, point.start_time_unix_nano) if with_start else b"",
        _fixed64_field(_T_NDP_TIME, point.time_unix_nano),
        _T_NDP_INT + _sfixed64(value) if isinstance(value, int) else _T_NDP_DOUBLE + _double(value),
        _exemplars(_T_NDP_EXEMPLARS, point.exemplars),
    ))


def _optional_double(tag: bytes, value) -> bytes:
    return b"" if value is None else tag + _double(value)


def _histogram_point(point) -> bytes:
    counts, bounds = point.bucket_counts, point.explicit_bounds
    return b"".join((
        _attributes(_T_HDP_ATTRIBUTES, point.attributes),
        _fixed64_field(_T_HDP_START, point.start_time_unix_nano),
        _fixed64_field(_T_HDP_TIME, point.time_unix_nano),
        _fixed64_field(_T_HDP_COUNT, point.count),
        _optional_double(_T_HDP_SUM, point.sum),
        _delimited(_T_HDP_BUCKETS, struct.pack(f"<{len(counts)}Q", *counts)) if counts else b"",
        _delimited(_T_HDP_BOUNDS, struct.pack(f"<{len(bounds)}d", *bounds)) if bounds else b"",
        _exemplars(_T_HDP_EXEMPLARS, point.exemplars),
        _optional_double(_T_HDP_MIN, point.min),
        _optional_double(_T_HDP_MAX, point.max),
    ))


def _buckets(tag: bytes, buckets) -> bytes:
    """ExponentialHistogramDataPoint.Buckets, left out (unset) when it has no counts."""
    if not buckets.bucket_counts:
        return b""
    counts = b"".join([_varint(c) for c in buckets.bucket_counts])
    return _delimited(tag, (_T_BUCKETS_OFFSET + _sint32(buckets.offset) if buckets.offset else b"")
                      + _delimited(_T_BUCKETS_COUNTS, counts))


def _exponential_point(point) -> bytes:
    return b"".join((
        _attributes(_T_EDP_ATTRIBUTES, point.attributes),
        _fixed64_field(_T_EDP_START, point.start_time_unix_nano),
        _fixed64_field(_T_EDP_TIME, point.time_unix_nano),
        _fixed64_field(_T_EDP_COUNT, point.count),
        _optional_double(_T_EDP_SUM, point.sum),
        _T_EDP_SCALE + _sint32(point.scale) if point.scale else b"",
        _fixed64_field(_T_EDP_ZERO_COUNT, point.zero_count),
        _buckets(_T_EDP_POSITIVE, point.positive),
        _buckets(_T_EDP_NEGATIVE, point.negative),
        _uint(_T_EDP_FLAGS, point.flags),
        _exemplars(_T_EDP_EXEMPLARS, point.exemplars),
        _optional_double(_T_EDP_MIN, point.min),
        _optional_double(_T_EDP_MAX, point.max),
    ))


def _metric_data(data, kinds) -> bytes:
    """The ``data`` oneof of a Metric; nothing when it has no points (the official encoder then sets none)."""
    points = data.data_points
    if not points:
        return b""
    if isinstance(data, kinds.Gauge):
        return _delimited(_T_METRIC_GAUGE, b"".join([_delimited(_T_DATA_POINTS, _number_point(p, False))
                                                     for p in points]))
    if isinstance(data, kinds.Histogram):
        return _delimited(_T_METRIC_HISTOGRAM, b"".join(
            [_delimited(_T_DATA_POINTS, _histogram_point(p)) for p in points])
            + _uint(_T_TEMPORALITY, int(data.aggregation_temporality)))
    if isinstance(data, kinds.Sum):
        return _delimited(_T_METRIC_SUM, b"".join([_delimited(_T_DATA_POINTS, _number_point(p, True))
                                                   for p in points])
                          + _uint(_T_TEMPORALITY, int(data.aggregation_temporality))
                          + (_T_MONOTONIC + b"\x01" if data.is_monotonic else b""))
    if isinstance(data, kinds.ExponentialHistogram):
        return _delimited(_T_METRIC_EXP_HISTOGRAM, b"".join(
            [_delimited(_T_DATA_POINTS, _exponential_point(p)) for p in points])
            + _uint(_T_TEMPORALITY, int(data.aggregation_temporality)))
    logger.warning("observed-engine: OTLP: unsupported metric data type %s", type(data).__name__)
    return b""


def encode_metrics(data) -> bytes:
    """The serialized ``ExportMetricsServiceRequest`` of an SDK ``MetricsData``."""
    from opentelemetry.sdk.metrics import export as kinds  # imported by whoever made ``data``

    by_resource: Dict[Any, tuple] = {}
    for resource_metrics in data.resource_metrics:
        # as the official encoder: a later entry for the same resource (or the same scope in it)
        # replaces the earlier one, in the earlier one's place
        scopes: Dict[Any, bytes] = {}
        for scope_metrics in resource_metrics.scope_metrics:
            scope = scope_metrics.scope
            metrics = [
                _delimited(_T_SM_METRICS, _string(_T_METRIC_NAME, m.name) + _string(_T_METRIC_DESCRIPTION, m.description)
                           + _string(_T_METRIC_UNIT, m.unit) + _metric_data(m.data, kinds))
                for m in scope_metrics.metrics
            ]
            scopes[scope] = _delimited(_T_RM_SCOPE_METRICS, _delimited(_T_SM_SCOPE, _scope(scope)) + b"".join(metrics)
                                       + _string(_T_SM_SCHEMA, scope.schema_url))
        by_resource[resource_metrics.resource] = scopes
    return b"".join(
        _delimited(_T_REQ_RESOURCE_METRICS, _delimited(_T_RM_RESOURCE, _resource(resource)) + b"".join(scopes.values())
                   + _string(_T_RM_SCHEMA, resource.schema_url))
        for resource, scopes in by_resource.items())

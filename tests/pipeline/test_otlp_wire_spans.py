"""Spans: ours and the official ``encode_spans`` give the same ExportTraceServiceRequest
(the method: tests/pipeline/test_otlp_wire.py)."""

from __future__ import annotations

import math
import random
import types
from collections import OrderedDict

import pytest
from opentelemetry import trace as trace_api
from opentelemetry.attributes import BoundedAttributes
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans as official_encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan, SpanLimits
from opentelemetry.sdk.util import BoundedList
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, NonRecordingSpan, SpanKind
from opentelemetry.trace.status import Status, StatusCode
from support.otlp_wire_cases import (
    EVERY_TYPE,
    HAS_IS_REMOTE,
    INT64_MIN,
    IS_REMOTE,
    RESOURCE,
    SCOPE,
    T0,
    UINT64_MAX,
    Colour,
    Ratio,
    Tag,
    Tracing,
    _attributes,
    _context,
    _text,
    _time,
    all_spans,
    assert_same_message,
    attr,
    ctx,
    only_span,
    readable,
    spans_match,
    zero_nans,
)

from observed_engine.pipeline import otlp_wire

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

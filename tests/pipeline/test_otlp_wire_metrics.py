"""Metrics: ours and the official ``encode_metrics`` give the same ExportMetricsServiceRequest,
and raise where it raises (the method: tests/pipeline/test_otlp_wire.py)."""

from __future__ import annotations

import math
import random

import pytest
from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics as official_encode_metrics
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.sdk.metrics import (
    AlwaysOnExemplarFilter,
    Counter,
    Exemplar,
    Histogram,
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
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from support.otlp_wire_cases import (
    EVERY_TYPE,
    INT64_MAX,
    INT64_MIN,
    RESOURCE,
    SCOPE,
    T0,
    UINT64_MAX,
    Colour,
    Metering,
    Ratio,
    Tracing,
    _attributes,
    _float,
    _int,
    _text,
    _time,
    assert_same_message,
    both_raise,
    first_scope_metrics,
    metrics_data,
    metrics_match,
    number_metric,
    only_metric,
    point,
    zero_nans,
)

from observed_engine.pipeline import otlp_wire

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

"""Histogram values recorded per batch (issue 16, worker CPU per event).

The worker collects a batch's histogram values per (instrument, attributes) and hands each group to
the SDK at once (observed_engine/worker/histograms.py). What a reader collects must be exactly what
one ``record`` per value would have given, with real SDK providers, readers and views; where the
direct path does not apply, every value goes through ``record``.
"""

from __future__ import annotations

import threading

import pytest
from opentelemetry.sdk.metrics import AlwaysOnExemplarFilter, MeterProvider
from opentelemetry.sdk.metrics import Histogram as HistogramKind
from opentelemetry.sdk.metrics._internal.measurement_consumer import SynchronousMeasurementConsumer
from opentelemetry.sdk.metrics.export import AggregationTemporality, InMemoryMetricReader
from opentelemetry.sdk.metrics.view import View

import observed_engine
from observed_engine.contract.catalogue import METRICS
from observed_engine.worker import histograms
from observed_engine.worker.histograms import HistogramBatch

VALUES = [0.3, 1e-6, 2.0, 0.0125, 0.5, 0.1 + 0.2, 4, 0.0, 9.5, 0.75, 1e-9, 0.5]
BOUNDS = [0.001, 0.01, 0.5, 1.0, 5.0]


def _points(reader):
    data = reader.get_metrics_data()
    out = []
    for resource in data.resource_metrics if data is not None else ():
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                for p in metric.data.data_points:
                    if hasattr(p, "bucket_counts"):
                        out.append((metric.name, tuple(sorted(p.attributes.items())), p.count, p.sum,
                                    tuple(p.bucket_counts), p.min, p.max))
    return sorted(out)


def _provider(**kwargs):
    readers = [InMemoryMetricReader(),
               InMemoryMetricReader(preferred_temporality={HistogramKind: AggregationTemporality.DELTA})]
    views = [View(instrument_name="filtered", attribute_keys={"engine"})]
    return readers, MeterProvider(metric_readers=readers, views=views, shutdown_on_exit=False, **kwargs)


def _record(direct: bool, rounds=3, **provider_kwargs):
    readers, provider = _provider(**provider_kwargs)
    meter = provider.get_meter("t")
    hists = [meter.create_histogram(n, explicit_bucket_boundaries_advisory=BOUNDS) for n in ("plain", "filtered")]
    batch = HistogramBatch()
    took_direct = []
    collected = []
    for r in range(rounds):
        for h in hists:
            for hook in ("should_compress", "update_from_response"):
                attrs = {"engine": "ContextCompressor", "hook": hook}
                values = VALUES[r:] + VALUES[:r]
                if direct:
                    took_direct.append(batch.record_group(h, attrs, values))
                else:
                    for v in values:
                        h.record(v, attrs)
        collected.append([_points(reader) for reader in readers])
    provider.shutdown()
    return collected, took_direct


def test_a_group_recorded_at_once_collects_exactly_as_one_record_per_value():
    expected, _ = _record(direct=False)
    got, took_direct = _record(direct=True)
    assert all(took_direct), "the direct path was not taken with the SDK's own provider"
    assert got == expected      # cumulative and delta readers, a view that drops an attribute, 3 collections


def test_with_an_exemplar_filter_that_samples_every_value_each_value_goes_through_record():
    expected, _ = _record(direct=False, exemplar_filter=AlwaysOnExemplarFilter())
    got, took_direct = _record(direct=True, exemplar_filter=AlwaysOnExemplarFilter())
    assert not any(took_direct)
    assert got == expected


def test_a_direct_path_that_would_differ_is_never_used(monkeypatch):
    """The once-per-process self-test catches an SDK whose aggregation the direct path gets wrong."""
    def wrong_add(point, values):      # forgets min and max
        with point._lock:
            if point._value is None:
                point._value = point._get_empty_bucket_counts()
            for value in values:
                point._sum += value
                point._value[0] += 1

    monkeypatch.setattr(histograms._SdkInternals, "_add", staticmethod(wrong_add))
    monkeypatch.setattr(histograms, "_self_test_result", None)
    assert histograms._passes_self_test(histograms._SdkInternals.load()) is False
    expected, _ = _record(direct=False)
    got, took_direct = _record(direct=True)
    assert not any(took_direct) and got == expected
    monkeypatch.setattr(histograms, "_self_test_result", None)


def test_delta_collections_running_meanwhile_lose_and_double_nothing():
    readers, provider = _provider()
    delta = readers[1]
    h = provider.get_meter("t").create_histogram("plain", explicit_bucket_boundaries_advisory=BOUNDS)
    batch = HistogramBatch()
    stop = threading.Event()
    counts = []

    def collect():
        while not stop.is_set():
            counts.extend(p[2] for p in _points(delta))

    t = threading.Thread(target=collect)
    t.start()
    try:
        for _ in range(2000):
            batch.record_group(h, {"engine": "e", "hook": "h"}, VALUES)
    finally:
        stop.set()
        t.join()
    counts.extend(p[2] for p in _points(delta))
    assert sum(counts) == 2000 * len(VALUES)
    provider.shutdown()


def test_the_worker_hands_the_sdk_one_measurement_per_engine_and_hook_of_a_batch_not_one_per_call(
        tmp_path, monkeypatch):
    """Before issue 16 every call cost the SDK one Histogram.record (13 µs here); the values are the same."""
    consumed = []
    real = SynchronousMeasurementConsumer.consume_measurement

    def counting(self, measurement):
        consumed.append(measurement.instrument.name)
        return real(self, measurement)

    monkeypatch.setattr(SynchronousMeasurementConsumer, "consume_measurement", counting)
    from agent.context_compressor import ContextCompressor

    reader = InMemoryMetricReader()
    mp = MeterProvider(metric_readers=[reader], shutdown_on_exit=False)
    settings = {"traces": False, "store": {"path": str(tmp_path / "h.sqlite")}}
    engine = observed_engine.observe(ContextCompressor("gpt-4o", config_context_length=200_000, quiet_mode=True),
                                     meter_provider=mp, settings=settings)
    from observed_engine.api import pipeline_for

    telemetry = pipeline_for(meter_provider=mp, settings=settings)
    telemetry.recorder.flush(30)
    consumed.clear()
    n = 3000
    for i in range(n):
        engine.should_compress(1000 + i)
    assert telemetry.recorder.flush(60) and telemetry.store.flush(60)
    duration = next(s.otel_name for s in METRICS if s.key == "hook_duration")
    assert consumed.count(duration) < n / 100, consumed.count(duration)

    import sqlite3
    conn = sqlite3.connect(str(tmp_path / "h.sqlite"))
    stored = [d for (d,) in conn.execute("SELECT duration_s FROM events WHERE hook = 'should_compress' "
                                         "AND event = 'call' ORDER BY id")]
    conn.close()
    points = [p for p in _points(reader) if p[0] == duration and ("hook", "should_compress") in p[1]]
    assert len(points) == 1
    _, _, count, total, buckets, low, high = points[0]
    assert count == n == len(stored) == sum(buckets)
    assert total == pytest.approx(sum(stored), rel=1e-12) and low == min(stored) and high == max(stored)
    mp.shutdown()


def test_internals_that_are_not_there_send_every_value_through_record(monkeypatch):
    """An SDK whose internals differ from what the self-test saw (an attribute the direct path reads
    is missing) loses nothing: the group's other values go through record()."""
    expected, _ = _record(direct=False)

    def missing(self, instrument):
        raise AttributeError("_instrument_view_instrument_matches")

    monkeypatch.setattr(histograms, "_self_test_result", True)     # it passed, on a provider built earlier
    monkeypatch.setattr(histograms._SdkInternals, "_matches", missing)
    got, took_direct = _record(direct=True)
    assert not any(took_direct) and got == expected

"""Histogram measurements of one batch, recorded together at the batch's end.

The SDK's ``Histogram.record`` costs about 13 µs per value, a third of the worker's CPU per
event; :class:`HistogramBatch` records a group's first value through ``record`` and adds the rest
straight into the SDK's own aggregations. When editing: that shortcut is taken only when
nothing could tell the difference, checked (types, exemplar filter, a once-per-process
self-test), not assumed; otherwise every value goes through ``record``.

The full account: docs/design/internals.md, *observed_engine/worker/histograms.py*.
"""

from __future__ import annotations

import math
import threading
from bisect import bisect_left
from typing import Any, Dict, List, Optional

from opentelemetry import trace as trace_api

_self_test_lock = threading.Lock()
_self_test_result: Optional[bool] = None


class HistogramBatch:
    """``add`` during a batch, ``record_all`` at its end."""

    def __init__(self) -> None:
        self._values: Dict[tuple, List[float]] = {}
        self._sdk: Optional[_SdkInternals] = None
        self._sdk_checked = False

    def add(self, instrument: Any, value: float, attributes: Dict[str, Any]) -> None:
        self.add_keyed(self.key(instrument, attributes), value)

    @staticmethod
    def key(instrument: Any, attributes: Dict[str, Any]) -> tuple:
        """What ``add_keyed`` takes for this instrument and these attributes (made once, used often)."""
        return instrument, tuple(attributes.items())

    def add_keyed(self, key: tuple, value: float) -> None:
        values = self._values.get(key)
        if values is None:
            self._values[key] = [value]
        else:
            values.append(value)

    def record_all(self, on_failure) -> None:
        """Record every value added since the last call; ``on_failure(exc)`` for a group that failed
        (the other groups are still recorded)."""
        groups, self._values = self._values, {}
        for (instrument, items), values in groups.items():
            try:
                self.record_group(instrument, dict(items), values)
            except Exception as exc:
                on_failure(exc)

    def record_group(self, instrument: Any, attributes: Dict[str, Any], values: List[float]) -> bool:
        """Record ``values`` with ``attributes``; True when all but the first went in directly."""
        instrument.record(values[0], attributes)
        rest = values[1:]
        if not rest:
            return False
        sdk = self._internals(instrument)
        if sdk is not None and sdk.add_directly(instrument, attributes, rest):
            return True
        for value in rest:
            instrument.record(value, attributes)
        return False

    def _internals(self, instrument: Any) -> Optional[_SdkInternals]:
        if not self._sdk_checked:
            self._sdk_checked = True
            if type(instrument).__module__.startswith("opentelemetry.sdk."):
                self._sdk = _SdkInternals.load()
                if self._sdk is not None and not _passes_self_test(self._sdk):
                    self._sdk = None
        return self._sdk


class _SdkInternals:
    """The SDK names the direct path reads, looked up once (None when one is missing)."""

    @classmethod
    def load(cls) -> Optional[_SdkInternals]:
        try:
            from opentelemetry.sdk.metrics._internal import _view_instrument_match as view_match
            from opentelemetry.sdk.metrics._internal import aggregation, instrument, measurement_consumer
            from opentelemetry.sdk.metrics._internal.exemplar import exemplar_filter
        except Exception:  # probe: an SDK without these private modules: None, every value goes via record()
            return None
        self = cls()
        self.histogram_type = getattr(instrument, "_Histogram", None)
        self.consumer_type = getattr(measurement_consumer, "SynchronousMeasurementConsumer", None)
        self.aggregation_type = getattr(aggregation, "_ExplicitBucketHistogramAggregation", None)
        self.quiet_filters = tuple(t for t in (getattr(exemplar_filter, "AlwaysOffExemplarFilter", None),
                                               getattr(exemplar_filter, "TraceBasedExemplarFilter", None)) if t)
        self.trace_based = getattr(exemplar_filter, "TraceBasedExemplarFilter", None)
        self.hash_attributes = getattr(view_match, "_hash_attributes", None) or (lambda a: frozenset(a.items()))
        if None in (self.histogram_type, self.consumer_type, self.aggregation_type) or not self.quiet_filters:
            return None
        return self

    def _matches(self, instrument) -> Optional[list]:
        """Every view match of every reader for ``instrument``, or None when one of them (or the
        instrument, its consumer, the exemplar filter) is not what the direct path knows."""
        if type(instrument) is not self.histogram_type:
            return None
        enabled = getattr(instrument, "_is_enabled", None)
        if enabled is not None and not enabled():
            return None
        consumer = getattr(instrument, "_measurement_consumer", None)
        if type(consumer) is not self.consumer_type:
            return None
        exemplars = consumer._sdk_config.exemplar_filter
        if type(exemplars) not in self.quiet_filters:
            return None
        if type(exemplars) is self.trace_based and trace_api.get_current_span().get_span_context().is_valid:
            return None         # a span current on this thread could be sampled as an exemplar
        found = []
        for storage in consumer._reader_storages.values():
            matches = storage._instrument_view_instrument_matches.get(instrument)
            if not matches:
                return None
            found.extend(matches)
        return found or None

    def _point(self, match, attributes):
        keys = match._view._attribute_keys
        seen = attributes if keys is None else {k: v for k, v in attributes.items() if k in keys}
        point = match._attributes_aggregation.get(self.hash_attributes(seen))
        # not there: not made yet for this view, or the cardinality overflow took it
        return point if type(point) is self.aggregation_type else None

    def add_directly(self, instrument, attributes, values: List[float]) -> bool:
        """Add ``values`` (the first of the group already recorded) into the aggregation points the
        SDK's ``record`` would update; False (nothing added) when the direct path does not apply."""
        for value in values:
            if not (type(value) is float or type(value) is int) or not math.isfinite(value) or value < 0:
                return False            # record() warns about it and drops it: let it
        # A delta collection swaps a match's points under its lock: those locks are held from the
        # lookup to the last add, or values could go into a point already collected. (A collection
        # holds one match lock at a time and record() as well: taking several cannot deadlock.)
        try:
            matches = self._matches(instrument)
            held = [m._lock for m in matches if getattr(m, "_reset_on_collect", False)] if matches else []
        except Exception:       # internals not as the self-test saw them: record() for these values
            return False
        if matches is None:
            return False
        for lock in held:
            lock.acquire()
        try:
            try:
                points = [self._point(match, attributes) for match in matches]
            except Exception:   # as above; nothing was added yet
                return False
            if None in points:
                return False
            for point in points:
                self._add(point, values)
            return True
        finally:
            for lock in reversed(held):
                lock.release()

    @staticmethod
    def _add(point, values: List[float]) -> None:
        """``point.aggregate`` for each value (without exemplars), in one go under its lock."""
        with point._lock:
            if point._value is None:
                point._value = point._get_empty_bucket_counts()
            counts, bounds, total = point._value, point._boundaries, point._sum
            for value in values:
                total += value
                counts[bisect_left(bounds, value)] += 1
            point._sum = total
            if point._record_min_max:
                point._min = min(point._min, min(values))
                point._max = max(point._max, max(values))


def _passes_self_test(sdk: _SdkInternals) -> bool:
    """Once per process: the same values recorded through ``record`` and through the direct path
    into a private provider collect to the same points."""
    global _self_test_result
    with _self_test_lock:
        if _self_test_result is None:
            try:
                _self_test_result = _self_test(sdk)
            except Exception:  # probe: a self-test that raises has failed: values go through record()
                _self_test_result = False
        return _self_test_result


def _self_test(sdk: _SdkInternals) -> bool:
    from opentelemetry.sdk.metrics import Histogram as HistogramKind
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import AggregationTemporality, InMemoryMetricReader
    from opentelemetry.sdk.metrics.view import View

    values = [0.25, 0.000_1, 3.0, 0.5, 1.0, 0.1 + 0.2, 7, 0.0, 2.5e-7, 0.75]
    names = ("observed_engine_self_test", "observed_engine_self_test_filtered")

    def collected(direct: bool) -> Optional[list]:
        readers = [InMemoryMetricReader(),
                   InMemoryMetricReader(preferred_temporality={HistogramKind: AggregationTemporality.DELTA})]
        provider = MeterProvider(metric_readers=readers, shutdown_on_exit=False,
                                 views=[View(instrument_name=names[1], attribute_keys={"engine"})])
        batch = HistogramBatch()
        batch._sdk, batch._sdk_checked = sdk, True
        out = []
        try:
            meter = provider.get_meter("observed_engine.self_test")
            histograms = [meter.create_histogram(n, explicit_bucket_boundaries_advisory=[0.001, 0.5, 1.0, 5.0])
                          for n in names]
            for _round in range(2):        # the second time the points exist (and the delta ones were reset)
                for histogram in histograms:
                    for hook in ("a", "b"):
                        attributes = {"engine": "e", "hook": hook}
                        if direct:
                            if not batch.record_group(histogram, attributes, values):
                                return None
                        else:
                            for value in values:
                                histogram.record(value, attributes)
                for reader in readers:
                    out.append(sorted(_points(reader.get_metrics_data())))
            return out
        finally:
            provider.shutdown()

    expected = collected(direct=False)
    return bool(expected) and collected(direct=True) == expected


def _points(data) -> list:
    """Every histogram point collected, without its timestamps."""
    found = []
    for resource in data.resource_metrics if data is not None else ():
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    found.append((metric.name, tuple(sorted(point.attributes.items())), point.count, point.sum,
                                  tuple(point.bucket_counts), point.min, point.max))
    return found

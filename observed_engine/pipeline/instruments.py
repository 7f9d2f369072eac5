"""The OpenTelemetry instruments, built once from the catalogue.

Like the instrumentations of opentelemetry-python-contrib, an ``Instruments``
holder is created from a meter that the caller's provider supplies; nothing
here chooses providers or exporters.
"""

from __future__ import annotations

from typing import Callable, Dict, Iterable

from opentelemetry.metrics import CallbackOptions, Meter, Observation

from ..contract.catalogue import COUNTER, HISTOGRAM, METRICS, OBSERVABLE_GAUGE, MetricSpec

GaugeReader = Callable[[], Iterable[tuple]]   # yields (value, attributes dict)


class Instruments:
    """One attribute per catalogue key (``instruments.hook_calls`` ...)."""

    def __init__(self, meter: Meter, gauge_readers: Dict[str, GaugeReader]) -> None:
        self._by_key: Dict[str, object] = {}
        for spec in METRICS:
            self._by_key[spec.key] = _create(meter, spec, gauge_readers.get(spec.key))
            setattr(self, spec.key, self._by_key[spec.key])

    def __getitem__(self, key: str):
        return self._by_key[key]


def _create(meter: Meter, spec: MetricSpec, reader):
    if spec.kind == COUNTER:
        return meter.create_counter(spec.otel_name, unit=spec.unit, description=spec.description)
    if spec.kind == HISTOGRAM:
        try:
            return meter.create_histogram(
                spec.otel_name, unit=spec.unit, description=spec.description,
                explicit_bucket_boundaries_advisory=list(spec.buckets or ()),
            )
        except TypeError:  # an API without bucket advice
            return meter.create_histogram(spec.otel_name, unit=spec.unit, description=spec.description)
    if spec.kind == OBSERVABLE_GAUGE:
        if reader is None:
            raise ValueError(f"observable gauge {spec.key} needs a reader")

        def callback(_options: CallbackOptions, _reader=reader):
            return [Observation(value, attrs) for value, attrs in _reader()]

        return meter.create_observable_gauge(
            spec.otel_name, callbacks=[callback], unit=spec.unit, description=spec.description,
        )
    raise ValueError(f"unknown instrument kind {spec.kind}")

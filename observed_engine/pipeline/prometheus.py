"""One Prometheus ``/metrics`` endpoint per listening address, shared by every pipeline.

An edited ``observed:`` section makes a new pipeline; with a server per pipeline the later
pipelines' engines were missing from ``/metrics``. Here every pipeline attaches a collector to
its address's one server and a scrape serves the union. When editing: the merged counters of
the process never go down (a retired pipeline's last counters are kept), gauges take the larger
value except ``ADDITIVE_GAUGES``, and a failing collector is skipped and counted.

The full account: docs/design/internals.md, *observed_engine/pipeline/prometheus.py*.
"""

from __future__ import annotations

import copy
import logging
import threading
from typing import Callable, Dict, List, Optional, Tuple

from ..contract.catalogue import BY_KEY

logger = logging.getLogger(__name__)

ADDITIVE_GAUGES = frozenset({BY_KEY["compression_in_flight"].prom_name})
_SUMMED_TYPES = ("counter", "histogram", "summary", "gaugehistogram")

SampleKey = Tuple[str, Tuple[Tuple[str, str], ...]]


def _sample_key(sample) -> SampleKey:
    return sample.name, tuple(sorted(sample.labels.items()))


class _Attachment:
    __slots__ = ("collector", "count_error")

    def __init__(self, collector, count_error: Optional[Callable[[str], None]]) -> None:
        self.collector = collector
        self.count_error = count_error


class PrometheusEndpoint:
    """The shared ``/metrics`` server of one (host, port), and the collector it serves."""

    def __init__(self, host: str, port: int) -> None:
        from prometheus_client import CollectorRegistry, start_http_server

        self._lock = threading.Lock()
        self._attached: List[_Attachment] = []
        # family name -> (a family to copy the name/help/type/unit from, {sample key: value})
        self._retired: Dict[str, Tuple[object, Dict[SampleKey, float]]] = {}
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)
        self.server, self.thread = start_http_server(port, addr=host, registry=self.registry)
        self.address = self.server.server_address[:2]

    def _attach(self, collector, count_error: Optional[Callable[[str], None]] = None) -> None:
        with self._lock:
            for entry in self._attached:
                if entry.collector is collector:
                    if count_error is not None:
                        entry.count_error = count_error
                    return
            self._attached.append(_Attachment(collector, count_error))

    def detach(self, collector, keep_counters: bool = True) -> None:
        """Stop serving ``collector``; with ``keep_counters`` its counters' last values stay."""
        with self._lock:
            entry = next((e for e in self._attached if e.collector is collector), None)
        if entry is None:
            return
        if keep_counters:
            families = self._collect_one(entry)
            with self._lock:
                for family in families:
                    if family.type not in _SUMMED_TYPES:
                        continue
                    kept = self._retired.setdefault(family.name, (family, {}))[1]
                    for sample in family.samples:
                        key = _sample_key(sample)
                        kept[key] = kept.get(key, 0.0) + sample.value
        with self._lock:
            self._attached = [e for e in self._attached if e is not entry]
            empty = not self._attached
        if empty:
            _release(self)

    @property
    def attached(self) -> int:
        with self._lock:
            return len(self._attached)

    def _collect_one(self, entry: _Attachment) -> list:
        try:
            return list(entry.collector.collect())
        except Exception:
            if entry.count_error is not None:
                try:
                    entry.count_error("exporter_prometheus")
                except Exception:  # the counter is the last resort: nothing is left to tell
                    pass
            return []

    # what the CollectorRegistry calls on a scrape
    def collect(self):
        with self._lock:
            entries = list(self._attached)
            retired = {name: (family, dict(values)) for name, (family, values) in self._retired.items()}
        merged: Dict[str, object] = {}
        values: Dict[str, Dict[SampleKey, float]] = {}
        samples: Dict[str, Dict[SampleKey, object]] = {}
        for entry in entries:
            for family in self._collect_one(entry):
                name = family.name
                if name not in merged:
                    merged[name] = family
                    values[name], samples[name] = {}, {}
                summed = family.type in _SUMMED_TYPES or name in ADDITIVE_GAUGES
                into_values, into_samples = values[name], samples[name]
                for sample in family.samples:
                    key = _sample_key(sample)
                    if key not in into_values:
                        into_values[key], into_samples[key] = sample.value, sample
                    elif summed:
                        into_values[key] += sample.value
                    elif sample.value > into_values[key]:
                        into_values[key] = sample.value
        for name, (family, kept) in retired.items():
            if name not in merged:
                merged[name] = family
                values[name], samples[name] = {}, {}
            into_values, into_samples = values[name], samples[name]
            for key, value in kept.items():
                if key in into_values:
                    into_values[key] += value
                else:
                    into_values[key] = value
                    into_samples[key] = None
        for name, family in merged.items():
            out = copy.copy(family)
            out.samples = []
            for key, value in values[name].items():
                sample = samples[name][key]
                if sample is None:
                    from prometheus_client.samples import Sample

                    sample = Sample(key[0], dict(key[1]), value)
                else:
                    sample = sample._replace(value=value)
                out.samples.append(sample)
            yield out

    def close(self) -> None:
        try:
            self.server.shutdown()
            self.server.server_close()
        except Exception:  # teardown: the port is freed with the process
            pass


_endpoints: Dict[Tuple[str, int], PrometheusEndpoint] = {}
_endpoints_lock = threading.Lock()


class NotARegistry:
    """Given to PrometheusMetricReader(registry=...): the reader's collector is attached to an
    endpoint by ``attach`` below, not registered by the reader itself."""

    def register(self, collector) -> None:
        pass

    def unregister(self, collector) -> None:
        pass


def attach(host: str, port: int, collector,
           count_error: Optional[Callable[[str], None]] = None) -> PrometheusEndpoint:
    """Serve ``collector`` on (host, port): on the endpoint already listening there in this process,
    else on a new one. Raises OSError when the address cannot be bound (another process has it)."""
    with _endpoints_lock:
        endpoint = _endpoints.get((host, port))
        if endpoint is None:
            endpoint = PrometheusEndpoint(host, port)
            _endpoints[(host, port)] = endpoint
            if port == 0:                # an ephemeral port: known by its real number too
                _endpoints[(host, endpoint.address[1])] = endpoint
        endpoint._attach(collector, count_error)
        return endpoint


def _release(endpoint: PrometheusEndpoint) -> None:
    """No pipeline serves on it any more: stop the server, free the port."""
    with _endpoints_lock:
        if endpoint.attached:
            return
        for key in [k for k, e in _endpoints.items() if e is endpoint]:
            del _endpoints[key]
    endpoint.close()


def after_fork_in_child() -> None:
    """A forked child has none of the parent's server threads (the parent keeps serving its ports):
    it forgets them, and a pipeline it makes binds anew."""
    global _endpoints_lock
    _endpoints_lock = threading.Lock()
    _endpoints.clear()

"""Providers built from the ``observed:`` settings: Prometheus ``/metrics`` and OTLP.

Used only when the caller passes no providers. Every exporter runs on the SDK's
own threads (batch span processor, periodic metric reader, Prometheus HTTP
server), never on the hook path; export failures are counted, logged once and
swallowed. The SDK side lives in ``sdk_exporters``, imported only when a setting
asks for an exporter: with the defaults (store only) the SDK is never imported.
"""

from __future__ import annotations

from typing import Callable, Optional

from ..settings import Settings
from .providers import BuiltProviders, ErrorCounter


def build_providers(settings: Settings, count_error: ErrorCounter,
                    count_drop: Optional[Callable[[str, int], None]] = None, *,
                    traces: bool = True, metrics: bool = True) -> BuiltProviders:
    """Providers for the signals the caller did not bring its own provider for (``traces``,
    ``metrics``), as the settings say: Prometheus /metrics and/or OTLP."""
    want_metrics = settings.metrics and metrics
    want_traces = settings.traces and traces
    want_prom = want_metrics and settings.prometheus.enabled
    want_otlp = settings.otlp.enabled and (want_metrics or want_traces)
    if not (want_prom or want_otlp):
        return BuiltProviders()
    from . import sdk_exporters

    return sdk_exporters.build(settings, count_error, count_drop, want_metrics=want_metrics,
                               want_traces=want_traces, want_prom=want_prom, want_otlp=want_otlp)

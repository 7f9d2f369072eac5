"""``observe()`` and ``unobserve()``: the host's facts + a pipeline + capture.

This module composes the layers: it asks the host (``host/``) for what only the
installed Hermes knows (its ``ContextEngine`` ABC, HERMES_HOME for the default store,
the configured compress timeout), gets the pipeline for the process configuration
from a registry, and has capture re-class the engine.
"""

from __future__ import annotations

from typing import Any, Optional

from . import host
from .capture import instrument_engine, is_observed, observed_meta, uninstrument_engine
from .pipeline import REGISTRY, Pipeline, Registry
from .settings import Settings


def observe(inner: Any, tracer_provider=None, meter_provider=None, settings=None, *,
            registry: Optional[Registry] = None):
    """Return ``inner`` made observable (the same object, re-classed).

    ``tracer_provider`` / ``meter_provider``: OpenTelemetry providers to use; for a signal
    whose provider is None the ones configured from ``settings`` are built (Prometheus,
    OTLP), else the global one is used. ``settings``: the keys of the ``observed:`` config
    section. ``registry``: where the pipeline lives (default :data:`REGISTRY`).

    Calling it again on an observed engine returns the engine unchanged. If the engine's
    class cannot be extended, the engine is returned unobserved and a warning is logged:
    observation is never worth breaking the engine for.
    """
    if is_observed(inner):
        return inner
    parsed = Settings.from_mapping(settings)
    pipeline = pipeline_for(tracer_provider, meter_provider, parsed, registry=registry)
    return instrument_engine(inner, pipeline, exposed_name=parsed.name, engine_abc=host.context_engine_abc())


def unobserve(engine: Any) -> Any:
    """The inverse of :func:`observe`: the engine back in its own class, no longer followed.

    Returns the engine. Copies and clones made while it was observed stay observed; a
    no-op for an engine that is not observed."""
    return uninstrument_engine(engine)


def pipeline_for(tracer_provider=None, meter_provider=None, settings=None, *,
                 registry: Optional[Registry] = None) -> Pipeline:
    """The pipeline that ``observe()`` uses for these providers and settings (made on first use)."""
    settings = Settings.from_mapping(settings)
    hermes_config = host.load_config(log_errors=False) if not settings.compress_timeout_seconds else None
    return (registry or REGISTRY).get(
        settings, tracer_provider, meter_provider,
        store_path=settings.store_path(host.hermes_home()),
        compress_timeout=settings.resolved_compress_timeout(host.host_compress_timeout(hermes_config)),
    )


def pipeline_of(engine: Any) -> Optional[Pipeline]:
    """The pipeline observing ``engine``, or None."""
    meta = observed_meta(engine)
    return meta.pipeline if meta is not None else None


def flush(timeout: float = 5.0, *, registry: Optional[Registry] = None) -> bool:
    """Deliver everything recorded so far (spans, metrics, store rows). False on timeout."""
    return (registry or REGISTRY).flush(timeout)


def shutdown(timeout: float = 5.0, *, registry: Optional[Registry] = None) -> None:
    """Stop every pipeline (worker threads, servers, exporters)."""
    (registry or REGISTRY).shutdown(timeout)

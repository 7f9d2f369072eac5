"""Shared fixtures: in-memory OpenTelemetry SDK providers, a private Hermes home,
and a clean observed-engine state after every test.

Kept generic on purpose: any test module may use these.

* ``hermes_home`` (autouse): ``HERMES_HOME`` points at a fresh temporary
  directory, so neither Hermes nor the store ever touches ``~/.hermes``.
* ``span_exporter`` / ``tracer_provider``: SDK ``TracerProvider`` with a
  ``SimpleSpanProcessor`` into an ``InMemorySpanExporter``.
* ``metric_reader`` / ``meter_provider``: SDK ``MeterProvider`` with an
  ``InMemoryMetricReader``.
* ``store_path``: where the embedded store of this test lives.
* ``observed_settings``: the settings mapping the ``observe_engine`` factory
  passes (store under the temporary home).
* ``observe_engine``: ``observe_engine(inner, **settings_overrides)`` calls
  ``observed_engine.observe`` with the providers above.
* ``finished_spans``: ``finished_spans()`` flushes every pipeline and returns
  the exported spans.
* ``metric_points``: ``metric_points(otel_name)`` flushes and returns
  ``{frozenset(attributes.items()): value}`` for counters / gauges (sum of a
  histogram's ``count`` for histograms).
* an autouse cleanup that shuts every pipeline down (worker, watchdog and store
  threads) and forgets the generated engine classes, so threads don't pile up.
"""

from __future__ import annotations

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter


@pytest.fixture(autouse=True)
def hermes_home(tmp_path, monkeypatch):
    home = tmp_path / "hermes_home"
    home.mkdir()
    monkeypatch.setenv("HERMES_HOME", str(home))
    return home


@pytest.fixture
def store_path(hermes_home):
    return hermes_home / "observed" / "telemetry.sqlite"


@pytest.fixture
def span_exporter():
    return InMemorySpanExporter()


@pytest.fixture
def tracer_provider(span_exporter):
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(span_exporter))
    yield provider
    _shutdown_pipelines()   # before the provider: the workers may still end spans
    provider.shutdown()


@pytest.fixture
def metric_reader():
    return InMemoryMetricReader()


@pytest.fixture
def meter_provider(metric_reader):
    provider = MeterProvider(metric_readers=[metric_reader])
    yield provider
    _shutdown_pipelines()
    provider.shutdown()


@pytest.fixture
def observed_settings(store_path):
    return {"store": {"path": str(store_path)}}


@pytest.fixture
def observe_engine(tracer_provider, meter_provider, observed_settings):
    from observed_engine import observe

    def _observe(inner, **overrides):
        settings = dict(observed_settings)
        settings.update(overrides)
        return observe(inner, tracer_provider=tracer_provider, meter_provider=meter_provider, settings=settings)

    return _observe


@pytest.fixture
def finished_spans(span_exporter):
    import observed_engine

    def _spans():
        assert observed_engine.flush(10.0), "observed_engine.flush() timed out"
        return list(span_exporter.get_finished_spans())

    return _spans


def _collect_points(reader, name):
    """{frozenset of attributes: value (counters, gauges) or count (histograms)}."""
    from support.otel import metric_points

    points = {}
    for attrs, dp in metric_points(reader, name):
        key = frozenset(attrs.items())
        value = getattr(dp, "value", None)
        if value is None:
            value = getattr(dp, "count", None)
        points[key] = points.get(key, 0) + value
    return points


@pytest.fixture
def metric_points(metric_reader):
    import observed_engine

    def _points(name, flush=True):
        if flush:
            assert observed_engine.flush(10.0), "observed_engine.flush() timed out"
        return _collect_points(metric_reader, name)

    return _points


def _shutdown_pipelines():
    try:
        import observed_engine
    except Exception:  # pragma: no cover - package not importable: nothing to clean
        return
    observed_engine.shutdown(5.0)   # the generated classes go with their pipelines


@pytest.fixture(autouse=True)
def _observed_cleanup():
    yield
    _shutdown_pipelines()


@pytest.fixture
def prov():
    """tests/support/otel.py providers (spans, exact metric values); pipelines stopped after the test."""
    import observed_engine
    from support.otel import make_providers

    p = make_providers()
    yield p
    observed_engine.shutdown(5.0)
    p.shutdown()

"""Shared fixtures: in-memory OpenTelemetry SDK providers, a private Hermes home,
and a clean observed-engine state after every test.

Kept generic on purpose: any test module may use these.

* ``hermes_home`` (autouse): ``HERMES_HOME`` points at a fresh temporary
  directory, so neither Hermes nor the store ever touches ``~/.hermes``.
* ``prov``: the test's ``support.otel.Providers`` (SDK providers with in-memory
  readers; exact metric values); ``span_exporter`` / ``tracer_provider`` and
  ``metric_reader`` / ``meter_provider`` are its ``InMemorySpanExporter`` /
  ``TracerProvider`` and ``InMemoryMetricReader`` / ``MeterProvider``.
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
* ``webhook``: a ``support.servers.WebhookReceiver`` on 127.0.0.1 (Alertmanager's
  notifications), stopped after the test.
* an autouse cleanup that shuts every pipeline down (worker, watchdog and store
  threads) and forgets the generated engine classes, so threads don't pile up.
"""

from __future__ import annotations

import pytest
from support.otel import Providers
from support.servers import WebhookReceiver


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
def prov():
    """support/otel.py providers (spans, exact metric values); pipelines stopped after the test,
    before the providers (the workers may still end spans)."""
    p = Providers()
    yield p
    _shutdown_pipelines()
    p.shutdown()


@pytest.fixture
def span_exporter(prov):
    return prov.exporter


@pytest.fixture
def tracer_provider(prov):
    return prov.tracer_provider


@pytest.fixture
def metric_reader(prov):
    return prov.reader


@pytest.fixture
def meter_provider(prov):
    return prov.meter_provider


@pytest.fixture
def observed_settings(store_path):
    return {"store": {"path": str(store_path)}}


@pytest.fixture
def observe_engine(prov, observed_settings):
    def _observe(inner, **overrides):
        return prov.observe(inner, **dict(observed_settings, **overrides))

    return _observe


@pytest.fixture
def finished_spans(prov):
    def _spans():
        return prov.spans(timeout=10.0)

    return _spans


@pytest.fixture
def metric_points(prov):
    def _points(name, flush=True):
        if flush:
            prov.flush(10.0)
        return prov.by_attributes(name)

    return _points


@pytest.fixture
def webhook():
    hook = WebhookReceiver()
    yield hook
    hook.stop()


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

"""The pipeline and its registry: one per process configuration, providers per signal,
nothing started when disabled, ``unobserve()``, and a plugin ``register()`` that never raises.

Each test here failed before the re-seam that introduced ``observed_engine.pipeline``.
"""

from __future__ import annotations

import logging
import threading
import time

from support.engines import NarrowEngine
from support.engines import agent_transcript as transcript
from support.otel import Providers, metrics
from support.otlp_receiver import OtlpReceiver
from support.paths import TESTS
from support.servers import free_port, scrape

import observed_engine
from observed_engine import REGISTRY, Registry, is_observed, observe, unobserve
from observed_engine.api import pipeline_of


def _observed_threads():
    return sorted(t.name for t in threading.enumerate() if t.name.startswith("observed-engine"))


def test_a_tracer_provider_alone_keeps_the_builtin_prometheus_metrics(store_path):
    """Passing only a tracer provider used to switch the built-in exporters off for both signals."""
    port = free_port()
    providers = Providers()
    spans = providers.exporter
    engine = observe(NarrowEngine(), tracer_provider=providers.tracer_provider,
                     settings={"prometheus": {"enabled": True, "port": port}, "store": {"path": str(store_path)}})
    engine.should_compress(10)
    assert observed_engine.flush(5.0)
    assert "hermes_context_engine_hook_calls_total" in scrape(port)       # metrics: built from settings
    assert [s.name for s in spans.get_finished_spans()] == ["context_engine.should_compress"]   # spans: ours
    assert pipeline_of(engine).built.tracer_provider is None


def test_a_meter_provider_alone_keeps_the_builtin_otlp_spans(store_path):
    providers = Providers()
    with OtlpReceiver(grpc_enabled=False) as receiver:
        engine = observe(NarrowEngine(), meter_provider=providers.meter_provider, settings={
            "otlp": {"enabled": True, "protocol": "http/protobuf", "endpoint": receiver.http_endpoint},
            "store": {"path": str(store_path)}})
        engine.compress(transcript(10))
        assert observed_engine.flush(10.0)
        deadline = time.monotonic() + 10
        while "context_engine.compress" not in receiver.span_names() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "context_engine.compress" in receiver.span_names()           # spans: built from settings
    names = {m.name for m in metrics(providers.reader)}
    assert "hermes.context_engine.hook.calls" in names                      # metrics: ours
    assert pipeline_of(engine).built.meter_provider is None


def test_engines_differing_only_in_name_share_one_pipeline(store_path, caplog):
    """The per-engine keys (name, inner) used to be part of the pipeline key: a second store
    writer thread on the same file and a second Prometheus server that failed to bind."""
    port = free_port()
    common = {"prometheus": {"enabled": True, "port": port}, "store": {"path": str(store_path)}}
    with caplog.at_level(logging.WARNING, logger="observed_engine"):
        first = observe(NarrowEngine(), settings={**common, "name": "observed"})
        second = observe(NarrowEngine(), settings={**common, "name": "other", "inner": "lcm"})
    assert pipeline_of(first) is pipeline_of(second)
    assert len(REGISTRY.pipelines()) == 1
    assert _observed_threads().count("observed-engine-store") == 1
    assert not [r for r in caplog.records if "cannot listen" in r.getMessage()]
    assert first.name == "observed" and second.name == "other"               # the names stay per engine
    first.should_compress(1)
    second.should_compress(2)
    assert observed_engine.flush(5.0)
    assert 'hook="should_compress"' in scrape(port)


def test_disabled_starts_no_thread(store_path):
    before = _observed_threads()
    engine = observe(NarrowEngine(), settings={"enabled": False, "store": {"path": str(store_path)}})
    engine.should_compress(1)
    engine.compress(transcript(10))
    assert observed_engine.flush(1.0)
    assert _observed_threads() == before
    assert not store_path.exists()


def test_a_registry_of_its_own_keeps_its_pipelines(store_path):
    registry = Registry()
    engine = observe(NarrowEngine(), settings={"store": {"path": str(store_path)}}, registry=registry)
    assert pipeline_of(engine) in registry.pipelines()
    assert pipeline_of(engine) not in REGISTRY.pipelines()
    engine.should_compress(1)
    assert registry.flush(5.0)
    registry.shutdown(5.0)
    assert registry.pipelines() == []


def test_unobserve_puts_the_engine_back_in_its_class(observe_engine, finished_spans):
    inner = NarrowEngine()
    engine = observe_engine(inner)
    copy_made_while_observed = engine.clone_for_agent() if hasattr(engine, "clone_for_agent") else None
    pipeline = pipeline_of(engine)
    engine.should_compress(1)
    assert unobserve(engine) is inner and type(inner) is NarrowEngine and not is_observed(inner)
    assert inner not in pipeline.live_engines()
    inner.should_compress(2)
    inner.compress(transcript(10))
    names = [s.name for s in finished_spans()]
    assert names == ["context_engine.should_compress"]                  # only the call made while observed
    assert unobserve(inner) is inner                                      # a no-op now
    if copy_made_while_observed is not None:
        assert is_observed(copy_made_while_observed)
    assert is_observed(observe_engine(inner))                              # and it can be observed again


def test_register_never_raises_when_hermes_refuses_the_engine(caplog):
    from observed_engine import hermes_plugin

    class RefusingContext:
        def register_context_engine(self, engine):
            raise TypeError("not a ContextEngine")

    with caplog.at_level(logging.ERROR, logger="observed_engine.plugin"):
        hermes_plugin.register(RefusingContext())            # used to raise out of register()
    assert any("refused the observed engine" in r.getMessage() for r in caplog.records)


def test_with_the_default_settings_the_otel_sdk_is_never_imported(tmp_path):
    """Every ``hermes -z`` one-shot paid the SDK's import (55-85 ms of CPU) although the defaults
    (store only) build no exporter; a setting that asks for one still gets it."""
    import subprocess
    import sys

    code = (
        "import sys; sys.path.insert(0, %r)\n"  # noqa: UP031  (a program text with %r paths)
        "import observed_engine\n"
        "from observed_engine import observe\n"
        "from support.engines import NarrowEngine\n"
        "e = observe(NarrowEngine(), settings={'store': {'path': %r}})\n"
        "e.should_compress(1); e.on_session_end('s', [])\n"
        "assert observed_engine.flush(10.0)\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry.sdk')))\n"
        "observe(NarrowEngine(), settings={'store': False, 'prometheus': {'enabled': True, 'port': %d}})\n"
        "print('opentelemetry.sdk.metrics' in sys.modules)\n"
    ) % (str(TESTS), str(tmp_path / "s.sqlite"), free_port())
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True,
                         timeout=120).stdout.splitlines()
    assert out == ["[]", "True"], out


def test_a_failing_registry_cleanup_is_counted_and_said_once(observe_engine, metric_points, caplog, monkeypatch):
    """The pipeline's own bookkeeping when its last engine goes (``registry.engine_gone``) and the
    watchdog's deadline event never raise; before, a failure there was counted but never said."""
    from observed_engine import failsafe

    failsafe.forget_logged()
    engine = observe_engine(NarrowEngine())
    telemetry = pipeline_of(engine)

    def broken(_pipeline):
        raise RuntimeError("registry bookkeeping broke")

    monkeypatch.setattr(telemetry.registry, "engine_gone", broken)
    with caplog.at_level(logging.WARNING, logger="observed_engine"):
        for _ in range(3):
            telemetry.forget_engine(engine)
            telemetry.register_engine(engine)
        telemetry.forget_engine(engine)
    said = [r for r in caplog.records if "registry bookkeeping broke" in r.getMessage()]
    assert len(said) == 1 and "pipeline" in said[0].getMessage(), [r.getMessage() for r in caplog.records]
    errors = metric_points("hermes.context_engine.telemetry_errors")
    assert errors.get(frozenset({("component", "pipeline")})) == 4, errors

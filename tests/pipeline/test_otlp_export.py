"""OTLP export over gRPC and HTTP/protobuf to a real receiver on 127.0.0.1, and dead endpoints.

The receiver (tests/support/otlp_receiver.py) decodes what arrives with opentelemetry-proto.
Dead endpoints: a socket that accepts and never answers (black hole) and a refused port.
"""

from __future__ import annotations

import logging
import os
import socket
import statistics
import subprocess
import sys
import threading

import pytest
from prometheus_client.parser import text_string_to_metric_families
from support.engines import ScriptedEngine, transcript
from support.latency import ReceiverProcess, interleaved
from support.otlp_receiver import OtlpReceiver
from support.paths import TESTS
from support.servers import BlackHole, free_port, http_get, refused_port, wait_until

import observed_engine
from observed_engine import observe

PROTOCOLS = ["grpc", "http/protobuf"]
N_CALLS = 2500          # per round; 4 interleaved rounds per engine (+2000 warm-up, +500 per round)
OTEL_ENV = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES",
            "OTEL_EXPORTER_OTLP_COMPRESSION")


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    for name in OTEL_ENV:
        monkeypatch.delenv(name, raising=False)
    yield
    observed_engine.shutdown(1.0)      # dead exporters: do not wait for their last export


@pytest.fixture
def receiver():
    rx = OtlpReceiver().start()
    yield rx
    observed_engine.shutdown(2.0)      # before the receiver goes: no last export into a closed port
    rx.stop()


@pytest.fixture
def thread_exceptions(monkeypatch):
    """Exceptions escaping any thread (exporter, worker, watchdog) during the test."""
    seen = []
    monkeypatch.setattr(threading, "excepthook", lambda args: seen.append(args.exc_value))
    return seen


def drive(eng):
    eng.on_session_start("s-otlp", platform="cli")
    for t in (10, 20, 60_000):
        eng.should_compress(t)
    eng.compress(transcript(10), current_tokens=60_000)
    eng.handle_tool_call("ctx_search", {"q": "x"}, messages=[])
    eng.update_from_response({"prompt_tokens": 1500, "completion_tokens": 20, "total_tokens": 1520})


def check_delivery(rx, transport, engine="otlp_engine"):
    assert rx.wait_for(lambda: len(rx.spans_named("context_engine.should_compress")) == 3, 10), rx.span_names()
    assert rx.wait_for(lambda: rx.latest_value("hermes.context_engine.hook.calls", hook="should_compress") == 3,
                       10), rx.metric_names()
    names = rx.span_names()
    assert {"context_engine.on_session_start", "context_engine.should_compress", "context_engine.compress",
            "context_engine.update_from_response", "execute_tool ctx_search"} <= names
    assert all(n.startswith("context_engine.") or n.startswith("execute_tool ") for n in names)
    for span in rx.spans:
        assert span.transport == transport
        assert span.attributes["hermes.context_engine.name"] == engine
        assert span.attributes["gen_ai.conversation.id"] == "s-otlp"
        assert span.resource["service.name"] == "hermes-agent"
        assert span.resource["service.instance.id"] == f"{socket.gethostname()}-{os.getpid()}"
    [comp] = rx.spans_named("context_engine.compress")
    assert comp.attributes["hermes.context.compress.outcome"] == "compressed"
    assert comp.attributes["hermes.context.messages.before"] == 11
    [tool] = rx.spans_named("execute_tool ctx_search")
    assert tool.attributes["gen_ai.operation.name"] == "execute_tool"
    assert tool.attributes["gen_ai.tool.name"] == "ctx_search"

    metric_names = rx.metric_names()
    assert {"hermes.context_engine.hook.calls", "hermes.context_engine.hook.duration",
            "hermes.context.compressions", "hermes.context.window_tokens",
            "hermes.context_engine.usage_tokens"} <= metric_names
    assert all(n.startswith("hermes.context") for n in metric_names), metric_names
    assert rx.latest_value("hermes.context.compressions", engine=engine, outcome="compressed") == 1
    assert rx.latest_value("hermes.context_engine.usage_tokens", engine=engine, token_type="prompt") == 1500
    assert rx.latest_value("hermes.context.window_tokens", engine=engine) == 100_000
    assert rx.latest_value("hermes.context_engine.hook.duration", engine=engine, hook="should_compress")[0] == 3
    for m in rx.metrics:
        assert m.transport == transport
        assert m.resource["service.name"] == "hermes-agent"
        assert m.resource["service.instance.id"] == f"{socket.gethostname()}-{os.getpid()}"


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_spans_and_metrics_arrive_over_the_configured_protocol(receiver, protocol):
    endpoint = receiver.grpc_endpoint if protocol == "grpc" else receiver.http_endpoint
    eng = observe(ScriptedEngine("otlp_engine"), settings={
        "otlp": {"enabled": True, "protocol": protocol, "endpoint": endpoint, "export_interval_seconds": 0.5},
        "store": {"enabled": False}})
    drive(eng)
    assert observed_engine.flush(10)
    check_delivery(receiver, "grpc" if protocol == "grpc" else "http")
    other = "http" if protocol == "grpc" else "grpc"
    assert receiver.requests[f"{other}_traces"] == receiver.requests[f"{other}_metrics"] == 0
    # periodic export (0.5 s) keeps the metrics coming without any flush
    before = receiver.requests[f"{'grpc' if protocol == 'grpc' else 'http'}_metrics"]
    assert receiver.wait_for(
        lambda: receiver.requests[f"{'grpc' if protocol == 'grpc' else 'http'}_metrics"] >= before + 2, 5)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_standard_env_vars_turn_otlp_on(receiver, monkeypatch, protocol):
    endpoint = receiver.grpc_endpoint if protocol == "grpc" else receiver.http_endpoint
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
    eng = observe(ScriptedEngine("otlp_engine"), settings={"store": {"enabled": False}})   # no otlp section
    drive(eng)
    assert observed_engine.flush(10)
    check_delivery(receiver, "grpc" if protocol == "grpc" else "http")


def test_otel_service_name_env_names_the_service(receiver, monkeypatch):
    monkeypatch.setenv("OTEL_SERVICE_NAME", "hermes-gateway")
    eng = observe(ScriptedEngine("named"), settings={
        "otlp": {"enabled": True, "protocol": "grpc", "endpoint": receiver.grpc_endpoint},
        "store": {"enabled": False}})
    eng.should_compress(1)
    assert observed_engine.flush(10)
    assert receiver.wait_for(lambda: receiver.spans, 10)
    assert {s.resource["service.name"] for s in receiver.spans} == {"hermes-gateway"}


# -- dead endpoints ---------------------------------------------------------------------------------


def own_counters(port):
    errors, dropped = {}, {}
    for fam in text_string_to_metric_families(http_get(f"http://127.0.0.1:{port}/metrics")):
        for s in fam.samples:
            if s.name == "hermes_context_engine_telemetry_errors_total":
                errors[s.labels["component"]] = s.value
            elif s.name == "hermes_context_engine_telemetry_dropped_total":
                dropped[s.labels["signal"]] = s.value
    return errors, dropped


@pytest.fixture
def live_receiver_process():
    proc = ReceiverProcess()
    yield proc
    observed_engine.shutdown(1.0)
    proc.stop()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_dead_endpoints_add_no_hook_latency_and_failures_are_counted(
        protocol, live_receiver_process, caplog, thread_exceptions):
    """Three pipelines side by side: OTLP to a live receiver (another process), to a black hole,
    and to a refused port; hook latency measured in interleaved rounds."""
    caplog.set_level(logging.WARNING)
    hole = BlackHole()
    try:
        endpoints = {"normal": live_receiver_process.endpoint(protocol),
                     "blackhole": f"http://127.0.0.1:{hole.port}",
                     "refused": f"http://127.0.0.1:{refused_port()}"}
        ports = {name: free_port() for name in endpoints}
        engines = {
            name: observe(ScriptedEngine(name), settings={
                "store": {"enabled": False}, "prometheus": {"enabled": True, "port": ports[name]},
                "otlp": {"enabled": True, "protocol": protocol, "endpoint": endpoint,
                         "export_interval_seconds": 0.5, "timeout_seconds": 1}})
            for name, endpoint in endpoints.items()
        }
        # the dead exporters are stuck / failing before we measure
        for eng in engines.values():
            for i in range(2000):
                assert eng.should_compress(i) is False
        for dead in ("blackhole", "refused"):
            assert wait_until(lambda: own_counters(ports[dead])[0], 8, 0.1), f"{dead}: no export failure counted"  # noqa: B023

        samples = interleaved(engines, rounds=4, n=N_CALLS)
        score = {k: statistics.mean(statistics.median(v[i:i + N_CALLS]) for i in range(0, len(v), N_CALLS))
                 for k, v in samples.items()}
        for dead in ("blackhole", "refused"):
            assert score[dead] <= 1.5 * score["normal"] + 2000, score     # ns

        # every hook returned normally, nothing escaped a thread
        for eng in engines.values():
            assert len(eng.compress(transcript(10))) == 2
        assert thread_exceptions == []

        # failures are counted; logged once per exporter however often they repeat
        def repeated(port):
            errors = own_counters(port)[0]
            return errors.get("exporter_otlp_traces", 0) >= 2 and errors.get("exporter_otlp_metrics", 0) >= 2
        for dead in ("blackhole", "refused"):
            assert wait_until(lambda: repeated(ports[dead]), 10, 0.2), own_counters(ports[dead])  # noqa: B023
            errors, _ = own_counters(ports[dead])
            assert set(errors) <= {"exporter_otlp_traces", "exporter_otlp_metrics"}, errors
        # exports into the black hole hang for their full timeout: the bounded span queue overflows
        assert own_counters(ports["blackhole"])[1].get("span", 0) > 0
        # the healthy pipeline next to them: no error, nothing dropped
        assert own_counters(ports["normal"]) == ({}, {})
        ours = [r.getMessage() for r in caplog.records if r.name.startswith("observed_engine")]
        for component in ("exporter_otlp_traces", "exporter_otlp_metrics"):
            assert sum(component in m for m in ours) == 2, ours          # once per dead pipeline
        assert sum("span export queue full" in m for m in ours) in (1, 2), ours
    finally:
        hole.close()


def test_exit_delivers_pending_telemetry_without_bogus_errors(receiver, tmp_path):
    """At interpreter exit the pending spans/metrics are exported before the providers shut down."""
    script = tmp_path / "exit_probe.py"
    script.write_text(
        "import sys, logging\n"
        "logging.basicConfig(level=logging.WARNING)\n"
        f"sys.path.insert(0, {str(TESTS)!r})\n"
        "from observed_engine import observe\n"
        "from support.engines import ScriptedEngine\n"
        "eng = observe(ScriptedEngine('exiting'), settings={'otlp': {'enabled': True, 'protocol': 'grpc', "
        f"'endpoint': {receiver.grpc_endpoint!r}, 'export_interval_seconds': 60}}, 'store': {{'enabled': False}}}})\n"
        "for i in range(3):\n"
        "    eng.should_compress(i)\n"
    )
    env = dict(os.environ)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 0, proc.stderr
    assert len(receiver.spans_named("context_engine.should_compress")) == 3
    assert receiver.latest_value("hermes.context_engine.hook.calls", engine="exiting", hook="should_compress") == 3
    assert "export failed" not in proc.stderr and "already shutdown" not in proc.stderr, proc.stderr

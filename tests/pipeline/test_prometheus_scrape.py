"""Prometheus ``/metrics`` from ``observe()`` (providers built from settings), and a real
Prometheus server scraping it and answering PromQL."""

from __future__ import annotations

import logging
import socket

import pytest
from prometheus_client.parser import text_string_to_metric_families
from support.engines import ScriptedEngine, SelectingEngine, transcript
from support.servers import PrometheusServer, free_port, http_get

import observed_engine
from observed_engine import observe
from observed_engine.capture import observed_meta
from observed_engine.contract import catalogue
from observed_engine.settings import PrometheusSettings
from observed_engine.tokens import TokenCounter

N_SHOULD = 7
DEADLINE = 30.0
DRIVEN = {
    "hook_calls", "hook_duration", "prompt_tokens", "threshold_tokens", "window_tokens", "usage_ratio",
    "usage_tokens", "compressions", "compression_duration", "compression_tokens", "compression_messages",
    "compression_in_flight", "compression_oldest_age", "compression_deadline", "compression_timeouts",
    "fail_open", "selections", "cache_prefix_lost", "bad_input", "telemetry_errors", "telemetry_dropped",
}


@pytest.fixture(autouse=True)
def _shutdown_pipelines():
    yield
    observed_engine.shutdown(5.0)


def prom_settings(port, **extra):
    return {"prometheus": {"enabled": True, "port": port}, "store": {"enabled": False},
            "compress_timeout_seconds": DEADLINE, **extra}


def scrape(port):
    """{sample name: [(labels, value)]} from GET /metrics (otel_scope_* labels dropped)."""
    out = {}
    for family in text_string_to_metric_families(http_get(f"http://127.0.0.1:{port}/metrics")):
        for s in family.samples:
            labels = {k: v for k, v in s.labels.items() if not k.startswith("otel_scope_")}
            out.setdefault(s.name, []).append((labels, s.value))
    return out


def sample(samples, name, **labels):
    found = [v for lab, v in samples.get(name, []) if lab == labels]
    assert len(found) <= 1, (name, labels, samples.get(name))
    return found[0] if found else None


class BrokenGaugeEngine(ScriptedEngine):
    """Its last_prompt_tokens is a property that fails when called. The gauges run on the scrape
    thread and never run engine code (issue 13.8: a property guarded by the lock compress() holds
    blocked the scrape): the engine is left out of the gauges, the property is never called."""

    property_calls = 0

    @property
    def last_prompt_tokens(self):
        type(self).property_calls += 1
        raise RuntimeError("state unavailable")

    @last_prompt_tokens.setter
    def last_prompt_tokens(self, value):
        pass


def drive_session(eng):
    """A session touching every metric of the catalogue; returns the expected exact values."""
    eng.on_session_start("s-prom", platform="cli")
    eng.update_from_response({"prompt_tokens": 40_000, "completion_tokens": 500, "total_tokens": 40_500,
                              "cache_read_tokens": 1000})
    eng.update_from_response({"prompt_tokens": "x", "completion_tokens": 100})      # bad input
    eng.last_prompt_tokens = 40_000
    for t in range(N_SHOULD):
        eng.should_compress(t)
    eng.compress(transcript(10), current_tokens=40_000)
    request = transcript(6)
    sel1 = request[:4] + [request[-1]]
    sel2 = request[:2] + [request[-1]]
    answers = iter([sel1, sel2, []])
    eng.behaviour["select_context"] = lambda *a, **k: next(answers)
    for _ in range(3):
        eng.select_context(request, conversation_messages=request, incoming_message=request[-1],
                           budget_tokens=10_000)
    eng.record_timeout_failure("no progress", failure_kind="stalled")
    lost = TokenCounter("auto").count_messages_from(sel1, 2)
    assert lost > 0
    return {"lost": lost}


def test_metrics_endpoint_serves_the_catalogue_names_with_exact_values():
    port = free_port()
    settings = prom_settings(port)
    eng = observe(SelectingEngine("scraped"), settings=settings)
    broken = observe(BrokenGaugeEngine("broken_gauge"), settings=settings)
    telemetry = observed_meta(eng).pipeline
    assert observed_meta(broken).pipeline is telemetry
    assert telemetry.built.prometheus_address == ("127.0.0.1", port)
    expected = drive_session(eng)
    # The recorder's queue drop path: counted through the same accounting the recorder uses.
    telemetry.count_drop("span", 3)
    # ... and an own failure, through the accounting every component uses
    telemetry.count_error("worker", 2)
    assert observed_engine.flush(10)
    calls_before = BrokenGaugeEngine.property_calls         # observe() and the hooks may read it, as bare
    scrape(port)                                            # a collection
    s = scrape(port)

    assert sample(s, "hermes_context_engine_hook_calls_total", engine="scraped", hook="should_compress",
                  outcome="ok") == N_SHOULD
    assert sample(s, "hermes_context_engine_hook_calls_total", engine="scraped", hook="update_from_response",
                  outcome="ok") == 2
    assert sample(s, "hermes_context_engine_hook_duration_seconds_count", engine="scraped",
                  hook="should_compress") == N_SHOULD
    assert sample(s, "hermes_context_engine_usage_tokens_total", engine="scraped", token_type="prompt") == 40_000
    assert sample(s, "hermes_context_engine_usage_tokens_total", engine="scraped", token_type="completion") == 600
    assert sample(s, "hermes_context_engine_usage_tokens_total", engine="scraped", token_type="cache_read") == 1000
    assert sample(s, "hermes_context_engine_bad_input_total", engine="scraped", hook="update_from_response",
                  kind="usage_field_prompt_tokens_str") == 1
    assert sample(s, "hermes_context_compressions_total", engine="scraped", outcome="compressed") == 1
    assert sample(s, "hermes_context_compression_duration_seconds_count", engine="scraped") == 1
    assert sample(s, "hermes_context_compression_duration_seconds_bucket", engine="scraped", le="600.0") == 1
    assert sample(s, "hermes_context_compression_messages_sum", engine="scraped", stage="before") == 11
    assert sample(s, "hermes_context_compression_messages_sum", engine="scraped", stage="after") == 2
    assert sample(s, "hermes_context_compression_tokens_count", engine="scraped", stage="after") == 1
    assert sample(s, "hermes_context_prompt_tokens", engine="scraped") == 40_000
    assert sample(s, "hermes_context_threshold_tokens", engine="scraped") == 50_000
    assert sample(s, "hermes_context_window_tokens", engine="scraped") == 100_000
    assert sample(s, "hermes_context_usage_ratio", engine="scraped") == pytest.approx(0.4)
    assert sample(s, "hermes_context_compression_in_flight", engine="scraped") == 0
    assert sample(s, "hermes_context_compression_oldest_in_flight_age_seconds", engine="scraped") == 0
    assert sample(s, "hermes_context_compression_deadline_seconds", engine="scraped") == DEADLINE
    assert sample(s, "hermes_context_compression_timeouts_total", engine="scraped", kind="host_reported") == 1
    assert sample(s, "hermes_context_selections_total", engine="scraped", result="changed_selection") == 2
    assert sample(s, "hermes_context_selections_total", engine="scraped", result="fail_open") == 1
    assert sample(s, "hermes_context_engine_fail_open_total", engine="scraped", hook="select_context",
                  reason="invalid_return") == 1
    assert sample(s, "hermes_context_selection_cache_prefix_lost_tokens_total", engine="scraped") == expected["lost"]
    assert sample(s, "hermes_context_engine_telemetry_dropped_total", signal="span") == 3
    # the scrapes ran no engine code: the property was not called, nothing failed
    assert BrokenGaugeEngine.property_calls == calls_before
    assert sample(s, "hermes_context_engine_telemetry_errors_total", component="gauge") is None
    assert sample(s, "hermes_context_engine_telemetry_errors_total", component="worker") == 2
    # the engine whose state is a property is left out of the gauges; the healthy one is not affected
    assert sample(s, "hermes_context_window_tokens", engine="broken_gauge") is None

    # The exposed names are exactly the catalogue's prom_name (+ _bucket/_sum/_count for
    # histograms) for every metric that has data: the OTel -> Prometheus translation (dots,
    # unit suffix, _total) is what the catalogue says. This session gives data to every
    # metric the catalogue had when it was written (DRIVEN); a later addition is checked by
    # the subset test until the session drives it too.
    exposed = {name for name in s if name.startswith("hermes_") and not name.endswith("_created")}
    wanted = set()
    for spec in catalogue.METRICS:
        if spec.kind == catalogue.HISTOGRAM:
            wanted |= {spec.prom_name + suffix for suffix in ("_bucket", "_sum", "_count")}
        else:
            wanted.add(spec.prom_name)
    assert exposed <= wanted, exposed - wanted
    assert exposed <= catalogue.prometheus_series_names()
    for spec in catalogue.METRICS:
        name = spec.prom_name + ("_count" if spec.kind == catalogue.HISTOGRAM else "")
        if spec.key in DRIVEN:
            assert name in exposed, spec
        for labels, _v in s.get(name, []):
            assert set(labels) == set(spec.labels), (spec.prom_name, labels)
    assert {spec.key for spec in catalogue.METRICS} >= DRIVEN
    # process identity on target_info
    [(info, _)] = s["target_info"]
    assert info["service_name"] and info["service_instance_id"]


def test_flush_does_not_duplicate_series_on_the_next_scrape():
    """observed_engine.flush() force-flushes the meter provider, which makes every reader collect;
    the Prometheus reader must not queue that collection for the next scrape (duplicated series
    with stale values, which Prometheus rejects as duplicate samples)."""
    port = free_port()
    eng = observe(ScriptedEngine("flushed"), settings=prom_settings(port))
    for i in range(3):
        eng.should_compress(i)
        assert observed_engine.flush(10)
    text = http_get(f"http://127.0.0.1:{port}/metrics")
    series = [line.rsplit(" ", 1)[0] for line in text.splitlines() if line and not line.startswith("#")]
    duplicated = sorted({x for x in series if series.count(x) > 1})
    assert duplicated == []
    assert sample(scrape(port), "hermes_context_engine_hook_calls_total", engine="flushed",
                  hook="should_compress", outcome="ok") == 3


def test_busy_port_logs_one_warning_and_the_engine_goes_on(caplog):
    caplog.set_level(logging.WARNING, logger="observed_engine")
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen(1)
        port = squatter.getsockname()[1]
        settings = prom_settings(port)
        eng = observe(SelectingEngine("squatted"), settings=settings)
        other = observe(ScriptedEngine("squatted2"), settings=settings)
        assert [eng.should_compress(t) for t in (1, 60_000)] == [False, True]
        assert len(other.compress(transcript(10))) == 2
        assert observed_engine.flush(5)
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    assert str(port) in warnings[0].getMessage() and "cannot listen" in warnings[0].getMessage()
    assert observed_meta(eng).pipeline.built.prometheus_address is None


def _non_loopback_ip():
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("10.255.255.255", 1))       # no packet is sent; picks the outgoing interface
            ip = s.getsockname()[0]
    except OSError:
        return None
    return None if ip.startswith("127.") else ip


def test_default_bind_host_is_loopback():
    assert PrometheusSettings().host == "127.0.0.1" and PrometheusSettings().port == 9464
    port = free_port()
    eng = observe(ScriptedEngine("bound"), settings={"prometheus": {"enabled": True, "port": port},
                                                      "store": {"enabled": False}})
    assert observed_meta(eng).pipeline.built.prometheus_address == ("127.0.0.1", port)
    assert "hermes_context_window_tokens" in http_get(f"http://127.0.0.1:{port}/metrics")
    ip = _non_loopback_ip()
    if ip is not None:
        with pytest.raises(OSError):
            with socket.create_connection((ip, port), timeout=2):
                pass


@pytest.mark.prometheus
def test_real_prometheus_scrapes_and_answers_promql(tmp_path, request):
    port = free_port()
    eng = observe(SelectingEngine("promql"), settings=prom_settings(port))
    expected = drive_session(eng)
    assert observed_engine.flush(10)

    prom = PrometheusServer(tmp_path / "prometheus", [f"127.0.0.1:{port}"])
    request.addfinalizer(prom.stop)
    prom.start()

    def q(expr, value):
        got = prom.wait_value(expr, value, timeout=30)
        assert got == value, f"{expr}: {got} != {value}\n{prom.targets_health()}\n{prom.log_tail()}"

    q('sum(hermes_context_engine_hook_calls_total{hook="should_compress"})', N_SHOULD)
    q('up{job="hermes"}', 1)
    q('sum by (token_type) (hermes_context_engine_usage_tokens_total{token_type="completion"})', 600)
    q('hermes_context_compressions_total{engine="promql",outcome="compressed"}', 1)
    q('sum(hermes_context_compression_duration_seconds_count)', 1)
    q('hermes_context_window_tokens{engine="promql"}', 100_000)
    q('hermes_context_usage_ratio{engine="promql"}', 0.4)
    q('hermes_context_selection_cache_prefix_lost_tokens_total', expected["lost"])
    q('sum(hermes_context_engine_fail_open_total{reason="invalid_return"})', 1)
    q('hermes_context_compression_timeouts_total{kind="host_reported"}', 1)

    # more calls show up in the next scrapes
    for t in range(5):
        eng.should_compress(t)
    assert observed_engine.flush(10)
    q('sum(hermes_context_engine_hook_calls_total{hook="should_compress"})', N_SHOULD + 5)
    # and a host write to the engine's state reaches the gauge without any hook call
    eng.last_prompt_tokens = -1
    q('hermes_context_prompt_tokens{engine="promql"}', 0)
    # no scrape was rejected for duplicate series (flush() above made the reader collect)
    own = {s.name: s.value for f in text_string_to_metric_families(http_get(prom.url + "/metrics"))
           for s in f.samples}
    assert own["prometheus_target_scrapes_sample_duplicate_timestamp_total"] == 0

"""End to end for the alerts test_alerting.py does not drive: HermesContextNearWindow,
HermesContextCompressionErrors, HermesContextSummaryFailing and HermesObservedTelemetryErrors.

Real engines wrapped by ``observe()`` export on their own /metrics (127.0.0.1) -> a real Prometheus
evaluates the SHIPPED rules -> a real Alertmanager (shipped routing, timings shortened) -> a webhook
on 127.0.0.1. The only change to alerts.yml is the ``for:`` of the two ``for: 5m`` rules (3 s here);
the test asserts the copy differs from the shipped file in those two lines only, so the expressions
under test are exactly the shipped ones (HermesContextSummaryFailing has ``for: 0m``: nothing to
shorten, and the test checks it stays so).

Five pipelines in this process, each with its own /metrics port (five scrape targets, i.e.
five ``instance`` values, in one Prometheus), driven at the same time:

* ``window``: two built-in ContextCompressors (same engine label ``compressor``: the gauge is the
  instance closest to its window), one fed a prompt of 190,000 of its 200,000 tokens the way the
  host does (``update_from_response``) -> NearWindow fires at 95 %; then it compresses and the
  next response reports 30,000 tokens -> the alert resolves. Must not fire: ``roomy`` (40 %) and
  ``edge`` (exactly 90 %: the rule says ``> 0.9``).
* ``errors``: compress() calls that raise. Fires: ``raising`` (support/engines.py RaisingEngine,
  3/3 errors) and ``flaky`` (2 errors in 4 calls: exactly the rule's minimum of 2). Must not fire:
  ``rare`` (2 errors in 12 calls, 17 % <= 20 %), ``single`` (1 error: 100 % but fewer than 2) and
  ``healthy`` (successes only); the window pipeline's successful real compression neither.
* ``telemetry``: the store path lies under a regular file, so every store write fails (counted in
  hermes_context_engine_telemetry_errors_total{component="store"}) and, with a 20-row bound, rows
  are dropped (hermes_context_engine_telemetry_dropped_total{signal="store_row"}): both branches
  of HermesObservedTelemetryErrors fire, for that instance only.
* ``summary``: three real built-in ContextCompressors, each compacted by the host's own
  ``compress_context`` (0.19.0) while ``agent.context_compressor.call_llm`` (the only fake) raises:
  a 401 -> the compressor aborts (kind=aborted, cause=auth, severity critical); a ConnectionError
  -> aborted/network (warning); a RuntimeError -> it drops the middle turns behind a fallback
  summary (fallback_summary/other, warning). compress() returns normally in all three, so
  HermesContextSummaryFailing fires three times and HermesContextCompressionErrors never.
  Must not fire: ``summary_ok``, the same compaction with a working summariser (its own
  instance, since every built-in is labelled ``compressor``), nor the window pipeline's compression.

Must-not-fire cases are checked against Prometheus's ALERTS history (not even pending, ever),
after their series were visible for longer than ``for:`` plus a few evaluations, with every rule
evaluating without error (a rule failing to evaluate would make them pass vacuously).
"""

from __future__ import annotations

import re
import time
from datetime import datetime

import pytest
import yaml
from support.builtin import compressor, real_compressor
from support.deploy import ALERT_RULES
from support.engines import EngineError, RaisingEngine, ScriptedEngine, transcript
from support.host import host_compaction, usage
from support.llm import SUMMARY_TEXT, FakeLLM, ProviderError, install_llm
from support.servers import (
    free_port,
    wait_until,
)

import observed_engine
from observed_engine import observe
from observed_engine.capture import observed_meta

pytestmark = pytest.mark.prometheus

FOR_SECONDS = 3
SHORTENED = ("HermesContextNearWindow", "HermesContextCompressionErrors")
NEAR, ERRORS, TELEMETRY = ("HermesContextNearWindow", "HermesContextCompressionErrors",
                           "HermesObservedTelemetryErrors")
SUMMARY = "HermesContextSummaryFailing"
WAIT_S = 60.0


# --------------------------------------------------------------------------- small helpers

def parse_ts(text: str) -> float:
    """RFC 3339 from Prometheus/Alertmanager (nanoseconds allowed) -> epoch seconds."""
    m = re.fullmatch(r"(.*T\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)", text)
    assert m, text
    base = datetime.fromisoformat(m.group(1) + (m.group(3).replace("Z", "+00:00")))
    return base.timestamp() + float("0." + (m.group(2) or "0"))


def compress_script(*fails: bool):
    """A ScriptedEngine compress behaviour: call i raises when fails[i], else shrinks."""
    outcomes = iter(fails)

    def compress(messages, current_tokens=None):
        if next(outcomes):
            raise RuntimeError("summary model: 401 invalid api key")
        return messages[:1] + messages[-2:]
    return compress


def compress_n(engine, n: int, exc_type=RuntimeError) -> None:
    for _ in range(n):
        try:
            engine.compress(transcript(10), current_tokens=5_000)
        except exc_type:
            pass


# --------------------------------------------------------------------------- the test

def test_near_window_compression_errors_summary_and_telemetry_errors_reach_the_webhook(alert_stack, tmp_path, webhook,
                                                                                       request, monkeypatch, capsys):
    t_start = time.monotonic()
    shipped = ALERT_RULES.read_text()
    rules = alert_stack.rules(SHORTENED, FOR_SECONDS)

    # -- five pipelines, five /metrics endpoints
    ports = {k: free_port() for k in ("window", "errors", "telemetry", "summary", "summary_ok")}
    instance = {k: f"127.0.0.1:{p}" for k, p in ports.items()}
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a regular file where the store's directory should be")

    def settings(which, **more):
        return dict({"prometheus": {"enabled": True, "port": ports[which]}, "store": {"enabled": False}}, **more)

    def stop_pipelines():
        blocker.unlink(missing_ok=True)     # the store can write again: its close() need not wait out a timeout
        observed_engine.shutdown(2.0)
    request.addfinalizer(stop_pipelines)

    full = observe(real_compressor(monkeypatch), settings=settings("window"))
    light = observe(real_compressor(monkeypatch), settings=settings("window"))
    roomy = observe(ScriptedEngine("roomy", context_length=100_000), settings=settings("window"))
    edge = observe(ScriptedEngine("edge", context_length=100_000), settings=settings("window"))

    raising = observe(RaisingEngine(), settings=settings("errors"))
    flaky = observe(ScriptedEngine("flaky", {"compress": compress_script(False, False, True, True)}),
                    settings=settings("errors"))
    rare = observe(ScriptedEngine("rare", {"compress": compress_script(*[False] * 10, True, True)}),
                   settings=settings("errors"))
    single = observe(ScriptedEngine("single", {"compress": compress_script(True)}), settings=settings("errors"))
    healthy = observe(ScriptedEngine("healthy"), settings=settings("errors"))

    ledger = observe(ScriptedEngine("ledger"), settings=settings(
        "telemetry", store={"path": str(blocker / "telemetry.sqlite")}, queue_size=20))
    ledger_pipeline = observed_meta(ledger).pipeline
    assert ledger_pipeline.store is not None and ledger_pipeline.settings.queue_size == 20

    # summariser error -> what the built-in does -> the alert's (kind, cause, severity)
    failing = {
        "auth": (ProviderError("Error code: 401 - invalid api key", status_code=401),
                 ("aborted", "auth", "critical")),
        "network": (ConnectionError("Connection reset by peer"), ("aborted", "network", "warning")),
        "other": (RuntimeError("upstream exploded (500)"), ("fallback_summary", "other", "warning")),
    }
    summary_engines = {name: observe(compressor(), settings=settings("summary")) for name in failing}
    summary_ok = observe(compressor(), settings=settings("summary_ok"))

    prom = alert_stack.start_prometheus(list(instance.values()), rules)
    t_ready = time.monotonic()
    diagnostics, webhook_alert, rules_api = alert_stack.diagnostics, alert_stack.webhook_alert, alert_stack.loaded_rules

    loaded = rules_api()
    assert set(loaded) == {r["alert"] for g in yaml.safe_load(shipped)["groups"] for r in g["rules"]}
    assert all(loaded[name]["duration"] == FOR_SECONDS for name in SHORTENED), loaded
    assert loaded[SUMMARY]["duration"] == 0, loaded[SUMMARY]   # shipped as is: a for: would need shortening

    def prom_alert(alertname, **labels):
        hits = [a for a in prom.alerts() if a["labels"]["alertname"] == alertname
                and all(a["labels"].get(k) == v for k, v in labels.items())]
        return hits[0] if hits else None

    # -- drive all three scenarios (negatives first: they are visible at least as long as the positives)
    roomy.update_from_response(usage(40_000))
    edge.update_from_response(usage(90_000))
    light.update_from_response(usage(20_000))
    compress_n(healthy, 5)
    compress_n(rare, 10)
    assert observed_engine.flush(5)      # rare: its successes reach /metrics before its errors
    compress_n(rare, 2)
    compress_n(single, 1)
    ok_llm = install_llm(monkeypatch, FakeLLM(SUMMARY_TEXT))
    ok_in, ok_out = host_compaction(summary_ok, "ok")
    assert len(ok_out) < len(ok_in) and ok_llm.calls, "the working summariser must really compress"
    assert not vars(summary_ok)["_last_summary_fallback_used"] and not vars(summary_ok)["_last_compress_aborted"]

    t_summary = time.monotonic()
    for name, (error, (kind, _, _)) in failing.items():
        llm = install_llm(monkeypatch, FakeLLM(SUMMARY_TEXT, error=error))
        messages, out = host_compaction(summary_engines[name], name)
        assert llm.calls, name                                  # the summariser was really asked
        if kind == "aborted":                                   # messages kept, session not rotated
            assert len(out) == len(messages), name
        else:                                                   # middle turns dropped behind a fallback
            assert len(out) < len(messages), name
    install_llm(monkeypatch, FakeLLM(SUMMARY_TEXT))   # as real_compressor() set it, for `full`

    t_near = time.monotonic()
    full.update_from_response(usage(190_000))          # the host, after a response of 190k prompt tokens
    assert full.should_compress(190_000)              # ...that its own engine would compress

    t_errors = time.monotonic()
    compress_n(raising, 3, EngineError)
    compress_n(flaky, 4)

    t_telemetry = time.monotonic()
    for _ in range(5):                  # 50 rows for a store that fails and keeps 20
        for _ in range(10):
            ledger.update_from_response(usage(1_000))
        assert ledger_pipeline.recorder.flush(5)   # not observed_engine.flush(): this store never flushes

    assert len(raising.raised) == 3 and [h for h, *_ in flaky.calls].count("compress") == 4

    # -- the series Prometheus scrapes are what the rules expect
    def value(expr):
        return prom.scalar(expr)

    def negatives_visible():
        return (value(f'hermes_context_usage_ratio{{instance="{instance["window"]}",engine="roomy"}}') == 0.4
                and value(f'hermes_context_usage_ratio{{instance="{instance["window"]}",engine="edge"}}') == 0.9
                and value('hermes_context_compressions_total{engine="rare",outcome="error"}') == 2
                and value('hermes_context_compressions_total{engine="rare",outcome="compressed"}') == 10
                and value('hermes_context_compressions_total{engine="single",outcome="error"}') == 1
                and value('sum(hermes_context_compressions_total{engine="healthy"})') == 5
                and value(f'sum(hermes_context_compressions_total{{instance="{instance["summary_ok"]}"}})') == 1)
    assert wait_until(negatives_visible, 30, 0.25), diagnostics()
    t_negatives_visible = time.monotonic()

    # -- fire: NearWindow (95 %, max of the two same-named compressors)
    assert wait_until(lambda: webhook_alert(NEAR, engine="compressor"), WAIT_S, 0.2), diagnostics()
    near = webhook_alert(NEAR, engine="compressor")
    near_after = near["_received_at"] - t_near
    assert value(f'hermes_context_usage_ratio{{instance="{instance["window"]}",engine="compressor"}}') == 0.95
    assert near["labels"] == {"alertname": NEAR, "job": "hermes", "instance": instance["window"],
                              "engine": "compressor", "severity": "warning"}
    assert "95%" in near["annotations"]["summary"] and instance["window"] in near["annotations"]["summary"]
    near_prom = prom_alert(NEAR, engine="compressor")
    assert near_prom and near_prom["state"] == "firing", diagnostics()
    assert parse_ts(near["startsAt"]) - parse_ts(near_prom["activeAt"]) >= FOR_SECONDS - 0.001, (near, near_prom)

    # -- resolve: the host compresses, the next response is small
    t_down = time.monotonic()
    compacted = full.compress(transcript(60, words=200), current_tokens=190_000)
    assert len(compacted) < 61
    full.update_from_response(usage(30_000))
    assert not full.should_compress(30_000)

    # -- fire: CompressionErrors (raising 100 %, flaky 50 % with exactly 2 errors)
    assert wait_until(lambda: webhook_alert(ERRORS, engine="raising") and webhook_alert(ERRORS, engine="flaky"),
                      WAIT_S, 0.2), diagnostics()
    errors_after = max(webhook_alert(ERRORS, engine=e)["_received_at"] for e in ("raising", "flaky")) - t_errors
    for engine, percent in (("raising", "100%"), ("flaky", "50%")):
        hit = webhook_alert(ERRORS, engine=engine)
        assert hit["labels"] == {"alertname": ERRORS, "job": "hermes", "instance": instance["errors"],
                                 "engine": engine, "severity": "warning"}
        assert hit["annotations"]["summary"].startswith(percent + " of compressions fail"), hit
        firing = prom_alert(ERRORS, engine=engine)
        assert firing and firing["state"] == "firing", diagnostics()
        assert parse_ts(hit["startsAt"]) - parse_ts(firing["activeAt"]) >= FOR_SECONDS - 0.001, (hit, firing)

    # -- fire: TelemetryErrors, both branches (component=store errors, signal=store_row drops)
    assert wait_until(lambda: webhook_alert(TELEMETRY, component="store")
                      and webhook_alert(TELEMETRY, signal="store_row"), WAIT_S, 0.2), diagnostics()
    telemetry_after = webhook_alert(TELEMETRY, component="store")["_received_at"] - t_telemetry
    drops_after = webhook_alert(TELEMETRY, signal="store_row")["_received_at"] - t_telemetry
    store_errors = webhook_alert(TELEMETRY, component="store")
    assert store_errors["labels"] == {"alertname": TELEMETRY, "job": "hermes", "instance": instance["telemetry"],
                                      "component": "store", "severity": "info"}
    assert "(store)" in store_errors["annotations"]["summary"], store_errors
    assert "(store_row)" in webhook_alert(TELEMETRY, signal="store_row")["annotations"]["summary"]
    assert value('hermes_context_engine_telemetry_errors_total{component="store"}') >= 1
    assert value('hermes_context_engine_telemetry_dropped_total{signal="store_row"}') >= 1

    # -- fire: SummaryFailing, one alert per (kind, cause); compress() itself never raised
    def summary_alerts():
        return [webhook_alert(SUMMARY, kind=kind, cause=cause) for _, (kind, cause, _) in failing.values()]
    assert wait_until(lambda: all(summary_alerts()), WAIT_S, 0.2), diagnostics()
    summary_after = max(a["_received_at"] for a in summary_alerts()) - t_summary
    for error, (kind, cause, severity) in failing.values():
        hit = webhook_alert(SUMMARY, kind=kind, cause=cause)
        assert hit["labels"] == {"alertname": SUMMARY, "job": "hermes", "instance": instance["summary"],
                                 "engine": "compressor", "kind": kind, "cause": cause, "severity": severity}, hit
        ann = hit["annotations"]
        assert ann["summary"] == (f"Summary model failing for engine compressor on hermes/{instance['summary']} "
                                  f"({kind}, cause {cause})"), ann
        text = ann["description"]
        assert "{{" not in text and " returned 1 time(s) " in text, text
        assert ("HermesContextNearWindow may follow" in text) == (kind == "aborted"), text
        assert ("quality loss" in text) == (kind == "fallback_summary"), text
        assert {"auth": "credentials, quota/billing and model name", "network": "check connectivity",
                "other": "Failed to generate context summary"}[cause] in text, text
        assert str(error) not in text                       # the provider's text is not exported
        assert value(f'hermes_context_compression_summary_failures_total{{instance="{instance["summary"]}",'
                     f'kind="{kind}",cause="{cause}"}}') == 1
        firing = prom_alert(SUMMARY, kind=kind, cause=cause)
        assert firing and firing["state"] == "firing", diagnostics()
    # the aborted ones read "compressed" (tool results pruned), the fallback one too: no outcome=error
    assert value(f'sum(hermes_context_compressions_total{{instance="{instance["summary"]}",'
                 f'outcome="compressed"}})') == 3

    # -- NearWindow resolves, in Prometheus and at the webhook
    assert wait_until(lambda: webhook_alert(NEAR, status="resolved", engine="compressor"), WAIT_S, 0.2), \
        diagnostics()
    resolved_after = webhook_alert(NEAR, status="resolved", engine="compressor")["_received_at"] - t_down
    assert prom_alert(NEAR) is None, diagnostics()
    assert value(f'hermes_context_usage_ratio{{instance="{instance["window"]}",engine="compressor"}}') == 0.15

    # -- must not fire: never even pending, with every rule evaluating cleanly
    settle = t_negatives_visible + FOR_SECONDS + 3 - time.monotonic()
    if settle > 0:
        time.sleep(settle)

    ever = alert_stack.ever
    assert ever(f'alertname="{NEAR}",engine="compressor"'), "the ALERTS query finds nothing at all"
    assert ever(f'alertname="{NEAR}",engine=~"roomy|edge"') == [], diagnostics()
    assert ever(f'alertname="{ERRORS}",engine=~"rare|single|healthy|compressor"') == [], diagnostics()
    assert ever(f'alertname="{TELEMETRY}",instance!="{instance["telemetry"]}"') == [], diagnostics()
    assert ever(f'alertname="{SUMMARY}",instance!="{instance["summary"]}"') == [], diagnostics()
    assert ever(f'alertname="{ERRORS}",instance="{instance["summary"]}"') == [], diagnostics()
    assert prom.query(f'hermes_context_compression_summary_failures_total{{instance!="{instance["summary"]}"}}') == []
    assert value(f'sum(hermes_context_compressions_total{{instance="{instance["window"]}",'
                 f'engine="compressor",outcome=~"compressed|noop"}})') == 1
    expected = {(NEAR, "compressor"), (ERRORS, "raising"), (ERRORS, "flaky"), (TELEMETRY, None)}
    delivered = {(a["labels"]["alertname"], a["labels"].get("engine"))
                 for a in webhook.alerts(status=None) if a["labels"]["alertname"] in (NEAR, ERRORS, TELEMETRY)}
    assert delivered == expected, diagnostics()
    summaries = {(a["labels"]["instance"], a["labels"]["kind"], a["labels"]["cause"], a["labels"]["severity"])
                 for a in webhook.alerts(SUMMARY, status=None)}
    assert summaries == {(instance["summary"], kind, cause, severity)
                         for _, (kind, cause, severity) in failing.values()}, diagnostics()
    health = {name: (r["health"], r.get("lastError", "")) for name, r in rules_api().items()}
    assert all(h == ("ok", "") for h in health.values()), health

    total = time.monotonic() - t_start
    with capsys.disabled():
        print(f"\n[alerting] NearWindow at the webhook {near_after:.1f}s after the 95% response "
              f"(for: {FOR_SECONDS}s), resolved {resolved_after:.1f}s after usage fell to 15%; "
              f"CompressionErrors {errors_after:.1f}s after the failing calls; TelemetryErrors "
              f"{telemetry_after:.1f}s (store errors) / {drops_after:.1f}s (store_row drops) after the first "
              f"failing write; SummaryFailing (3 alerts) {summary_after:.1f}s after the failing summaries; "
              f"stack up in {t_ready - t_start:.1f}s, whole test {total:.1f}s")

"""End to end for the issue 15 alerts: HermesContextCompressionBlocked, HermesContextCompressionThrash
and HermesContextThresholdDeadZone.

Real engines wrapped by ``observe()`` export on their own /metrics (127.0.0.1) -> a real Prometheus
evaluates the SHIPPED rules -> a real Alertmanager (shipped routing, timings shortened) -> a webhook on
127.0.0.1. The only change to alerts.yml is the ``for:`` of the two rules that wait (Blocked 2m,
DeadZone 5m: 3 s here); the test asserts the copy differs from the shipped file in those lines only.

* ``blocked``: a real built-in ContextCompressor at 85 % of a 100k window, compacted by the host's own
  0.19.0 ``compress_context`` while its summariser answers 401: the built-in aborts and sets its
  summary cooldown; the gauge reads it from the engine's state -> Blocked fires (reason
  summary_cooldown). Must not fire: ``blocked_roomy``, the same failure on another process whose next
  response is at 50 % (blocked, but room left), nor ``full`` at 95 % with nothing blocking.
* ``misc``: ScriptedEngines. ``thrash`` compacts 5 times in 8 responses -> Thrash (too_frequent);
  ``stuck`` runs 3 compress() calls that change nothing -> Thrash (noop_streak); ``calm`` compacts
  5 times in 40 responses -> nothing. ``dead`` has threshold = window (64k) -> DeadZone; ``alive``
  (54.4k of 64k) -> nothing.
"""

from __future__ import annotations

import time

import pytest
from support.builtin import compressor
from support.engines import ScriptedEngine, transcript
from support.host import host_compaction, usage
from support.llm import SUMMARY_TEXT, FakeLLM, ProviderError, install_llm
from support.servers import (
    free_port,
    wait_until,
)

import observed_engine
from observed_engine import observe

pytestmark = pytest.mark.prometheus

FOR_SECONDS = 3
BLOCKED, THRASH, DEAD = ("HermesContextCompressionBlocked", "HermesContextCompressionThrash",
                         "HermesContextThresholdDeadZone")
SHORTENED = (BLOCKED, DEAD)
WAIT_S = 60.0


def test_blocked_thrash_and_dead_zone_alerts_reach_the_webhook(alert_stack, webhook, request, monkeypatch):
    rules = alert_stack.rules(SHORTENED, FOR_SECONDS)

    ports = {k: free_port() for k in ("blocked", "blocked_roomy", "full", "misc")}
    instance = {k: f"127.0.0.1:{p}" for k, p in ports.items()}

    def settings(which):
        return {"prometheus": {"enabled": True, "port": ports[which]}, "store": {"enabled": False}}

    request.addfinalizer(lambda: observed_engine.shutdown(2.0))
    blocked = observe(compressor(), settings=settings("blocked"))
    roomy = observe(compressor(), settings=settings("blocked_roomy"))
    full = observe(compressor(), settings=settings("full"))
    thrash = observe(ScriptedEngine("thrash"), settings=settings("misc"))
    stuck = observe(ScriptedEngine("stuck"), settings=settings("misc"))
    calm = observe(ScriptedEngine("calm"), settings=settings("misc"))
    dead = observe(ScriptedEngine("dead", context_length=64_000, threshold_tokens=64_000), settings=settings("misc"))
    alive = observe(ScriptedEngine("alive", context_length=64_000, threshold_tokens=54_400), settings=settings("misc"))

    prom = alert_stack.start_prometheus(list(instance.values()), rules)
    diagnostics, webhook_alert, ever = alert_stack.diagnostics, alert_stack.webhook_alert, alert_stack.ever

    loaded = alert_stack.loaded_rules()
    assert {BLOCKED, THRASH, DEAD} <= set(loaded)
    assert loaded[BLOCKED]["duration"] == FOR_SECONDS and loaded[DEAD]["duration"] == FOR_SECONDS
    assert loaded[THRASH]["duration"] == 0

    # -- drive: negatives first
    alive.update_from_response(usage(10_000))
    full.update_model(model="gpt-4o", context_length=100_000)
    full.update_from_response(usage(95_000))
    for _ in range(40):
        calm.update_from_response(usage(5_000))
    for _ in range(5):
        calm.compress(transcript(10), current_tokens=5_000)
    install_llm(monkeypatch, FakeLLM(SUMMARY_TEXT, error=ProviderError("Error code: 401 - invalid api key",
                                                                       status_code=401)))
    # blocked below the rule's 80 % at every moment: it compresses (and its summariser fails) at 76 %, just
    # over its 75 % threshold. (At 85 %, a scrape between the failed compress() and the next response saw
    # it blocked at 85 % and the rule went pending: a race in the test, seen once under CI load.)
    messages, out = host_compaction(roomy, "roomy", prompt=76_000)
    assert len(out) == len(messages) and vars(roomy)["_last_compress_aborted"]
    roomy.update_from_response(usage(50_000))           # blocked, but half the window is free
    t_blocked = time.monotonic()
    messages, out = host_compaction(blocked, "blocked")
    assert len(out) == len(messages) and vars(blocked)["_summary_failure_cooldown_until"] > time.monotonic()
    blocked.update_from_response(usage(88_000))         # the next response: still 88 %
    t_thrash = time.monotonic()
    for _ in range(8):
        thrash.update_from_response(usage(60_000))
    for _ in range(5):
        thrash.compress(transcript(10), current_tokens=60_000)
    for _ in range(3):
        stuck.compress(transcript(3), current_tokens=1_000)     # nothing to take away: noop
    dead.update_from_response(usage(30_000))
    t_dead = time.monotonic()
    assert observed_engine.flush(5)

    value = prom.scalar
    assert wait_until(lambda: value(f'hermes_context_compression_blocked{{instance="{instance["blocked"]}",'
                                    f'reason="summary_cooldown"}}') == 1, 30, 0.25), diagnostics()
    # (each target is scraped on its own schedule: wait for this one too)
    assert wait_until(lambda: value(f'hermes_context_compression_blocked{{instance="{instance["blocked_roomy"]}",'
                                    f'reason="summary_cooldown"}}') == 1, 30, 0.25), diagnostics()
    assert value(f'sum(hermes_context_compression_blocked{{instance="{instance["full"]}"}})') == 0

    # -- fire: Blocked, Thrash x2, DeadZone
    assert wait_until(lambda: webhook_alert(BLOCKED, instance=instance["blocked"]), WAIT_S, 0.2), diagnostics()
    hit = webhook_alert(BLOCKED, instance=instance["blocked"])
    blocked_after = hit["_received_at"] - t_blocked
    assert hit["labels"] == {"alertname": BLOCKED, "job": "hermes", "instance": instance["blocked"],
                             "engine": "compressor", "reason": "summary_cooldown", "severity": "warning"}
    assert "88%" in hit["annotations"]["summary"] and "credentials" in hit["annotations"]["description"]

    assert wait_until(lambda: webhook_alert(THRASH, engine="thrash") and webhook_alert(THRASH, engine="stuck"),
                      WAIT_S, 0.2), diagnostics()
    thrash_after = max(webhook_alert(THRASH, engine=e)["_received_at"] for e in ("thrash", "stuck")) - t_thrash
    assert webhook_alert(THRASH, engine="thrash")["labels"]["pattern"] == "too_frequent"
    assert webhook_alert(THRASH, engine="stuck")["labels"]["pattern"] == "noop_streak"
    assert "compacted 5 time(s)" in webhook_alert(THRASH, engine="thrash")["annotations"]["description"]

    assert wait_until(lambda: webhook_alert(DEAD, engine="dead"), WAIT_S, 0.2), diagnostics()
    dead_hit = webhook_alert(DEAD, engine="dead")
    dead_after = dead_hit["_received_at"] - t_dead
    assert dead_hit["labels"] == {"alertname": DEAD, "job": "hermes", "instance": instance["misc"],
                                  "engine": "dead", "severity": "warning"}
    assert "threshold 64000 tokens" in dead_hit["annotations"]["summary"]

    # -- must not fire: never even pending
    time.sleep(FOR_SECONDS + 3)

    assert ever(f'alertname="{BLOCKED}"'), "the ALERTS query finds nothing at all"
    assert ever(f'alertname="{BLOCKED}",instance!="{instance["blocked"]}"') == [], diagnostics()
    assert ever(f'alertname="{THRASH}",engine!~"thrash|stuck"') == [], diagnostics()
    assert ever(f'alertname="{DEAD}",engine!="dead"') == [], diagnostics()
    health = {name: (r["health"], r.get("lastError")) for name, r in alert_stack.loaded_rules().items()}
    assert all(health[name] == ("ok", "") or health[name] == ("ok", None) for name in (BLOCKED, THRASH, DEAD)), health
    print(f"\n[alerts e2e issue 15] webhook after: Blocked {blocked_after:.1f} s, Thrash {thrash_after:.1f} s, "
          f"DeadZone {dead_after:.1f} s")

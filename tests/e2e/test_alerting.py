"""End to end: observed engine -> /metrics -> real Prometheus (shipped alert rules) -> real
Alertmanager (shipped routing, timings shortened) -> a webhook receiver on 127.0.0.1.

One pipeline with two engines in THIS process: ``hangs`` (its compress() blocks past a 0.3 s
deadline) and ``garbage`` (its select_context returns a string: the host falls open).

The shipped Alertmanager config inhibits HermesContextCompressionTimeout while
HermesContextCompressionStuck fires for the same job/instance/engine, so the timeout
notification can only arrive once the stuck call has returned; the test follows that order:
FailOpen and Stuck while the call is blocked, then release, then Timeout.
"""

from __future__ import annotations

import threading
import time

import pytest
from support.engines import ScriptedEngine, SelectingEngine, blocking_compress, transcript
from support.servers import (
    free_port,
    wait_until,
)

import observed_engine
from observed_engine import observe

DEADLINE = 0.3


@pytest.mark.prometheus
def test_timeout_and_fail_open_alerts_reach_the_webhook(alert_stack, webhook, request, capsys):
    rules = alert_stack.rules()

    port = free_port()
    settings = {"prometheus": {"enabled": True, "port": port}, "store": {"enabled": False},
                "compress_timeout_seconds": DEADLINE}
    release, started = threading.Event(), threading.Event()
    hangs = observe(ScriptedEngine("hangs", {"compress": blocking_compress(release, started)}), settings=settings)
    garbage = observe(SelectingEngine("garbage", {"select_context": lambda *a, **k: "not a list"}),
                      settings=settings)
    request.addfinalizer(release.set)
    request.addfinalizer(lambda: observed_engine.shutdown(2.0))

    prom = alert_stack.start_prometheus([f"127.0.0.1:{port}"], rules)
    diagnostics = alert_stack.diagnostics

    # -- drive: a compress() that hangs, a select_context that returns garbage
    box = {}
    t_compress = time.monotonic()
    worker = threading.Thread(target=lambda: box.setdefault("out", hangs.compress(transcript(10))), daemon=True)
    worker.start()
    assert started.wait(5)
    request_messages = transcript(4)
    t_fail_open = time.monotonic()
    assert garbage.select_context(request_messages, conversation_messages=request_messages,
                                  incoming_message=request_messages[-1], budget_tokens=1000) == "not a list"
    assert observed_engine.flush(5)

    # -- while the call is blocked: FailOpen and Stuck fire; Timeout is inhibited by Stuck
    assert wait_until(lambda: webhook.alerts("HermesContextEngineFailOpen"), 60, 0.2), diagnostics()
    fail_open_after = webhook.alerts("HermesContextEngineFailOpen")[0]["_received_at"] - t_fail_open
    assert wait_until(lambda: webhook.alerts("HermesContextCompressionStuck"), 60, 0.2), diagnostics()
    stuck_after = webhook.alerts("HermesContextCompressionStuck")[0]["_received_at"] - t_compress
    assert worker.is_alive()
    firing = {a["labels"]["alertname"] for a in prom.alerts() if a["state"] == "firing"}
    assert {"HermesContextCompressionTimeout", "HermesContextEngineFailOpen",
            "HermesContextCompressionStuck"} <= firing, diagnostics()

    # -- the call returns (late): Stuck resolves, the Timeout notification is let through
    t_release = time.monotonic()
    release.set()
    worker.join(5)
    assert box.get("out") is not None
    assert wait_until(lambda: webhook.alerts("HermesContextCompressionTimeout"), 60, 0.2), diagnostics()
    timeout_after_release = webhook.alerts("HermesContextCompressionTimeout")[0]["_received_at"] - t_release

    [fo] = webhook.alerts("HermesContextEngineFailOpen")[:1]
    assert fo["labels"]["engine"] == "garbage" and fo["labels"]["hook"] == "select_context"
    assert fo["labels"]["severity"] == "warning" and fo["labels"]["job"] == "hermes"
    assert fo["annotations"]["summary"] and fo["annotations"]["description"]
    [to] = webhook.alerts("HermesContextCompressionTimeout")[:1]
    assert to["labels"]["engine"] == "hangs" and to["labels"]["severity"] == "warning"
    assert to["labels"]["instance"] == f"127.0.0.1:{port}"
    assert not [a for a in webhook.alerts("HermesContextEngineFailOpen") if a["labels"]["engine"] != "garbage"]
    assert not [a for a in webhook.alerts("HermesContextCompressionTimeout") if a["labels"]["engine"] != "hangs"]
    assert wait_until(lambda: webhook.alerts("HermesContextCompressionStuck", status="resolved"), 30, 0.2), \
        diagnostics()
    with capsys.disabled():
        print(f"\n[alerting] FailOpen at the webhook {fail_open_after:.1f}s after the call; "
              f"Stuck {stuck_after:.1f}s after compress() started (deadline {DEADLINE}s); "
              f"Timeout {timeout_after_release:.1f}s after the stuck call returned (inhibited while stuck)")

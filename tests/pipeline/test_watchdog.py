"""The compression watchdog: deadlines reported while the call is still blocked, no thread per call.

Deadlines here are 0.2 s (``observed.compress_timeout_seconds``); the inner
``compress()`` blocks on a ``threading.Event`` the test controls.
"""

from __future__ import annotations

import threading
import time

import pytest
from support.engines import ScriptedEngine, blocking_compress, transcript
from support.servers import wait_until
from support.store_rows import read_rows

import observed_engine
from observed_engine import observe
from observed_engine.capture import observed_meta

DEADLINE = 0.2
TIMEOUTS = "hermes.context.compression.timeouts"


@pytest.fixture
def store(tmp_path):
    return tmp_path / "watchdog.sqlite"


def observed(inner, prov, store, timeout=DEADLINE):
    return observe(inner, tracer_provider=prov.tracer_provider, meter_provider=prov.meter_provider,
                   settings={"compress_timeout_seconds": timeout, "store": {"path": str(store)}})


def flush():
    assert observed_engine.flush(10.0)


def start_compress(eng, messages=None):
    box = {}

    def run():
        try:
            box["result"] = eng.compress(messages or transcript(10), current_tokens=1000)
        except BaseException as exc:   # pragma: no cover - reported by the test
            box["error"] = exc
    th = threading.Thread(target=run, daemon=True)
    th.start()
    return th, box


def timeouts(prov, engine, kind):
    return prov.value(TIMEOUTS, engine=engine, kind=kind) or 0


def test_deadline_fires_while_the_call_is_still_blocked_then_late_completion(prov, store):
    release, started = threading.Event(), threading.Event()
    eng = observed(ScriptedEngine("slow", {"compress": blocking_compress(release, started)}), prov, store)
    t0 = time.monotonic()
    th, box = start_compress(eng)
    assert started.wait(2)

    assert wait_until(lambda: timeouts(prov, "slow", "deadline_exceeded") == 1, 1.5, 0.02)
    detected_after = time.monotonic() - t0
    assert DEADLINE <= detected_after < 1.2, detected_after
    assert th.is_alive(), "the call must still be blocked when the deadline is reported"
    assert timeouts(prov, "slow", "late_completion") == 0
    assert prov.value("hermes.context.compressions", engine="slow", outcome="timeout") == 1

    # span event on the (still open) compress span
    [span] = prov.started.named("context_engine.compress")
    assert span.end_time is None
    events = {e.name: e for e in span.events}
    assert "hermes.context.compress.deadline_exceeded" in events
    assert events["hermes.context.compress.deadline_exceeded"].attributes[
        "hermes.context.compress.deadline_seconds"] == DEADLINE

    # a store row, written while the call is still blocked
    flush()
    [row] = read_rows(store, "event = 'deadline_exceeded'")
    assert (row["engine"], row["hook"], row["outcome"]) == ("slow", "compress", "timeout")
    assert row["duration_s"] >= DEADLINE
    assert read_rows(store, "hook = 'compress' AND event = 'call'") == []   # the call has not returned

    # gauges while stuck
    assert prov.value("hermes.context.compression.in_flight", engine="slow") == 1
    assert prov.value("hermes.context.compression.oldest_in_flight_age", engine="slow") > DEADLINE
    assert prov.value("hermes.context.compression.deadline", engine="slow") == DEADLINE

    time.sleep(0.3)
    release.set()
    th.join(5)
    total = time.monotonic() - t0
    assert box["result"] is not None and "error" not in box
    flush()
    assert timeouts(prov, "slow", "late_completion") == 1
    assert timeouts(prov, "slow", "deadline_exceeded") == 1
    # a timed-out call is one compression (outcome timeout), not also "compressed"
    assert prov.by_label("hermes.context.compressions", "outcome") == {"timeout": 1}
    [late] = read_rows(store, "event = 'late_completion'")
    assert 0.5 <= late["duration_s"] <= total
    [call] = read_rows(store, "hook = 'compress' AND event = 'call'")
    assert call["outcome"] == "timeout" and call["duration_s"] == pytest.approx(late["duration_s"])
    assert span.end_time is not None
    assert prov.value("hermes.context.compression.in_flight", engine="slow") == 0
    assert prov.value("hermes.context.compression.oldest_in_flight_age", engine="slow") == 0


def test_a_thousand_concurrent_short_calls_start_no_thread_per_call(prov, store):
    eng = observed(ScriptedEngine("quick"), prov, store, timeout=5.0)
    eng.compress(transcript(10))          # warm-up: starts the watchdog's one thread
    watchdog = observed_meta(eng).pipeline.watchdog
    assert watchdog.threads_started == 1

    n_threads, per_thread = 50, 20
    barrier = threading.Barrier(n_threads)
    baseline = threading.active_count()
    peak = [baseline]
    stop = threading.Event()

    def monitor():
        while not stop.is_set():
            peak[0] = max(peak[0], threading.active_count())
            time.sleep(0.0005)

    errors = []

    def worker():
        barrier.wait()
        for _ in range(per_thread):
            try:
                out = eng.compress(transcript(6), current_tokens=10)
                assert len(out) == 2
            except BaseException as exc:
                errors.append(exc)

    mon = threading.Thread(target=monitor, daemon=True)
    mon.start()
    workers = [threading.Thread(target=worker) for _ in range(n_threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(60)
    stop.set()
    mon.join()
    assert not errors
    # the 50 callers and the monitor; a thread per call would add up to 1000 more
    assert peak[0] <= baseline + n_threads + 1 + 2, (baseline, peak[0])
    assert watchdog.threads_started == 1
    flush()
    total = n_threads * per_thread + 1
    assert prov.value("hermes.context_engine.hook.calls", engine="quick", hook="compress", outcome="ok") == total
    assert prov.value("hermes.context.compressions", engine="quick", outcome="compressed") == total
    assert prov.total(TIMEOUTS) == 0
    assert watchdog.in_flight() == 0
    assert prov.value("hermes.context.compression.in_flight", engine="quick") == 0


def test_a_call_that_never_returns_is_still_reported(prov, store):
    never = threading.Event()               # never set: the call blocks for the rest of the process
    eng = observed(ScriptedEngine("hung", {"compress": blocking_compress(never)}), prov, store)
    th, _ = start_compress(eng)
    assert wait_until(lambda: timeouts(prov, "hung", "deadline_exceeded") == 1, 1.5, 0.02)
    assert th.is_alive()
    flush()
    assert len(read_rows(store, "event = 'deadline_exceeded' AND engine = 'hung'")) == 1
    assert prov.value("hermes.context.compression.in_flight", engine="hung") == 1
    # reported once, not again and again
    time.sleep(0.5)
    assert timeouts(prov, "hung", "deadline_exceeded") == 1


def test_record_timeout_failure_is_counted_and_passed_through(prov, store):
    sentinel = object()
    eng = observed(ScriptedEngine("reported", {"record_timeout_failure": lambda *a, **k: sentinel}), prov, store)
    assert eng.record_timeout_failure("no progress for 120s", failure_kind="stalled") is sentinel
    assert eng.record_timeout_failure("600s ceiling", failure_kind="ceiling_exhausted") is sentinel
    assert eng.calls_of("record_timeout_failure") == [
        (("no progress for 120s",), {"failure_kind": "stalled"}),
        (("600s ceiling",), {"failure_kind": "ceiling_exhausted"}),
    ]
    flush()
    assert timeouts(prov, "reported", "host_reported") == 2
    assert timeouts(prov, "reported", "deadline_exceeded") == 0
    rows = read_rows(store, "event = 'host_reported'")
    assert [(r["engine"], r["hook"], r["reason"]) for r in rows] == [
        ("reported", "compress", "stalled"), ("reported", "compress", "ceiling_exhausted")]


def test_in_flight_gauge_counts_running_calls(prov, store):
    release = threading.Event()
    eng = observed(ScriptedEngine("busy", {"compress": blocking_compress(release)}), prov, store, timeout=30)
    threads = [start_compress(eng)[0] for _ in range(3)]
    assert wait_until(lambda: prov.value("hermes.context.compression.in_flight", engine="busy") == 3, 2, 0.02)
    age = prov.value("hermes.context.compression.oldest_in_flight_age", engine="busy")
    assert 0 <= age < 30
    release.set()
    for th in threads:
        th.join(5)
    flush()
    assert prov.value("hermes.context.compression.in_flight", engine="busy") == 0
    assert timeouts(prov, "busy", "deadline_exceeded") == 0


def test_a_hung_inner_engine_never_hangs_the_watchdog(prov, store):
    stuck_forever = threading.Event()
    brief = threading.Event()
    state = {"n": 0}

    def compress(messages, current_tokens=None):
        state["n"] += 1
        n = state["n"]
        if n <= 2:
            stuck_forever.wait()            # two calls that never come back
        elif n == 3:
            brief.wait(0.6)                 # past the deadline, then returns
        return messages[:2]

    eng = observed(ScriptedEngine("wedged", {"compress": compress}), prov, store)
    start_compress(eng)
    start_compress(eng)
    assert wait_until(lambda: timeouts(prov, "wedged", "deadline_exceeded") == 2, 1.5, 0.02)
    assert wait_until(lambda: prov.value("hermes.context.compression.oldest_in_flight_age", engine="wedged") > DEADLINE,
                      1, 0.02)

    t0 = time.monotonic()
    th3, box3 = start_compress(eng)
    assert wait_until(lambda: timeouts(prov, "wedged", "deadline_exceeded") == 3, 1.5, 0.02)
    assert time.monotonic() - t0 < 1.0
    th3.join(5)
    assert box3["result"] is not None
    flush()
    assert timeouts(prov, "wedged", "late_completion") == 1

    # a short call now is reported as an ordinary compression
    assert eng.compress(transcript(10)) is not None
    flush()
    assert prov.value("hermes.context.compressions", engine="wedged", outcome="compressed") == 1
    assert prov.value("hermes.context.compressions", engine="wedged", outcome="timeout") == 3
    assert timeouts(prov, "wedged", "deadline_exceeded") == 3
    assert prov.value("hermes.context.compression.in_flight", engine="wedged") == 2

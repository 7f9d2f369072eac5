"""The worker yields the GIL after each millisecond of work (processing._PACE_AFTER_S).

The mechanism is tested here deterministically (a fake clock and a spy for sleep); its effect
on host latency while a backlog is processed is measured by benchmarks/hook_overhead.py
("worker busy"), not asserted in a timed test.
"""

from __future__ import annotations

import types

from support.engines import NarrowEngine

from observed_engine.worker import processor as processing

HOOK_CALLS = "hermes.context_engine.hook.calls"


def test_worker_sleeps_between_slices_and_loses_nothing(observe_engine, metric_points, monkeypatch):
    import time as real_time

    engine = observe_engine(NarrowEngine())
    ticks = {"now": 0.0}
    sleeps = []

    def fake_clock():
        ticks["now"] += 0.0004          # every event "takes" 0.4 ms of worker time
        return ticks["now"]

    fake_time = types.SimpleNamespace(
        perf_counter=fake_clock, sleep=sleeps.append, monotonic=real_time.monotonic,
        time_ns=real_time.time_ns, perf_counter_ns=real_time.perf_counter_ns, time=real_time.time,
    )
    monkeypatch.setattr(processing, "time", fake_time)
    for _ in range(50):
        engine.should_compress(1)
    calls = {dict(k)["hook"]: v for k, v in metric_points(HOOK_CALLS).items()}
    assert calls == {"should_compress": 50}
    # 0.4 ms per clock read, one read per event plus one per sleep: a sleep every couple of events
    assert 10 <= len(sleeps) <= 50
    assert set(sleeps) == {processing._PACE_SLEEP_S}


def test_small_batches_never_sleep(observe_engine, metric_points, monkeypatch):
    sleeps = []
    import time as real_time

    fake_time = types.SimpleNamespace(
        perf_counter=lambda: 0.0, sleep=sleeps.append, monotonic=real_time.monotonic,
        time_ns=real_time.time_ns, perf_counter_ns=real_time.perf_counter_ns, time=real_time.time,
    )
    monkeypatch.setattr(processing, "time", fake_time)
    engine = observe_engine(NarrowEngine())
    for _ in range(20):
        engine.should_compress(1)
    assert sum(metric_points(HOOK_CALLS).values()) == 20
    assert sleeps == []


def test_the_worker_thread_sleeps_with_a_tight_timer_slack_and_only_it(observe_engine):
    """Issue 16: a pacing sleep of 50 µs took 136 µs at the kernel's default timer slack (50 µs), so
    under a backlog the worker lost 12 % of its time to pacing instead of 5 %. The worker thread sets
    its own slack to 1 µs (prctl, Linux); the host's threads keep theirs."""
    import ctypes
    import sys

    import pytest

    from observed_engine.pipeline import recorder as recorder_module

    if not sys.platform.startswith("linux"):
        pytest.skip("prctl(PR_SET_TIMERSLACK) is Linux's")
    prctl = ctypes.CDLL(None).prctl
    host_slack = prctl(recorder_module._PR_GET_TIMERSLACK, 0, 0, 0, 0)
    engine = observe_engine(NarrowEngine())
    engine.should_compress(10)
    recorder = next(iter(_recorders_of(engine)))
    recorder.flush(10)
    assert recorder.timer_slack_ns == recorder_module.WORKER_TIMER_SLACK_NS
    assert prctl(recorder_module._PR_GET_TIMERSLACK, 0, 0, 0, 0) == host_slack


def _recorders_of(engine):
    from observed_engine.contract.events import ENGINE_META_ATTRIBUTE

    meta = getattr(type(engine), ENGINE_META_ATTRIBUTE)
    yield meta.pipeline.recorder

"""Concurrency: 32 threads x 1 000 sessions, each on its own deep copy of one observed engine
(as the host copies plugin engines per agent). No exceptions, every host-visible result
right, and exact totals afterwards: hook_calls per hook, spans per hook, store rows per hook
and per session, nothing dropped.
"""

from __future__ import annotations

import copy
import os
import sqlite3
import threading
import time

from support.engines import LedgerEngine
from support.otel import Providers

import observed_engine

THREADS = 32
SESSIONS = 1000
TRACES = os.environ.get("LOAD_TRACES", "1") == "1"      # LOAD_TRACES=0: metrics and store only
HOOKS = ("on_session_start", "update_from_response", "should_compress", "compress", "on_session_end")


def test_32_threads_x_1000_sessions_exact_totals(tmp_path):
    store = tmp_path / "store.sqlite"
    pipeline = Providers({"store": {"path": str(store)}, "queue_size": 2_000_000, "traces": TRACES}, keep_spans=False)
    template = pipeline.observe(LedgerEngine())
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "hello"},
                {"role": "assistant", "content": "hi"}]
    failures: list = []
    barrier = threading.Barrier(THREADS)

    def agent(t: int) -> None:
        barrier.wait()
        for s in range(SESSIONS):
            try:
                engine = copy.deepcopy(template)
                session = f"t{t}-s{s}"
                tokens = 100 + s
                assert engine.on_session_start(session, platform="cli", model="gpt-4o") is None
                assert engine.update_from_response(
                    {"prompt_tokens": tokens, "completion_tokens": 5, "total_tokens": tokens + 5}) is None
                assert engine.last_prompt_tokens == tokens
                assert engine.should_compress(tokens) is (tokens >= engine.threshold_tokens)
                assert engine.compress(messages, current_tokens=tokens) is messages
                assert engine.on_session_end(session, messages) is None
                assert [entry[0] for entry in engine.log] == ["start", "usage", "should_compress", "compress", "end"]
            except BaseException as exc:  # noqa: BLE001 - collected and reported below
                failures.append((t, s, repr(exc)))
                return

    started = time.monotonic()
    threads = [threading.Thread(target=agent, args=(t,), name=f"agent-{t}") for t in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    hooks_done = time.monotonic() - started
    assert not any(thread.is_alive() for thread in threads), "an agent thread hung"
    assert not failures, failures[:5]

    assert observed_engine.flush(60.0)
    drained = time.monotonic() - started
    expected = THREADS * SESSIONS
    total = expected * len(HOOKS)

    telemetry = pipeline.telemetry
    assert telemetry.recorder.dropped == 0
    assert pipeline.total("hermes.context_engine.telemetry_dropped", flush=True) == 0
    assert pipeline.total("hermes.context_engine.telemetry_errors", flush=True) == 0
    for hook in HOOKS:
        assert pipeline.total("hermes.context_engine.hook.calls", engine="ledger", hook=hook,
                              outcome="ok") == expected, hook
        if TRACES:
            assert pipeline.counting.by_name.get(f"context_engine.{hook}") == expected, hook
    assert pipeline.total("hermes.context_engine.hook.calls") == total
    assert pipeline.total("hermes.context_engine.usage_tokens", token_type="completion") == 5 * expected

    conn = sqlite3.connect(f"file:{store}?mode=ro", uri=True)
    try:
        assert conn.execute("SELECT COUNT(*) FROM events").fetchone()[0] == total
        per_hook = dict(conn.execute("SELECT hook, COUNT(*) FROM events GROUP BY hook").fetchall())
        assert per_hook == {hook: expected for hook in HOOKS}
        # every copy kept its own session: five rows per session id, no row without one
        assert conn.execute("SELECT COUNT(DISTINCT session) FROM events").fetchone()[0] == expected
        assert conn.execute("SELECT COUNT(*) FROM events WHERE session IS NULL").fetchone()[0] == 0
        assert conn.execute(
            "SELECT COUNT(*) FROM (SELECT session FROM events GROUP BY session HAVING COUNT(*) != 5)"
        ).fetchone()[0] == 0
        outcomes = dict(conn.execute(
            "SELECT hook || ':' || event || ':' || outcome, COUNT(*) FROM events GROUP BY 1").fetchall())
        assert outcomes == {f"{hook}:call:{'noop' if hook == 'compress' else 'ok'}": expected for hook in HOOKS}
    finally:
        conn.close()
    print(f"\n{THREADS} threads x {SESSIONS} sessions: {total} hook calls in {hooks_done:.1f} s, "
          f"{total / hooks_done:,.0f} calls/s; all telemetry recorded after {drained:.1f} s; nothing dropped")

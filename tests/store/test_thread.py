"""The store writer thread never dies and never raises into the caller (issue 13, item 5).

``StoreWriter.__init__`` must not raise when no thread can be started (the real
``RuntimeError: can't start new thread``, provoked here with a thread stack size no
mmap can satisfy); the start is retried at the next submit, counted and logged once.
"""

from __future__ import annotations

import logging
import threading
import time

import pytest
from support.store_rows import count_rows

from observed_engine.contract.store_schema import make_row
from observed_engine.store import StoreWriter


def _rows(n, start=0, **fields):
    return [make_row(**{"ts": time.time(), "engine": "e", "event": "call", "prompt_tokens": start + i, **fields})
            for i in range(n)]


def _store_logs(caplog):
    return [r for r in caplog.records if r.name.startswith("observed_engine.store") and r.levelno >= logging.WARNING]


def _cannot_start_threads():
    """Make every new thread fail to start for real (its stack cannot be mapped)."""
    old = threading.stack_size(1 << 42)
    probe = threading.Thread(target=lambda: None)
    try:
        probe.start()
    except RuntimeError:
        return old
    probe.join()
    threading.stack_size(old)
    pytest.skip("this machine maps a 4 TiB thread stack; cannot provoke a failed thread start")


def test_writer_init_survives_a_failed_thread_start_and_starts_at_the_next_submit(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="observed_engine")
    path = tmp_path / "nothread.sqlite"
    errors = []
    old = _cannot_start_threads()
    try:
        writer = StoreWriter(path, flush_interval=0.02, on_error=lambda c, e: errors.append((c, e)))
        writer.submit(_rows(3))                      # still no thread: queued, start retried
        writer.submit(_rows(2, 3))
        assert writer.flush(0.2) is False
    finally:
        threading.stack_size(old)
    try:
        assert [c for c, _ in errors] == ["store"] and isinstance(errors[0][1], RuntimeError)
        writer.submit(_rows(1, 5))                   # threads can start again
        assert writer.flush(5)
        assert writer.rows_written == 6 and writer.rows_dropped == 0
    finally:
        writer.close()
    assert [r["n"] for r in _query(path)] == list(range(6))
    logs = _store_logs(caplog)
    assert len(logs) == 1 and "thread" in logs[0].getMessage(), [r.getMessage() for r in logs]


def _query(path):
    import sqlite3
    conn = sqlite3.connect(str(path))
    try:
        conn.row_factory = sqlite3.Row
        return [{"n": r["prompt_tokens"]} for r in conn.execute("SELECT prompt_tokens FROM events ORDER BY id")]
    finally:
        conn.close()


def test_flush_without_a_thread_starts_it(tmp_path):
    path = tmp_path / "flushstart.sqlite"
    old = _cannot_start_threads()
    try:
        writer = StoreWriter(path, flush_interval=0.02)
    finally:
        threading.stack_size(old)
    try:
        writer._queue.extend(_rows(2))               # rows queued before any thread ran
        assert writer.flush(5)
        assert count_rows(path) == 2
    finally:
        writer.close()


def test_callbacks_that_raise_neither_kill_the_thread_nor_reach_the_caller(tmp_path):
    path = tmp_path / "callbacks.sqlite"

    def on_error(component, exc):
        raise ValueError("a broken metrics callback")

    def on_drop(n):
        raise ValueError("a broken drop counter")

    writer = StoreWriter(path, flush_interval=0.02, max_queue=4, on_error=on_error, on_drop=on_drop)
    try:
        writer.submit(_rows(6))                      # 2 beyond the bound: on_drop raises in the caller's thread
        assert writer.flush(5)
        writer.submit([make_row(ts=time.time(), event="call", prompt_tokens=2 ** 70)])   # on_error raises on the thread
        assert writer.flush(5)
        time.sleep(0.1)
        assert writer._thread.is_alive(), "the writer thread died"
        writer.submit(_rows(2, 100))
        assert writer.flush(5)
        assert writer.rows_written == 7 and writer.rows_dropped == 2
    finally:
        writer.close()
    assert count_rows(path) == 7


def test_close_then_submit_does_not_restart_or_raise(tmp_path):
    writer = StoreWriter(tmp_path / "closed.sqlite", flush_interval=0.02)
    writer.submit(_rows(1))
    writer.close()
    writer.submit(_rows(1))
    assert not writer._thread.is_alive()

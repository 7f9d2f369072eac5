"""The embedded SQLite store: rows after a session, retention, concurrent writer processes,
a locked file, and a store that cannot be written (the engine must not notice)."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from support.engines import ScriptedEngine, SelectingEngine, transcript
from support.paths import TESTS
from support.servers import wait_until
from support.store_rows import count_rows, read_rows

import observed_engine
from observed_engine import observe
from observed_engine.capture import observed_meta
from observed_engine.contract.store_schema import make_row, row_from
from observed_engine.store import StoreWriter, connect
from observed_engine.tokens import TokenCounter


def observed(inner, prov, path, **settings):
    return observe(inner, tracer_provider=prov.tracer_provider, meter_provider=prov.meter_provider,
                   settings={"store": {"path": str(path)}, **settings})


def flush(timeout=10.0):
    assert observed_engine.flush(timeout)


class Boom(Exception):
    pass


# -- rows after a session ------------------------------------------------------------------------


def test_one_row_per_hook_call_with_the_right_columns(prov, tmp_path):
    path = tmp_path / "session.sqlite"

    def slow_should_compress(tokens):
        time.sleep(0.03)
        return False

    def failing_reset():
        raise Boom("reset failed")

    # the counts below are checked exactly, so the encoding is in this process before the session
    # (run alone on a slow machine the worker's helper process was still loading it when the session
    # ended, and the rows were labelled estimates: tests/tokens/test_helper_hurry.py covers that)
    counter = TokenCounter("auto", model="gpt-4o")
    counter.count_text("warm")
    eng = observed(SelectingEngine("stored", {
        "should_compress": slow_should_compress,
        "select_context": lambda *a, **k: [],
        "on_session_reset": failing_reset,
    }), prov, path)
    t_start = time.time()
    eng.on_session_start("sess-A", model="gpt-4o", platform="cli")
    eng.update_from_response({"prompt_tokens": 1234, "completion_tokens": 56, "total_tokens": 1290,
                              "cache_read_tokens": 7, "cache_write_tokens": 8, "reasoning_tokens": 9})
    assert eng.should_compress(1234) is False
    msgs = transcript(10)
    out = eng.compress(msgs, current_tokens=1234)
    request = transcript(4)
    assert eng.select_context(request, conversation_messages=request, incoming_message=request[-1],
                              budget_tokens=1000) == []
    with pytest.raises(Boom):
        eng.on_session_reset()
    eng.on_session_end("sess-A", out)
    flush()
    t_end = time.time()

    rows = read_rows(path)
    calls = [r for r in rows if r["event"] == "call"]
    assert [(r["hook"], r["outcome"]) for r in calls] == [
        ("on_session_start", "ok"), ("update_from_response", "ok"), ("should_compress", "ok"),
        ("compress", "compressed"), ("select_context", "fail_open"), ("on_session_reset", "error"),
        ("on_session_end", "ok"),
    ]
    for r in rows:
        assert r["session"] == "sess-A", r
        assert r["engine"] == "stored"
        assert r["pid"] == os.getpid() and r["host"] == socket.gethostname()
        assert t_start - 0.01 <= r["ts"] <= t_end + 0.01
    for r in calls:
        assert 0 <= r["duration_s"] < 1.0
    by_hook = {r["hook"]: r for r in calls}
    assert 0.03 <= by_hook["should_compress"]["duration_s"] < 0.5

    usage = by_hook["update_from_response"]
    assert (usage["input_tokens"], usage["output_tokens"], usage["cache_read_tokens"],
            usage["cache_write_tokens"], usage["reasoning_tokens"]) == (1234, 56, 7, 8, 9)
    assert (usage["prompt_tokens"], usage["threshold_tokens"], usage["window_tokens"]) == (1234, 50_000, 100_000)

    comp = by_hook["compress"]
    assert (comp["messages_before"], comp["messages_after"]) == (len(msgs), len(out))
    assert comp["tokens_before"] == counter.count_messages(msgs)
    assert comp["tokens_after"] == counter.count_messages(out)
    assert comp["tokens_after"] < comp["tokens_before"]
    assert comp["tokenizer"] == counter.method

    assert by_hook["on_session_reset"]["reason"] == "Boom"
    fail_open = [(r["hook"], r["outcome"], r["reason"]) for r in rows if r["event"] == "fail_open"]
    assert sorted(fail_open) == [("on_session_reset", "fail_open", "exception"),
                                 ("select_context", "fail_open", "invalid_return")]
    assert len(rows) == len(calls) + 2
    assert all(r["content"] is None for r in rows)      # capture_content is off


def test_retention_deletes_rows_older_than_the_window(tmp_path):
    path = tmp_path / "retention.sqlite"
    now = time.time()
    conn = connect(path)
    conn.executemany(
        "INSERT INTO events (ts, engine, hook, event) VALUES (?, 'e', 'should_compress', 'call')",
        [(now - 30 * 86400,), (now - 15 * 86400,), (now - 14 * 86400 - 60,), (now - 13 * 86400,), (now - 60,)],
    )
    conn.close()
    writer = StoreWriter(path, retention_days=14, flush_interval=0.05)
    try:
        writer.submit([make_row(ts=now, engine="e", hook="compress", event="call")])
        assert writer.flush(10)
    finally:
        writer.close()
    ages = sorted(round((now - r["ts"]) / 86400) for r in read_rows(path))
    assert ages == [0, 0, 13]


# -- two writer processes ---------------------------------------------------------------------------------


def test_two_writer_processes_lose_no_rows(tmp_path, capsys):
    path = tmp_path / "shared.sqlite"
    n = 20_000
    start_at = time.time() + 3.0          # both processes import, then write together
    procs = [
        subprocess.Popen([sys.executable, str(TESTS / "support" / "store_writer_proc.py"), str(path), str(n),
                          name, str(start_at)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for name in ("writer_a", "writer_b")
    ]
    reports = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        reports.append(json.loads(out.strip().splitlines()[-1]))
    for rep in reports:
        assert rep["flushed"] and rep["rows_dropped"] == 0, rep
        assert rep["rows_written"] == n
    assert count_rows(path) == 2 * n
    for rep, name in zip(reports, ("writer_a", "writer_b")):
        assert count_rows(path, "pid = ? AND engine = ? AND event = 'call'", (rep["pid"], name)) == n
    # every call of each process is there exactly once (should_compress(i) for i in range(n))
    seconds = max(r["seconds"] for r in reports)
    with capsys.disabled():
        print(f"\n[store] 2 processes x {n} rows in {seconds:.2f}s -> {2 * n / seconds:,.0f} rows/s (end to end)")


def test_store_writer_throughput(tmp_path, capsys):
    path = tmp_path / "throughput.sqlite"
    writer = StoreWriter(path, flush_interval=0.05)
    rows = [make_row(ts=time.time(), engine="e", hook="should_compress", event="call", outcome="ok",
                     duration_s=1e-6) for _ in range(50_000)]
    t0 = time.perf_counter()
    writer.submit(rows)
    assert writer.flush(60)
    seconds = time.perf_counter() - t0
    writer.close()
    assert count_rows(path) == 50_000
    with capsys.disabled():
        print(f"\n[store] StoreWriter: 50000 rows in {seconds:.2f}s -> {50_000 / seconds:,.0f} rows/s")


# -- a locked file ----------------------------------------------------------------------------------------------


def test_rows_written_after_an_exclusive_lock_is_released(prov, tmp_path):
    path = tmp_path / "locked.sqlite"
    eng = observed(ScriptedEngine("locked"), prov, path)
    eng.should_compress(1)
    flush()
    assert count_rows(path) == 1
    store = observed_meta(eng).pipeline.store

    holder = sqlite3.connect(str(path), isolation_level=None, timeout=10)
    holder.execute("BEGIN EXCLUSIVE")
    t0 = time.monotonic()
    try:
        for i in range(500):
            assert eng.should_compress(i) is False
        # The hooks did not wait for the lock: one that did would wait out SQLite's 5 s busy
        # timeout (connect()'s default). 500 calls take milliseconds, half a second on a machine
        # loaded 8x over its cores: a bound below the timeout, not a speed target, keeps this
        # test about waiting rather than about the machine's load.
        assert time.monotonic() - t0 < 2.5
        time.sleep(0.5)
        assert store.rows_written == 1               # nothing could be written yet
        assert count_rows(path) == 1
    finally:
        time.sleep(max(0.0, 1.0 - (time.monotonic() - t0)))
        holder.execute("COMMIT")
        holder.close()
    flush()
    assert count_rows(path) == 501
    assert store.rows_written == 501 and store.rows_dropped == 0
    assert prov.total("hermes.context_engine.telemetry_errors") == 0


def test_a_lock_longer_than_the_busy_timeout_loses_nothing(prov, tmp_path, caplog):
    """Past SQLite's 5 s busy timeout the batch fails, is kept, and is retried."""
    caplog.set_level(logging.WARNING, logger="observed_engine")
    path = tmp_path / "long-lock.sqlite"
    eng = observed(ScriptedEngine("long_lock"), prov, path)
    eng.should_compress(1)
    flush()
    store = observed_meta(eng).pipeline.store
    holder = sqlite3.connect(str(path), isolation_level=None, timeout=10)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        for i in range(300):
            eng.should_compress(i)
        assert wait_until(lambda: prov.total("hermes.context_engine.telemetry_errors", component="store") >= 1,
                          10, 0.1)
    finally:
        holder.execute("COMMIT")
        holder.close()
    flush(15)
    assert count_rows(path) == 301
    assert store.rows_dropped == 0
    assert len([r for r in caplog.records if r.name.startswith("observed_engine.store")]) == 1


# -- a store that cannot be written -------------------------------------------------------------------------------


@contextlib.contextmanager
def read_only(target: Path):
    """chmod it read-only; as root (which ignores modes) also make it immutable."""
    mode = target.stat().st_mode
    target.chmod(0o555 if target.is_dir() else 0o444)
    immutable = False
    try:
        if os.geteuid() == 0:
            res = subprocess.run(["chattr", "+i", str(target)], capture_output=True)
            if res.returncode != 0:
                pytest.skip(f"running as root and cannot make {target} immutable: {res.stderr!r}")
            immutable = True
        yield
    finally:
        if immutable:
            subprocess.run(["chattr", "-i", str(target)], capture_output=True)
        target.chmod(mode)


@pytest.mark.parametrize("case", ["readonly_file", "readonly_dir", "dir_is_a_file"])
def test_unwritable_store_is_counted_logged_once_and_harmless(prov, tmp_path, caplog, case):
    caplog.set_level(logging.WARNING, logger="observed_engine")
    with contextlib.ExitStack() as stack:
        if case == "readonly_file":
            path = tmp_path / "ro.sqlite"
            connect(path).close()
            stack.enter_context(read_only(path))
        elif case == "readonly_dir":
            d = tmp_path / "ro_dir"
            d.mkdir()
            path = d / "telemetry.sqlite"
            stack.enter_context(read_only(d))
        else:
            (tmp_path / "plain_file").write_text("not a directory")
            path = tmp_path / "plain_file" / "telemetry.sqlite"

        eng = observed(ScriptedEngine("unwritable"), prov, path)
        t0 = time.perf_counter()
        results = [eng.should_compress(t) for t in (10, 60_000, 20)]
        out = eng.compress(transcript(10))
        hook_seconds = time.perf_counter() - t0
        assert results == [False, True, False] and len(out) == 2
        assert hook_seconds < 0.5
        store = observed_meta(eng).pipeline.store
        # no further hook call: the error still reaches the metric
        assert wait_until(lambda: prov.total("hermes.context_engine.telemetry_errors", component="store") >= 1,
                          5, 0.05), caplog.text
        time.sleep(0.5)                      # more failed retries
        eng.should_compress(30)
        observed_engine.flush(0.5)           # the store cannot flush: returns False after 0.5 s
        assert store.rows_written == 0
        assert prov.value("hermes.context_engine.hook.calls", engine="unwritable", hook="should_compress",
                          outcome="ok") == 4
        store_warnings = [r for r in caplog.records if r.name.startswith("observed_engine.store")]
        assert len(store_warnings) == 1, [r.getMessage() for r in store_warnings]
        if case == "readonly_file":
            assert count_rows(path) == 0
        else:
            assert not path.exists()
        observed_engine.shutdown(0.5)


def test_rows_bind_only_their_own_columns_and_keep_their_arrival_order(tmp_path):
    """Issue 16: each row in the worker's form (store_schema.row_from) is inserted naming only the columns it has (binding the 20-odd NULLs of a
    full-width row cost as much as the rest of the insert); rows of different shapes, grouped into
    one executemany per shape, still get ids in the order they were submitted."""
    from observed_engine.store import writer as writer_module

    statements = []
    real_connect = writer_module.connect

    def traced_connect(*args, **kwargs):
        conn = real_connect(*args, **kwargs)
        conn.set_trace_callback(statements.append)
        return conn

    writer_module.connect = traced_connect
    path = tmp_path / "narrow.sqlite"
    writer = StoreWriter(path, flush_interval=0.05)
    try:
        now = time.time()
        writer.submit([
            row_from(dict(ts=now, engine="e", hook="should_compress", event="call", decision="skip", checked_tokens=1)),
            row_from(dict(ts=now, engine="e", hook="update_from_response", event="call", input_tokens=2)),
            make_row(ts=now, engine="e", hook="should_compress", event="call", decision="skip", checked_tokens=3),
            row_from(dict(ts=now, engine="e", hook="compress", event="call", not_a_column="ignored", tokens_before=4)),
        ])
        assert writer.flush(5)
    finally:
        writer.close()
        writer_module.connect = real_connect
    inserts = [s for s in statements if s.startswith("INSERT INTO events")]
    wide = [s for s in inserts if "summary_model" in s]
    assert len(inserts) == 4 and len(wide) == 1 and "VALUES (3," in wide[0], inserts   # only make_row's row is wide
    conn = sqlite3.connect(str(path))
    got = conn.execute("SELECT hook, coalesce(checked_tokens, input_tokens, tokens_before) FROM events "
                       "ORDER BY id").fetchall()
    conn.close()
    assert got == [("should_compress", 1), ("update_from_response", 2), ("should_compress", 3), ("compress", 4)]


def test_the_writer_keeps_up_beside_a_busy_python_thread(tmp_path):
    """Issue 16: executemany releases and takes back the GIL around every row, so beside any busy
    Python thread (the host, or our worker under a backlog) each row waited out the switch interval:
    about 3 ms per row here (2,000 rows took 6-20 s; at 40,000 events/s the store dropped rows). Rows
    now go in as multi-row INSERTs, a few GIL hand-offs per batch."""
    stop = threading.Event()

    def busy():
        x = 0
        while not stop.is_set():
            x += 1

    spinner = threading.Thread(target=busy, daemon=True)
    writer = StoreWriter(tmp_path / "busy.sqlite", flush_interval=0.05)
    try:
        writer.submit([row_from(dict(ts=time.time(), engine="e", hook="should_compress", event="call",
                                     outcome="ok", checked_tokens=0))])
        assert writer.flush(10)                      # the file exists and the schema is made before timing
        spinner.start()
        rows = [row_from(dict(ts=time.time(), engine="e", hook="should_compress", event="call", outcome="ok",
                              checked_tokens=i + 1, decision="skip")) for i in range(2000)]
        t0 = time.monotonic()
        writer.submit(rows)
        assert writer.flush(30)
        took = time.monotonic() - t0
    finally:
        stop.set()
        writer.close()
    assert writer.rows_written == 2001 and writer.rows_dropped == 0
    assert took < 3.0, f"2,000 rows took {took:.1f} s beside a busy thread"


def test_the_writers_page_cache_is_bounded_below_sqlites_default(tmp_path):
    """A long-lived writer caches at most WRITER_CACHE_KIB of pages: with SQLite's 2,000 KiB, a
    gateway's resident memory grew with the file (benchmarks/memory.py: +0.23 MB per 100 sessions;
    flat with 256 KiB). Readers (the dashboard) keep SQLite's default."""
    from observed_engine.store.connection import WRITER_CACHE_KIB

    default = sqlite3.connect(":memory:").execute("PRAGMA cache_size").fetchone()[0]
    path = tmp_path / "s.sqlite"
    writer = connect(path)
    reader = connect(path, readonly=True)
    try:
        assert writer.execute("PRAGMA cache_size").fetchone()[0] == -WRITER_CACHE_KIB
        assert default < -WRITER_CACHE_KIB      # both negative: KiB; the default is -2000
        assert reader.execute("PRAGMA cache_size").fetchone()[0] == default
    finally:
        writer.close()
        reader.close()
    w = StoreWriter(path, retention_days=36500)
    try:
        w.submit([row_from({"ts": time.time(), "engine": "compressor", "hook": "compress", "event": "call"})])
        assert w.flush(10)
        assert w._conn.execute("PRAGMA cache_size").fetchone()[0] == -WRITER_CACHE_KIB
    finally:
        w.close()

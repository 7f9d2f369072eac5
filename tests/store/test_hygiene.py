"""Store hygiene (issue 13, item 4): older stores are migrated, a file that is not ours is
refused and left untouched, and retention deletes in chunks so other writers get in.

Real SQLite files, real threads.
"""

from __future__ import annotations

import hashlib
import logging
import os
import sqlite3
import threading
import time

import pytest
from support.store_rows import count_rows, read_rows

from observed_engine.contract.store_schema import COLUMNS, SCHEMA_SQL, SCHEMA_VERSION, column_type, make_row
from observed_engine.store import StoreWriter, connect


class Counts:
    def __init__(self):
        self.errors = []
        self.drops = []
        self.lock = threading.Lock()

    def on_error(self, component, exc):
        with self.lock:
            self.errors.append(component)

    def on_drop(self, n):
        with self.lock:
            self.drops.append(n)


def _rows(n, **fields):
    return [make_row(**{"ts": time.time(), "engine": "e", "hook": "should_compress", "event": "call",
                        "outcome": "ok", "prompt_tokens": i, **fields}) for i in range(n)]


def _store_logs(caplog, level=logging.WARNING):
    return [r for r in caplog.records if r.name.startswith("observed_engine.store") and r.levelno >= level]


def _snapshot(path):
    d = path.parent
    return sorted(os.listdir(d)), hashlib.sha256(path.read_bytes()).hexdigest()


# -- a file that is not ours ----------------------------------------------------------------------------


def _foreign(path, kind):
    if kind == "not_sqlite":
        path.write_text("[settings]\nname = a config file someone pointed store.path at\n" * 20)
        return
    conn = sqlite3.connect(str(path))
    if kind == "other_tables":
        conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
        conn.execute("INSERT INTO users (name) VALUES ('alice')")
    elif kind == "meta_without_our_key":
        conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)")
        conn.execute("INSERT INTO meta VALUES ('app_version', '3.1')")
    elif kind == "our_key_other_tables_no_events":
        conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)")
        conn.execute("INSERT INTO meta VALUES ('schema_version', '7')")
        conn.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, total REAL)")
    elif kind == "events_not_ours":
        conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)")
        conn.execute("INSERT INTO meta VALUES ('schema_version', '2')")
        conn.execute("CREATE TABLE events (id INTEGER PRIMARY KEY, title TEXT, starts_at TEXT)")
    elif kind == "events_but_no_schema_key":
        conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)")
        conn.execute("CREATE TABLE events (id INTEGER PRIMARY KEY, ts REAL NOT NULL, event TEXT NOT NULL)")
    elif kind == "meta_without_key_column":
        conn.execute("CREATE TABLE meta (name TEXT, data BLOB)")
    conn.commit()
    conn.close()


@pytest.mark.parametrize("kind", ["other_tables", "meta_without_our_key", "our_key_other_tables_no_events",
                                  "events_not_ours", "events_but_no_schema_key", "meta_without_key_column",
                                  "not_sqlite"])
def test_a_file_that_is_not_our_store_is_refused_and_left_untouched(tmp_path, caplog, kind):
    caplog.set_level(logging.INFO, logger="observed_engine")
    path = tmp_path / "someone_elses.db"
    _foreign(path, kind)
    before = _snapshot(path)
    counts = Counts()
    writer = StoreWriter(path, flush_interval=0.02, on_error=counts.on_error, on_drop=counts.on_drop)
    try:
        writer.submit(_rows(5))
        writer.flush(1)
        time.sleep(0.2)                               # more writer cycles: no retry, no second log
        writer.submit(_rows(3))
        writer.flush(1)
        assert writer.rows_written == 0
        assert writer.rows_dropped == 8 and sum(counts.drops) == 8
        assert not writer._queue and not writer._pending        # nothing piles up in memory
    finally:
        writer.close()
    assert _snapshot(path) == before, "the writer changed a file that is not its store"
    assert counts.errors == ["store"]
    logs = _store_logs(caplog)
    assert len(logs) == 1, [r.getMessage() for r in logs]
    assert "not an observed-engine store" in logs[0].getMessage() or "not an SQLite" in logs[0].getMessage()
    if kind != "not_sqlite":
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
        conn.close()


def test_connect_refuses_a_foreign_file_without_touching_it(tmp_path):
    from observed_engine.store import ForeignStoreError

    path = tmp_path / "app.db"
    _foreign(path, "other_tables")
    before = _snapshot(path)
    with pytest.raises(ForeignStoreError):
        connect(path)
    assert _snapshot(path) == before


def test_an_empty_file_and_an_empty_database_become_stores(tmp_path):
    empty = tmp_path / "empty.sqlite"
    empty.touch()
    fresh_db = tmp_path / "fresh.sqlite"
    sqlite3.connect(str(fresh_db)).execute("PRAGMA user_version = 0").connection.close()
    for path in (empty, fresh_db):
        writer = StoreWriter(path, flush_interval=0.02)
        try:
            writer.submit(_rows(2))
            assert writer.flush(5), path
        finally:
            writer.close()
        assert count_rows(path) == 2


# -- migration of older stores ---------------------------------------------------------------------------------


@pytest.mark.parametrize("stored_version", ["0", str(SCHEMA_VERSION)])
def test_an_older_store_gains_every_missing_column_and_keeps_its_rows(tmp_path, caplog, stored_version):
    """An older store lacks some columns of COLUMNS (whichever were added since): every missing
    column is added, the old rows stay, new rows carry every column, meta.schema_version is current."""
    caplog.set_level(logging.INFO, logger="observed_engine")
    path = tmp_path / "old.sqlite"
    required = ("ts", "event")
    missing = [c for c in COLUMNS if c not in required][-4:]      # the newest columns, whatever they are
    kept = [c for c in COLUMNS if c not in missing]
    conn = sqlite3.connect(str(path), isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(SCHEMA_SQL[0])
    types = {"ts": "REAL NOT NULL", "event": "TEXT NOT NULL"}
    conn.execute("CREATE TABLE events (id INTEGER PRIMARY KEY, "
                 + ", ".join(f"{c} {types.get(c, '')}".strip() for c in kept) + ")")
    conn.execute("CREATE INDEX events_ts ON events (ts)")
    conn.execute("INSERT INTO meta VALUES ('schema_version', ?)", (stored_version,))
    conn.executemany("INSERT INTO events (ts, engine, event) VALUES (?, 'old', 'call')",
                     [(time.time(),), (time.time(),)])
    conn.close()

    full = {c: (f"v-{c}" if column_type(c).startswith("TEXT") else 7) for c in COLUMNS}
    full.update(ts=time.time(), event="call", engine="new", duration_s=0.5)
    counts = Counts()
    writer = StoreWriter(path, flush_interval=0.02, on_error=counts.on_error, on_drop=counts.on_drop)
    try:
        writer.submit([make_row(**full)])
        flushed = writer.flush(5)
    finally:
        writer.close()
    assert flushed and writer.rows_written == 1 and counts.errors == []
    conn = sqlite3.connect(str(path))
    cols = [r[1] for r in conn.execute("PRAGMA table_info(events)")]
    assert set(COLUMNS) <= set(cols)
    assert conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0] == str(SCHEMA_VERSION)
    index_names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    assert {"events_ts", "events_engine_hook_ts_cover", "events_session_ts"} <= index_names
    conn.close()
    rows = read_rows(path)
    assert [r["engine"] for r in rows] == ["old", "old", "new"]
    for c in missing:
        assert rows[0][c] is None
        assert rows[2][c] == full[c], c
    migrated = [r for r in caplog.records if r.name.startswith("observed_engine.store") and "added" in r.getMessage()]
    assert len(migrated) == 1 and all(c in migrated[0].getMessage() for c in missing)


def test_a_current_store_is_not_migrated_again(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="observed_engine")
    path = tmp_path / "current.sqlite"
    connect(path).close()
    conn = connect(path)
    conn.close()
    assert not [r for r in caplog.records if r.name.startswith("observed_engine.store")]


def test_a_store_of_a_newer_version_is_written_and_keeps_its_version(tmp_path):
    path = tmp_path / "newer.sqlite"
    connect(path).close()
    conn = sqlite3.connect(str(path))
    conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION + 5),))
    conn.execute("ALTER TABLE events ADD COLUMN from_the_future TEXT")
    conn.commit()
    conn.close()
    writer = StoreWriter(path, flush_interval=0.02)
    try:
        writer.submit(_rows(3))
        assert writer.flush(5)
    finally:
        writer.close()
    assert count_rows(path) == 3
    conn = sqlite3.connect(str(path))
    assert conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0] == str(SCHEMA_VERSION + 5)
    conn.close()


# -- retention in chunks -----------------------------------------------------------------------------------------


def _fill_expired(path, n, age_days):
    """``n`` expired rows, written with one INSERT ... SELECT (the indexes are created afterwards)."""
    conn = sqlite3.connect(str(path), isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("BEGIN")
    for stmt in SCHEMA_SQL[:2]:
        conn.execute(stmt)
    conn.execute("INSERT INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
    conn.execute(
        "INSERT INTO events (ts, host, session, engine, hook, event, outcome, duration_s, cache_lost_tokens) "
        "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < ?) "
        "SELECT ? + i * 1e-3, 'h', 's' || (i % 100), 'e', 'should_compress', 'call', 'ok', 0.001, 0 FROM n",
        (n - 1, time.time() - age_days * 86400))
    for stmt in SCHEMA_SQL[2:]:
        conn.execute(stmt)
    conn.execute("COMMIT")
    conn.close()


def test_retention_chunks_are_sized_by_time_on_a_slow_machine(tmp_path):
    """On a starved or slow machine a 5,000-row delete held the lock for seconds (a CI run saw
    another writer wait 2.35 s). The chunk follows the time each one takes, so no transaction
    of a pass lasts much longer than RETENTION_CHUNK_S, however slow SQLite runs."""
    from observed_engine.store import retention

    path = tmp_path / "slow.sqlite"
    n_expired = 20_000
    _fill_expired(path, n_expired, age_days=30)
    conn = sqlite3.connect(str(path), isolation_level=None)

    def slow():                     # a much slower machine: every 250 SQLite instructions sleep 1 ms
        time.sleep(0.001)
        return 0

    conn.set_progress_handler(slow, 250)
    probe = sqlite3.connect(str(path), isolation_level=None)
    probe.set_progress_handler(slow, 250)
    probe.execute("BEGIN")
    t0 = time.perf_counter()
    probe.execute(retention.RETENTION_SQL, (time.time(), retention.RETENTION_CHUNK))
    full_chunk_s = time.perf_counter() - t0
    probe.execute("ROLLBACK")
    probe.close()
    assert full_chunk_s > 8 * retention.RETENTION_CHUNK_S, full_chunk_s     # the slowdown is real

    r = retention.Retention(14)
    errors, took = [], []
    r.step(conn, lambda *a: errors.append(a))
    passes = 1
    while r.under_way and passes < 10_000:
        t0 = time.perf_counter()
        r.step(conn, lambda *a: errors.append(a))
        took.append(time.perf_counter() - t0)
        passes += 1
    conn.close()
    assert not errors and not r.under_way
    assert count_rows(path) == 0
    assert max(took) < 4 * retention.RETENTION_CHUNK_S < full_chunk_s / 2, (max(took), full_chunk_s)
    assert retention.RETENTION_MIN_CHUNK <= r.chunk < retention.RETENTION_CHUNK


def test_retention_deletes_in_chunks_so_another_writer_gets_in(tmp_path, capsys):
    path = tmp_path / "big.sqlite"
    n_expired = 300_000
    _fill_expired(path, n_expired, age_days=30)
    other = sqlite3.connect(str(path), isolation_level=None, timeout=30)
    writer = StoreWriter(path, retention_days=14, flush_interval=0.05)
    waits, versions = [], set()
    try:
        writer.submit(_rows(1, engine="ours"))    # the first batch opens the store; retention starts
        deadline = time.monotonic() + 60
        remaining = n_expired
        i = 0
        while remaining and time.monotonic() < deadline:
            t0 = time.perf_counter()
            other.execute("BEGIN IMMEDIATE")
            waits.append(time.perf_counter() - t0)
            other.execute("INSERT INTO events (ts, engine, event) VALUES (?, 'other', 'call')", (time.time(),))
            other.execute("COMMIT")
            versions.add(other.execute("PRAGMA data_version").fetchone()[0])
            remaining = other.execute("SELECT COUNT(*) FROM events WHERE ts < ?",
                                      (time.time() - 14 * 86400,)).fetchone()[0]
            i += 1
            time.sleep(0.002)
        assert remaining == 0, "retention did not finish"
        assert writer.flush(10)
    finally:
        writer.close()
        other.close()
    assert count_rows(path, "engine = 'ours'") == 1
    assert count_rows(path, "engine = 'other'") == i
    assert count_rows(path) == i + 1
    # the writer committed many short deletes (each seen as a change by the other connection)...
    assert len(versions) >= 10, (len(versions), i)
    # ...so the other writer never waited for the whole delete
    assert max(waits) < 0.5, sorted(waits)[-5:]
    with capsys.disabled():
        print(f"\n[store] retention of {n_expired} rows: {len(versions)} commits seen by another writer, "
              f"which made {i} inserts meanwhile, longest wait for the lock {max(waits) * 1000:.0f} ms")


def test_a_relative_store_path_is_relative_to_hermes_home_not_the_current_directory(
        hermes_home, tmp_path, monkeypatch):
    """``store.path: telemetry/obs.sqlite`` landed in the current directory of whichever process
    ran (a gateway started from /, a cron job, a one-shot CLI in a project directory): one store
    per directory, none where the dashboard looks. It is HERMES_HOME's, like config.yaml."""
    from support.engines import NarrowEngine

    import observed_engine
    from observed_engine import observe
    from observed_engine.api import pipeline_of
    from observed_engine.settings import Settings

    elsewhere = tmp_path / "some-project"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    settings = {"store": {"path": "telemetry/obs.sqlite"}}
    expected = hermes_home / "telemetry" / "obs.sqlite"
    assert Settings.from_mapping(settings).store_path(hermes_home) == expected
    engine = observe(NarrowEngine(), settings=settings)
    engine.should_compress(1)
    assert observed_engine.flush(10.0)
    assert pipeline_of(engine).store.path == expected
    assert count_rows(expected) == 1
    assert not (elsewhere / "telemetry").exists()
    # an absolute path and ~ stay as they are
    assert Settings.from_mapping({"store": {"path": str(tmp_path / "abs.sqlite")}}).store_path(hermes_home) \
        == tmp_path / "abs.sqlite"
    monkeypatch.setenv("HOME", str(tmp_path))
    assert Settings.from_mapping({"store": {"path": "~/x.sqlite"}}).store_path(hermes_home) == tmp_path / "x.sqlite"

"""Store paths with URI characters (``#``, ``?``, ``%``) opened read-only (issue 13, item 3).

``connect(path, readonly=True)`` builds a ``file:`` URI; unquoted, a ``#`` ends the
path (``.../C#proj/x.sqlite`` opened ``.../C`` read-write, creating it) and a ``?``
starts the query. Real directories with those names.
"""

from __future__ import annotations

import os
import sqlite3
import time

import pytest

from observed_engine.contract.store_schema import make_row
from observed_engine.store import StoreWriter, connect


@pytest.mark.parametrize("dirname", ["C#proj", "a?b", "50%", "x%23y", "sp ace&amp;=;"])
def test_read_only_open_of_a_store_under_a_directory_with_uri_characters(tmp_path, dirname):
    base = tmp_path / "base"
    base.mkdir()
    d = base / dirname
    d.mkdir()
    path = d / "telemetry.sqlite"
    writer = StoreWriter(path, flush_interval=0.05)
    try:
        writer.submit([make_row(ts=time.time(), engine="e", event="call", prompt_tokens=i) for i in range(3)])
        assert writer.flush(5)
    finally:
        writer.close()
    before = sorted(os.listdir(base))

    conn = connect(path, readonly=True)
    try:
        assert conn.execute("SELECT COUNT(*) FROM events").fetchone()[0] == 3
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            conn.execute("INSERT INTO events (ts, event) VALUES (1, 'call')")
    finally:
        conn.close()
    assert sorted(os.listdir(base)) == before, "the read-only open created a file"
    # a reader of a WAL store may create its -wal/-shm; nothing else
    assert {n for n in os.listdir(d) if not n.startswith("telemetry.sqlite")} == set()


def test_read_only_open_of_a_missing_store_creates_nothing(tmp_path):
    base = tmp_path / "base"
    d = base / "C#proj"
    d.mkdir(parents=True)
    with pytest.raises(sqlite3.OperationalError):
        connect(d / "telemetry.sqlite", readonly=True).execute("SELECT 1 FROM events")
    assert os.listdir(base) == ["C#proj"] and os.listdir(d) == []


def test_read_only_open_of_a_relative_path(tmp_path, monkeypatch):
    d = tmp_path / "rel?dir"
    d.mkdir()
    connect(d / "t.sqlite").close()
    monkeypatch.chdir(tmp_path)
    conn = connect("rel?dir/t.sqlite", readonly=True)
    try:
        assert conn.execute("SELECT COUNT(*) FROM events").fetchone()[0] == 0
    finally:
        conn.close()

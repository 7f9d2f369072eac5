"""The store file deleted or replaced while a writer runs (issue 13, item 2).

The writer compares the path's (st_dev, st_ino) with the file it has open at each
batch and reopens (recreating the store) when they differ, logging once. Opening a
store whose main file is gone but whose -wal/-shm are still there sets those aside
so a new store can be created. Real SQLite files, real processes.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

from support.paths import REPO
from support.store_rows import count_rows

from observed_engine.contract.store_schema import make_row
from observed_engine.store import StoreWriter, connect


def _rows(engine, n, start=0):
    return [make_row(ts=time.time(), engine=engine, hook="should_compress", event="call", outcome="ok",
                     prompt_tokens=start + i) for i in range(n)]


class Errors:
    def __init__(self):
        self.items = []
        self.lock = threading.Lock()

    def __call__(self, component, exc):
        with self.lock:
            self.items.append(component)


def _replaced_logs(caplog):
    return [r for r in caplog.records if r.name.startswith("observed_engine.store") and "replaced" in r.getMessage()]


def test_store_deleted_while_running_is_recreated_and_logged_once(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="observed_engine")
    path = tmp_path / "deleted.sqlite"
    errors = Errors()
    writer = StoreWriter(path, flush_interval=0.05, on_error=errors)
    try:
        writer.submit(_rows("before", 3))
        assert writer.flush(5)
        os.unlink(path)                           # the -wal/-shm stay (this writer has them open)
        writer.submit(_rows("after", 4))
        assert writer.flush(5)
        assert path.exists(), "rows went into the unlinked file"
        assert count_rows(path) == 4
        assert count_rows(path, "engine = 'after'") == 4
        os.unlink(path)                           # once more: recreated again, not logged again
        writer.submit(_rows("again", 2))
        assert writer.flush(5)
        assert count_rows(path) == 2
        assert writer.rows_written == 9 and writer.rows_dropped == 0
    finally:
        writer.close()
    assert errors.items == ["store", "store"]
    assert len(_replaced_logs(caplog)) == 1, [r.getMessage() for r in caplog.records]
    conn = sqlite3.connect(str(path))
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    conn.close()


def test_store_replaced_by_another_file_while_running_writes_into_the_new_file(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="observed_engine")
    path = tmp_path / "replaced.sqlite"
    other = tmp_path / "restored.sqlite"
    writer = StoreWriter(path, flush_interval=0.05)
    try:
        writer.submit(_rows("old", 3))
        assert writer.flush(5)
        conn = connect(other)
        conn.executemany("INSERT INTO events (ts, engine, event) VALUES (?, 'restored', 'call')", [(1.0,), (2.0,)])
        conn.close()
        os.replace(other, path)
        writer.submit(_rows("new", 4))
        assert writer.flush(5)
    finally:
        writer.close()
    assert count_rows(path, "engine = 'restored'") == 2
    assert count_rows(path, "engine = 'new'") == 4
    assert count_rows(path) == 6
    assert len(_replaced_logs(caplog)) == 1


def test_store_renamed_while_running_keeps_its_rows_and_a_new_store_is_created(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="observed_engine")
    path = tmp_path / "telemetry.sqlite"
    moved = tmp_path / "telemetry-2026-11.sqlite"
    writer = StoreWriter(path, flush_interval=0.05)
    try:
        writer.submit(_rows("before", 3))
        assert writer.flush(5)
        os.rename(path, moved)                       # log rotation by hand
        writer.submit(_rows("after", 4))
        assert writer.flush(5)
        assert count_rows(path) == 4 and count_rows(path, "engine = 'after'") == 4
    finally:
        writer.close()
    assert count_rows(moved) == 3 and count_rows(moved, "engine = 'before'") == 3
    assert len(_replaced_logs(caplog)) == 1


def test_a_stale_wal_and_shm_without_their_main_file_are_set_aside(tmp_path, caplog):
    """A process killed with the store open leaves -wal/-shm; then the main file is removed."""
    caplog.set_level(logging.INFO, logger="observed_engine")
    path = tmp_path / "orphans.sqlite"
    code = (f"import os, sys; sys.path.insert(0, {str(REPO)!r})\n"
            "from observed_engine.store import connect\n"
            f"c = connect({str(path)!r})\n"
            "c.executemany(\"INSERT INTO events (ts, engine, event) VALUES (?, 'killed', 'call')\", [(1.0,), (2.0,)])\n"
            "os._exit(0)\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
    assert Path(f"{path}-wal").exists() and Path(f"{path}-shm").exists()
    os.unlink(path)
    writer = StoreWriter(path, flush_interval=0.05)
    try:
        writer.submit(_rows("fresh", 2))
        assert writer.flush(5)
    finally:
        writer.close()
    assert count_rows(path) == 2, "rows of the deleted store came back from its stale -wal"
    assert count_rows(path, "engine = 'fresh'") == 2
    aside = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("orphans.sqlite-") and "orphan" in p.name[15:])
    assert aside == ["orphans.sqlite-shm.orphaned", "orphans.sqlite-wal.orphaned"], sorted(os.listdir(tmp_path))
    assert len([r for r in caplog.records if r.name.startswith("observed_engine.store") and "stale" in r.getMessage()]) == 1


_PROCESS_A = """
import json, os, sys, time
sys.path.insert(0, {root!r})
from observed_engine.store import StoreWriter
from observed_engine.contract.store_schema import make_row
w = StoreWriter({path!r}, flush_interval=0.02)
n = 0
for line in sys.stdin:
    cmd = line.split()
    if cmd[0] == "write":
        k = int(cmd[1])
        w.submit([make_row(ts=time.time(), engine="A", event="call", prompt_tokens=n + i) for i in range(k)])
        n += k
        ok = w.flush(10)
        print(json.dumps({{"flushed": ok, "written": w.rows_written, "dropped": w.rows_dropped}}), flush=True)
    else:
        break
w.close()
"""


def test_store_deleted_under_a_live_process_next_process_starts_fresh_and_both_write(tmp_path):
    """Process A has the store open; the main file is removed (its -wal/-shm stay); process B
    opens the path: B must not fail with "disk I/O error", and A, noticing, must join B's new
    file without removing B's -wal/-shm (which would hide B's rows from every new reader)."""
    path = tmp_path / "shared.sqlite"
    proc = subprocess.Popen([sys.executable, "-c", _PROCESS_A.format(root=str(REPO), path=str(path))],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def a(cmd):
        proc.stdin.write(cmd + "\n")
        proc.stdin.flush()
        return json.loads(proc.stdout.readline())

    writer_b = None
    try:
        assert a("write 5") == {"flushed": True, "written": 5, "dropped": 0}
        os.unlink(path)                                      # A still has the file, its -wal and -shm open
        writer_b = StoreWriter(path, flush_interval=0.02)
        writer_b.submit(_rows("B", 5))
        assert writer_b.flush(10), "the next process could not write the recreated store"
        assert count_rows(path, "engine = 'B'") == 5
        assert a("write 3") == {"flushed": True, "written": 8, "dropped": 0}
        writer_b.submit(_rows("B", 5, 5))
        assert writer_b.flush(10)
        # B is still open (its rows are in its -wal): a new reader sees both processes' rows
        assert count_rows(path, "engine = 'B'") == 10
        assert count_rows(path, "engine = 'A'") == 3
        assert a("write 2")["flushed"]
        assert count_rows(path, "engine = 'A'") == 5
        proc.stdin.write("quit\n")
        proc.stdin.close()
        assert proc.wait(30) == 0
        # A has exited (its connection to the deleted file closed with it): B's -wal is still
        # there, so a new reader still sees B's rows, and B goes on writing
        assert count_rows(path, "engine = 'B'") == 10
        writer_b.submit(_rows("B", 5, 10))
        assert writer_b.flush(10)
        assert count_rows(path, "engine = 'B'") == 15
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
        if writer_b is not None:
            writer_b.close()
    err = proc.stderr.read()
    proc.stderr.close()
    proc.stdout.close()
    assert count_rows(path, "engine = 'B'") == 15
    assert count_rows(path, "engine = 'A'") == 5
    conn = sqlite3.connect(str(path))
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    conn.close()
    assert err.count("replaced") == 1, err


def test_a_relative_store_path_is_not_taken_for_a_replaced_file_after_a_chdir(tmp_path, monkeypatch, caplog):
    caplog.set_level(logging.INFO, logger="observed_engine")
    work = tmp_path / "work"
    elsewhere = tmp_path / "elsewhere"
    work.mkdir()
    elsewhere.mkdir()
    monkeypatch.chdir(work)
    writer = StoreWriter("rel/telemetry.sqlite", flush_interval=0.05)
    try:
        writer.submit(_rows("a", 2))
        assert writer.flush(5)
        monkeypatch.chdir(elsewhere)                 # the host changes its working directory
        writer.submit(_rows("b", 3))
        assert writer.flush(5)
    finally:
        writer.close()
    assert count_rows(work / "rel" / "telemetry.sqlite") == 5
    assert not (elsewhere / "rel").exists()
    assert not _replaced_logs(caplog)

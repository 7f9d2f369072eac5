"""The store writer and rows it cannot store as they are (issue 13, item 1).

A lone surrogate in a TEXT value (a session id or tool name decoded with
``surrogateescape``) used to fail the batch forever: nothing later was written for
any session. Text is now made storable once (lone surrogates -> U+FFFD); a row that
still cannot be stored is skipped, counted as a dropped ``store_row`` and logged
once, and the rest of its batch is written. Real SQLite files, the real writer thread.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time

from support.store_rows import read_rows

from observed_engine.contract.store_schema import COLUMNS, make_row
from observed_engine.store import StoreWriter


def _row(i, **fields):
    base = dict(ts=time.time(), engine="e", hook="should_compress", event="call", outcome="ok", prompt_tokens=i)
    base.update(fields)
    return make_row(**base)


class Counts:
    def __init__(self):
        self.errors = []
        self.drops = []
        self.lock = threading.Lock()

    def on_error(self, component, exc):
        with self.lock:
            self.errors.append((component, exc))

    def on_drop(self, n):
        with self.lock:
            self.drops.append(n)


def _store_records(caplog):
    return [r for r in caplog.records if r.name.startswith("observed_engine.store")]


def test_lone_surrogates_are_stored_once_as_replacement_characters_and_later_rows_follow(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="observed_engine")
    path = tmp_path / "surrogates.sqlite"
    counts = Counts()
    writer = StoreWriter(path, flush_interval=0.05, on_error=counts.on_error, on_drop=counts.on_drop)
    try:
        writer.submit([_row(0, session="sess-a"),
                       _row(1, session="sess-\udcff", reason="tool_\udcfe\udcff", content="x\ud83d\ude00y\ud800"),
                       _row(2, session="sess-a")])
        assert writer.flush(5), "a lone surrogate blocked the batch"
        writer.submit([_row(i, session="sess-b") for i in range(3, 10)])
        assert writer.flush(5), "rows after the surrogate batch were not written"
        assert writer.rows_written == 10 and writer.rows_dropped == 0
        assert counts.drops == []
    finally:
        writer.close()
    rows = read_rows(path)
    assert [r["prompt_tokens"] for r in rows] == list(range(10))
    bad = rows[1]
    assert bad["session"] == "sess-\ufffd"
    assert bad["reason"] == "tool_\ufffd\ufffd"
    assert bad["content"] == "x\U0001F600y\ufffd"         # a surrogate pair is joined, a lone one replaced
    assert rows[0]["session"] == rows[2]["session"] == "sess-a"
    assert len([r for r in _store_records(caplog) if r.levelno >= logging.WARNING]) == 1


def test_a_row_that_cannot_be_stored_is_skipped_counted_and_logged_once(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="observed_engine")
    path = tmp_path / "skipped.sqlite"
    counts = Counts()
    writer = StoreWriter(path, flush_interval=0.05, on_error=counts.on_error, on_drop=counts.on_drop)
    short = ("only", "three", "values")                         # wrong number of bindings
    try:
        writer.submit([_row(0), _row(1, ts=None), _row(2), short, _row(3, event=None), _row(4)])
        assert writer.flush(5), "a row that can never be stored blocked its batch"
        writer.submit([_row(5), None, _row(6)])
        assert writer.flush(5)
        writer.submit([_row(7)])
        assert writer.flush(5)
        assert writer._thread.is_alive()
        assert writer.rows_written == 6
        assert writer.rows_dropped == 4
        assert sum(counts.drops) == 4
    finally:
        writer.close()
    assert [r["prompt_tokens"] for r in read_rows(path)] == [0, 2, 4, 5, 6, 7]
    skipped = [r for r in _store_records(caplog) if "skipped" in r.getMessage()]
    assert len(skipped) == 1, [r.getMessage() for r in _store_records(caplog)]
    assert len([r for r in _store_records(caplog) if r.levelno >= logging.WARNING]) == 1


def test_every_text_column_takes_a_lone_surrogate(tmp_path):
    path = tmp_path / "columns.sqlite"
    text_columns = [c for c in COLUMNS if c in ("host", "session", "engine", "hook", "event", "outcome",
                                                "reason", "tokenizer", "content")]
    writer = StoreWriter(path, flush_interval=0.05)
    try:
        for i, col in enumerate(text_columns):
            writer.submit([_row(i, **{col: f"{col}\udcff"})])
            assert writer.flush(5), col
        writer.submit([_row(99)])
        assert writer.flush(5)
    finally:
        writer.close()
    rows = read_rows(path)
    assert len(rows) == len(text_columns) + 1
    for row, col in zip(rows, text_columns):
        assert row[col] == f"{col}\ufffd"


def test_a_locked_file_still_keeps_and_retries_a_batch_with_a_bad_row(tmp_path, caplog):
    """The data fallback is not taken for a lock: the batch (bad row and all) is kept, then
    written once the lock is gone, only the bad row skipped."""
    caplog.set_level(logging.INFO, logger="observed_engine")
    path = tmp_path / "locked.sqlite"
    counts = Counts()
    writer = StoreWriter(path, flush_interval=0.05, on_error=counts.on_error, on_drop=counts.on_drop)
    holder = None
    try:
        writer.submit([_row(0)])
        assert writer.flush(5)
        holder = sqlite3.connect(str(path), isolation_level=None, timeout=10)
        holder.execute("BEGIN EXCLUSIVE")
        writer.submit([_row(1), _row(2, ts=None), _row(3, session="s\udcff")])
        deadline = time.monotonic() + 15
        while not counts.errors and time.monotonic() < deadline:       # the busy timeout ran out once
            time.sleep(0.05)
        assert counts.errors, "the lock was never reported"
        assert writer.rows_written == 1 and writer.rows_dropped == 0 and counts.drops == []
        holder.execute("COMMIT")
        holder.close()
        holder = None
        assert writer.flush(10)
        assert writer.rows_written == 3 and writer.rows_dropped == 1 and counts.drops == [1]
    finally:
        if holder is not None:
            holder.execute("ROLLBACK")
            holder.close()
        writer.close()
    assert [(r["prompt_tokens"], r["session"]) for r in read_rows(path)] == [(0, None), (1, None), (3, "s\ufffd")]
    messages = [r.getMessage() for r in _store_records(caplog)]
    assert len([m for m in messages if "failed (write)" in m and "locked" in m]) == 1, messages


def test_named_rows_that_cannot_be_stored_are_skipped_and_the_others_keep_their_order(tmp_path):
    """The worker's rows (store_schema.row_from) in every broken form next to good ones, in one batch:
    a name twice, more names than values, an unhashable name, a non-string name, a value SQLite cannot
    store. The broken ones are skipped and counted, the good ones written in the order they came."""
    from observed_engine.contract.store_schema import row_from

    def good(i, **extra):
        return row_from(dict(ts=time.time(), engine="e", hook="should_compress", event="call",
                             prompt_tokens=i, **extra))

    counts = Counts()
    path = tmp_path / "named.sqlite"
    writer = StoreWriter(path, flush_interval=0.05, on_error=counts.on_error, on_drop=counts.on_drop)
    try:
        writer.submit([
            good(0),
            (("ts", "event", "ts"), (time.time(), "call", time.time())),          # a name twice
            good(1, decision="skip"),
            (("ts", "event", "engine"), (time.time(), "call")),                    # fewer values than names
            ((["ts"], "event"), (time.time(), "call")),                            # an unhashable name
            good(2, session="s\udcff"),                                            # repaired, kept
            ((1, "event"), (time.time(), "call")),                                 # not a string: left out -> no ts
            good(3, not_a_column="dropped"),
            ((), ()),                                                              # nothing at all
            good(4),
        ])
        assert writer.flush(10)
    finally:
        writer.close()
    rows = read_rows(path)
    assert [r["prompt_tokens"] for r in rows] == [0, 1, 2, 3, 4]
    assert rows[2]["session"] == "s\ufffd" and rows[1]["decision"] == "skip"
    assert writer.rows_dropped == 5 == sum(counts.drops)

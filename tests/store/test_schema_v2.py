"""Schema version 2 (issue 15): a version-1 store gains the decision, summary-model and cache-rewrite
columns, keeps its rows, and takes rows with them. Opened by a newer writer it is migrated to the
current version (3 added the prune and turn columns) in the same step."""

import sqlite3
import time

from support.store_rows import read_rows

from observed_engine.contract.store_schema import SCHEMA_VERSION, make_row
from observed_engine.store import StoreWriter

V1_COLUMNS = (
    "ts", "host", "pid", "session", "engine", "hook", "event", "outcome", "reason",
    "duration_s", "prompt_tokens", "threshold_tokens", "window_tokens",
    "tokens_before", "tokens_after", "messages_before", "messages_after",
    "cache_lost_tokens", "input_tokens", "output_tokens", "cache_read_tokens",
    "cache_write_tokens", "reasoning_tokens", "tokenizer", "content",
)
V1_TEXT = {"host", "session", "engine", "hook", "outcome", "reason", "tokenizer", "content"}
NEW = ("checked_tokens", "decision", "summary_model", "summary_provider",
       "summary_input_tokens", "summary_output_tokens", "cache_rewrite_tokens")


def test_a_version_1_store_gains_the_issue_15_columns(tmp_path):
    path = tmp_path / "v1.sqlite"
    conn = sqlite3.connect(str(path), isolation_level=None)
    conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)")
    cols = ", ".join(f"{c} {'REAL NOT NULL' if c == 'ts' else 'TEXT NOT NULL' if c == 'event' else 'REAL' if c == 'duration_s' else 'TEXT' if c in V1_TEXT else 'INTEGER'}"
                     for c in V1_COLUMNS)
    conn.execute(f"CREATE TABLE events (id INTEGER PRIMARY KEY, {cols})")
    conn.execute("INSERT INTO meta VALUES ('schema_version', '1')")
    conn.execute("INSERT INTO events (ts, engine, hook, event) VALUES (?, 'old', 'should_compress', 'call')", (time.time(),))
    conn.close()

    assert SCHEMA_VERSION >= 2
    writer = StoreWriter(path, flush_interval=0.02)
    try:
        writer.submit([make_row(ts=time.time(), engine="new", hook="should_compress", event="call",
                                checked_tokens=57_600, decision="skip", threshold_tokens=54_400,
                                reason="summary_cooldown"),
                       make_row(ts=time.time(), engine="new", hook="compress", event="call",
                                summary_model="summary-m", summary_provider="custom",
                                summary_input_tokens=900, summary_output_tokens=120)])
        assert writer.flush(5)
    finally:
        writer.close()
    conn = sqlite3.connect(str(path))
    have = {r[1]: r[2] for r in conn.execute("PRAGMA table_info(events)")}
    assert conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0] == str(SCHEMA_VERSION)
    conn.close()
    assert set(NEW) <= set(have)
    assert have["decision"] == "TEXT" and have["summary_model"] == "TEXT" and have["checked_tokens"] == "INTEGER"
    rows = read_rows(path)
    assert [r["engine"] for r in rows] == ["old", "new", "new"]
    assert all(rows[0][c] is None for c in NEW)
    assert (rows[1]["checked_tokens"], rows[1]["decision"], rows[1]["threshold_tokens"]) == (57_600, "skip", 54_400)
    assert (rows[2]["summary_model"], rows[2]["summary_input_tokens"]) == ("summary-m", 900)

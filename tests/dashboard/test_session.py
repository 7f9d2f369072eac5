"""Issue 15 items 6 and 7 under AppTest: one session end to end (the Session timeline tab, opened
by ``?session=<id>``), the headline figures of a focused session, "Active sessions", the range
fitted to a young store, usage above the window explained, the empty state's demo store, legends.

The stores are written row by row (``store_schema.make_row``), one with the columns the engine
adds for issue 15 (``checked_tokens``, ``decision``, ``summary_model``) and one of the older
schema without them."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest
from support.dashboard_app import app, chart_specs, frame_with, metrics, run_ok, show, texts, write_store

from observed_engine.contract import vocabulary as v
from observed_engine.contract.store_schema import COLUMNS, SCHEMA_SQL, demo_store_path, make_row

SESSION = "sess-A *bold* [x](http://example.invalid) `tick`"      # markup that must stay text
OPEN_SESSION = "sess-B"
BLOCKED_SESSION = "sess-C"          # blocked, still
TAB = "Session timeline"


def _r(ts, hook, event=v.EVENT_CALL, session=SESSION, **kw):
    kw.setdefault("engine", "compressor")
    return make_row(ts=ts, host="h", pid=1, session=session, hook=hook, event=event, **kw)


def session_rows(t0: float) -> list:
    """One session: a skip, a compression (summary by demo-model), a summary failure that starts the
    cooldown, a check declined while blocked, the prompt at 150 % of the window, the block's end,
    a timeout, a fail-open, the session's end; and a second session that has not ended."""
    w, th = 64_000, 54_400
    return [
        _r(t0 + 0, "update_model", outcome="ok", duration_s=0.0001),
        _r(t0 + 1, "on_session_start", outcome="ok", duration_s=0.0001),
        _r(t0 + 2, "update_from_response", outcome="ok", prompt_tokens=30_000, threshold_tokens=th,
           window_tokens=w, input_tokens=30_000, cache_read_tokens=27_000, duration_s=0.0002),
        _r(t0 + 3, "should_compress", outcome="ok", checked_tokens=30_000, decision=v.DECISION_SKIP,
           reason=v.DECISION_BELOW_THRESHOLD, threshold_tokens=th, duration_s=0.0001),
        _r(t0 + 4, "should_defer_preflight_to_real_usage", outcome="ok", checked_tokens=30_500,
           decision=v.DECISION_ESTIMATE, duration_s=0.0001),
        _r(t0 + 5, "update_from_response", outcome="ok", prompt_tokens=58_000, threshold_tokens=th,
           window_tokens=w, duration_s=0.0002),
        _r(t0 + 6, "should_compress", outcome="ok", checked_tokens=58_000, decision=v.DECISION_COMPRESS,
           reason=v.DECISION_AT_THRESHOLD, duration_s=0.0001),
        _r(t0 + 7, "compress", outcome=v.COMPRESSED, tokens_before=57_000, tokens_after=20_000,
           messages_before=40, messages_after=8, duration_s=1.25, summary_model="demo-model",
           summary_input_tokens=37_000, summary_output_tokens=900, cache_rewrite_tokens=12_000),
        _r(t0 + 8, "compress", event=v.EVENT_SUMMARY_FAILURE, outcome=v.ABORTED, reason="auth"),
        _r(t0 + 8.5, "compress", event=v.EVENT_COMPRESSION_BLOCKED, outcome=v.BLOCK_STARTED,
           reason=v.BLOCKED_SUMMARY_COOLDOWN),
        _r(t0 + 9, "should_compress", outcome="ok", checked_tokens=70_000, decision=v.DECISION_SKIP,
           reason=v.BLOCKED_SUMMARY_COOLDOWN, duration_s=0.0001),
        _r(t0 + 10, "update_from_response", outcome="ok", prompt_tokens=96_000, threshold_tokens=th,
           window_tokens=w, cache_read_tokens=24_000, duration_s=0.0002),
        _r(t0 + 11, "compress", event=v.EVENT_COMPRESSION_BLOCKED, outcome=v.BLOCK_ENDED,
           reason=v.BLOCKED_SUMMARY_COOLDOWN),
        _r(t0 + 12, "compress", event=v.DEADLINE_EXCEEDED, outcome=v.TIMEOUT, reason=v.DEADLINE_EXCEEDED,
           duration_s=3.0),
        _r(t0 + 13, "select_context", event=v.FAIL_OPEN, outcome=v.FAIL_OPEN, reason="invalid_return",
           duration_s=0.0001),
        _r(t0 + 14, "on_session_end", outcome="ok", duration_s=0.0001),
        _r(t0 + 5, "update_from_response", session=OPEN_SESSION, outcome="ok", prompt_tokens=1000,
           threshold_tokens=th, window_tokens=w, duration_s=0.0002),
        _r(t0 + 6, "compress", session=BLOCKED_SESSION, event=v.EVENT_COMPRESSION_BLOCKED, outcome=v.BLOCK_STARTED,
           reason=v.BLOCKED_SUMMARY_COOLDOWN),
    ]


EXPECTED_WHAT = ["ok", "ok", "ok", "skip", "estimate", "ok", "compress", "compressed", "summary aborted",
                 "blocked started", "skip", "ok", "blocked ended", "timeout", "fail_open", "ok"]


@pytest.fixture
def store(tmp_path) -> Path:
    path = tmp_path / "observed" / "telemetry.sqlite"
    path.parent.mkdir(parents=True)
    return write_store(path, session_rows(time.time() - 300))


def old_store(path: Path, rows) -> Path:
    """A store of the schema before issue 15: no checked_tokens, decision, summary_model columns."""
    old = [c for c in COLUMNS if c not in ("checked_tokens", "decision", "summary_model", "summary_provider",
                                           "summary_input_tokens", "summary_output_tokens",
                                           "cache_rewrite_tokens")]
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)")
    conn.execute("INSERT INTO meta VALUES ('schema_version', '1')")
    conn.execute("CREATE TABLE events (id INTEGER PRIMARY KEY, "
                 + ", ".join(f"{c} {'REAL' if c in ('ts', 'duration_s') else 'TEXT' if c in ('host', 'session', 'engine', 'hook', 'event', 'outcome', 'reason', 'tokenizer', 'content') else 'INTEGER'}" for c in old) + ")")
    for stmt in SCHEMA_SQL[2:]:
        conn.execute(stmt)
    idx = [COLUMNS.index(c) for c in old]
    conn.executemany(f"INSERT INTO events ({', '.join(old)}) VALUES ({', '.join('?' for _ in old)})",
                     [tuple(r[i] for i in idx) for r in rows])
    conn.commit()
    conn.close()
    return path


def open_timeline(monkeypatch, path: Path, session: str = SESSION):
    at = app(monkeypatch, store=path)
    at.query_params["session"] = session
    run_ok(at)
    return show(at, TAB)


def test_timeline_of_one_session_by_link(monkeypatch, store):
    at = open_timeline(monkeypatch, store)
    assert at.selectbox(key="session").value == SESSION          # the link focused it
    table = frame_with(at, "what")
    assert list(table["what"]) == EXPECTED_WHAT
    assert list(table["hook"])[:3] == ["update_model", "on_session_start", "update_from_response"]
    comp = table[table["what"] == "compressed"].iloc[0]
    assert (comp["tokens before"], comp["tokens after"], comp["messages before"], comp["messages after"]) == \
        (57_000, 20_000, 40, 8)
    assert comp["summary model"] == "demo-model" and comp["ms"] == pytest.approx(1250.0)
    checks = table[table["hook"] == "should_compress"]
    assert list(checks["tokens"]) == [30_000, 58_000, 70_000]
    assert list(checks["reason"]) == [v.DECISION_BELOW_THRESHOLD, v.DECISION_AT_THRESHOLD, v.BLOCKED_SUMMARY_COOLDOWN]
    first = table[table["hook"] == "update_from_response"].iloc[0]
    assert first["cache read"] == 27_000 and first["cache hit"] == pytest.approx(0.9)
    assert (comp["summary tokens in"], comp["summary tokens out"]) == (37_000, 900)
    # the blocked period: its own table and a shaded band on the chart
    blocked = frame_with(at, "blocked from")
    assert list(blocked["reason"]) == [v.BLOCKED_SUMMARY_COOLDOWN] and not blocked["still blocked"].iloc[0]
    names = [[lay.get("data", {}).get("name") for lay in s.get("layer", [])] for s in chart_specs(at)]
    assert ["blocked", "rows"] in names, names
    shown = texts(at)
    assert "16 hook call" not in shown                      # events are not calls
    assert "1 compression of 1 compress() calls" in shown and "1 fail-open" in shown
    assert "1 blocked period" in shown and "ended" in shown


def test_focused_session_scopes_the_headline(monkeypatch, store):
    at = open_timeline(monkeypatch, store)
    m = metrics(at)
    assert m["Session"] == "ended"
    assert (m["Compressions"], m["Compression timeouts"], m["Fail-opens"], m["Summary failures"]) == \
        ("1", "1", "1", "1")
    assert m["Context usage"] == "150%"
    usage = next(x for x in at.metric if x.label == "Context usage")
    assert "outgrew the model's window" in usage.help and "blocked" in usage.help
    assert "stay fleet-wide" in texts(at)                    # says which views are not scoped


def test_identifiers_are_literal_text(monkeypatch, store):
    at = open_timeline(monkeypatch, store)
    raw = "\n".join(e.value for e in [*at.markdown, *at.caption])
    assert "`` sess-A *bold* [x](http://example.invalid) `tick` ``" in raw     # a code span, never markup
    assert SESSION in texts(at)


def test_timeline_on_a_store_without_the_new_columns(monkeypatch, tmp_path):
    path = old_store(tmp_path / "old.sqlite", session_rows(time.time() - 300))
    at = open_timeline(monkeypatch, path)
    table = frame_with(at, "what")
    assert len(table) == len(EXPECTED_WHAT)
    assert table["summary model"].isna().all()
    assert list(table[table["hook"] == "should_compress"]["what"]) == ["ok", "ok", "ok"]   # no decision known


def test_active_sessions_are_the_ones_not_ended(monkeypatch, store):
    at = run_ok(app(monkeypatch, store=store))
    m = metrics(at)
    assert m["Active sessions"] == "2"                       # sess-A ended, sess-B and sess-C did not
    help_ = next(x for x in at.metric if x.label == "Active sessions").help
    assert "1 of the 3" in help_
    highest = next(x for x in at.metric if x.label == "Highest context usage")
    assert highest.value == "150%" and "outgrew" in highest.help


def test_session_tab_without_a_session_lists_links(monkeypatch, store):
    at = show(run_ok(app(monkeypatch, store=store)), TAB)
    links = frame_with(at, "state")
    assert set(links["state"]) == {"ended", "open"}
    assert all(href.startswith("?session=") for href in links["session"])
    assert "?session=sess-B" in list(links["session"])


def test_incident_table_links_to_the_timeline(monkeypatch, store):
    at = show(run_ok(app(monkeypatch, store=store)), "Alerts & incidents")
    inc = frame_with(at, "timeline")
    assert set(inc["session"]) == {SESSION}                  # the id itself, as text
    assert set(inc["timeline"]) == {"?session=sess-A%20%2Abold%2A%20%5Bx%5D%28http%3A%2F%2Fexample.invalid"
                                    "%29%20%60tick%60"}


def test_young_store_fills_the_range(monkeypatch, store):
    now = time.time()
    at = show(run_ok(app(monkeypatch, store=store)), "Compressions")   # default: last 6 hours
    assert "the data begins" in texts(at)
    spec = next(s for s in chart_specs(at) if s.get("encoding", {}).get("x2"))
    lo, hi = spec["encoding"]["x"]["scale"]["domain"]
    assert hi / 1000 - lo / 1000 < 1200, (lo, hi)            # minutes, not 6 hours
    assert lo / 1000 <= now - 300 + 1


def test_legends_are_not_cut_off(monkeypatch, store):
    at = show(run_ok(app(monkeypatch, store=store)), "Compressions")
    legends = [s["encoding"]["color"]["legend"] for s in chart_specs(at)
               if isinstance(s.get("encoding", {}).get("color", {}).get("legend"), dict)]
    assert legends and all(lg["labelLimit"] == 0 and lg.get("columns") for lg in legends)


def test_usage_view_explains_the_token_numbers(monkeypatch, store):
    at = run_ok(app(monkeypatch, store=store))
    shown = texts(at)
    assert "above 100 % of the window" in shown
    assert "whole-request estimate" in shown and "content" in shown and "o200k_base" in shown


def test_empty_state_names_the_demo_store(monkeypatch, tmp_path):
    """The demo's store is in the demo's own directory, not in the operator's Hermes home."""
    home = tmp_path / "home"
    monkeypatch.setenv("HERMES_HOME", str(home))
    monkeypatch.setenv("OBSERVED_DEMO_DIR", str(tmp_path / "demo-dir"))
    at = run_ok(app(monkeypatch, store=tmp_path / "nothing.sqlite"))
    shown = texts(at)
    assert str(tmp_path / "demo-dir" / "demo.sqlite") == str(demo_store_path())
    assert str(demo_store_path()) in shown and "--store" in shown
    assert str(home / "observed" / "demo.sqlite") not in shown


def test_compression_decisions_and_the_blocked_state(monkeypatch, store):
    at = show(run_ok(app(monkeypatch, store=store)), "Compressions")
    dec = frame_with(at, "estimate")
    by_hook = {r.hook: r for r in dec.itertuples()}
    assert (by_hook["should_compress"].compress, by_hook["should_compress"].skip) == (1, 2)
    assert by_hook["should_defer_preflight_to_real_usage"].estimate == 1
    shown = texts(at)
    assert "Automatic compression is blocked now" in shown and "summary_cooldown (1 session)" in shown


def test_decisions_on_a_store_without_the_new_columns(monkeypatch, tmp_path):
    path = old_store(tmp_path / "old.sqlite", session_rows(time.time() - 300))
    at = show(run_ok(app(monkeypatch, store=path)), "Compressions")
    assert "Compression decisions" not in texts(at)
    assert "Automatic compression is blocked now" not in texts(at)


def test_cache_hit_ratio_of_the_focused_session(monkeypatch, store):
    at = app(monkeypatch, store=store)
    at.query_params["session"] = SESSION
    run_ok(at)                                               # the first tab: Context usage
    names = [[lay.get("data", {}).get("name") for lay in s.get("layer", [])] for s in chart_specs(at)]
    assert ["ratio", "marks"] in names, names
    shown = texts(at)
    assert "Prompt-cache hit ratio" in shown and "12.0k tokens were written into the cache again" in shown

"""The Streamlit dashboard under AppTest: empty state, a store filled by a real observed session,
and a real Prometheus scraping the engine's own /metrics.

The data feeds are swappable, with one job each:

* ``feed_store(path, now)`` fills a store and returns its :class:`StoreFacts` (counted from the
  store with plain sqlite3). ``STORE_FEEDS`` maps a name to a feed;
  ``OBSERVED_DASHBOARD_STORE_FEED`` picks one:

  - ``real`` (default): the demo's observed engines (Hermes' built-in ContextCompressor with an
    offline summariser, and the topic-router engine with select_context) driven by a scripted
    traffic of five sessions, with a summary slower than the compress deadline, a summary model
    that fails (``call_llm`` raises: a server error, then a 401; the compressor returns with a
    fallback summary, then aborted) and select_context garbage (``support.real_feeds``);
  - ``rows``: the hand-made scenario of ``observed_engine.dashboard.sample_data`` written with ``StoreWriter``.

  One feed per module (``fed``); tests that write get a copy.
* ``metrics_endpoint`` serves /metrics for the real Prometheus the tests start.
  ``ENDPOINT_FEEDS`` / ``OBSERVED_DASHBOARD_METRICS_FEED``:

  - ``engine`` (default): the engine's own exporter (``prometheus: {enabled: true}``, no store,
    no providers passed) in a child process, driven by the same traffic: a warm-up pass before
    Prometheus starts, the main pass while it scrapes; the views must show the engine's
    counters (``increase()`` of the main pass, within Prometheus' extrapolation);
  - ``prometheus_client``: catalogue series that move every 0.25 s.

  Prometheus loads the project's alert rules (``deploy/prometheus/alerts.yml``).

Every expected number comes from the feed: ``StoreFacts`` for the store, the exporter's own
/metrics for Prometheus.
"""

from __future__ import annotations

import gc
import hashlib
import html
import json
import os
import re
import shutil
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Optional

import pytest
from markdown_it import MarkdownIt
from observed_engine.dashboard.format import fmt_int, fmt_pct, fmt_seconds, fmt_tokens
from observed_engine.dashboard.sample_data import scenario_rows
from support import real_feeds
from support.paths import REPO
from support.real_feeds import (
    SCRIPT,
    EngineExporter,
    StoreFacts,
    copy_store,
    feed_real_session,
    percentiles,
    prometheus_ready_for,
    store_facts,
)
from support.servers import PrometheusServer, free_port

from observed_engine.contract import catalogue
from observed_engine.contract.store_schema import INSERT_SQL, make_row
from observed_engine.store import StoreWriter, connect

APP = str(REPO / "dashboard" / "app.py")
TIMEOUT = 120
ALERT_RULES = REPO / "deploy" / "prometheus" / "alerts.yml"
SCRAPE_INTERVAL = 0.25             # seconds; short, so increase() extrapolates little

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


# --- store feeds (swappable) ------------------------------------------------------

def feed_rows_with_store_writer(path: Path, now: float) -> StoreFacts:
    writer = StoreWriter(path, retention_days=0)
    try:
        writer.submit(scenario_rows(now))
        assert writer.flush(20), "store writer did not flush"
    finally:
        writer.close()
    gc.collect()        # the writer's connection goes away now (its last close checkpoints the WAL)
    return store_facts(path)


STORE_FEEDS: dict = {"real": feed_real_session, "rows": feed_rows_with_store_writer}
STORE_FEED = os.environ.get("OBSERVED_DASHBOARD_STORE_FEED", "real")


def feed_store(path: Path, now: float) -> StoreFacts:
    return STORE_FEEDS[STORE_FEED](path, now)


@pytest.fixture(scope="module")
def fed(tmp_path_factory) -> StoreFacts:
    """One filled store per module (read-only: tests that write use ``own_store``)."""
    path = tmp_path_factory.mktemp("fed") / "hermes" / "observed" / "telemetry.sqlite"
    return feed_store(path, time.time())


@pytest.fixture
def facts(fed) -> StoreFacts:
    return fed


@pytest.fixture
def filled_store(fed) -> Path:
    return fed.path


@pytest.fixture
def own_store(fed, tmp_path) -> Path:
    return copy_store(fed.path, tmp_path / "own" / "observed" / "telemetry.sqlite")


# --- AppTest helpers ------------------------------------------------------------

def app(monkeypatch, *, store=None, prometheus=None, refresh="5", argv=()):
    """The app under AppTest, its source from the environment; ``argv``: the flags after ``--``."""
    from streamlit.testing.v1 import AppTest

    for var in ("OBSERVED_STORE", "OBSERVED_PROMETHEUS_URL", "OBSERVED_SOURCE", "OBSERVED_ALLOW_SOURCE_CHANGE"):
        monkeypatch.delenv(var, raising=False)
    if store is not None:
        monkeypatch.setenv("OBSERVED_STORE", str(store))
    if prometheus is not None:
        monkeypatch.setenv("OBSERVED_PROMETHEUS_URL", prometheus)
    monkeypatch.setenv("OBSERVED_REFRESH_SECONDS", refresh)
    monkeypatch.setattr(sys, "argv", ["app.py", *map(str, argv)])
    return AppTest.from_file(APP, default_timeout=TIMEOUT)


def write_store(path: Path, rows) -> Path:
    """A store holding exactly ``rows`` (tuples in COLUMNS order), written with plain SQL."""
    conn = connect(path)
    try:
        conn.execute("BEGIN")
        conn.executemany(INSERT_SQL, list(rows))
        conn.execute("COMMIT")
    finally:
        conn.close()
    return path


class FakePrometheus:
    """An HTTP server on 127.0.0.1 answering every GET with ``answer(path) -> (status, headers, body)``;
    ``paths`` are the paths asked for."""

    def __init__(self, answer: Callable[[str], tuple]) -> None:
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        fake = self
        self.paths: list = []

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                fake.paths.append(self.path)
                status, headers, body = answer(self.path)
                body = body if isinstance(body, bytes) else str(body).encode()
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def run_ok(at):
    at.run(timeout=TIMEOUT)
    assert not at.exception, [e.value for e in at.exception]
    return at


def show(at, tab: str):
    at.session_state["view"] = tab
    return run_ok(at)


def metrics(at) -> dict:
    return {m.label: m.value for m in at.metric}


MARKDOWN = MarkdownIt("commonmark").enable(["table", "strikethrough"])


def rendered(source: str) -> str:
    """The text a Markdown element shows (CommonMark, as Streamlit renders it): tags dropped,
    escapes and entities resolved."""
    return html.unescape(re.sub(r"<[^>]+>", "", MARKDOWN.render(str(source))))


def markdown_elements(at) -> list:
    """Every element whose text Streamlit renders as Markdown."""
    return [*at.markdown, *at.caption, *at.info, *at.error, *at.warning, *at.success]


def texts(at) -> str:
    """What the Markdown elements show."""
    return "\n".join(rendered(e.value) for e in markdown_elements(at))


def banner(at) -> str:
    return " ".join(e.value for e in at.error)


def frames(at) -> list:
    return [d.value for d in at.dataframe]


def frame_with(at, column: str):
    for df in frames(at):
        if column in df.columns:
            return df
    raise AssertionError(f"no table with column {column!r}: {[list(d.columns) for d in frames(at)]}")


def chart_specs(at) -> list:
    return [json.loads(c.proto.spec) for c in at.get("vega_lite_chart")]


def sawtooths(at) -> list:
    """The sawtooth charts (a layer on the "lines" data)."""
    return [s for s in chart_specs(at) if any(lay.get("data", {}).get("name") == "lines" for lay in s.get("layer", []))]


def chart_titles(at) -> list:
    out = []
    for spec in chart_specs(at):
        t = spec.get("title")
        if isinstance(t, dict):
            t = t.get("text")
        if t:
            out.append(t)
    return out


def file_digest(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def pct0(ratio: float) -> str:
    return f"{100.0 * ratio:.0f}%"


# The facts (support/real_feeds) name a summary_failure row by the kind-derived names the dashboard
# used to show (summary_fallback, summary_aborted); the dashboard shows the contract's words: event
# summary_failure, its kind (the row's outcome: fallback_summary, aborted), its cause as reason.
KIND_OF = {name: kind for kind, name in getattr(real_feeds, "SUMMARY_EVENTS", {}).items()}
SUMMARY_FAILURE = "summary_failure"


def shown_mark(outcome: str) -> str:
    """A sawtooth mark of the facts as the dashboard shows it."""
    return KIND_OF.get(outcome, outcome)


def shown_incident(row: dict) -> tuple:
    """(session, engine, hook, event, kind, reason) of an incident of the facts, as the table shows it."""
    kind = KIND_OF.get(row["event"])
    event = SUMMARY_FAILURE if kind else row["event"]
    return (row["session"], row["engine"], row["hook"], event, kind, row["reason"])


def text_or_none(v):
    return v if isinstance(v, str) else None


def open_sessions(path: Path, sessions) -> list:
    """The sessions whose latest row is not their on_session_end (what "Active sessions" counts)."""
    import sqlite3

    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        last = {s: h for s, h in db.execute(
            "SELECT session, hook FROM events e WHERE id = (SELECT id FROM events WHERE session = e.session "
            "ORDER BY ts DESC, id DESC LIMIT 1)")}
    return [s for s in sessions if last.get(s) != "on_session_end"]


def drawn_sessions(facts: StoreFacts, max_series: int = 4) -> list:
    """The sessions the usage view draws by default: the most recently active ones."""
    return facts.sessions[:max_series]


# --- (a) no store yet -------------------------------------------------------------

def test_missing_store_shows_how_to_enable(monkeypatch, tmp_path):
    store = tmp_path / "home" / "observed" / "telemetry.sqlite"
    at = run_ok(app(monkeypatch, store=store))
    body = texts(at)
    assert "No telemetry store yet" in body
    assert "engine: observed" in body and "context:" in body
    assert "$HERMES_HOME/config.yaml" in body
    assert "observed-engine install" in body
    assert "observed-engine demo" in body
    assert str(store) in body
    # read-only: looking for the store never creates it (nor its directory)
    assert not store.exists() and not store.parent.exists()
    assert not at.metric                      # no views without data


def test_empty_store_shows_empty_state(monkeypatch, tmp_path):
    store = tmp_path / "telemetry.sqlite"
    connect(store).close()                    # schema, no rows
    at = run_ok(app(monkeypatch, store=store))
    body = texts(at)
    assert "The telemetry store is empty" in body
    assert "observed-engine install" in body and "observed-engine demo" in body


def test_store_appears_later(monkeypatch, tmp_path, fed):
    store = tmp_path / "later" / "observed" / "telemetry.sqlite"
    at = run_ok(app(monkeypatch, store=store))
    assert "No telemetry store yet" in texts(at)
    copy_store(fed.path, store)               # the feed's store turns up
    run_ok(at)                                # the next refresh finds it
    assert metrics(at)["Active sessions"] == str(len(open_sessions(store, fed.sessions)))
    assert at.multiselect(key="engines").options == fed.engines


def test_source_cannot_write(filled_store):
    import sqlite3

    from observed_engine.dashboard.sqlite_source import SQLiteSource

    src = SQLiteSource(filled_store)
    with src.snapshot() as conn:
        with pytest.raises(sqlite3.OperationalError):
            conn.execute("DELETE FROM events")
    src.close()


# --- (b) a filled store ------------------------------------------------------------

def test_the_feed(facts):
    """What the views below are checked against (the real session must have all of it)."""
    if STORE_FEED == "real":
        facts.check_real_session()
        assert facts.engines == ["compressor", "topic-router"]
        assert len(facts.sessions) == len(SCRIPT) == 5
        # the built-in compressor returned twice although call_llm raised: a 500 -> fallback summary,
        # a 401 -> aborted (messages kept)
        assert facts.summary_failures == {"compressor": {("fallback_summary", "other"): 1, ("aborted", "auth"): 1}}
        fo = [r for r in facts.incidents if r["event"] == "fail_open"]
        assert {(r["engine"], r["hook"], r["reason"]) for r in fo} == {("topic-router", "select_context",
                                                                       "invalid_return")}
        assert all(r["content"] is None for r in facts.incidents)      # capture_content is off
    assert facts.events > 0 and facts.sessions


def test_headline_and_sawtooth(monkeypatch, filled_store, facts):
    before = file_digest(filled_store)
    now = time.time()
    at = run_ok(app(monkeypatch, store=filled_store))
    m = metrics(at)
    assert m["Active sessions"] == str(len(open_sessions(filled_store, facts.sessions)))
    assert m["Compressions"] == fmt_int(facts.compressions())
    assert m["Compression timeouts"] == str(facts.timeouts)
    assert m["Fail-opens"] == str(facts.fail_opens)
    assert m["Summary failures"] == fmt_int(facts.summary_total())
    top_session, top_ratio = facts.highest_usage()
    assert m["Highest context usage"] == pct0(top_ratio), top_session
    # the alert banner (store-derived: timeouts and fail-opens of the last 15 minutes)
    expected_alerts = facts.alerts(now)
    assert {"HermesContextCompressionTimeout", "HermesContextEngineFailOpen",
            "HermesContextSummaryFailing"} <= expected_alerts
    for name in expected_alerts:
        assert name in banner(at)
    # the sawtooth: one chart per drawn session, titled with its engine, usage and compressions
    titles = chart_titles(at)
    drawn = drawn_sessions(facts)
    assert sorted(t.split()[0] for t in titles) == sorted(drawn), titles
    for s in drawn:
        title = next(t for t in titles if t.split()[0] == s)
        _, prompt, _, window = facts.latest_usage(s)
        assert facts.session_engine[s] in title and f"({prompt / window:.0%})" in title, title
        n = facts.compressed_in(s)
        if n:
            assert f"{n} compression{'s' if n > 1 else ''}" in title, title
        else:
            assert "compression" not in title, title
    # read-only: the store file is byte-for-byte unchanged
    assert file_digest(filled_store) == before


def test_sawtooth_data_of_one_session(monkeypatch, filled_store, facts):
    session = facts.session_with("deadline_exceeded")      # the one with the slow summary
    at = app(monkeypatch, store=filled_store)
    run_ok(at)
    at.selectbox(key="session").set_value(session)
    run_ok(at)
    specs = sawtooths(at)          # (the focused session also has its cache-hit chart)
    assert len(specs) == 1
    # the compress rows of this session, newest first: the timed-out call is marked three times
    # (deadline_exceeded at the deadline, then the late call and its late_completion)
    table = frame_with(at, "outcome")
    marks = facts.marks[session]
    assert sorted(table["outcome"]) == sorted(m["outcome"] for m in marks)
    if STORE_FEED == "real":
        assert sorted(table["outcome"]) == ["late_completion", "timeout", "timeout"]
    assert list(table["time"]) == sorted(table["time"], reverse=True)
    shown = table[table["tokens before"].notna()]
    assert sorted(zip(shown["tokens before"], shown["tokens after"])) == sorted(
        (m["tokens_before"], m["tokens_after"]) for m in marks if m["tokens_before"] is not None)
    # no message text without capture_content
    assert "capture_content is off" in texts(at)
    assert not at.expander


def test_summary_failure_in_the_session_view(monkeypatch, filled_store, facts):
    """The session whose summary model failed: its compress() row and the summary_failure row (kind
    fallback_summary) next to it in the session's table, and a ring around the call's mark on the sawtooth."""
    session = facts.session_with("summary_fallback")
    at = app(monkeypatch, store=filled_store)
    run_ok(at)
    at.selectbox(key="session").set_value(session)
    run_ok(at)
    table = frame_with(at, "outcome")
    marks = facts.marks[session]
    assert sorted(table["outcome"]) == sorted(shown_mark(m["outcome"]) for m in marks)
    assert "fallback_summary" in set(table["outcome"])
    if STORE_FEED == "real":
        assert sorted(table["outcome"]) == ["compressed", "fallback_summary"]
    (spec,) = sawtooths(at)
    rings = [layer for layer in spec["layer"] if layer.get("data", {}).get("name") == "summary_failures"]
    assert len(rings) == 1 and rings[0]["mark"]["shape"] == "circle"
    assert "summary model failed" in texts(at)            # the legend says what the ring means


def test_sawtooth_rises_and_drops_in_the_source(filled_store, facts):
    from observed_engine.dashboard.sources import make_filters
    from observed_engine.dashboard.sqlite_source import SQLiteSource

    session = next(s for s in facts.sessions if facts.compressed_in(s))
    src = SQLiteSource(filled_store)
    f = make_filters(6 * 3600, time.time())
    lines, marks = src.usage(f, [session])
    usage = facts.usage[session]
    assert list(lines["prompt_tokens"]) == [u[1] for u in usage]
    assert set(lines["threshold_tokens"]) == {u[2] for u in usage}
    assert set(lines["window_tokens"]) == {u[3] for u in usage}
    compressed = marks[marks["outcome"] == "compressed"]
    assert len(compressed) == facts.compressed_in(session)
    for mark in compressed.itertuples():
        before = lines[lines["ts"] < mark.ts]
        after = lines[lines["ts"] > mark.ts]
        # the compression follows a response at or above the threshold (should_compress said so) ...
        assert before["prompt_tokens"].iloc[-1] >= before["threshold_tokens"].iloc[-1]
        # ... and the next response starts from a smaller prompt: the sawtooth's drop
        if not after.empty:
            assert after["prompt_tokens"].iloc[0] < before["prompt_tokens"].iloc[-1]
        assert mark.tokens_after < mark.tokens_before
    assert sorted(zip(compressed["tokens_before"], compressed["tokens_after"])) == sorted(
        (m["tokens_before"], m["tokens_after"]) for m in facts.marks[session] if m["outcome"] == "compressed")
    src.close()


def test_compressions_view(monkeypatch, filled_store, facts):
    at = show(run_ok(app(monkeypatch, store=filled_store)), "Compressions")
    m = metrics(at)
    for outcome in ("compressed", "noop", "error", "timeout"):
        assert m[outcome.capitalize()] == fmt_int(facts.outcome_total(outcome)), outcome
    pairs = [p for e in facts.compressed_tokens.values() for p in e]
    assert m["Tokens after / before"] == pct0(sum(a for _, a in pairs) / sum(b for b, _ in pairs))
    table = frame_with(at, "p95 s").set_index("engine")
    assert sorted(table.index) == sorted(facts.compress)
    for engine, counts in facts.compress.items():
        row = table.loc[engine]
        assert {o: row[o] for o in counts} == counts, engine
        # nearest-rank percentiles of the compress() call durations
        p50, p95, p99 = percentiles(facts.compress_durations[engine])
        assert (row["p50 s"], row["p95 s"], row["p99 s"]) == (pytest.approx(p50), pytest.approx(p95),
                                                              pytest.approx(p99)), engine
        tokens = facts.compressed_tokens.get(engine, [])
        if tokens:
            # whole tokens (issue 15 item 7)
            assert row["avg tokens before"] == round(sum(b for b, _ in tokens) / len(tokens))
            assert row["avg tokens after"] == round(sum(a for _, a in tokens) / len(tokens))
    if STORE_FEED == "real":
        # the slow summary: a timeout, and its call (finished late) is the slowest of the engine
        assert table.loc["compressor", "timeout"] == 1
        assert table.loc["compressor", "p99 s"] > 0.5
    assert len(chart_specs(at)) == 2
    # compress() calls that returned although the summary model failed, per engine and kind ...
    for engine in facts.compress:
        assert table.loc[engine, "fallback_summary"] == facts.summary_total("fallback_summary", engine=engine), engine
        assert table.loc[engine, "aborted"] == facts.summary_total("aborted", engine=engine), engine
    # ... and per engine, kind and cause
    expected = {(e, k, c): n for e, by in facts.summary_failures.items() for (k, c), n in by.items()}
    detail = frame_with(at, "cause")
    assert {(r["engine"], r["kind"], r["cause"]): r["count"] for r in detail.to_dict("records")} == expected
    assert f"{fmt_int(facts.summary_total())} compress() calls returned although the summary model failed" \
        in texts(at)
    if STORE_FEED == "real":
        assert expected == {("compressor", "fallback_summary", "other"): 1, ("compressor", "aborted", "auth"): 1}
        assert (table.loc["topic-router", "fallback_summary"], table.loc["topic-router", "aborted"]) == (0, 0)


def test_selection_view(monkeypatch, filled_store, facts):
    at = show(run_ok(app(monkeypatch, store=filled_store)), "select_context")
    total = facts.selection_total()
    changed = facts.selection_total("changed_selection")
    m = metrics(at)
    assert m["Selections"] == fmt_int(total)
    assert m["Churn rate"] == fmt_pct(changed / total)
    assert m["Fail-open"] == fmt_int(facts.selection_total("fail_open"))
    assert m["Prompt-cache tokens lost"] == fmt_tokens(sum(facts.cache_lost.values()))
    table = frame_with(at, "churn").set_index("engine")
    assert sorted(table.index) == sorted(facts.selections)
    for engine, expected in facts.selections.items():
        for result, n in expected.items():
            assert table.loc[engine, result] == n, (engine, result)
        assert table.loc[engine, "churn"] == pytest.approx(expected["changed_selection"] / sum(expected.values()))
        assert table.loc[engine, "cache tokens lost"] == facts.cache_lost[engine]
    if STORE_FEED == "real":       # every kind of result, from the router only
        assert list(table.index) == ["topic-router"]
        assert all(table.loc["topic-router", r] > 0
                   for r in ("unchanged", "same_selection", "changed_selection", "fail_open"))
    assert len(chart_specs(at)) == 3


def test_alerts_and_incident_table(monkeypatch, filled_store, facts):
    now = time.time()
    at = show(run_ok(app(monkeypatch, store=filled_store)), "Alerts & incidents")
    alerts = frame_with(at, "alert")
    assert set(alerts["alert"]) == facts.alerts(now)
    assert set(alerts["state"]) == {"firing"}
    m = metrics(at)
    for event in ("deadline_exceeded", "host_reported", "late_completion", "fail_open", "summary_fallback",
                  "summary_aborted"):
        assert m[shown_mark(event)] == fmt_int(facts.count(event)), event
    assert facts.count("summary_fallback") and facts.count("summary_aborted")
    inc = frame_with(at, "reason")
    assert len(inc) == min(500, len(facts.incidents))
    assert list(inc["time"]) == sorted(inc["time"], reverse=True)           # newest first
    keys = ("session", "engine", "hook", "event", "kind", "reason")

    def order(t):
        return tuple("" if x is None else str(x) for x in t)

    shown = sorted((tuple(text_or_none(r[k]) for k in keys) for r in inc.to_dict("records")), key=order)
    assert shown == sorted((shown_incident(r) for r in facts.incidents), key=order)
    # the fail-open, the deadline and the summary-failure rows, as the store has them
    for event in ("fail_open", "deadline_exceeded", "summary_fallback", "summary_aborted"):
        exp = next(r for r in facts.incidents if r["event"] == event)
        want = shown_incident(exp)
        match = inc[(inc["event"] == want[3]) & (inc["session"] == exp["session"])]
        if want[4] is not None:
            match = match[match["kind"] == want[4]]
        row = match.iloc[0]
        assert tuple(text_or_none(row[k]) for k in keys) == want
    if STORE_FEED == "real":
        fo = inc[inc["event"] == "fail_open"]
        assert set(fo["engine"]) == {"topic-router"} and set(fo["hook"]) == {"select_context"}
        assert set(fo["reason"]) == {"invalid_return"}
        assert set(fo["session"]) <= set(facts.engine_sessions("topic-router"))
        assert set(inc.loc[inc["event"] == "deadline_exceeded", "engine"]) == {"compressor"}
        sf = inc[inc["event"] == SUMMARY_FAILURE]
        assert sorted(zip(sf["engine"], sf["hook"], sf["kind"], sf["reason"])) == [
            ("compressor", "compress", "aborted", "auth"),
            ("compressor", "compress", "fallback_summary", "other")]
        # the store-derived HermesContextSummaryFailing: one per engine, kind and cause; auth is critical
        failing = alerts[alerts["alert"] == "HermesContextSummaryFailing"]
        assert sorted(zip(failing["engine"], failing["severity"])) == [("compressor", "critical"),
                                                                        ("compressor", "warning")]
        assert any("aborted, cause auth" in d for d in failing["detail"])
    assert "content" not in inc.columns                  # capture_content was off


def test_hook_latency_view(monkeypatch, filled_store, facts):
    at = show(run_ok(app(monkeypatch, store=filled_store)), "Hook latency")
    table = frame_with(at, "p95 ms").set_index(["engine", "hook"])
    assert sorted(table.index) == sorted(facts.hook_calls)
    for key, calls in facts.hook_calls.items():
        row = table.loc[key]
        assert row["calls"] == calls, key                 # fail-open and deadline rows are events, not calls
        assert row["errors"] == facts.hook_errors.get(key, 0), key
        p50, p95, p99 = percentiles(facts.hook_durations[key])
        assert row["p50 ms"] == pytest.approx(p50 * 1000) and row["p95 ms"] == pytest.approx(p95 * 1000), key
    assert (table["calls/s"] > 0).all()
    assert len(chart_specs(at)) == 2


def test_compare_engines_view(monkeypatch, filled_store, facts):
    at = show(run_ok(app(monkeypatch, store=filled_store)), "Compare engines")
    side = frame_with(at, "metric").set_index("metric")
    a, b = facts.engines[:2]
    assert list(side.columns) == [a, b]
    if STORE_FEED == "real":
        assert [a, b] == ["compressor", "topic-router"]
    for engine in (a, b):
        col = side[engine]
        assert col["compressions"] == fmt_int(facts.compressions(engine))
        assert col["fail-opens"] == fmt_int(facts.count("fail_open", engine))
        assert col["compression timeouts"] == fmt_int(facts.count("deadline_exceeded", engine)
                                                      + facts.count("host_reported", engine))
        assert col["summary failures"] == fmt_int(facts.summary_total(engine=engine))
        sel = facts.selections.get(engine)
        assert col["churn rate"] == (fmt_pct(sel["changed_selection"] / sum(sel.values())) if sel else "–")
        durations = facts.compress_durations.get(engine)
        assert col["compress p95"] == (fmt_seconds(percentiles(durations)[1]) if durations else "–")
        assert col["hook calls"] == fmt_int(sum(n for (e, _), n in facts.hook_calls.items() if e == engine))
    # swap the order: the picks are widgets
    at.selectbox(key="compare_a").set_value(b)
    run_ok(at)
    assert list(frame_with(at, "metric").columns)[1:] == [b, a]


def test_engine_filter(monkeypatch, filled_store, facts):
    engine = facts.engines[-1]
    at = run_ok(app(monkeypatch, store=filled_store))
    at.multiselect(key="engines").set_value([engine])
    run_ok(at)
    m = metrics(at)
    sessions = facts.engine_sessions(engine)
    assert m["Active sessions"] == str(len(open_sessions(filled_store, sessions)))
    assert m["Compressions"] == fmt_int(facts.compressions(engine))
    assert m["Fail-opens"] == fmt_int(facts.count("fail_open", engine))
    assert m["Summary failures"] == fmt_int(facts.summary_total(engine=engine))
    assert sorted(t.split()[0] for t in chart_titles(at)) == sorted(sessions[:4])


def test_content_only_when_captured(monkeypatch, own_store):
    now = time.time()
    rows = [
        make_row(ts=now - 100, host="h", pid=1, session="sess-text", engine="compressor", hook="select_context",
                 event="fail_open", reason="exception", content="the user asked about the lighthouse"),
        make_row(ts=now - 99, host="h", pid=1, session="sess-text", engine="compressor",
                 hook="update_from_response", event="call", outcome="ok", prompt_tokens=1000,
                 threshold_tokens=5000, window_tokens=8000),
    ]
    w = StoreWriter(own_store, retention_days=0)
    w.submit(rows)
    assert w.flush(20)
    w.close()
    at = show(run_ok(app(monkeypatch, store=own_store)), "Alerts & incidents")
    inc = frame_with(at, "reason")
    assert "content" in inc.columns
    assert "lighthouse" in inc.loc[inc["session"] == "sess-text", "content"].iloc[0]
    at.selectbox(key="session").set_value("sess-text")
    show(at, "Context usage")
    assert len(at.expander) == 1 and "capture_content was on" in at.expander[0].label


def test_live_refresh_picks_up_new_rows(monkeypatch, own_store, facts):
    at = run_ok(app(monkeypatch, store=own_store, refresh="1"))
    assert metrics(at)["Fail-opens"] == str(facts.fail_opens)
    w = StoreWriter(own_store, retention_days=0)
    w.submit([make_row(ts=time.time(), host="h", pid=1, session=facts.sessions[0], engine=facts.engines[0],
                       hook="select_context", event="fail_open", reason="exception")])
    assert w.flush(20)
    w.close()
    time.sleep(1.1)                    # next refresh tick
    run_ok(at)
    assert metrics(at)["Fail-opens"] == str(facts.fail_opens + 1)


# --- (c) Prometheus -----------------------------------------------------------------

class MetricsFeed:
    """A /metrics target for Prometheus. ``exporter`` is the engine's own (None: prometheus_client)."""

    def __init__(self, target: str, stop: Callable[[], None], exporter: Optional[EngineExporter] = None,
                 engines=("compressor",)) -> None:
        self.target = target
        self.stop = stop
        self.exporter = exporter
        self.engines = list(engines)


class _Exposition:
    """catalogue series that move every 0.25 s, served by prometheus_client."""

    def __init__(self):
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        m = catalogue.BY_KEY
        reg = self.registry = CollectorRegistry()

        def counter(key):
            return Counter(m[key].prom_name[: -len("_total")], m[key].description, m[key].labels, registry=reg)

        def hist(key, buckets):
            return Histogram(m[key].prom_name, m[key].description, m[key].labels, buckets=buckets, registry=reg)

        def gauge(key):
            return Gauge(m[key].prom_name, m[key].description, m[key].labels, registry=reg)

        self.calls = counter("hook_calls")
        self.duration = hist("hook_duration", catalogue.HOOK_LATENCY_BUCKETS)
        self.compressions = counter("compressions")
        self.c_duration = hist("compression_duration", catalogue.COMPRESSION_LATENCY_BUCKETS)
        self.c_tokens = hist("compression_tokens", catalogue.TOKEN_BUCKETS)
        self.selections = counter("selections")
        self.lost = counter("cache_prefix_lost")
        self.fail_open = counter("fail_open")
        self.timeouts = counter("compression_timeouts")
        self.summary_failures = counter("summary_failures")
        self.prompt, self.threshold, self.window = gauge("prompt_tokens"), gauge("threshold_tokens"), \
            gauge("window_tokens")
        self.ratio = gauge("usage_ratio")
        self.ticks = 0
        self._stop = threading.Event()

    def tick(self):
        e = "compressor"
        self.ticks += 1
        self.calls.labels(e, "should_compress", "ok").inc(4)
        for _ in range(4):
            self.duration.labels(e, "should_compress").observe(0.00003)
        self.calls.labels(e, "select_context", "ok").inc(2)
        self.duration.labels(e, "select_context").observe(0.002)
        self.duration.labels(e, "select_context").observe(0.004)
        self.calls.labels(e, "compress", "ok").inc()
        self.duration.labels(e, "compress").observe(8.0)
        self.compressions.labels(e, "compressed").inc()
        self.c_duration.labels(e).observe(8.0)
        self.c_tokens.labels(e, "before").observe(100_000)
        self.c_tokens.labels(e, "after").observe(25_000)
        self.selections.labels(e, "unchanged").inc()
        self.selections.labels(e, "changed_selection").inc()
        self.lost.labels(e).inc(3_000)
        if self.ticks % 4 == 0:
            self.compressions.labels(e, "noop").inc()
            self.fail_open.labels(e, "select_context", "exception").inc()
            self.selections.labels(e, "fail_open").inc()
            self.timeouts.labels(e, "deadline_exceeded").inc()
            self.summary_failures.labels(e, "fallback_summary", "other").inc()
        p = 20_000 + (self.ticks % 10) * 8_000
        self.prompt.labels(e).set(p)
        self.threshold.labels(e).set(100_000)
        self.window.labels(e).set(128_000)
        self.ratio.labels(e).set(p / 128_000)

    def run(self):
        while not self._stop.wait(0.25):
            self.tick()

    def stop(self):
        self._stop.set()


def serve_prometheus_client(workdir: Path) -> MetricsFeed:
    from prometheus_client import start_http_server

    expo = _Exposition()
    expo.tick()
    port = free_port()
    server, thread = start_http_server(port, addr="127.0.0.1", registry=expo.registry)
    ticker = threading.Thread(target=expo.run, daemon=True)
    ticker.start()
    return MetricsFeed(f"127.0.0.1:{port}", lambda: (expo.stop(), server.shutdown()))


def serve_engine_exporter(workdir: Path) -> MetricsFeed:
    exporter = EngineExporter(workdir, free_port())
    try:
        exporter.start()             # the warm-up pass has run: every series exists
    except BaseException:
        exporter.stop()
        raise
    return MetricsFeed(exporter.target, exporter.stop, exporter, exporter.engines())


ENDPOINT_FEEDS = {"engine": serve_engine_exporter, "prometheus_client": serve_prometheus_client}
METRICS_FEED = os.environ.get("OBSERVED_DASHBOARD_METRICS_FEED", "engine")


@pytest.fixture(scope="module")
def metrics_endpoint(tmp_path_factory, request) -> MetricsFeed:
    feed = ENDPOINT_FEEDS[METRICS_FEED](tmp_path_factory.mktemp("metrics-feed"))
    request.addfinalizer(feed.stop)
    return feed


def _firing(prom: PrometheusServer) -> set:
    return {a["labels"]["alertname"] for a in prom.alerts() if a["state"] == "firing"}


def _wait(what: str, predicate, timeout: float, prom: PrometheusServer) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if prom.proc.poll() is not None:
            pytest.fail("prometheus exited: " + prom.log_tail())
        try:
            if predicate():
                return
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.2)
    pytest.fail(f"prometheus never had {what}: " + prom.log_tail())


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory, metrics_endpoint, request) -> str:
    """A real Prometheus scraping the feed every SCRAPE_INTERVAL, with deploy/'s alert rules.

    The engine feed: once Prometheus holds the warm-up values, the main pass runs; the fixture
    returns when Prometheus holds the final values and the fail-open and summary-failure alerts fire."""
    tmp_path = tmp_path_factory.mktemp("prometheus")
    shutil.copy(ALERT_RULES, tmp_path / "rules.yml")
    interval = f"{int(SCRAPE_INTERVAL * 1000)}ms"
    # PrometheusServer skips without the binary, or fails under OBSERVED_REQUIRE_TOOLS (CI)
    prom = PrometheusServer(tmp_path, [metrics_endpoint.target], job_name="observed", rule_files=["rules.yml"],
                            scrape_interval=interval, scrape_timeout=interval, evaluation_interval="1s")
    request.addfinalizer(prom.stop)  # kills the recorded PID, even if startup fails
    prom.start()
    query = prom.query
    exporter = metrics_endpoint.exporter
    if exporter is not None:
        _wait("the warm-up values", lambda: prometheus_ready_for(exporter, query), 90, prom)
        exporter.baseline_seen = time.time()
        time.sleep(3.0)              # flat samples first: increase() then extrapolates less
        exporter.drive()             # the main pass, scraped as it runs
        _wait("the final values", lambda: prometheus_ready_for(exporter, query), 60, prom)
        _wait("the fail-open and summary-failure alerts", lambda: {
            "HermesContextEngineFailOpen", "HermesContextSummaryFailing"} <= _firing(prom), 60, prom)
    else:
        _wait("moving series and a firing alert", lambda: query(
            "increase(hermes_context_compressions_total[1m]) > 0") and query(
            "increase(hermes_context_engine_fail_open_total[1m]) > 0") and "HermesContextEngineFailOpen"
            in _firing(prom), 90, prom)
    return prom.url


def _num(v) -> int:
    """A count as the view shows it ("1,234", 11.0, numpy ints)."""
    x = float(str(v).replace(",", ""))
    assert x == int(x), v
    return int(x)


@pytest.mark.prometheus
def test_prometheus_source(monkeypatch, prometheus, metrics_endpoint):
    feed = metrics_endpoint
    since = time.time()
    at = app(monkeypatch, prometheus=prometheus)
    run_ok(at)
    at.selectbox(key="range").set_value("Last 15 minutes")
    run_ok(at)
    assert "Prometheus" in texts(at) and prometheus in texts(at)
    m = metrics(at)
    assert m["Engines"] == str(len(feed.engines))
    assert m["Highest context usage"].endswith("%")
    assert "HermesContextEngineFailOpen" in banner(at)
    # usage: no sessions in Prometheus, said so; each engine's gauges are drawn
    assert "never metric labels" in texts(at)
    assert sorted(t.split()[0] for t in chart_titles(at)) == sorted(feed.engines)
    if feed.exporter is not None:
        _check_engine_views(at, feed.exporter, since)
    else:
        _check_prometheus_client_views(at)


def _check_engine_views(at, exporter: EngineExporter, since: float) -> None:
    """Every view shows the engine's own counters: what the main pass added, as increase() sees it."""

    def within(value, name, **labels):
        lo, hi = exporter.count_range(exporter.delta(name, **labels), SCRAPE_INTERVAL, since)
        assert lo <= _num(value) <= hi, (name, labels, value, (lo, hi))

    def total_within(value, parts):
        ranges = [exporter.count_range(exporter.delta(n, **ls), SCRAPE_INTERVAL, since) for n, ls in parts]
        lo, hi = sum(r[0] for r in ranges), sum(r[1] for r in ranges)
        assert lo <= _num(value) <= hi, (parts, value, (lo, hi))

    spread = exporter.factor(SCRAPE_INTERVAL, since)
    compressions, selections = "hermes_context_compressions_total", "hermes_context_selections_total"
    timeouts, fail_open = "hermes_context_compression_timeouts_total", "hermes_context_engine_fail_open_total"
    summary_failures = "hermes_context_compression_summary_failures_total"
    hook_calls = "hermes_context_engine_hook_calls_total"
    engines = sorted(exporter.label_values(hook_calls, "engine"))
    assert engines == ["compressor", "topic-router"]
    comp_keys = [(e, o) for e in engines for o in ("compressed", "noop", "error", "timeout")
                 if exporter.delta(compressions, engine=e, outcome=o)]
    assert ("compressor", "compressed") in comp_keys and ("compressor", "timeout") in comp_keys

    m = metrics(at)
    total_within(m["Compressions"], [(compressions, {"engine": e, "outcome": o}) for e, o in comp_keys])
    within(m["Fail-opens"], fail_open)
    within(m["Compression timeouts"], timeouts, kind="deadline_exceeded")
    assert exporter.delta(timeouts, kind="deadline_exceeded") >= 1 and exporter.delta(fail_open) >= 1
    # the summary model failed in the main pass too: a fallback summary (other) and an abort (auth)
    failed = {(e, k, c): exporter.delta(summary_failures, engine=e, kind=k, cause=c) for e in engines
              for k in ("fallback_summary", "aborted") for c in ("auth", "network", "other")}
    failed = {key: n for key, n in failed.items() if n}
    assert failed == {("compressor", "fallback_summary", "other"): 1, ("compressor", "aborted", "auth"): 1}
    within(m["Summary failures"], summary_failures)
    ratio = max(v for (n, _), v in exporter.final.items() if n == "hermes_context_usage_ratio")
    assert m["Highest context usage"] == fmt_pct(ratio, 0)
    assert "HermesContextCompressionTimeout" in banner(at)

    show(at, "Compressions")
    table = frame_with(at, "p95 s").set_index("engine")
    assert sorted(table.index) == engines
    for e in engines:
        for o in ("compressed", "noop", "error", "timeout"):
            within(table.loc[e, o], compressions, engine=e, outcome=o)
        for col, q in (("p50 s", 0.5), ("p95 s", 0.95), ("p99 s", 0.99)):
            lo, hi = exporter.quantile_bounds("hermes_context_compression_duration_seconds", q, spread, engine=e)
            assert lo - 1e-9 <= table.loc[e, col] <= hi + 1e-9, (e, col, table.loc[e, col], (lo, hi))
        before = exporter.delta("hermes_context_compression_tokens_sum", engine=e, stage="before")
        after = exporter.delta("hermes_context_compression_tokens_sum", engine=e, stage="after")
        assert table.loc[e, "after / before"] == pytest.approx(after / before, rel=0.02), e
    # the slow summary: past the 0.5 s deadline, its call is in the compressor's top bucket
    assert table.loc["compressor", "p99 s"] > 0.5
    for e in engines:
        within(table.loc[e, "fallback_summary"], summary_failures, engine=e, kind="fallback_summary")
        within(table.loc[e, "aborted"], summary_failures, engine=e, kind="aborted")
    detail = frame_with(at, "cause")
    got_failed = {(r["engine"], r["kind"], r["cause"]): r["count"] for r in detail.to_dict("records")}
    assert set(got_failed) == set(failed)
    for (e, k, c), n in got_failed.items():
        within(n, summary_failures, engine=e, kind=k, cause=c)
    assert "returned although the summary model failed (from increase(), approximate)" in texts(at)

    show(at, "select_context")
    sel = frame_with(at, "churn").set_index("engine")
    assert list(sel.index) == ["topic-router"]
    row = sel.loc["topic-router"]
    for result in ("unchanged", "same_selection", "changed_selection", "fail_open"):
        assert exporter.delta(selections, engine="topic-router", result=result) > 0, result
        within(row[result], selections, engine="topic-router", result=result)
    assert row["churn"] == pytest.approx(row["changed_selection"] / row["total"])
    churn = exporter.delta(selections, engine="topic-router", result="changed_selection") / exporter.delta(
        selections, engine="topic-router")
    assert row["churn"] == pytest.approx(churn, abs=0.03)
    within(row["cache tokens lost"], "hermes_context_selection_cache_prefix_lost_tokens_total",
           engine="topic-router")

    show(at, "Alerts & incidents")
    alerts = frame_with(at, "alert")
    fired = alerts[alerts["alert"] == "HermesContextEngineFailOpen"].iloc[0]
    assert fired["state"] == "firing" and fired["severity"] == "warning" and "select_context" in fired["detail"]
    assert fired["engine"] == "topic-router"
    assert "HermesContextCompressionTimeout" in set(alerts["alert"])
    assert "needs the SQLite store" in texts(at)
    counts = frame_with(at, "count")
    got = {(r["engine"], r["event"], text_or_none(r["kind"])): r for r in counts.to_dict("records")}
    assert set(got) == {("topic-router", "fail_open", None), ("compressor", "deadline_exceeded", None),
                        ("compressor", "late_completion", None), ("compressor", SUMMARY_FAILURE, "fallback_summary"),
                        ("compressor", SUMMARY_FAILURE, "aborted")}
    fo = got[("topic-router", "fail_open", None)]
    assert (fo["hook"], fo["reason"]) == ("select_context", "invalid_return")
    within(fo["count"], fail_open, engine="topic-router", hook="select_context", reason="invalid_return")
    for kind in ("deadline_exceeded", "late_completion"):
        within(got[("compressor", kind, None)]["count"], timeouts, engine="compressor", kind=kind)
    for kind, cause in (("fallback_summary", "other"), ("aborted", "auth")):
        row = got[("compressor", SUMMARY_FAILURE, kind)]
        assert (row["hook"], row["reason"]) == ("compress", cause)
        within(row["count"], summary_failures, engine="compressor", kind=kind, cause=cause)
    assert metrics(at)["fallback_summary"] != "0" and metrics(at)["aborted"] != "0"
    # Prometheus' own rule, shown as it fires: per engine, kind and cause; auth is critical
    failing = alerts[alerts["alert"] == "HermesContextSummaryFailing"]
    assert sorted(zip(failing["engine"], failing["severity"])) == [("compressor", "critical"),
                                                                    ("compressor", "warning")]

    show(at, "Hook latency")
    lat = frame_with(at, "p95 ms").set_index(["engine", "hook"])
    called = {(e, h) for e in engines for h in exporter.label_values(hook_calls, "hook", engine=e)}
    assert set(lat.index) == called
    for e, h in called:
        within(lat.loc[(e, h), "calls"], hook_calls, engine=e, hook=h)
        lo, hi = exporter.quantile_bounds("hermes_context_engine_hook_duration_seconds", 0.5, spread, engine=e,
                                          hook=h)
        assert lo * 1000 - 1e-6 <= lat.loc[(e, h), "p50 ms"] <= hi * 1000 + 1e-6, (e, h)
    assert ("topic-router", "select_context") in called and ("compressor", "compress") in called


def _check_prometheus_client_views(at) -> None:
    m = metrics(at)
    assert int(m["Compressions"].replace(",", "")) > 0
    assert int(m["Fail-opens"]) >= 1
    assert int(m["Compression timeouts"]) >= 1
    assert m["Highest context usage"] != "–"

    show(at, "Compressions")
    row = frame_with(at, "p95 s").set_index("engine").loc["compressor"]
    assert row["compressed"] > 0 and row["noop"] > 0
    assert row["fallback_summary"] > 0 and row["aborted"] == 0
    assert set(frame_with(at, "cause")["kind"]) == {"fallback_summary"}
    assert 5.0 <= row["p50 s"] <= 10.0                    # every observation was 8 s: bucket (5, 10]
    assert row["after / before"] == pytest.approx(0.25, rel=0.05)

    show(at, "select_context")
    sel = frame_with(at, "churn").set_index("engine").loc["compressor"]
    assert sel["unchanged"] > 0 and sel["changed_selection"] > 0 and sel["fail_open"] > 0
    assert 0.3 < sel["churn"] < 0.6

    show(at, "Alerts & incidents")
    alerts = frame_with(at, "alert")
    fired = alerts[alerts["alert"] == "HermesContextEngineFailOpen"].iloc[0]
    assert fired["state"] == "firing" and fired["severity"] == "warning" and "select_context" in fired["detail"]
    assert "needs the SQLite store" in texts(at)
    counts = frame_with(at, "count")
    assert {"fail_open", "deadline_exceeded", SUMMARY_FAILURE} <= set(counts["event"])
    assert set(counts.loc[counts["event"] == SUMMARY_FAILURE, "kind"]) == {"fallback_summary"}

    show(at, "Hook latency")
    lat = frame_with(at, "p95 ms").set_index(["engine", "hook"])
    assert lat.loc[("compressor", "should_compress"), "calls"] > lat.loc[("compressor", "compress"), "calls"]
    assert 1.0 <= lat.loc[("compressor", "select_context"), "p50 ms"] <= 5.0      # bucket (1 ms, 5 ms]


@pytest.mark.prometheus
def test_store_with_prometheus_alerts(monkeypatch, filled_store, facts, prometheus):
    at = run_ok(app(monkeypatch, store=filled_store, prometheus=prometheus))
    assert metrics(at)["Active sessions"] == str(len(open_sessions(filled_store, facts.sessions)))  # the store ...
    assert "HermesContextEngineFailOpen" in banner(at) and "HermesContextCompressionTimeout" in banner(at)
    show(at, "Alerts & incidents")
    alerts = frame_with(at, "alert")
    assert set(alerts["from"]) == {"store", "prometheus"}   # ... and Prometheus adds its rule alerts
    prom = alerts[alerts["from"] == "prometheus"]
    assert "HermesContextEngineFailOpen" in set(prom["alert"])
    assert set(prom.loc[prom["alert"] == "HermesContextEngineFailOpen", "state"]) == {"firing"}
    assert prometheus in texts(at)


def test_prometheus_unreachable(monkeypatch):
    at = run_ok(app(monkeypatch, prometheus=f"http://127.0.0.1:{free_port()}"))
    body = texts(at)
    assert "Cannot reach Prometheus" in body
    assert "engine: observed" in body

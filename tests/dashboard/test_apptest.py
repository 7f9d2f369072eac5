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

import time

import pytest
from observed_engine.dashboard.format import fmt_int, fmt_pct, fmt_seconds, fmt_tokens
from support.dashboard_app import (
    SUMMARY_FAILURE,
    app,
    banner,
    chart_specs,
    chart_titles,
    drawn_sessions,
    file_digest,
    frame_with,
    metrics,
    open_sessions,
    pct0,
    run_ok,
    sawtooths,
    show,
    shown_incident,
    shown_mark,
    text_or_none,
    texts,
)
from support.dashboard_feeds import SCRAPE_INTERVAL, STORE_FEED
from support.real_feeds import SCRIPT, EngineExporter, copy_store, percentiles
from support.servers import free_port

from observed_engine.contract.store_schema import make_row
from observed_engine.store import StoreWriter, connect

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


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

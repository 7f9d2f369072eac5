"""Dashboard render times over a big store.

    .venv/bin/python benchmarks/dashboard_bench.py [--rows 1000000] [--span-hours 24]
                                                  [--range "Last 24 hours"] [--store PATH] [--keep]

1. Fills a temporary store with ``--rows`` realistic events spread over the last
   ``--span-hours`` hours (``observed_engine.dashboard.sample_data.synthetic_rows``; executemany
   in big transactions, indexes rebuilt from ``store.SCHEMA_SQL`` afterwards).
2. Times the source's query functions per view: first call (cold) and a
   refresh (the next tick, after 300 new rows arrived).
3. Times the app under Streamlit's AppTest: the first render of every tab in a
   fresh session with empty caches, and a refresh (next tick, new rows) of the
   same tab. Python imports are warmed up first and reported apart.

With the default arguments every one of the million rows lies inside the
selected range (the worst case for the dashboard's queries).
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time
from pathlib import Path

import observed_engine.dashboard
from scratch import scratch_dir

APP = str(Path(observed_engine.dashboard.__file__).with_name("app.py"))


def fill(path: Path, rows: int, span_s: float) -> float:
    from observed_engine.dashboard.sample_data import fill_store, synthetic_rows

    t = time.perf_counter()
    data = synthetic_rows(rows, end_ts=time.time() - 5, span_s=span_s)
    fill_store(path, data)
    del data
    gc.collect()
    return time.perf_counter() - t


def append_live_rows(path: Path, n: int = 300) -> None:
    """What a running engine adds between two refreshes."""
    from observed_engine.contract.store_schema import INSERT_SQL, make_row
    from observed_engine.store import connect

    now = time.time()
    rows = []
    for i in range(n):
        hook = ("should_compress", "select_context", "update_from_response", "on_turn_complete")[i % 4]
        rows.append(make_row(ts=now - 1 + i / n, host="bench", pid=1, session=f"sess-live-{i % 3}",
                             engine="compressor", hook=hook, event="call",
                             outcome="unchanged" if hook == "select_context" else "ok", duration_s=0.001,
                             prompt_tokens=50_000 + i if hook == "update_from_response" else None,
                             threshold_tokens=64_000, window_tokens=128_000))
    conn = connect(path)
    try:
        conn.execute("BEGIN")
        conn.executemany(INSERT_SQL, rows)
        conn.execute("COMMIT")
    finally:
        conn.close()


def wait_next_tick(quantum: float) -> None:
    now = time.time()
    time.sleep((int(now / quantum) + 1) * quantum - now + 0.02)


def bench_queries(path: Path, span_s: float, quantum: float) -> list:
    from observed_engine.dashboard.sources import make_filters
    from observed_engine.dashboard.sqlite_source import SQLiteSource

    src = SQLiteSource(path)
    out = []
    f = make_filters(span_s, time.time(), quantum=quantum)
    sessions: list = []

    def lists(f):
        src.status(), src.engines(f)
        sessions[:] = list(src.sessions(f)["session"])

    views = [
        ("status + engines + sessions", lists),
        ("headline (KPIs + alerts)", lambda f: (src.compressions(f), src.incident_counts(f),
                                                src.usage_now(f, sessions[:20]), src.alerts(f, f.end))),
        ("context usage (4 sessions)", lambda f: src.usage(f, sessions[:4])),
        ("compressions", lambda f: src.compressions(f)),
        ("select_context", lambda f: src.selections(f)),
        ("incidents", lambda f: (src.incidents(f), src.incident_counts(f))),
        ("hook latency", lambda f: src.latency(f)),
    ]
    first = {}
    for name, fn in views:
        t = time.perf_counter()
        with src.snapshot():
            fn(f)
        first[name] = time.perf_counter() - t
    append_live_rows(path)
    wait_next_tick(quantum)
    f2 = make_filters(span_s, time.time(), quantum=quantum)
    for name, fn in views:
        t = time.perf_counter()
        with src.snapshot():
            fn(f2)
        out.append((name, first[name], time.perf_counter() - t))
    src.close()
    return out


def join_prefetch(timeout: float = 120.0) -> float:
    """Wait for the dashboard's background prefetch threads; returns the time waited."""
    import threading

    t = time.perf_counter()
    for th in threading.enumerate():
        if th.name == "dashboard-prefetch":
            th.join(timeout)
    return time.perf_counter() - t


def bench_app(path: Path, range_label: str, quantum: float, repeat: int) -> tuple:
    import streamlit as st
    from observed_engine.dashboard import prefetch
    from observed_engine.dashboard.tabs import TABS
    from streamlit.testing.v1 import AppTest

    os.environ["OBSERVED_STORE"] = str(path)
    os.environ["OBSERVED_REFRESH_SECONDS"] = f"{quantum:g}"
    os.environ.pop("OBSERVED_PROMETHEUS_URL", None)

    def fresh(tab=None):
        join_prefetch()
        st.cache_data.clear()
        st.cache_resource.clear()
        prefetch.forget()
        at = AppTest.from_file(APP, default_timeout=300)
        if range_label:
            at.session_state["range"] = range_label
        if tab:
            at.session_state["view"] = tab
        return at

    def timed_run(at) -> float:
        t = time.perf_counter()
        at.run()
        dt = time.perf_counter() - t
        assert not at.exception, [e.value for e in at.exception]
        return dt

    # warm-up: imports (streamlit, pandas) and Streamlit's own first-run cost
    t = time.perf_counter()
    fresh().run()
    warm_s = time.perf_counter() - t

    # (1) cold: a new session opens straight on the tab, nothing cached anywhere
    cold = {}
    for tab in TABS:
        cold[tab] = statistics.median(timed_run(fresh(tab)) for _ in range(repeat))

    # (2) the operator's flow: open the page (first tab), the other tabs are warmed in the
    #     background, then each tab is opened and refreshed with new rows arriving
    flow = []
    first_page, prefetch_s = [], []
    switch = {tab: [] for tab in TABS}
    refresh = {tab: [] for tab in TABS}
    for _ in range(repeat):
        at = fresh()
        first_page.append(timed_run(at))
        prefetch_s.append(join_prefetch())
        for tab in TABS:
            at.session_state["view"] = tab
            switch[tab].append(timed_run(at))
            append_live_rows(path)
            wait_next_tick(quantum)
            refresh[tab].append(timed_run(at))
    for tab in TABS:
        flow.append((tab, cold[tab], statistics.median(switch[tab]), statistics.median(refresh[tab])))
    return warm_s, statistics.median(first_page), statistics.median(prefetch_s), flow


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--span-hours", type=float, default=24.0, help="the rows cover this many hours up to now")
    p.add_argument("--range", default="Last 24 hours", help="the dashboard's time range preset")
    p.add_argument("--store", help="reuse (or create) this store instead of a temporary one")
    p.add_argument("--keep", action="store_true", help="keep the temporary store")
    p.add_argument("--repeat", type=int, default=1, help="AppTest runs per tab (median)")
    p.add_argument("--quantum", type=float, default=1.0, help="refresh interval in seconds")
    args = p.parse_args(argv)

    from observed_engine.dashboard.sources import RANGE_PRESETS

    span_s = RANGE_PRESETS[args.range]
    tmp = None
    if args.store:
        path = Path(args.store)
    else:
        tmp = scratch_dir("dashboard-bench-")
        path = Path(tmp) / "telemetry.sqlite"
    if not path.exists():
        print(f"filling {path} with {args.rows:,} events over {args.span_hours:g} h ...", flush=True)
        print(f"  filled in {fill(path, args.rows, args.span_hours * 3600):.1f} s "
              f"({path.stat().st_size / 1e6:.0f} MB)", flush=True)
    import sqlite3
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as c:
        n_all = c.execute("SELECT COUNT(*) FROM events").fetchone()[0]
        n_in = c.execute("SELECT COUNT(*) FROM events WHERE ts >= ?", (time.time() - span_s,)).fetchone()[0]
    print(f"store: {n_all:,} events, {n_in:,} in the range '{args.range}'\n", flush=True)

    q = bench_queries(path, span_s, args.quantum)
    print("source queries (SQLiteSource, seconds)")
    print(f"  {'view':30s} {'first':>8s} {'refresh':>8s}")
    for name, first, refresh in q:
        print(f"  {name:30s} {first:8.3f} {refresh:8.3f}")
    print(flush=True)

    warm_s, first_page, prefetch_s, rows = bench_app(path, args.range, args.quantum, args.repeat)
    print(f"app under AppTest (seconds; median of {args.repeat}; imports warmed up first: {warm_s:.2f} s)")
    print(f"  first render of the page (new session, empty caches): {first_page:.3f}")
    print(f"  background prefetch of the other tabs afterwards:     {prefetch_s:.3f}")
    print(f"  {'tab':22s} {'cold first render':>18s} {'open after prefetch':>20s} {'refresh':>8s}")
    for tab, cold, opened, refresh in rows:
        print(f"  {tab:22s} {cold:18.3f} {opened:20.3f} {refresh:8.3f}")
    print(f"\n  first render {first_page:.3f} s (target 2.0); worst tab opened after prefetch "
          f"{max(r[2] for r in rows):.3f} s; worst cold tab {max(r[1] for r in rows):.3f} s; "
          f"worst refresh {max(r[3] for r in rows):.3f} s (target 0.5)")
    try:
        load = os.getloadavg()
        print(f"  load average during the run: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} CPUs")
    except OSError:
        pass
    if tmp and not args.keep:
        for suffix in ("", "-wal", "-shm"):
            try:
                os.remove(str(path) + suffix)
            except OSError:
                pass
        os.rmdir(tmp)
    elif tmp:
        print(f"store kept at {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

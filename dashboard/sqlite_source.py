"""The store as a dashboard source: SQL aggregation over ``events``, read-only.

How it stays fast on a million rows (see ``benchmarks/dashboard_bench.py``):

* Everything is aggregated in SQLite; Python only sees per-bucket rows
  (``CAST(ts / step AS INTEGER) * step``), a few hundred incident rows, the rows
  of the handful of sessions drawn, and bounded latency samples.
* Queries go through the store's indexes: ``events_engine_hook_ts`` (engine
  lists are passed explicitly, so ``engine IN (...) AND hook = ? AND ts`` is an
  index range; hook call counts are index-only), ``events_session_ts`` (the
  sawtooth of one session, the session list by loose index scan) and the
  partial ``events_incidents`` (timeouts, fail-opens, summary failures).
* Bucketed aggregates are incremental: the closed part of the range (buckets
  that ended more than ``LATE_MARGIN_S`` ago) is kept in memory and only the
  newest buckets are queried on a refresh. Rows that arrive late (a ``ts``
  before the closed edge, found by ``id > high-water mark``, an O(new rows)
  rowid range) reopen the buckets from that point on, so results stay exact.
* Percentiles are exact up to ``PCT_SAMPLE`` calls per group; above that they
  come from a time-stratified sample of that size (proportional to the
  per-bucket call counts), drawn through the (engine, hook, ts) index.

The connection is opened with ``mode=ro`` and ``PRAGMA query_only``: the
dashboard never writes the store.
"""

from __future__ import annotations

import functools

import math
import os
import sqlite3
import threading
import time
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np
import pandas as pd

from dashboard.sources import (
    CAP_CONTENT, CAP_EVENTS, CAP_EXACT, CAP_SESSIONS, COMPRESS_OUTCOMES, SELECTION_RESULTS, SUMMARY_EVENTS,
    SUMMARY_FAILURE_EVENTS, TIMEOUT_EVENTS, Filters, Source, SourceError, Status,
)

ALERT_WINDOW_S = 15 * 60          # store-derived alerts look at the last 15 minutes ...
SUMMARY_ALERT_WINDOW_S = 30 * 60  # ... HermesContextSummaryFailing at the last 30 (the built-in's cooldowns)
NEAR_WINDOW_RATIO = 0.9           # HermesContextNearWindow

# The store's incident rows (events other than 'call'); a summary failure is one 'summary_failure'
# row whose outcome is its kind and reason its cause.
STORE_INCIDENT_EVENTS = TIMEOUT_EVENTS + ("fail_open", "summary_failure")
# ... and the dashboard's name for each (sources.INCIDENT_EVENTS): a summary failure by its kind.
INCIDENT_EVENT_SQL = (
    "CASE WHEN event = 'summary_failure' THEN CASE outcome "
    + " ".join(f"WHEN '{kind}' THEN '{ev}'" for kind, ev in SUMMARY_EVENTS.items())
    + " ELSE 'summary_' || COALESCE(outcome, 'failure') END ELSE event END"
)


def _mark(event: str, outcome: Optional[str]) -> Optional[str]:
    """What a compress row is marked as on the sawtooth: the call's outcome, or its event."""
    if event == "call":
        return outcome
    if event == "deadline_exceeded":
        return "timeout"
    if event == "summary_failure":
        return SUMMARY_EVENTS.get(outcome, f"summary_{outcome}")
    return event


def _sum_by_engine(df: pd.DataFrame, num, categories) -> Tuple[Dict[str, dict], list]:
    """Per engine, the ``num`` columns summed over the time buckets of ``df``; and the
    (bucket, engine, category, count) rows of the nonzero ``categories`` columns (the chart's series)."""
    agg: Dict[str, dict] = {}
    series_rows = []
    for row in df.itertuples(index=False):
        d = row._asdict()
        a = agg.setdefault(d["engine"], dict.fromkeys(num, 0.0))
        for k in num:
            a[k] += d[k] or 0
        for c in categories:
            if d[c]:
                series_rows.append((d["b"], d["engine"], c, d[c]))
    return agg, series_rows


@dataclass
class _Entry:
    lo: float
    cut: float
    hwm: int
    frame: pd.DataFrame


class SQLiteSource(Source):
    kind = "sqlite"
    capabilities = frozenset({CAP_SESSIONS, CAP_EVENTS, CAP_CONTENT, CAP_EXACT})

    PCT_SAMPLE = 3000       # latency percentiles: exact below, stratified sample above
    PCT_STRATA = 24
    LATE_MARGIN_S = 120.0   # buckets younger than this are always re-queried
    SERIES_RAW_MAX = 4000   # rows of one session drawn as-is; above, bucketed
    CACHE_ENTRIES = 96
    PCT_REUSE_S = 30.0      # a sampled percentile is reused this long while counts barely move
    WORKERS = 2             # cold range queries run on this many connections at once
    SPLIT_MIN_BUCKETS = 24

    def __init__(self, path: os.PathLike | str) -> None:
        self.path = str(Path(path).expanduser())
        self.label = self.path
        self._local = threading.local()
        self._pool: List[sqlite3.Connection] = []
        self._pool_lock = threading.Lock()
        self._cache: "OrderedDict[tuple, _Entry]" = OrderedDict()
        self._cache_lock = threading.Lock()
        self._pct_cache: Dict[tuple, tuple] = {}
        self._sess_cache: "OrderedDict[tuple, tuple]" = OrderedDict()
        self._late_memo: Dict[tuple, Optional[float]] = {}
        self._flights: Dict[tuple, threading.Lock] = {}
        self._sessions_state: Optional[tuple] = None     # (hwm, {session: (last_ts, engine)})
        self.queries = 0              # statements run (tests and the benchmark read it)

    # -- connections ---------------------------------------------------------

    def _open(self) -> sqlite3.Connection:
        if not os.path.exists(self.path):
            raise SourceError(f"store {self.path} does not exist yet")
        from observed_engine.store import connect
        try:
            conn = connect(self.path, readonly=True, timeout=2.0)
            conn.execute("PRAGMA query_only=1")
        except sqlite3.Error as exc:
            raise SourceError(f"cannot open store {self.path} read-only: {exc}") from exc
        return conn

    @contextmanager
    def snapshot(self) -> Iterator[sqlite3.Connection]:
        """One read transaction (one consistent snapshot) for everything inside; re-entrant."""
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            yield conn
            return
        with self._pool_lock:
            conn = self._pool.pop() if self._pool else None
        if conn is None:
            conn = self._open()
        self._local.conn = conn
        began = False
        try:
            try:
                conn.execute("BEGIN")
                began = True
            except sqlite3.Error:
                pass
            yield conn
        finally:
            self._local.conn = None
            if began:
                try:
                    conn.execute("COMMIT")
                except sqlite3.Error:
                    pass
            with self._pool_lock:
                if len(self._pool) < 4:
                    self._pool.append(conn)
                    conn = None
            if conn is not None:
                conn.close()

    def close(self) -> None:
        with self._pool_lock:
            for c in self._pool:
                c.close()
            self._pool.clear()

    def _rows(self, sql: str, params=()) -> list:
        with self.snapshot() as conn:
            self.queries += 1
            try:
                return conn.execute(sql, params).fetchall()
            except sqlite3.Error as exc:
                raise SourceError(f"store query failed: {exc}") from exc

    def _frame(self, sql: str, params=()) -> pd.DataFrame:
        with self.snapshot() as conn:
            self.queries += 1
            try:
                cur = conn.execute(sql, params)
                rows = cur.fetchall()
            except sqlite3.Error as exc:
                raise SourceError(f"store query failed: {exc}") from exc
            return pd.DataFrame.from_records(rows, columns=[d[0] for d in cur.description])

    # -- status and lists ----------------------------------------------------

    def status(self) -> Status:
        if not os.path.exists(self.path):
            return Status("missing", f"No store at {self.path} yet.")
        try:
            first, last, count = self._rows(
                "SELECT (SELECT MIN(ts) FROM events), (SELECT MAX(ts) FROM events), "
                "(SELECT COUNT(*) FROM events)")[0]
        except SourceError as exc:
            return Status("error", str(exc))
        if first is None:
            return Status("empty", f"The store at {self.path} has no events yet.", events=0)
        return Status("ok", "", first_ts=first, last_ts=last, events=count)

    def engines(self, f: Optional[Filters] = None) -> list:
        # Loose index scan over events_engine_hook_ts: one seek per distinct engine.
        rows = self._rows(
            "WITH RECURSIVE e(x) AS (SELECT MIN(engine) FROM events UNION ALL "
            "SELECT (SELECT MIN(engine) FROM events WHERE engine > e.x) FROM e WHERE e.x IS NOT NULL) "
            "SELECT x FROM e WHERE x IS NOT NULL")
        return [r[0] for r in rows]

    def hooks(self, engine: str) -> list:
        rows = self._rows(
            "WITH RECURSIVE h(x) AS (SELECT MIN(hook) FROM events WHERE engine = :e UNION ALL "
            "SELECT (SELECT MIN(hook) FROM events WHERE engine = :e AND hook > h.x) FROM h "
            "WHERE h.x IS NOT NULL) SELECT x FROM h WHERE x IS NOT NULL", {"e": engine})
        return [r[0] for r in rows]

    def _engine_list(self, f: Filters) -> list:
        return list(f.engines) if f.engines else self.engines(f)

    @staticmethod
    def _in(names: Sequence[str], prefix: str, params: dict) -> str:
        keys = []
        for i, n in enumerate(names):
            k = f"{prefix}{i}"
            params[k] = n
            keys.append(":" + k)
        return "(" + (", ".join(keys) if keys else "NULL") + ")"

    def sessions(self, f: Filters, limit: Optional[int] = None) -> pd.DataFrame:
        """Sessions with events in [start, end), most recent first: [session, engine, last_ts].

        Cold: a loose index scan over events_session_ts (one seek per distinct
        session). Live (the range ends now): kept in memory and updated from the
        rows added since (a rowid range)."""
        cols = ["session", "engine", "last_ts"]
        with self.snapshot():
            hwm = self._hwm()
            live = f.end >= time.time() - 1.0
            with self._cache_lock:
                state = self._sessions_state
            if live and state is not None and state[0] <= hwm:
                old_hwm, known = state
                if hwm > old_hwm:
                    known = dict(known)
                    for sess, ts, engine in self._rows(
                            "SELECT session, MAX(+ts), engine FROM events WHERE id > ? AND id <= ? "
                            "AND session IS NOT NULL GROUP BY +session", (old_hwm, hwm)):
                        if sess not in known or ts >= known[sess][0]:
                            known[sess] = (ts, engine)
            else:
                known = {sess: (ts, engine) for sess, engine, ts in self._rows(
                    "WITH RECURSIVE s(x) AS (SELECT MIN(session) FROM events UNION ALL "
                    "SELECT (SELECT MIN(session) FROM events WHERE session > s.x) FROM s WHERE s.x IS NOT NULL), "
                    "t AS MATERIALIZED (SELECT x AS session, (SELECT MAX(ts) FROM events WHERE session = s.x "
                    "AND ts < :hi) AS last_ts FROM s WHERE x IS NOT NULL) "
                    "SELECT session, (SELECT engine FROM events WHERE session = t.session AND ts = t.last_ts), "
                    "last_ts FROM t WHERE last_ts IS NOT NULL", {"hi": f.end})}
            if live:
                with self._cache_lock:
                    self._sessions_state = (hwm, known)
        rows = [(sess, engine, ts) for sess, (ts, engine) in known.items()
                if ts is not None and f.start <= ts < f.end and (not f.engines or engine in f.engines)]
        rows.sort(key=lambda r: r[2], reverse=True)
        return pd.DataFrame(rows[:limit] if limit else rows, columns=cols)

    # -- the incremental bucket cache ---------------------------------------

    def _single_flight(self, key: tuple) -> threading.Lock:
        """One computation per cache key at a time: a tab opened while the background prefetch
        is computing the same aggregate waits for it and then reads only the newest buckets."""
        with self._cache_lock:
            lock = self._flights.get(key)
            if lock is None:
                if len(self._flights) > 4 * self.CACHE_ENTRIES:
                    self._flights = {k: v for k, v in self._flights.items() if v.locked()}
                lock = self._flights[key] = threading.Lock()
        return lock

    def _run_split(self, run, lo: float, cut: float, g: int) -> pd.DataFrame:
        """A cold (long) range: split at a bucket edge and query both halves on two connections
        at once (SQLite releases the GIL; the machine has two cores)."""
        n = int((cut - lo) // g)
        if n < self.SPLIT_MIN_BUCKETS or self.WORKERS < 2:
            return run(lo, cut)
        edges = [lo + (n * i // self.WORKERS) * g for i in range(self.WORKERS)] + [cut]
        parts = list(_pool().map(lambda ab: run(*ab), zip(edges[:-1], edges[1:])))
        return _concat(parts)

    def _hwm(self) -> int:
        return self._rows("SELECT COALESCE(MAX(id), 0) FROM events")[0][0]

    def _min_ts_since(self, old_hwm: int, hwm: int) -> Optional[float]:
        """Smallest ts among rows added since ``old_hwm``: a rowid range, O(new rows).
        (``+ts`` keeps SQLite from walking the whole ts index for MIN.)"""
        key = (old_hwm, hwm)
        with self._cache_lock:
            if key in self._late_memo:
                return self._late_memo[key]
        v = self._rows("SELECT MIN(+ts) FROM events WHERE id > ? AND id <= ?", (old_hwm, hwm))[0][0]
        with self._cache_lock:
            if len(self._late_memo) > 256:
                self._late_memo.clear()
            self._late_memo[key] = v
        return v

    def _bucketed(self, name: str, sql: str, params: dict, f: Filters) -> pd.DataFrame:
        """Run ``sql`` (columns start with ``b``, the bucket start; placeholders :lo :hi :g)
        over [f.start, f.end), reusing the cached closed buckets of an earlier call."""
        g = f.step
        lo, hi = f.start, f.end
        cut = math.floor((time.time() - self.LATE_MARGIN_S) / g) * g
        cut = float(min(max(cut, lo), hi))
        key = (name, tuple(sorted(params.items())), g)

        def run(a: float, b: float) -> pd.DataFrame:
            p = dict(params, lo=a, hi=b, g=g)
            return self._frame(sql, p)

        with self.snapshot(), self._single_flight(key):
            hwm = self._hwm()
            with self._cache_lock:
                entry = self._cache.get(key)
            closed: Optional[pd.DataFrame] = None
            if entry is not None and entry.lo <= lo < entry.cut:
                e_cut = entry.cut
                frame = entry.frame
                if hwm > entry.hwm:
                    late = self._min_ts_since(entry.hwm, hwm)
                    if late is not None and late < e_cut:
                        e_cut = max(entry.lo, math.floor(late / g) * g)
                        frame = frame[frame["b"] < e_cut]
                if e_cut > lo:
                    closed = frame[frame["b"] >= lo]
                    if cut > e_cut:
                        closed = _concat([closed, run(e_cut, cut)])
                    elif cut < e_cut:
                        closed = closed[closed["b"] < cut]
            if closed is None and cut > lo:
                closed = self._run_split(run, lo, cut, g)
            if closed is not None:
                with self._cache_lock:
                    self._cache[key] = _Entry(lo=lo, cut=cut, hwm=hwm, frame=closed)
                    self._cache.move_to_end(key)
                    while len(self._cache) > self.CACHE_ENTRIES:
                        self._cache.popitem(last=False)
            parts = [closed] if closed is not None else []
            if hi > cut:
                parts.append(run(cut, hi))
            return _concat(parts) if parts else run(lo, lo)

    # -- the sawtooth --------------------------------------------------------

    _USAGE_COLS = ("id, ts, hook, event, outcome, prompt_tokens, threshold_tokens, window_tokens, "
                   "tokens_before, tokens_after, duration_s")

    def _session_rows(self, sess: str, f: Filters, engine_clause: str, params: dict, hwm: int) -> Optional[list]:
        """The update_from_response and compress rows of one session in the range, or None when
        there are too many to draw as-is. Kept per session; a refresh reads only rows with a
        higher id (new rows, late ones included) through the rowid."""
        key = (sess, f.engines)
        with self._cache_lock:
            entry = self._sess_cache.get(key)
        p = dict(params, s=sess)
        if entry is not None and entry[0] <= f.start:
            _, old_hwm, rows = entry
            if hwm > old_hwm:
                new = self._rows(
                    f"SELECT {self._USAGE_COLS} FROM events WHERE id > :hwm AND +session = :s "
                    "AND hook IN ('update_from_response', 'compress')" + engine_clause, dict(p, hwm=old_hwm))
                rows = sorted([r for r in rows if r[1] >= f.start] + new, key=lambda r: r[1])
            else:
                rows = [r for r in rows if r[1] >= f.start]
            if len(rows) > self.SERIES_RAW_MAX:
                rows = None
        else:
            n = self._rows("SELECT COUNT(*) FROM events WHERE session = :s AND ts >= :lo AND ts < :hi", p)[0][0]
            rows = None
            if n <= self.SERIES_RAW_MAX:
                rows = self._rows(
                    f"SELECT {self._USAGE_COLS} FROM events WHERE session = :s AND ts >= :lo "
                    "AND hook IN ('update_from_response', 'compress')" + engine_clause + " ORDER BY ts", p)
        with self._cache_lock:
            if rows is None:
                self._sess_cache.pop(key, None)
            else:
                self._sess_cache[key] = (f.start, hwm, rows)
                self._sess_cache.move_to_end(key)
                while len(self._sess_cache) > 64:
                    self._sess_cache.popitem(last=False)
        if rows is None:
            return None
        return [r for r in rows if r[1] < f.end]

    def usage(self, f: Filters, series: Sequence[str]) -> Tuple[pd.DataFrame, pd.DataFrame]:
        line_cols = ["ts", "series", "prompt_tokens", "threshold_tokens", "window_tokens"]
        mark_cols = ["ts", "series", "outcome", "tokens_before", "tokens_after", "duration_s"]
        line_rows: list = []
        mark_rows: list = []
        params_base: dict = {"lo": f.start, "hi": f.end}
        engine_clause = ""
        if f.engines:
            engine_clause = " AND engine IN " + self._in(f.engines, "e", params_base)
        with self.snapshot():
            hwm = self._hwm()
            for sess in series:
                rows = self._session_rows(sess, f, engine_clause, params_base, hwm)
                if rows is not None:
                    for (_id, ts, hook, event, outcome, pt, tt, wt, tb, ta, d) in rows:
                        if hook == "update_from_response":
                            line_rows.append((ts, sess, pt, tt, wt))
                        else:
                            mark_rows.append((ts, sess, _mark(event, outcome), tb, ta, d))
                    continue
                # a very long session: the per-bucket peak, and the latest 500 compressions
                p = dict(params_base, s=sess, g2=max(1.0, f.span / 1000.0))
                for ts, pt, tt, wt in self._rows(
                        "SELECT MAX(ts), MAX(prompt_tokens), MAX(threshold_tokens), MAX(window_tokens) FROM events "
                        "WHERE session = :s AND ts >= :lo AND ts < :hi AND hook = 'update_from_response'"
                        + engine_clause + " GROUP BY CAST(ts / :g2 AS INTEGER) ORDER BY 1", p):
                    line_rows.append((ts, sess, pt, tt, wt))
                for ts, event, outcome, tb, ta, d in self._rows(
                        "SELECT ts, event, outcome, tokens_before, tokens_after, duration_s FROM events "
                        "WHERE session = :s AND ts >= :lo AND ts < :hi AND hook = 'compress'" + engine_clause +
                        " ORDER BY ts DESC LIMIT 500", p):
                    mark_rows.append((ts, sess, _mark(event, outcome), tb, ta, d))
        return pd.DataFrame(line_rows, columns=line_cols), pd.DataFrame(mark_rows, columns=mark_cols)

    def usage_now(self, f: Filters, sessions: Sequence[str]) -> pd.DataFrame:
        """Latest prompt / window of each given session (before f.end)."""
        out = []
        with self.snapshot():
            for sess in sessions:
                r = self._rows(
                    "SELECT ts, engine, prompt_tokens, threshold_tokens, window_tokens FROM events "
                    "WHERE session = ? AND ts < ? AND ts >= ? AND hook = 'update_from_response' "
                    "ORDER BY ts DESC LIMIT 1", (sess, f.end, f.start))
                if r:
                    ts, engine, p, t, w = r[0]
                    out.append((sess, engine, ts, p, t, w))
        df = pd.DataFrame(out, columns=["series", "engine", "ts", "prompt_tokens", "threshold_tokens",
                                        "window_tokens"])
        df["ratio"] = (df["prompt_tokens"] / df["window_tokens"].where(df["window_tokens"] > 0)).astype(float)
        return df

    # -- compressions ----------------------------------------------------------

    def compressions(self, f: Filters) -> Tuple[pd.DataFrame, pd.DataFrame]:
        cols = ["engine", *COMPRESS_OUTCOMES, "host_reported", "late_completion", *SUMMARY_FAILURE_EVENTS, "total",
                "p50_s", "p95_s", "p99_s", "tokens_before_avg", "tokens_after_avg", "ratio"]
        engines = self._engine_list(f)
        params: dict = {}
        in_e = self._in(engines, "e", params)
        # (event and outcome are in the covering index; the token columns are read from the rows anyway)
        summary_sums = "".join(f"SUM(event = 'summary_failure' AND outcome = '{kind}') AS {ev}, "
                               for kind, ev in SUMMARY_EVENTS.items())
        sql = (
            "SELECT CAST(ts / :g AS INTEGER) * :g AS b, engine, "
            "SUM(event = 'call' AND outcome = 'compressed') AS compressed, "
            "SUM(event = 'call' AND outcome = 'noop') AS noop, "
            "SUM(event = 'call' AND outcome = 'error') AS error, "
            "SUM(event = 'deadline_exceeded') AS timeout, "
            "SUM(event = 'host_reported') AS host_reported, "
            "SUM(event = 'late_completion') AS late_completion, "
            f"{summary_sums}"
            "SUM(event = 'call' AND duration_s IS NOT NULL) AS calls, "
            "TOTAL(CASE WHEN event = 'call' AND outcome = 'compressed' THEN tokens_before END) AS tb, "
            "TOTAL(CASE WHEN event = 'call' AND outcome = 'compressed' THEN tokens_after END) AS ta, "
            "SUM(event = 'call' AND outcome = 'compressed' AND tokens_before IS NOT NULL) AS tn "
            f"FROM events WHERE engine IN {in_e} AND hook = 'compress' AND ts >= :lo AND ts < :hi "
            "GROUP BY engine, b")
        empty_series = pd.DataFrame(columns=["ts", "engine", "outcome", "count"])
        with self.snapshot():
            df = self._bucketed("compress", sql, params, f)
            if df.empty:
                return pd.DataFrame(columns=cols), empty_series
            num = ["compressed", "noop", "error", "timeout", "host_reported", "late_completion",
                   *SUMMARY_FAILURE_EVENTS, "calls", "tb", "ta", "tn"]
            agg, series_rows = _sum_by_engine(df, num, COMPRESS_OUTCOMES)
            buckets: Dict[str, Dict[float, float]] = {}
            for b, eng, calls in zip(df["b"], df["engine"], df["calls"]):
                if calls:
                    buckets.setdefault(eng, {})[b] = calls
            out = []
            for eng in sorted(agg):
                a = agg[eng]
                p50, p95, p99 = self._percentiles(eng, "compress", f, buckets.get(eng, {}))
                out.append((eng, *(int(a[o]) for o in COMPRESS_OUTCOMES), int(a["host_reported"]),
                            int(a["late_completion"]), *(int(a[ev]) for ev in SUMMARY_FAILURE_EVENTS),
                            int(sum(a[o] for o in COMPRESS_OUTCOMES)), p50, p95, p99,
                            a["tb"] / a["tn"] if a["tn"] else None, a["ta"] / a["tn"] if a["tn"] else None,
                            a["ta"] / a["tb"] if a["tb"] else None))
            series = pd.DataFrame(series_rows, columns=["ts", "engine", "outcome", "count"]) if series_rows \
                else empty_series
            return pd.DataFrame(out, columns=cols), series

    # -- select_context ------------------------------------------------------

    def selections(self, f: Filters) -> Tuple[pd.DataFrame, pd.DataFrame]:
        cols = ["engine", *SELECTION_RESULTS, "total", "churn", "cache_lost_tokens"]
        engines = self._engine_list(f)
        params: dict = {}
        in_e = self._in(engines, "e", params)
        sums = ", ".join(f"SUM(outcome = '{r}') AS {r}" for r in SELECTION_RESULTS)
        sql = (f"SELECT CAST(ts / :g AS INTEGER) * :g AS b, engine, {sums}, COUNT(*) AS total, "
               "TOTAL(cache_lost_tokens) AS cache_lost_tokens "
               f"FROM events WHERE engine IN {in_e} AND hook = 'select_context' AND event = 'call' "
               "AND ts >= :lo AND ts < :hi GROUP BY engine, b")
        df = self._bucketed("select", sql, params, f)
        empty_series = pd.DataFrame(columns=["ts", "engine", "result", "count"])
        if df.empty:
            return pd.DataFrame(columns=cols), empty_series
        num = [*SELECTION_RESULTS, "total", "cache_lost_tokens"]
        agg, series_rows = _sum_by_engine(df, num, SELECTION_RESULTS)
        out = []
        for eng in sorted(agg):
            a = agg[eng]
            out.append((eng, *(int(a[r]) for r in SELECTION_RESULTS), int(a["total"]),
                        a["changed_selection"] / a["total"] if a["total"] else None, int(a["cache_lost_tokens"])))
        series = pd.DataFrame(series_rows, columns=["ts", "engine", "result", "count"]) if series_rows \
            else empty_series
        return pd.DataFrame(out, columns=cols), series

    # -- hook latency ----------------------------------------------------------

    def latency(self, f: Filters) -> Tuple[pd.DataFrame, pd.DataFrame]:
        cols = ["engine", "hook", "calls", "calls_per_s", "errors", "p50_ms", "p95_ms", "p99_ms"]
        empty = (pd.DataFrame(columns=cols), pd.DataFrame(columns=["ts", "engine", "hook", "calls_per_s"]))
        with self.snapshot():
            pairs = [(e, h) for e in self._engine_list(f) for h in self.hooks(e)]
            if not pairs:
                return empty
            params: dict = {}
            values = []
            for i, (e, h) in enumerate(pairs):
                params[f"pe{i}"], params[f"ph{i}"] = e, h
                values.append(f"(:pe{i}, :ph{i})")
            # Index-only: one (engine, hook, ts) range count per pair and bucket.
            counts_sql = (
                "WITH RECURSIVE bk(b) AS (SELECT :lo UNION ALL SELECT b + :g FROM bk WHERE b + :g < :hi), "
                f"grp(engine, hook) AS (VALUES {', '.join(values)}) "
                "SELECT b, engine, hook, n FROM (SELECT bk.b AS b, grp.engine AS engine, grp.hook AS hook, "
                "(SELECT COUNT(*) FROM events e WHERE e.engine = grp.engine AND e.hook = grp.hook "
                "AND e.ts >= bk.b AND e.ts < MIN(bk.b + :g, :hi)) AS n FROM grp, bk) WHERE n > 0")
            counts = self._bucketed("hookcounts", counts_sql, params, f)
            errors = self._bucketed(
                "hookerrors",
                "SELECT CAST(ts / :g AS INTEGER) * :g AS b, engine, hook, COUNT(*) AS errors FROM events "
                "WHERE ts >= :lo AND ts < :hi AND event = 'call' AND outcome = 'error' GROUP BY b, engine, hook",
                {}, f)
            # Non-call rows (fail-open, timeouts, bad input) share the hook name: subtract them.
            other = self._bucketed(
                "noncall", "SELECT CAST(ts / :g AS INTEGER) * :g AS b, engine, hook, COUNT(*) AS n FROM events "
                "WHERE event != 'call' AND ts >= :lo AND ts < :hi GROUP BY b, engine, hook", {}, f)
            other_map = {(b, e, h): n for b, e, h, n in other.itertuples(index=False)}
            wanted = set(pairs)
            per: Dict[tuple, Dict[float, float]] = {}
            series_rows = []
            for b, e, h, n in counts.itertuples(index=False):
                calls = n - other_map.get((b, e, h), 0)
                if calls > 0 and (e, h) in wanted:
                    per.setdefault((e, h), {})[b] = calls
                    series_rows.append((b, e, h, calls / float(f.step)))
            if not per:
                return empty
            err: Dict[tuple, int] = {}
            for b, e, h, n in errors.itertuples(index=False):
                err[(e, h)] = err.get((e, h), 0) + int(n)
            span = max(1.0, min(f.end, time.time()) - f.start)
            out = []
            keys = sorted(per)
            pcts = list(_pool().map(lambda k: self._percentiles(k[0], k[1], f, per[k]), keys))
            for (e, h), p in zip(keys, pcts):
                calls = int(sum(per[(e, h)].values()))
                out.append((e, h, calls, calls / span, err.get((e, h), 0),
                            *(None if v is None else v * 1000.0 for v in p)))
            return (pd.DataFrame(out, columns=cols),
                    pd.DataFrame(series_rows, columns=["ts", "engine", "hook", "calls_per_s"]))

    def _percentiles(self, engine: str, hook: str, f: Filters, bucket_counts: Dict[float, float]) -> list:
        """p50/p95/p99 (seconds) of call durations: exact up to PCT_SAMPLE calls, else from a
        time-stratified sample of PCT_SAMPLE calls. A large group's result is reused for up to
        PCT_REUSE_S seconds while its call count moves by less than 5 %."""
        total = float(sum(bucket_counts.values())) if bucket_counts else 0.0
        if total <= 0:
            return [None, None, None]
        key = (engine, hook, f.step, f.engines)
        now = time.monotonic()
        with self._cache_lock:
            hit = self._pct_cache.get(key)
        if hit is not None:
            at, lo, n, result = hit
            if (lo == f.start and n == total) or (
                    total > self.PCT_SAMPLE and now - at < self.PCT_REUSE_S and abs(total - n) <= 0.05 * n
                    and abs(lo - f.start) <= max(f.step, 0.05 * f.span)):
                return result
        base = ("SELECT duration_s FROM events WHERE engine = ? AND hook = ? AND ts >= ? AND ts < ? "
                "AND event = 'call' AND duration_s IS NOT NULL")
        if total <= self.PCT_SAMPLE:
            vals = [r[0] for r in self._rows(base, (engine, hook, f.start, f.end))]
        else:
            starts = np.array(sorted(bucket_counts), dtype=float)
            cum = np.cumsum([bucket_counts[b] for b in starts])
            strata = min(self.PCT_STRATA, len(starts))
            # equal-count strata over the buckets, then the same number of rows from each
            edges = np.searchsorted(cum, np.linspace(0, cum[-1], strata + 1)[1:-1], side="left") + 1
            bounds = sorted(set([0, *[int(x) for x in edges if x < len(starts)]]))
            per = max(1, int(self.PCT_SAMPLE / len(bounds)))
            parts, params = [], []
            for i, a in enumerate(bounds):
                t0 = f.start if i == 0 else starts[a]
                t1 = f.end if i + 1 == len(bounds) else starts[bounds[i + 1]]
                if t1 <= t0:
                    continue
                parts.append(f"SELECT duration_s FROM ({base} ORDER BY ts LIMIT {per})")
                params.extend((engine, hook, float(t0), float(t1)))
            vals = [r[0] for r in self._rows(" UNION ALL ".join(parts), params)] if parts else []
        if not vals:
            result = [None, None, None]
        else:
            result = [float(v) for v in np.percentile(np.asarray(vals, dtype=float), [50, 95, 99],
                                                      method="inverted_cdf")]
        with self._cache_lock:
            self._pct_cache[key] = (now, f.start, total, result)
            if len(self._pct_cache) > 512:
                self._pct_cache.clear()
        return result

    # -- incidents and alerts --------------------------------------------------

    def _incident_where(self, f: Filters, params: dict) -> str:
        params.update(lo=f.start, hi=f.end)
        ev = self._in(STORE_INCIDENT_EVENTS, "ev", params)
        # "event != 'call'" lets SQLite use the partial index events_incidents.
        where = f"event != 'call' AND event IN {ev} AND ts >= :lo AND ts < :hi"
        if f.engines:
            where += " AND engine IN " + self._in(f.engines, "e", params)
        if f.session:
            params["s"] = f.session
            where += " AND session = :s"
        return where

    def incidents(self, f: Filters, limit: int = 500) -> pd.DataFrame:
        params: dict = {"limit": limit}
        where = self._incident_where(f, params)
        return self._frame(
            f"SELECT ts, session, engine, hook, {INCIDENT_EVENT_SQL} AS event, reason, duration_s, content "
            f"FROM events WHERE {where} ORDER BY ts DESC LIMIT :limit", params)

    def incident_counts(self, f: Filters) -> pd.DataFrame:
        cols = ["engine", "hook", "event", "reason", "count"]
        params: dict = {}
        where = self._incident_where(f, params)
        if f.start % f.step:          # an unaligned range (the alerts' last 15 minutes): one plain query
            return self._frame(
                f"SELECT engine, hook, {INCIDENT_EVENT_SQL} AS event, reason, COUNT(*) AS count FROM events "
                f"WHERE {where} GROUP BY engine, hook, {INCIDENT_EVENT_SQL}, reason ORDER BY count DESC", params)
        for k in ("lo", "hi"):
            params.pop(k, None)
        df = self._bucketed(
            "incidents", f"SELECT CAST(ts / :g AS INTEGER) * :g AS b, engine, hook, {INCIDENT_EVENT_SQL} AS event, "
            f"reason, COUNT(*) AS count FROM events WHERE {where} GROUP BY b, engine, hook, {INCIDENT_EVENT_SQL}, "
            "reason", params, f)
        if df.empty:
            return pd.DataFrame(columns=cols)
        out = df.groupby(["engine", "hook", "event", "reason"], dropna=False, as_index=False)["count"].sum()
        return out.sort_values("count", ascending=False)[cols].reset_index(drop=True)

    def alerts(self, f: Filters, now: float) -> pd.DataFrame:
        """Alerts derived from the store, mirroring deploy/'s rules over the last 15 minutes."""
        lo = now - ALERT_WINDOW_S
        recent = Filters(start=lo, end=now + 1, step=f.step, engines=f.engines)
        rows = []
        with self.snapshot():
            inc = self.incident_counts(recent)
            if not inc.empty:
                since = self._frame(
                    "SELECT engine, event, MIN(ts) AS since FROM events WHERE event != 'call' AND ts >= ? "
                    "GROUP BY engine, event", (lo,))
                first = {(r.engine, r.event): r.since for r in since.itertuples()}
                for (engine, event), grp in inc.groupby(["engine", "event"]):
                    n = int(grp["count"].sum())
                    if event in ("deadline_exceeded", "host_reported"):
                        rows.append(("HermesContextCompressionTimeout", _rule_severity("HermesContextCompressionTimeout"), engine,
                                     f"{n} compression timeout(s) ({event}) in the last 15 min",
                                     first.get((engine, event))))
                    elif event == "fail_open":
                        hooks = ", ".join(sorted(set(grp["hook"].dropna())))
                        reasons = ", ".join(sorted(set(grp["reason"].dropna())))
                        rows.append(("HermesContextEngineFailOpen", _rule_severity("HermesContextEngineFailOpen"), engine,
                                     f"{n} fail-open(s) in {hooks} ({reasons}) in the last 15 min",
                                     first.get((engine, event))))
            engines = self._engine_list(f)
            params: dict = {"lo": lo}
            in_e = self._in(engines, "e", params)
            errs = self._rows(
                f"SELECT engine, COUNT(*), MIN(ts) FROM events WHERE engine IN {in_e} AND hook = 'compress' "
                "AND ts >= :lo AND event = 'call' AND outcome = 'error' GROUP BY engine", params)
            for engine, n, since in errs:
                rows.append(("HermesContextCompressionErrors", _rule_severity("HermesContextCompressionErrors"), engine,
                             f"{n} compress() error(s) in the last 15 min", since))
            # HermesContextSummaryFailing: per engine, kind and cause; the rows are rare non-call
            # events, read through the partial index events_incidents.
            sp: dict = {"slo": now - SUMMARY_ALERT_WINDOW_S}
            engine_clause = " AND engine IN " + self._in(f.engines, "se", sp) if f.engines else ""
            for engine, kind, cause, n, since in self._rows(
                    "SELECT engine, outcome, reason, COUNT(*), MIN(ts) FROM events WHERE event != 'call' "
                    f"AND event = 'summary_failure' AND ts >= :slo{engine_clause} GROUP BY engine, outcome, reason",
                    sp):
                rows.append(("HermesContextSummaryFailing", _summary_severity(cause), engine,
                             f"{n} compress() call(s) returned although the summary model failed ({kind}, "
                             f"cause {cause}) in the last 30 min", since))
            near = self._rows(
                "SELECT engine, session, prompt_tokens, window_tokens, MAX(ts) FROM events "
                f"WHERE engine IN {in_e} AND hook = 'update_from_response' AND ts >= :lo GROUP BY session",
                params)
            for engine, session, p, w, ts in near:
                if p and w and p >= NEAR_WINDOW_RATIO * w:
                    rows.append(("HermesContextNearWindow", _rule_severity("HermesContextNearWindow"), engine,
                                 f"session {session} at {p / w:.0%} of its {w:,} token window", ts))
        df = pd.DataFrame(rows, columns=["alert", "severity", "engine", "detail", "since"])
        df.insert(2, "state", "firing")
        return df

    def content(self, f: Filters, limit: int = 50) -> pd.DataFrame:
        if not f.session:
            return pd.DataFrame(columns=["ts", "hook", "content"])
        return self._frame(
            "SELECT ts, hook, content FROM events WHERE session = ? AND ts >= ? AND ts < ? "
            "AND content IS NOT NULL ORDER BY ts DESC LIMIT ?", (f.session, f.start, f.end, limit))


_POOL: Optional[ThreadPoolExecutor] = None
_POOL_LOCK = threading.Lock()


def _pool() -> ThreadPoolExecutor:
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(max_workers=SQLiteSource.WORKERS, thread_name_prefix="dashboard-sql")
        return _POOL


def _concat(frames: Sequence[pd.DataFrame]) -> pd.DataFrame:
    frames = [x for x in frames if x is not None]
    nonempty = [x for x in frames if not x.empty]
    if not nonempty:
        return frames[0] if frames else pd.DataFrame()
    if len(nonempty) == 1:
        return nonempty[0]
    return pd.concat(nonempty, ignore_index=True)


_ALERT_RULES = Path(__file__).resolve().parent.parent / "deploy" / "prometheus" / "alerts.yml"


@functools.lru_cache(maxsize=1)
def _rule_severities() -> dict:
    """alert name -> severity label, read from the shipped rules (one source for both)."""
    try:
        import yaml

        doc = yaml.safe_load(_ALERT_RULES.read_text())
        return {rule["alert"]: rule.get("labels", {}).get("severity", "warning")
                for group in doc.get("groups", []) for rule in group.get("rules", []) if "alert" in rule}
    except Exception:
        return {}


def _rule_severity(name: str) -> str:
    return _rule_severities().get(name, "warning")


def _summary_severity(cause: Optional[str]) -> str:
    """HermesContextSummaryFailing's severity, a template in the rule: auth does not heal by itself."""
    return "critical" if cause == "auth" else "warning"

"""Sessions, the sawtooth of the drawn sessions, and captured message text.

* The session list: cold, a loose index scan over ``events_session_ts`` (one seek per
  distinct session); live (the range ends now), kept in memory and updated from the rows
  added since (a rowid range).
* The rows of a drawn session are kept per session; a refresh reads only rows with a higher
  id (new rows, late ones included). A very long session is drawn from per-bucket peaks.
* A row whose token or duration column holds something that is not a number is left out
  of the sawtooth and counted (``sources.skipped``).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from typing import Optional, Sequence, Tuple

import pandas as pd

from observed_engine.contract import vocabulary as vocab

from ..sources import (
    CONTENT_COLUMNS,
    HOOK_COMPRESS,
    HOOK_SESSION_END,
    HOOK_UPDATE,
    SESSION_COLUMNS,
    Filters,
    with_skipped,
)
from .reader import TS_IS_NUMBER, StoreReader, in_list, is_number, numeric

SERIES_RAW_MAX = 4000   # rows of one session drawn as-is; above, bucketed
LINE_COLUMNS = ["ts", "series", "prompt_tokens", "threshold_tokens", "window_tokens"]
MARK_COLUMNS = ["ts", "series", "outcome", "tokens_before", "tokens_after", "duration_s"]
_ROW_COLUMNS = ("id, ts, hook, event, outcome, prompt_tokens, threshold_tokens, window_tokens, "
                "tokens_before, tokens_after, duration_s")
_HOOKS = f"('{HOOK_UPDATE}', '{HOOK_COMPRESS}')"
_USAGE_NUMBERS = ("prompt_tokens", "threshold_tokens", "window_tokens")
_MARK_NUMBERS = ("tokens_before", "tokens_after", "duration_s")


def mark(event: str, outcome: Optional[str]) -> Optional[str]:
    """What a compress row is marked as on the sawtooth: the call's outcome, ``timeout`` for a
    deadline, a summary failure's kind (its outcome), else the event."""
    if event == vocab.EVENT_CALL:
        return outcome
    if event == vocab.DEADLINE_EXCEEDED:
        return vocab.TIMEOUT
    if event == vocab.EVENT_SUMMARY_FAILURE:
        return outcome
    return event


class Usage:
    def __init__(self, db: StoreReader) -> None:
        self.db = db
        self._lock = threading.Lock()
        self._sess_cache: OrderedDict[tuple, tuple] = OrderedDict()
        self._sessions_state: Optional[tuple] = None     # (hwm, {session: (last_ts, engine)})

    # -- the session list ------------------------------------------------------------

    def sessions(self, f: Filters) -> pd.DataFrame:
        """Sessions with events in [start, end), most recent first: [session, engine, last_ts, ended]
        (``ended``: the session's latest row is its on_session_end)."""
        with self.db.snapshot():
            hwm = self.db.hwm()
            live = f.end >= time.time() - 1.0
            with self._lock:
                state = self._sessions_state
            if live and state is not None and state[0] <= hwm:
                old_hwm, known = state
                if hwm > old_hwm:
                    known = dict(known)
                    # (SQLite: with MAX(), the bare columns come from the row holding the maximum)
                    for sess, ts, engine, hook in self.db.rows(
                            "SELECT session, MAX(+ts), engine, hook FROM events WHERE id > ? AND id <= ? "
                            f"AND session IS NOT NULL AND {TS_IS_NUMBER} GROUP BY +session",
                            (old_hwm, hwm)):
                        if sess not in known or ts >= known[sess][0]:
                            known[sess] = (ts, engine, hook)
            else:
                known = {sess: (ts, engine, hook) for sess, engine, hook, ts in self.db.rows(
                    "WITH RECURSIVE s(x) AS (SELECT MIN(session) FROM events UNION ALL "
                    "SELECT (SELECT MIN(session) FROM events WHERE session > s.x) FROM s WHERE s.x IS NOT NULL), "
                    "t AS MATERIALIZED (SELECT x AS session, (SELECT MAX(ts) FROM events WHERE session = s.x "
                    "AND ts < :hi) AS last_ts FROM s WHERE x IS NOT NULL), "
                    "r AS MATERIALIZED (SELECT session, last_ts, (SELECT id FROM events WHERE session = t.session "
                    "AND ts = t.last_ts ORDER BY id DESC LIMIT 1) AS rid FROM t WHERE last_ts IS NOT NULL) "
                    "SELECT r.session, e.engine, e.hook, r.last_ts FROM r JOIN events e ON e.id = r.rid",
                    {"hi": f.end})}
            if live:
                with self._lock:
                    self._sessions_state = (hwm, known)
        rows = [(sess, engine, ts, hook == HOOK_SESSION_END) for sess, (ts, engine, hook) in known.items()
                if ts is not None and f.start <= ts < f.end and (not f.engines or engine in f.engines)]
        rows.sort(key=lambda r: r[2], reverse=True)
        return pd.DataFrame(rows, columns=SESSION_COLUMNS)

    # -- the sawtooth ----------------------------------------------------------------

    def _session_rows(self, sess: str, f: Filters, engine_clause: str, params: dict, hwm: int) -> Optional[list]:
        """The update_from_response and compress rows of one session in the range, or None when
        there are too many to draw as-is."""
        key = (sess, f.engines)
        with self._lock:
            entry = self._sess_cache.get(key)
        p = dict(params, s=sess)
        if entry is not None and entry[0] <= f.start:
            _, old_hwm, rows = entry
            if hwm > old_hwm:
                new = self.db.rows(
                    f"SELECT {_ROW_COLUMNS} FROM events WHERE id > :hwm AND +session = :s "
                    f"AND hook IN {_HOOKS} AND {TS_IS_NUMBER}" + engine_clause,
                    dict(p, hwm=old_hwm))
                rows = sorted([r for r in rows if r[1] >= f.start] + new, key=lambda r: r[1])
            else:
                rows = [r for r in rows if r[1] >= f.start]
            if len(rows) > SERIES_RAW_MAX:
                rows = None
        else:
            n = self.db.rows("SELECT COUNT(*) FROM events WHERE session = :s AND ts >= :lo AND ts < :hi", p)[0][0]
            rows = None
            if n <= SERIES_RAW_MAX:
                rows = self.db.rows(
                    f"SELECT {_ROW_COLUMNS} FROM events WHERE session = :s AND ts >= :lo AND {TS_IS_NUMBER} "
                    f"AND hook IN {_HOOKS}" + engine_clause + " ORDER BY ts", p)
        with self._lock:
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
        line_rows: list = []
        mark_rows: list = []
        bad = 0
        params_base: dict = {"lo": f.start, "hi": f.end}
        engine_clause = ""
        if f.engines:
            engine_clause = " AND engine IN " + in_list(f.engines, "e", params_base)
        with self.db.snapshot():
            hwm = self.db.hwm()
            for sess in series:
                rows = self._session_rows(sess, f, engine_clause, params_base, hwm)
                if rows is not None:
                    for (_id, ts, hook, event, outcome, pt, tt, wt, tb, ta, d) in rows:
                        if hook == HOOK_UPDATE:
                            if all(map(is_number, (pt, tt, wt))):
                                line_rows.append((ts, sess, pt, tt, wt))
                            else:
                                bad += 1
                        elif event == vocab.EVENT_COMPRESSION_BLOCKED:
                            continue          # a state change, not a compress() call (the timeline shows it)
                        elif all(map(is_number, (tb, ta, d))):
                            mark_rows.append((ts, sess, mark(event, outcome), tb, ta, d))
                        else:
                            bad += 1
                    continue
                # a very long session: the per-bucket peak, and the latest 500 compressions
                p = dict(params_base, s=sess, g2=max(1.0, f.span / 1000.0))
                where = "session = :s AND ts >= :lo AND ts < :hi AND hook = "
                for ts, pt, tt, wt in self.db.rows(
                        "SELECT MAX(ts), MAX(prompt_tokens), MAX(threshold_tokens), MAX(window_tokens) FROM events "
                        f"WHERE {where}'{HOOK_UPDATE}' AND {numeric(*_USAGE_NUMBERS)}" + engine_clause
                        + " GROUP BY CAST(ts / :g2 AS INTEGER) ORDER BY 1", p):
                    line_rows.append((ts, sess, pt, tt, wt))
                for ts, event, outcome, tb, ta, d in self.db.rows(
                        "SELECT ts, event, outcome, tokens_before, tokens_after, duration_s FROM events "
                        f"WHERE {where}'{HOOK_COMPRESS}' AND {numeric(*_MARK_NUMBERS)} "
                        f"AND event != '{vocab.EVENT_COMPRESSION_BLOCKED}'" + engine_clause
                        + " ORDER BY ts DESC LIMIT 500", p):
                    mark_rows.append((ts, sess, mark(event, outcome), tb, ta, d))
                bad += self.db.rows(
                    f"SELECT COUNT(*) FROM events WHERE session = :s AND ts >= :lo AND ts < :hi AND "
                    f"((hook = '{HOOK_UPDATE}' AND NOT ({numeric(*_USAGE_NUMBERS)})) OR "
                    f"(hook = '{HOOK_COMPRESS}' AND NOT ({numeric(*_MARK_NUMBERS)})))" + engine_clause, p)[0][0]
        lines = pd.DataFrame(line_rows, columns=LINE_COLUMNS)
        return with_skipped(lines, bad), pd.DataFrame(mark_rows, columns=MARK_COLUMNS)

    def usage_now(self, f: Filters, sessions: Sequence[str]) -> pd.DataFrame:
        """Latest prompt / window of each given session (before f.end), from its latest row
        whose numbers are numbers."""
        out = []
        with self.db.snapshot():
            for sess in sessions:
                r = self.db.rows(
                    "SELECT ts, engine, prompt_tokens, threshold_tokens, window_tokens FROM events "
                    f"WHERE session = ? AND ts < ? AND ts >= ? AND hook = '{HOOK_UPDATE}' "
                    f"AND {numeric(*_USAGE_NUMBERS)} ORDER BY ts DESC LIMIT 1", (sess, f.end, f.start))
                if r:
                    ts, engine, p, t, w = r[0]
                    out.append((sess, engine, ts, p, t, w))
        df = pd.DataFrame(out, columns=["series", "engine", "ts", "prompt_tokens", "threshold_tokens",
                                        "window_tokens"])
        df["ratio"] = (df["prompt_tokens"] / df["window_tokens"].where(df["window_tokens"] > 0)).astype(float)
        return df

    def content(self, f: Filters, limit: int) -> pd.DataFrame:
        if not f.session:
            return pd.DataFrame(columns=CONTENT_COLUMNS)
        return self.db.frame(
            "SELECT ts, hook, content FROM events WHERE session = ? AND ts >= ? AND ts < ? "
            "AND content IS NOT NULL ORDER BY ts DESC LIMIT ?", (f.session, f.start, f.end, limit))

"""The summary model's usage as Hermes itself records it, read-only.

Hermes records each auxiliary LLM call's usage in ``session_model_usage`` of its ``state.db``;
the worker reads the ``compression`` rows when it first sees a session and after each
compress(). When editing: nothing of Hermes runs (the path comes from the engine's instance
dict, the DB is opened ``mode=ro``); without a session DB there are no numbers.

The full account: docs/design/internals.md, *observed_engine/worker/summary_usage.py*.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

TASK = "compression"
# token_type -> column (prompt: Hermes' canonical prompt = input + cache_read + cache_write)
_QUERY = (
    "SELECT model, billing_provider, SUM(input_tokens), SUM(output_tokens), SUM(cache_read_tokens), "
    "SUM(cache_write_tokens), SUM(reasoning_tokens), SUM(api_call_count), MAX(last_seen) "
    "FROM session_model_usage WHERE session_id = ? AND task = ? GROUP BY model, billing_provider"
)

Totals = Dict[Tuple[str, str], tuple]   # (model, provider) -> (input, output, cache_read, cache_write, reasoning, calls, last_seen)


def session_db_path(engine: Any) -> Optional[str]:
    """The state.db path of the session DB bound to the engine (instance dicts only), or None."""
    try:
        db = object.__getattribute__(engine, "__dict__").get("_session_db")
        if db is None:
            return None
        path = object.__getattribute__(db, "__dict__").get("db_path")
    except Exception:  # hot path: no instance __dict__ on the engine or its DB: no state.db, no usage read
        return None
    if isinstance(path, (str, Path)) and str(path) and str(path) != ":memory:":
        return str(path)
    return None


class SummaryUsage:
    """One engine's view of Hermes' summary-usage rows (worker thread only)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.session: Optional[str] = None
        self.baseline: Totals = {}
        self._conn: Optional[sqlite3.Connection] = None
        self._pid = os.getpid()

    def _totals(self, session: str) -> Optional[Totals]:
        try:
            if self._pid != os.getpid():     # a forked child: SQLite connections do not cross a fork
                self._conn, self._pid = None, os.getpid()
            if self._conn is None:
                if not Path(self.path).exists():
                    return None
                self._conn = sqlite3.connect(Path(self.path).resolve().as_uri() + "?mode=ro", uri=True,
                                             timeout=0.2, check_same_thread=False)
            rows = self._conn.execute(_QUERY, (session, TASK)).fetchall()
        except sqlite3.Error:       # no such table (another Hermes), locked for longer than the timeout
            return None
        return {(str(r[0] or ""), str(r[1] or "")): tuple(int(x or 0) for x in r[2:8]) + (float(r[8] or 0),)
                for r in rows}

    def begin(self, session: str) -> None:
        """The session's totals so far are the baseline (they belong to no call we will see)."""
        totals = self._totals(session)
        self.session = session
        self.baseline = totals or {}

    def take(self, session: str) -> Optional[Tuple[str, str, Dict[str, int]]]:
        """(model, provider, {token_type: tokens}) the summary calls used since the last look, or None."""
        if session != self.session:
            # a session the worker did not see begin (it binds before its first turn, so rarely):
            # what it holds now is taken for this call's
            self.session, self.baseline = session, {}
        totals = self._totals(session)
        if totals is None:
            return None
        tokens = {"prompt": 0, "completion": 0, "cache_read": 0, "cache_write": 0, "reasoning": 0}
        latest = None
        for key, now in totals.items():
            before = self.baseline.get(key, (0, 0, 0, 0, 0, 0, 0.0))
            delta = [a - b for a, b in zip(now[:6], before[:6])]
            if delta[5] <= 0:
                continue
            tokens["prompt"] += delta[0] + delta[2] + delta[3]
            tokens["completion"] += delta[1]
            tokens["cache_read"] += delta[2]
            tokens["cache_write"] += delta[3]
            tokens["reasoning"] += delta[4]
            if latest is None or now[6] > latest[1]:
                latest = (key, now[6])
        self.baseline = totals
        if latest is None:
            return None
        (model, provider), _ = latest
        return model, provider, tokens

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except sqlite3.Error:
                pass
            self._conn = None

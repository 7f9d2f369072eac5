"""Read-only access to the store: connections, one snapshot per page run, plain lists.

Connections are opened with ``mode=ro`` and ``PRAGMA query_only``: the dashboard never
writes the store. A reader for a path typed into the page (``probe=False``) never looks at
the file system itself and words every failure the same way (:data:`UNOPENABLE`), so the
page cannot tell a missing file from an unreadable one or from one that is not a store.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, List, Optional, Sequence

import pandas as pd

from ..sources import Filters, SourceError

UNOPENABLE = "cannot open the store at that path"

# SQLite orders every number before every text and blob, and '' is the smallest text: "x < ''"
# holds exactly when x is a number (as cheap as a comparison; typeof() IN (...) cost the select
# query 50 % more). NULL passes: "no value" is not a bad value.
TS_IS_NUMBER = "+ts < ''"            # (+: not an index range)


def numeric(*columns: str) -> str:
    """SQL: every one of ``columns`` holds a number or NULL."""
    return " AND ".join(f"coalesce({c} < '', 1)" for c in columns)


def is_number(value) -> bool:
    """A value read from the store that the views can compute with (None passes)."""
    return value is None or (isinstance(value, (int, float)) and not isinstance(value, bool))


def in_list(names: Sequence[str], prefix: str, params: dict) -> str:
    """``(:p0, :p1, ...)`` for ``names`` (params filled in); ``(NULL)`` for none."""
    keys = []
    for i, n in enumerate(names):
        k = f"{prefix}{i}"
        params[k] = n
        keys.append(":" + k)
    return "(" + (", ".join(keys) if keys else "NULL") + ")"


class StoreReader:
    def __init__(self, path: os.PathLike | str, *, probe: bool = True) -> None:
        self.path = str(Path(path).expanduser())
        self.probe = probe            # may say "does not exist yet" (the configured store only)
        self._local = threading.local()
        self._pool: List[sqlite3.Connection] = []
        self._pool_lock = threading.Lock()

    # -- errors ------------------------------------------------------------------

    def problem(self, what: str, exc: BaseException) -> str:
        return f"{what}: {exc}" if self.probe else UNOPENABLE

    def missing(self) -> bool:
        """The configured store does not exist (yet). Never asked for a typed path."""
        return self.probe and not os.path.exists(self.path)

    # -- connections ---------------------------------------------------------------

    def _open(self) -> sqlite3.Connection:
        if self.missing():
            raise SourceError(f"store {self.path} does not exist yet")
        from observed_engine.store import connect
        try:
            conn = connect(self.path, readonly=True, timeout=2.0)
            conn.execute("PRAGMA query_only=1")
        except sqlite3.Error as exc:
            raise SourceError(self.problem(f"cannot open store {self.path} read-only", exc)) from None
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

    def rows(self, sql: str, params=()) -> list:
        with self.snapshot() as conn:
            try:
                return conn.execute(sql, params).fetchall()
            except sqlite3.Error as exc:
                raise SourceError(self.problem("store query failed", exc)) from None

    def frame(self, sql: str, params=()) -> pd.DataFrame:
        with self.snapshot() as conn:
            try:
                cur = conn.execute(sql, params)
                rows = cur.fetchall()
            except sqlite3.Error as exc:
                raise SourceError(self.problem("store query failed", exc)) from None
            return pd.DataFrame.from_records(rows, columns=[d[0] for d in cur.description])

    # -- plain lists -----------------------------------------------------------------

    def hwm(self) -> int:
        """The highest row id: rows above an earlier high-water mark are the new (or late) ones."""
        return self.rows("SELECT COALESCE(MAX(id), 0) FROM events")[0][0]

    def engines(self) -> list:
        # Loose index scan over the (engine, hook, ts) index: one seek per distinct engine.
        rows = self.rows(
            "WITH RECURSIVE e(x) AS (SELECT MIN(engine) FROM events UNION ALL "
            "SELECT (SELECT MIN(engine) FROM events WHERE engine > e.x) FROM e WHERE e.x IS NOT NULL) "
            "SELECT x FROM e WHERE x IS NOT NULL")
        return [r[0] for r in rows]

    def hooks(self, engine: str) -> list:
        rows = self.rows(
            "WITH RECURSIVE h(x) AS (SELECT MIN(hook) FROM events WHERE engine = :e UNION ALL "
            "SELECT (SELECT MIN(hook) FROM events WHERE engine = :e AND hook > h.x) FROM h "
            "WHERE h.x IS NOT NULL) SELECT x FROM h WHERE x IS NOT NULL", {"e": engine})
        return [r[0] for r in rows]

    def engine_list(self, f: Optional[Filters]) -> list:
        return list(f.engines) if f is not None and f.engines else self.engines()

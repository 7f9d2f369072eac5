"""The incremental bucket cache: per-bucket aggregates of the closed part of a range, kept.

A bucketed query (columns start with ``b``, the bucket start ``CAST(ts / :g AS INTEGER) * :g``;
placeholders ``:lo :hi :g``) runs over [start, end). The buckets that ended more than
``LATE_MARGIN_S`` ago are kept in memory; a refresh queries only the newest ones. Rows that
arrive late (a ``ts`` before the closed edge, found by ``id > high-water mark``, an O(new
rows) rowid range) reopen the buckets from that point on, so results stay exact. A cold
(long) range is split in two and queried on two connections at once.
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Dict, Optional, Sequence, TypeVar

import pandas as pd

from ..sources import Filters
from .reader import TS_IS_NUMBER, StoreReader

WORKERS = 2             # cold range queries run on this many connections at once
T = TypeVar("T")


@dataclass
class _Entry:
    lo: float
    cut: float
    hwm: int
    frame: pd.DataFrame


_POOL: Optional[ThreadPoolExecutor] = None
_POOL_LOCK = threading.Lock()


def pool_map(fn: Callable[..., T], items: Sequence) -> list:
    """``fn`` over ``items`` on the shared two-thread pool (SQLite releases the GIL)."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="dashboard-sql")
    return list(_POOL.map(fn, items))


def concat(frames: Sequence[pd.DataFrame]) -> pd.DataFrame:
    frames = [x for x in frames if x is not None]
    nonempty = [x for x in frames if not x.empty]
    if not nonempty:
        return frames[0] if frames else pd.DataFrame()
    if len(nonempty) == 1:
        return nonempty[0]
    return pd.concat(nonempty, ignore_index=True)


class BucketCache:
    LATE_MARGIN_S = 120.0   # buckets younger than this are always re-queried
    CACHE_ENTRIES = 96
    SPLIT_MIN_BUCKETS = 24

    def __init__(self, db: StoreReader) -> None:
        self.db = db
        self.lock = threading.Lock()
        self._cache: OrderedDict[tuple, _Entry] = OrderedDict()
        self._late_memo: Dict[tuple, Optional[float]] = {}
        self._flights: Dict[tuple, threading.Lock] = {}

    def single_flight(self, key: tuple) -> threading.Lock:
        """One computation per cache key at a time: a tab opened while the background prefetch
        is computing the same aggregate waits for it and then reads only the newest buckets."""
        with self.lock:
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
        if n < self.SPLIT_MIN_BUCKETS or WORKERS < 2:
            return run(lo, cut)
        edges = [lo + (n * i // WORKERS) * g for i in range(WORKERS)] + [cut]
        return concat(pool_map(lambda ab: run(*ab), list(zip(edges[:-1], edges[1:]))))

    def min_ts_since(self, old_hwm: int, hwm: int) -> Optional[float]:
        """Smallest numeric ts among rows added since ``old_hwm``: a rowid range, O(new rows).
        (``+ts`` keeps SQLite from walking the whole ts index for MIN.)"""
        key = (old_hwm, hwm)
        with self.lock:
            if key in self._late_memo:
                return self._late_memo[key]
        v = self.db.rows(f"SELECT MIN(+ts) FROM events WHERE id > ? AND id <= ? AND {TS_IS_NUMBER}",
                         (old_hwm, hwm))[0][0]
        with self.lock:
            if len(self._late_memo) > 256:
                self._late_memo.clear()
            self._late_memo[key] = v
        return v

    def bucketed(self, name: str, sql: str, params: dict, f: Filters) -> pd.DataFrame:
        """Run ``sql`` over [f.start, f.end), reusing the cached closed buckets of an earlier call."""
        g = f.step
        lo, hi = f.start, f.end
        cut = math.floor((time.time() - self.LATE_MARGIN_S) / g) * g
        cut = float(min(max(cut, lo), hi))
        key = (name, tuple(sorted(params.items())), g)

        def run(a: float, b: float) -> pd.DataFrame:
            return self.db.frame(sql, dict(params, lo=a, hi=b, g=g))

        with self.db.snapshot(), self.single_flight(key):
            hwm = self.db.hwm()
            with self.lock:
                entry = self._cache.get(key)
            closed: Optional[pd.DataFrame] = None
            if entry is not None and entry.lo <= lo < entry.cut:
                e_cut = entry.cut
                frame = entry.frame
                if hwm > entry.hwm:
                    late = self.min_ts_since(entry.hwm, hwm)
                    if late is not None and late < e_cut:
                        e_cut = max(entry.lo, math.floor(late / g) * g)
                        frame = frame[frame["b"] < e_cut]
                if e_cut > lo:
                    closed = frame[frame["b"] >= lo]
                    if cut > e_cut:
                        closed = concat([closed, run(e_cut, cut)])
                    elif cut < e_cut:
                        closed = closed[closed["b"] < cut]
            if closed is None and cut > lo:
                closed = self._run_split(run, lo, cut, g)
            if closed is not None:
                with self.lock:
                    self._cache[key] = _Entry(lo=lo, cut=cut, hwm=hwm, frame=closed)
                    self._cache.move_to_end(key)
                    while len(self._cache) > self.CACHE_ENTRIES:
                        self._cache.popitem(last=False)
            parts = [closed] if closed is not None else []
            if hi > cut:
                parts.append(run(cut, hi))
            return concat(parts) if parts else run(lo, lo)

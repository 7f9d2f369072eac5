"""p50 / p95 / p99 of hook call durations: exact up to ``SAMPLE`` calls per group, above that
from a time-stratified sample of that size (proportional to the per-bucket call counts),
drawn through the (engine, hook, ts) index. A duration that is not a number is left out
and counted."""

from __future__ import annotations

import threading
import time
from typing import Dict, List, Optional, Tuple

import numpy as np

from observed_engine.contract import vocabulary as vocab

from ..sources import Filters
from .reader import StoreReader, is_number

SAMPLE = 3000           # exact below, stratified sample above
STRATA = 24
REUSE_S = 30.0          # a sampled percentile is reused this long while counts barely move

Result = Tuple[List[Optional[float]], int]      # ([p50, p95, p99] in seconds, rows skipped)


class Percentiles:
    def __init__(self, db: StoreReader) -> None:
        self.db = db
        self._lock = threading.Lock()
        self._cache: Dict[tuple, tuple] = {}

    def __call__(self, engine: str, hook: str, f: Filters, bucket_counts: Dict[float, float],
                 only: str = "") -> Result:
        """``only``: an SQL condition the calls must also meet (the rows a view does not skip).
        A large group's result is reused for up to REUSE_S seconds while its call count moves
        by less than 5 %."""
        total = float(sum(bucket_counts.values())) if bucket_counts else 0.0
        if total <= 0:
            return [None, None, None], 0
        key = (engine, hook, f.step, f.engines, only)
        now = time.monotonic()
        with self._lock:
            hit = self._cache.get(key)
        if hit is not None:
            at, lo, n, result = hit
            if (lo == f.start and n == total) or (
                    total > SAMPLE and now - at < REUSE_S and abs(total - n) <= 0.05 * n
                    and abs(lo - f.start) <= max(f.step, 0.05 * f.span)):
                return result
        base = ("SELECT duration_s FROM events WHERE engine = ? AND hook = ? AND ts >= ? AND ts < ? "
                f"AND event = '{vocab.EVENT_CALL}' AND duration_s IS NOT NULL" + (f" AND {only}" if only else ""))
        if total <= SAMPLE:
            raw = [r[0] for r in self.db.rows(base, (engine, hook, f.start, f.end))]
        else:
            starts = np.array(sorted(bucket_counts), dtype=float)
            cum = np.cumsum([bucket_counts[b] for b in starts])
            strata = min(STRATA, len(starts))
            # equal-count strata over the buckets, then the same number of rows from each
            edges = np.searchsorted(cum, np.linspace(0, cum[-1], strata + 1)[1:-1], side="left") + 1
            bounds = sorted(set([0, *[int(x) for x in edges if x < len(starts)]]))
            per = max(1, int(SAMPLE / len(bounds)))
            parts, params = [], []
            for i, a in enumerate(bounds):
                t0 = f.start if i == 0 else starts[a]
                t1 = f.end if i + 1 == len(bounds) else starts[bounds[i + 1]]
                if t1 <= t0:
                    continue
                parts.append(f"SELECT duration_s FROM ({base} ORDER BY ts LIMIT {per})")
                params.extend((engine, hook, float(t0), float(t1)))
            raw = [r[0] for r in self.db.rows(" UNION ALL ".join(parts), params)] if parts else []
        vals = [x for x in raw if is_number(x)]
        bad = len(raw) - len(vals)
        if not vals:
            result: Result = ([None, None, None], bad)
        else:
            result = ([float(x) for x in np.percentile(np.asarray(vals, dtype=float), [50, 95, 99],
                                                       method="inverted_cdf")], bad)
        with self._lock:
            self._cache[key] = (now, f.start, total, result)
            if len(self._cache) > 512:
                self._cache.clear()
        return result

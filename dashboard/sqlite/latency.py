"""Hook latency: calls, calls/s, errors and p50/p95/p99 per engine and hook; calls/s over time.

Call counts are index-only: one (engine, hook, ts) range count per pair and bucket. Rows of
other events (fail-open, timeouts, bad input) share the hook name and are subtracted. A call
whose duration is not a number is left out of the percentiles and counted."""

from __future__ import annotations

import time
from typing import Dict, Tuple

import pandas as pd

from observed_engine.contract import vocabulary as vocab

from ..sources import Filters, with_skipped
from .buckets import BucketCache, pool_map
from .percentiles import Percentiles
from .reader import StoreReader

COLUMNS = ["engine", "hook", "calls", "calls_per_s", "errors", "p50_ms", "p95_ms", "p99_ms"]
SERIES_COLUMNS = ["ts", "engine", "hook", "calls_per_s"]


def latency(db: StoreReader, cache: BucketCache, pct: Percentiles, f: Filters) -> Tuple[pd.DataFrame, pd.DataFrame]:
    empty = (pd.DataFrame(columns=COLUMNS), pd.DataFrame(columns=SERIES_COLUMNS))
    with db.snapshot():
        pairs = [(e, h) for e in db.engine_list(f) for h in db.hooks(e)]
        if not pairs:
            return empty
        params: dict = {}
        values = []
        for i, (e, h) in enumerate(pairs):
            params[f"pe{i}"], params[f"ph{i}"] = e, h
            values.append(f"(:pe{i}, :ph{i})")
        counts_sql = (
            "WITH RECURSIVE bk(b) AS (SELECT :lo UNION ALL SELECT b + :g FROM bk WHERE b + :g < :hi), "
            f"grp(engine, hook) AS (VALUES {', '.join(values)}) "
            "SELECT b, engine, hook, n FROM (SELECT bk.b AS b, grp.engine AS engine, grp.hook AS hook, "
            "(SELECT COUNT(*) FROM events e WHERE e.engine = grp.engine AND e.hook = grp.hook "
            "AND e.ts >= bk.b AND e.ts < MIN(bk.b + :g, :hi)) AS n FROM grp, bk) WHERE n > 0")
        counts = cache.bucketed("hookcounts", counts_sql, params, f)
        errors = cache.bucketed(
            "hookerrors",
            "SELECT CAST(ts / :g AS INTEGER) * :g AS b, engine, hook, COUNT(*) AS errors FROM events "
            f"WHERE ts >= :lo AND ts < :hi AND event = '{vocab.EVENT_CALL}' AND outcome = '{vocab.CALL_ERROR}' "
            "GROUP BY b, engine, hook", {}, f)
        other = cache.bucketed(
            "noncall", "SELECT CAST(ts / :g AS INTEGER) * :g AS b, engine, hook, COUNT(*) AS n FROM events "
            f"WHERE event != '{vocab.EVENT_CALL}' AND ts >= :lo AND ts < :hi GROUP BY b, engine, hook", {}, f)
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
        for _b, e, h, n in errors.itertuples(index=False):
            err[(e, h)] = err.get((e, h), 0) + int(n)
        span = max(1.0, min(f.end, time.time()) - f.start)
        out = []
        keys = sorted(per)
        results = pool_map(lambda k: pct(k[0], k[1], f, per[k]), keys)
        skipped = 0
        for (e, h), (p, bad) in zip(keys, results):
            calls = int(sum(per[(e, h)].values()))
            skipped += bad
            out.append((e, h, calls, calls / span, err.get((e, h), 0),
                        *(None if x is None else x * 1000.0 for x in p)))
        return (with_skipped(pd.DataFrame(out, columns=COLUMNS), skipped),
                pd.DataFrame(series_rows, columns=SERIES_COLUMNS))

"""compress(): outcomes, timeouts, summary failures, tokens and latency per engine; outcomes
over time. One bucketed pass over the compress rows (the (engine, hook, ts) index); a row
whose duration or token column is not a number is left out and counted."""

from __future__ import annotations

from typing import Dict, Tuple

import pandas as pd

from observed_engine.contract import vocabulary as vocab

from ..sources import HOOK_COMPRESS, Filters, with_skipped
from .buckets import BucketCache
from .percentiles import Percentiles
from .reader import StoreReader, in_list, numeric

LATE_KINDS = (vocab.HOST_REPORTED, vocab.LATE_COMPLETION)
COLUMNS = ["engine", *vocab.COMPRESS_OUTCOMES, *LATE_KINDS, *vocab.SUMMARY_FAILURE_KINDS, "total",
           "p50_s", "p95_s", "p99_s", "tokens_before_avg", "tokens_after_avg", "ratio"]
SERIES_COLUMNS = ["ts", "engine", "outcome", "count"]


def sum_by_engine(df: pd.DataFrame, num, categories) -> Tuple[Dict[str, dict], list]:
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


TOKENS_OK = numeric("tokens_before", "tokens_after")


def _sql(in_e: str) -> str:
    ok = numeric("duration_s", "tokens_before", "tokens_after")
    call, comp = f"event = '{vocab.EVENT_CALL}'", f"outcome = '{vocab.COMPRESSED}'"
    sums = [f"SUM({ok} AND {call} AND outcome = '{o}') AS {o}"
            for o in (vocab.COMPRESSED, vocab.NOOP, vocab.CALL_ERROR)]
    sums.append(f"SUM({ok} AND event = '{vocab.DEADLINE_EXCEEDED}') AS {vocab.TIMEOUT}")
    sums += [f"SUM({ok} AND event = '{k}') AS {k}" for k in LATE_KINDS]
    sums += [f"SUM({ok} AND event = '{vocab.EVENT_SUMMARY_FAILURE}' AND outcome = '{k}') AS {k}"
             for k in vocab.SUMMARY_FAILURE_KINDS]
    # (event and outcome are in the covering index; the token columns are read from the rows anyway)
    return (
        "SELECT CAST(ts / :g AS INTEGER) * :g AS b, engine, " + ", ".join(sums) + ", "
        f"SUM({ok} AND {call} AND duration_s IS NOT NULL) AS calls, "
        f"TOTAL(CASE WHEN {ok} AND {call} AND {comp} THEN tokens_before END) AS tb, "
        f"TOTAL(CASE WHEN {ok} AND {call} AND {comp} THEN tokens_after END) AS ta, "
        f"SUM({ok} AND {call} AND {comp} AND tokens_before IS NOT NULL) AS tn, "
        f"SUM(NOT ({ok})) AS skipped "
        f"FROM events WHERE engine IN {in_e} AND hook = '{HOOK_COMPRESS}' AND ts >= :lo AND ts < :hi "
        "GROUP BY engine, b")


def compressions(db: StoreReader, cache: BucketCache, pct: Percentiles, f: Filters
                 ) -> Tuple[pd.DataFrame, pd.DataFrame]:
    params: dict = {}
    in_e = in_list(db.engine_list(f), "e", params)
    empty_series = pd.DataFrame(columns=SERIES_COLUMNS)
    with db.snapshot():
        df = cache.bucketed("compress", _sql(in_e), params, f)
        if df.empty:
            return pd.DataFrame(columns=COLUMNS), empty_series
        num = [*vocab.COMPRESS_OUTCOMES, *LATE_KINDS, *vocab.SUMMARY_FAILURE_KINDS, "calls", "tb", "ta", "tn",
               "skipped"]
        agg, series_rows = sum_by_engine(df, num, vocab.COMPRESS_OUTCOMES)
        buckets: Dict[str, Dict[float, float]] = {}
        for b, eng, calls in zip(df["b"], df["engine"], df["calls"]):
            if calls:
                buckets.setdefault(eng, {})[b] = calls
        out = []
        skipped = 0
        for eng in sorted(agg):
            a = agg[eng]
            # over the calls counted here (durations that are not numbers are left out there)
            (p50, p95, p99), _ = pct(eng, HOOK_COMPRESS, f, buckets.get(eng, {}), TOKENS_OK)
            skipped += int(a["skipped"])
            out.append((eng, *(int(a[o]) for o in vocab.COMPRESS_OUTCOMES), *(int(a[k]) for k in LATE_KINDS),
                        *(int(a[k]) for k in vocab.SUMMARY_FAILURE_KINDS),
                        int(sum(a[o] for o in vocab.COMPRESS_OUTCOMES)), p50, p95, p99,
                        a["tb"] / a["tn"] if a["tn"] else None, a["ta"] / a["tn"] if a["tn"] else None,
                        a["ta"] / a["tb"] if a["tb"] else None))
        series = pd.DataFrame(series_rows, columns=SERIES_COLUMNS) if series_rows else empty_series
        return with_skipped(pd.DataFrame(out, columns=COLUMNS), skipped), series

"""select_context: results, churn and prompt-cache tokens lost per engine; results over time.
A row whose cache_lost_tokens is not a number is left out and counted."""

from __future__ import annotations

from typing import Tuple

import pandas as pd

from observed_engine.contract import vocabulary as vocab

from ..sources import HOOK_SELECT, Filters, with_skipped
from .buckets import BucketCache
from .compressions import sum_by_engine
from .reader import StoreReader, in_list, numeric

COLUMNS = ["engine", *vocab.SELECTION_RESULTS, "total", "churn", "cache_lost_tokens"]
SERIES_COLUMNS = ["ts", "engine", "result", "count"]


def selections(db: StoreReader, cache: BucketCache, f: Filters) -> Tuple[pd.DataFrame, pd.DataFrame]:
    params: dict = {}
    in_e = in_list(db.engine_list(f), "e", params)
    ok = numeric("cache_lost_tokens")
    sums = ", ".join(f"SUM({ok} AND outcome = '{r}') AS {r}" for r in vocab.SELECTION_RESULTS)
    sql = (f"SELECT CAST(ts / :g AS INTEGER) * :g AS b, engine, {sums}, SUM({ok}) AS total, "
           f"TOTAL(CASE WHEN {ok} THEN cache_lost_tokens END) AS cache_lost_tokens, SUM(NOT ({ok})) AS skipped "
           f"FROM events WHERE engine IN {in_e} AND hook = '{HOOK_SELECT}' AND event = '{vocab.EVENT_CALL}' "
           "AND ts >= :lo AND ts < :hi GROUP BY engine, b")
    df = cache.bucketed("select", sql, params, f)
    empty_series = pd.DataFrame(columns=SERIES_COLUMNS)
    if df.empty:
        return pd.DataFrame(columns=COLUMNS), empty_series
    num = [*vocab.SELECTION_RESULTS, "total", "cache_lost_tokens", "skipped"]
    agg, series_rows = sum_by_engine(df, num, vocab.SELECTION_RESULTS)
    out = []
    skipped = 0
    for eng in sorted(agg):
        a = agg[eng]
        skipped += int(a["skipped"])
        if not a["total"]:
            continue
        out.append((eng, *(int(a[r]) for r in vocab.SELECTION_RESULTS), int(a["total"]),
                    a[vocab.CHANGED_SELECTION] / a["total"], int(a["cache_lost_tokens"])))
    series = pd.DataFrame(series_rows, columns=SERIES_COLUMNS) if series_rows else empty_series
    return with_skipped(pd.DataFrame(out, columns=COLUMNS), skipped), series

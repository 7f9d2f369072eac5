"""The incident rows (vocabulary.INCIDENT_EVENTS: timeouts, fail-opens, summary failures), one
by one and counted. They are rare non-call rows, read through the partial index
``events_incidents``. Events, kinds and reasons are the store's own words; ``kind`` is the
outcome of a summary_failure row (fallback_summary / aborted), its reason the cause."""

from __future__ import annotations

import pandas as pd

from observed_engine.contract import vocabulary as vocab

from ..sources import INCIDENT_COLUMNS, INCIDENT_COUNT_COLUMNS, Filters, with_skipped
from .buckets import BucketCache
from .reader import StoreReader, in_list, numeric

KIND_SQL = f"CASE WHEN event = '{vocab.EVENT_SUMMARY_FAILURE}' THEN outcome END"


def where(f: Filters, params: dict) -> str:
    params.update(lo=f.start, hi=f.end)
    ev = in_list(vocab.INCIDENT_EVENTS, "ev", params)
    # "event != 'call'" lets SQLite use the partial index events_incidents.
    clause = f"event != '{vocab.EVENT_CALL}' AND event IN {ev} AND ts >= :lo AND ts < :hi"
    if f.engines:
        clause += " AND engine IN " + in_list(f.engines, "e", params)
    if f.session:
        params["s"] = f.session
        clause += " AND session = :s"
    return clause


def incidents(db: StoreReader, f: Filters, limit: int) -> pd.DataFrame:
    """Newest first; a row whose duration is not a number is left out and counted."""
    params: dict = {"limit": limit}
    clause = where(f, params)
    ok = numeric("duration_s")
    with db.snapshot():
        df = db.frame(
            f"SELECT ts, session, engine, hook, event, {KIND_SQL} AS kind, reason, duration_s, content "
            f"FROM events WHERE {clause} AND {ok} ORDER BY ts DESC LIMIT :limit", params)
        bad = db.rows(f"SELECT COUNT(*) FROM events WHERE {clause} AND NOT ({ok})",
                      {k: v for k, v in params.items() if k != "limit"})[0][0]
    return with_skipped(df[INCIDENT_COLUMNS], bad)


def incident_counts(db: StoreReader, cache: BucketCache, f: Filters) -> pd.DataFrame:
    params: dict = {}
    clause = where(f, params)
    group = f"engine, hook, event, {KIND_SQL}, reason"
    if f.start % f.step:          # an unaligned range (the alerts' last 15 minutes): one plain query
        return db.frame(
            f"SELECT engine, hook, event, {KIND_SQL} AS kind, reason, COUNT(*) AS count FROM events "
            f"WHERE {clause} GROUP BY {group} ORDER BY count DESC", params)
    for k in ("lo", "hi"):
        params.pop(k, None)
    df = cache.bucketed(
        "incidents", f"SELECT CAST(ts / :g AS INTEGER) * :g AS b, engine, hook, event, {KIND_SQL} AS kind, "
        f"reason, COUNT(*) AS count FROM events WHERE {clause} GROUP BY b, {group}", params, f)
    if df.empty:
        return pd.DataFrame(columns=INCIDENT_COUNT_COLUMNS)
    out = df.groupby(["engine", "hook", "event", "kind", "reason"], dropna=False, as_index=False)["count"].sum()
    return out.sort_values("count", ascending=False)[INCIDENT_COUNT_COLUMNS].reset_index(drop=True)

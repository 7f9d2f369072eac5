"""One session end to end: every row of the session in the range, in order (``events_session_ts``).

Columns an older store lacks (``checked_tokens``, ``decision``, ``summary_model``, ...) are read
as NULL, so the view works on every store version; a row whose numbers are not numbers is left
out and counted (``sources.skipped``)."""

from __future__ import annotations

import pandas as pd

from ..sources import TIMELINE_COLUMNS, Filters, with_skipped
from .reader import TS_IS_NUMBER, StoreReader, numeric

TIMELINE_LIMIT = 5000        # rows of one session shown (the newest, in time order)
TEXT_COLUMNS = ("hook", "event", "outcome", "reason", "decision", "summary_model", "engine", "tokenizer")
NUMBER_COLUMNS = tuple(c for c in TIMELINE_COLUMNS if c not in TEXT_COLUMNS and c not in ("ts",))


def store_columns(db: StoreReader) -> set:
    return {r[1] for r in db.rows("PRAGMA table_info(events)")}


def timeline(db: StoreReader, f: Filters, limit: int = TIMELINE_LIMIT) -> pd.DataFrame:
    """[TIMELINE_COLUMNS] of ``f.session`` in [start, end), oldest first (the newest ``limit``)."""
    if not f.session:
        return pd.DataFrame(columns=TIMELINE_COLUMNS)
    with db.snapshot():
        have = store_columns(db)
        present = [c for c in NUMBER_COLUMNS if c in have]
        select = ", ".join(c if c in have else f"NULL AS {c}" for c in TIMELINE_COLUMNS)
        ok = numeric(*present) if present else "1"
        where = f"session = :s AND ts >= :lo AND ts < :hi AND {TS_IS_NUMBER}"
        p = {"s": f.session, "lo": f.start, "hi": f.end, "limit": int(limit)}
        df = db.frame(f"SELECT * FROM (SELECT {select} FROM events WHERE {where} AND {ok} "
                      "ORDER BY ts DESC, id DESC LIMIT :limit) ORDER BY ts, rowid", p)
        bad = db.rows(f"SELECT COUNT(*) FROM events WHERE {where} AND NOT ({ok})",
                      {k: v for k, v in p.items() if k != "limit"})[0][0]
    return with_skipped(df[TIMELINE_COLUMNS], bad)

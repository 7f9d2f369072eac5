"""The compression decisions (should_compress*, should_defer_preflight_to_real_usage rows with a
``decision``) per engine and hook, and the sessions whose automatic compression is blocked now
(their latest compression_blocked row says 'started'). Stores without the ``decision`` column
(before issue 15) give empty frames. Fleet-wide, like the rest of the Compressions tab (the
focused session's own checks are in its timeline)."""

from __future__ import annotations

from typing import Tuple

import pandas as pd

from observed_engine.contract import vocabulary as vocab

from ..sources import BLOCKED_COLUMNS, DECISION_COLUMNS, Filters
from .reader import StoreReader, in_list
from .timeline import store_columns


def decisions(db: StoreReader, f: Filters) -> Tuple[pd.DataFrame, pd.DataFrame]:
    with db.snapshot():
        if "decision" not in store_columns(db):
            return pd.DataFrame(columns=DECISION_COLUMNS), pd.DataFrame(columns=BLOCKED_COLUMNS)
        params: dict = {"lo": f.start, "hi": f.end}
        where = "ts >= :lo AND ts < :hi"
        if f.engines:
            where += " AND engine IN " + in_list(f.engines, "e", params)
        dec = db.frame(f"SELECT engine, hook, decision, COUNT(*) AS count FROM events WHERE {where} "
                       f"AND event = '{vocab.EVENT_CALL}' AND decision IS NOT NULL "
                       "GROUP BY engine, hook, decision ORDER BY engine, hook, decision", params)
        # "event != 'call'": the partial index events_incidents
        rows = db.rows(f"SELECT engine, session, reason, outcome FROM events WHERE {where.replace('ts >= :lo AND ', '')} "
                       f"AND event != '{vocab.EVENT_CALL}' AND event = '{vocab.EVENT_COMPRESSION_BLOCKED}' "
                       "ORDER BY ts, id", params)
    last: dict = {}
    for engine, session, reason, outcome in rows:
        last[(engine, session, reason)] = outcome
    now: dict = {}
    for (engine, _session, reason), outcome in last.items():
        if outcome == vocab.BLOCK_STARTED:
            now[(engine, reason)] = now.get((engine, reason), 0) + 1
    blocked = pd.DataFrame([(e, r, n) for (e, r), n in sorted(now.items())], columns=BLOCKED_COLUMNS)
    return dec[DECISION_COLUMNS], blocked

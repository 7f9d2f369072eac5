"""Alerts derived from the store when no Prometheus evaluates the rules: the timeout, fail-open,
compression-error and near-window alerts of ``deploy/prometheus/alerts.yml`` over the last 15
minutes, HermesContextSummaryFailing over the last 30 (the built-in's cooldowns). Names and
severities are the contract's (``vocabulary.ALERT_SEVERITIES``, ``summary_failure_severity``);
a test checks them against the shipped rules."""

from __future__ import annotations

import pandas as pd

from observed_engine.contract import vocabulary as vocab

from ..sources import ALERT_COLUMNS, HOOK_COMPRESS, HOOK_UPDATE, Filters
from .reader import TS_IS_NUMBER, StoreReader, in_list, numeric

WINDOW_S = 15 * 60                # store-derived alerts look at the last 15 minutes ...
SUMMARY_WINDOW_S = 30 * 60        # ... HermesContextSummaryFailing at the last 30
NEAR_WINDOW_RATIO = 0.9           # HermesContextNearWindow
FIRING = "firing"
TIMEOUT_EVENTS = (vocab.DEADLINE_EXCEEDED, vocab.HOST_REPORTED)


def severity(alert: str) -> str:
    return vocab.ALERT_SEVERITIES.get(alert, vocab.WARNING)


def alerts(db: StoreReader, incident_counts, f: Filters, now: float) -> pd.DataFrame:
    """``incident_counts(filters)`` is the source's own (its bucket cache)."""
    lo = now - WINDOW_S
    recent = Filters(start=lo, end=now + 1, step=f.step, engines=f.engines)
    rows = []
    with db.snapshot():
        inc = incident_counts(recent)
        if not inc.empty:
            since = db.frame(
                f"SELECT engine, event, MIN(ts) AS since FROM events WHERE event != '{vocab.EVENT_CALL}' "
                f"AND ts >= ? AND {TS_IS_NUMBER} GROUP BY engine, event", (lo,))
            first = {(r.engine, r.event): r.since for r in since.itertuples()}
            for (engine, event), grp in inc.groupby(["engine", "event"]):
                n = int(grp["count"].sum())
                if event in TIMEOUT_EVENTS:
                    rows.append((vocab.ALERT_COMPRESSION_TIMEOUT, severity(vocab.ALERT_COMPRESSION_TIMEOUT), engine,
                                 f"{n} compression timeout(s) ({event}) in the last 15 min",
                                 first.get((engine, event))))
                elif event == vocab.FAIL_OPEN:
                    hooks = ", ".join(sorted(set(grp["hook"].dropna())))
                    reasons = ", ".join(sorted(set(grp["reason"].dropna())))
                    rows.append((vocab.ALERT_FAIL_OPEN, severity(vocab.ALERT_FAIL_OPEN), engine,
                                 f"{n} fail-open(s) in {hooks} ({reasons}) in the last 15 min",
                                 first.get((engine, event))))
        params: dict = {"lo": lo}
        in_e = in_list(db.engine_list(f), "e", params)
        errs = db.rows(
            f"SELECT engine, COUNT(*), MIN(ts) FROM events WHERE engine IN {in_e} AND hook = '{HOOK_COMPRESS}' "
            f"AND ts >= :lo AND {TS_IS_NUMBER} AND event = '{vocab.EVENT_CALL}' AND outcome = '{vocab.CALL_ERROR}' "
            "GROUP BY engine", params)
        for engine, n, since in errs:
            rows.append((vocab.ALERT_COMPRESSION_ERRORS, severity(vocab.ALERT_COMPRESSION_ERRORS), engine,
                         f"{n} compress() error(s) in the last 15 min", since))
        # HermesContextSummaryFailing: per engine, kind and cause; the rows are rare non-call
        # events, read through the partial index events_incidents.
        sp: dict = {"slo": now - SUMMARY_WINDOW_S}
        engine_clause = " AND engine IN " + in_list(f.engines, "se", sp) if f.engines else ""
        for engine, kind, cause, n, since in db.rows(
                f"SELECT engine, outcome, reason, COUNT(*), MIN(ts) FROM events WHERE event != '{vocab.EVENT_CALL}' "
                f"AND event = '{vocab.EVENT_SUMMARY_FAILURE}' AND ts >= :slo AND {TS_IS_NUMBER}{engine_clause} "
                "GROUP BY engine, outcome, reason", sp):
            rows.append((vocab.ALERT_SUMMARY_FAILING, vocab.summary_failure_severity(cause), engine,
                         f"{n} compress() call(s) returned although the summary model failed ({kind}, "
                         f"cause {cause}) in the last 30 min", since))
        near = db.rows(
            "SELECT engine, session, prompt_tokens, window_tokens, MAX(ts) FROM events "
            f"WHERE engine IN {in_e} AND hook = '{HOOK_UPDATE}' AND ts >= :lo AND {TS_IS_NUMBER} "
            f"AND {numeric('prompt_tokens', 'window_tokens')} GROUP BY session", params)
        for engine, session, p, w, ts in near:
            if p and w and p >= NEAR_WINDOW_RATIO * w:
                rows.append((vocab.ALERT_NEAR_WINDOW, severity(vocab.ALERT_NEAR_WINDOW), engine,
                             f"session {session} at {p / w:.0%} of its {w:,} token window", ts))
    df = pd.DataFrame(rows, columns=["alert", "severity", "engine", "detail", "since"])
    df.insert(2, "state", FIRING)
    return df[ALERT_COLUMNS]

"""Alerts and incidents: the active alerts, and the timeout / fail-open / summary-failure events
(one by one from the store, counted from Prometheus)."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from observed_engine.contract import vocabulary as vocab

from ..context import Ctx, note_skipped
from ..format import fmt_int, literal, session_href, to_dt
from ..sources import CAP_ALERTS, CAP_EVENTS

TITLE = "Alerts & incidents"
INCIDENT_LIMIT = 500
# One number per timeout kind and fail-open (the store's event), and per summary-failure kind.
COUNTED = (*vocab.TIMEOUT_KINDS, vocab.FAIL_OPEN, *vocab.SUMMARY_FAILURE_KINDS)
HELP = {
    vocab.FALLBACK_SUMMARY: f"{vocab.EVENT_SUMMARY_FAILURE}: compress() returned with a fallback summary (the "
                            "summary model failed); reason = cause.",
    vocab.ABORTED: f"{vocab.EVENT_SUMMARY_FAILURE}: compress() returned aborted, messages kept (the summary "
                   "model failed); reason = cause.",
}


def counted(counts: pd.DataFrame) -> dict:
    """COUNTED -> count over the range, from ``incident_counts``."""
    by_event = counts.groupby("event")["count"].sum()
    sf = counts[counts["event"] == vocab.EVENT_SUMMARY_FAILURE]
    by_kind = sf.groupby("kind")["count"].sum() if not sf.empty else {}
    return {k: int(by_kind.get(k, 0)) if k in vocab.SUMMARY_FAILURE_KINDS else int(by_event.get(k, 0))
            for k in COUNTED}


def render(ctx: Ctx) -> None:
    st.markdown("##### Active alerts")
    if ctx.src.supports(CAP_ALERTS):
        st.caption(f"From Prometheus `/api/v1/alerts` ({literal(ctx.src.label)}).")
    else:
        note = ("Derived from the store (`from` = store): timeouts, fail-opens, compress() errors and sessions "
                "above 90 % of their window in the last 15 minutes, summary failures in the last 30. ")
        if ctx.alerts_from is not None:
            note += f"Rule alerts from Prometheus {literal(ctx.alerts_from.label)} (`from` = prometheus)."
        else:
            note += "Set `OBSERVED_PROMETHEUS_URL` to add the Prometheus rule alerts."
        st.caption(note)
        if ctx.alerts_error:
            st.warning(f"Prometheus alerts unavailable: {literal(ctx.alerts_error)}")
    alerts = ctx.alerts
    if alerts is None or alerts.empty:
        st.success("No active alerts.")
    else:
        a = alerts.copy()
        a["since"] = to_dt(a["since"])
        st.dataframe(a, hide_index=True, width="stretch",
                     column_config={"since": st.column_config.DatetimeColumn(format="YYYY-MM-DD HH:mm:ss")})
    counts = ctx.q("incident_counts")
    st.markdown("##### Timeouts and fail-opens, summary failures")
    if counts.empty:
        st.success("No timeouts, fail-opens or summary failures in this range.")
        return
    n = counted(counts)
    for col, k in zip(st.columns(len(COUNTED)), COUNTED):
        col.metric(k, fmt_int(n[k]), help=HELP.get(k))
    if ctx.src.supports(CAP_EVENTS):
        inc = ctx.q("incidents", INCIDENT_LIMIT)
        note_skipped(inc)
        table = pd.DataFrame({
            "time": to_dt(inc["ts"]), "session": inc["session"], "engine": inc["engine"], "hook": inc["hook"],
            "event": inc["event"], "kind": inc["kind"], "reason": inc["reason"],
            "seconds": pd.to_numeric(inc["duration_s"], errors="coerce"),
        })
        table["timeline"] = [session_href(x) if isinstance(x, str) else None for x in inc["session"]]
        if inc["content"].notna().any():      # only when capture_content was on
            table["content"] = inc["content"]
        st.dataframe(table, hide_index=True, width="stretch", height=min(600, 38 + 35 * len(table)),
                     column_config={"time": st.column_config.DatetimeColumn(format="YYYY-MM-DD HH:mm:ss"),
                                    "timeline": st.column_config.LinkColumn(
                                        display_text="open", help="The session's timeline"),
                                    "seconds": st.column_config.NumberColumn(format="%.2f")})
        st.caption(f"Newest first; at most {INCIDENT_LIMIT} rows ({int(counts['count'].sum()):,} in the range). "
                   f"`kind`: the summary-failure kind of a `{vocab.EVENT_SUMMARY_FAILURE}` row, whose reason is "
                   "the cause.")
    else:
        st.info("Prometheus has counters, not events: totals per engine, hook and reason below. The table of "
                "individual events (time, session) needs the SQLite store.")
        st.dataframe(counts, hide_index=True, width="stretch")

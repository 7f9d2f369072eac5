"""Hook latency: p50/p95/p99 per engine and hook, and calls per second."""

from __future__ import annotations

import streamlit as st

from observed_engine.contract.catalogue import BY_KEY

from .. import charts
from ..context import Ctx, chart, note_skipped
from ..format import numeric
from .newer_hooks import render_clones

TITLE = "Hook latency"


def render(ctx: Ctx) -> None:
    table, series = ctx.q("latency")
    note_skipped(table)
    if table.empty:
        st.info("No hook calls in this range.")
        return
    render_clones(ctx)
    left, right = st.columns([1, 1])
    with left:
        st.markdown("##### p50 / p95 / p99 per hook")
        chart(charts.latency_dots(table))
    with right:
        st.markdown("##### Calls per second")
        if not series.empty:
            multi = series["engine"].nunique() > 1
            chart(charts.lines_over_time(series, "calls_per_s", "hook", "calls/s", fmt=",.3f",
                                         dash="engine" if multi else None, span_s=ctx.f.span,
                                         x_domain=ctx.x_domain))
    num = st.column_config.NumberColumn
    st.dataframe(numeric(table.rename(columns={"calls_per_s": "calls/s", "p50_ms": "p50 ms", "p95_ms": "p95 ms",
                                               "p99_ms": "p99 ms"})), hide_index=True, width="stretch",
                 column_config={"calls/s": num(format="%.4f"), "p50 ms": num(format="%.3f"),
                                "p95 ms": num(format="%.3f"), "p99 ms": num(format="%.3f"),
                                "calls": num(format="localized")})
    if ctx.exact:
        st.caption("calls/s is the average over the range. Percentiles are exact up to 3,000 calls per hook, "
                   "otherwise from a time-stratified sample of 3,000 calls (refreshed at most every 30 s).")
    else:
        st.caption(f"From `{BY_KEY['hook_duration'].prom_name}` buckets (histogram_quantile) and "
                   f"rate(`{BY_KEY['hook_calls'].prom_name}`).")

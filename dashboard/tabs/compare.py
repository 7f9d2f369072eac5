"""Compare engines: two engines side by side over the same (cached) queries as the other tabs, or
a replay run of ``observed-engine compare`` (compare_replay.py) or a sweep of ``observed-engine
tune`` (tune_sweeps.py), shown apart from live data."""

from __future__ import annotations

import dataclasses

import pandas as pd
import streamlit as st

from observed_engine.contract import vocabulary as vocab

from .. import charts
from ..context import Ctx, chart
from ..format import fmt_int, fmt_pct, fmt_seconds, fmt_tokens, literal
from . import compare_replay, tune_sweeps

TITLE = "Compare engines"
LIVE, REPLAY = "Live traffic", "Replay run (observed-engine compare)"
SWEEP = "Sweep (observed-engine tune)"
TIMEOUT_EVENTS = (vocab.DEADLINE_EXCEEDED, vocab.HOST_REPORTED)
FORMATS = {"compress p50": fmt_seconds, "compress p95": fmt_seconds, "compress p99": fmt_seconds,
           "tokens after / before": lambda v: fmt_pct(v, 0), "churn rate": fmt_pct,
           "prompt-cache tokens lost": fmt_tokens}
HEADLINE = ["compressions", "compress p95", "tokens after / before", "churn rate", "fail-opens",
            "compression timeouts"]


def _row(df, eng):
    r = df[df["engine"] == eng]
    return r.iloc[0] if not r.empty else None


def metrics_of(eng, comp, sel, lat, inc) -> dict:
    c, s = _row(comp, eng), _row(sel, eng)
    i = inc[inc["engine"] == eng] if not inc.empty else inc
    timeouts = int(i.loc[i["event"].isin(TIMEOUT_EVENTS), "count"].sum()) if not i.empty else 0
    fails = int(i.loc[i["event"] == vocab.FAIL_OPEN, "count"].sum()) if not i.empty else 0
    summary_failed = int(sum(c[k] for k in vocab.SUMMARY_FAILURE_KINDS)) if c is not None else 0
    lt = lat[lat["engine"] == eng]
    return {
        "compressions": 0 if c is None else c["total"],
        "compressed": 0 if c is None else c[vocab.COMPRESSED],
        "compress errors": 0 if c is None else c[vocab.CALL_ERROR],
        "compression timeouts": timeouts,
        "summary failures": summary_failed,
        "compress p50": None if c is None else c["p50_s"],
        "compress p95": None if c is None else c["p95_s"],
        "compress p99": None if c is None else c["p99_s"],
        "tokens after / before": None if c is None else c["ratio"],
        "selections": 0 if s is None else s["total"],
        "churn rate": None if s is None else s["churn"],
        "prompt-cache tokens lost": 0 if s is None else s["cache_lost_tokens"],
        "fail-opens": fails,
        "hook calls": int(lt["calls"].sum()) if not lt.empty else 0,
        "hook errors": int(lt["errors"].sum()) if not lt.empty else 0,
    }


def render(ctx: Ctx) -> None:
    data = st.radio("Data", (LIVE, REPLAY, SWEEP), horizontal=True, key="compare_data")
    if data == REPLAY:
        compare_replay.render()
        return
    if data == SWEEP:
        tune_sweeps.render()
        return
    engines = list(ctx.all_engines)
    if len(engines) < 2:
        st.info("Comparison needs two engines; the source has " +
                (f"only {literal(engines[0])}." if engines else "none yet."))
        return
    c1, c2 = st.columns(2)
    a = c1.selectbox("Engine A", engines, index=0, key="compare_a")
    b_opts = [e for e in engines if e != a]
    b = c2.selectbox("Engine B", b_opts, index=0, key="compare_b")
    # the same (cached) queries as the other views, over every engine, then the two picked
    f2 = dataclasses.replace(ctx.f, engines=())
    pair = [a, b]

    def two(df):
        return df[df["engine"].isin(pair)] if df is not None and not df.empty else df

    comp = two(ctx.q("compressions", f=f2)[0])
    sel = two(ctx.q("selections", f=f2)[0])
    lat = two(ctx.q("latency", f=f2)[0])
    inc = two(ctx.q("incident_counts", f=f2))
    ma, mb = metrics_of(a, comp, sel, lat, inc), metrics_of(b, comp, sel, lat, inc)
    for col, eng, m in ((c1, a, ma), (c2, b, mb)):
        with col:
            st.markdown(f"#### {literal(eng)}")
            cells = st.columns(3)
            for j, k in enumerate(HEADLINE):
                cells[j % 3].metric(k, FORMATS.get(k, fmt_int)(m[k]))
    left, right = st.columns(2)
    with left:
        st.markdown("##### Hook latency p50 / p95 / p99")
        if not lat.empty:
            chart(charts.latency_dots(lat, color_by="engine", order=pair))
    with right:
        if not comp.empty:
            st.markdown("##### compress() outcomes")
            outcomes = list(vocab.COMPRESS_OUTCOMES)
            long = comp.melt(id_vars=["engine"], value_vars=outcomes, var_name="outcome", value_name="count")
            chart(charts.outcome_bars(long[long["count"] > 0], "outcome", charts.OUTCOME_COLORS, outcomes,
                                      normalize=True))
        if not sel.empty:
            st.markdown("##### select_context results")
            results = list(vocab.SELECTION_RESULTS)
            long = sel.melt(id_vars=["engine"], value_vars=results, var_name="result", value_name="count")
            chart(charts.outcome_bars(long[long["count"] > 0], "result", charts.RESULT_COLORS, results,
                                      normalize=True))
    st.markdown("##### Side by side")
    st.dataframe(pd.DataFrame({"metric": list(ma), a: [FORMATS.get(k, fmt_int)(v) for k, v in ma.items()],
                               b: [FORMATS.get(k, fmt_int)(v) for k, v in mb.items()]}),
                 hide_index=True, width="stretch")

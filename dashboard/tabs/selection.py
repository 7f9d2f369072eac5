"""select_context: the outcome mix, churn over time, and prompt-cache tokens lost; and the finished
turns its complement on_turn_complete observes (Hermes 0.20+)."""

from __future__ import annotations

import streamlit as st

from observed_engine.contract import vocabulary as vocab

from .. import charts
from ..context import Ctx, chart, note_skipped
from ..format import fmt_int, fmt_pct, fmt_tokens, numeric
from .newer_hooks import render_turns

TITLE = "select_context"


def render(ctx: Ctx) -> None:
    summary, series = ctx.q("selections")
    note_skipped(summary)
    render_turns(ctx)
    if summary.empty:
        st.info("No select_context calls in this range (the host only calls it when the engine defines it).")
        return
    results = list(vocab.SELECTION_RESULTS)
    changed = vocab.CHANGED_SELECTION
    tot = summary[[*results, "total", "cache_lost_tokens"]].sum()
    churn = tot[changed] / tot["total"] if tot["total"] else None
    cols = st.columns(4)
    cols[0].metric("Selections", fmt_int(tot["total"]))
    cols[1].metric("Churn rate", fmt_pct(churn), help=f"{changed} / all select_context calls.")
    cols[2].metric("Fail-open", fmt_int(tot[vocab.FAIL_OPEN]), help="Selections the host fell open on.")
    cols[3].metric("Prompt-cache tokens lost", fmt_tokens(tot["cache_lost_tokens"]),
                   help="Cached prefix tokens invalidated by changed selections.")
    left, right = st.columns([2, 3])
    with left:
        st.markdown("##### Outcome mix")
        long = summary.melt(id_vars=["engine"], value_vars=results, var_name="result", value_name="count")
        chart(charts.outcome_bars(long[long["count"] > 0], "result", charts.RESULT_COLORS, results, normalize=True))
    with right:
        st.markdown("##### Churn over time")
        if not series.empty:
            wide = series.pivot_table(index=["ts", "engine"], columns="result", values="count", aggfunc="sum",
                                      fill_value=0).reset_index()
            total = sum(wide[r] for r in results if r in wide)
            wide["churn"] = (wide[changed] if changed in wide else 0) / total.where(total > 0)  # noqa: SIM401
            chart(charts.lines_over_time(wide, "churn", "engine", "churn", fmt=".1%", height=200, y_format="%",
                                         span_s=ctx.f.span, x_domain=ctx.x_domain))
    if not series.empty:
        st.markdown("##### Results over time")
        chart(charts.stacked_bars_over_time(series, "result", charts.RESULT_COLORS, results, ctx.f.step,
                                            height=180, span_s=ctx.f.span, x_domain=ctx.x_domain))
    st.markdown("##### Per engine")
    num = st.column_config.NumberColumn
    st.dataframe(numeric(summary.rename(columns={"cache_lost_tokens": "cache tokens lost"})), hide_index=True,
                 width="stretch", column_config={"churn": num(format="percent"),
                                                 "cache tokens lost": num(format="localized")})

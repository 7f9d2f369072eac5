"""Compressions: outcomes, latency p50/p95/p99, tokens before/after, and summary failures
(compress() calls that returned although the summary model failed), per engine and over time."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from observed_engine.contract import vocabulary as vocab

from .. import charts
from ..context import Ctx, chart, note_skipped
from ..format import fmt_int, fmt_pct, fmt_seconds, literal, numeric, plural
from .newer_hooks import render_prunes

TITLE = "Compressions"
KIND_HELP = {
    vocab.FALLBACK_SUMMARY: "compress() calls that returned with a fallback summary: the summary model failed, "
                            "the middle turns were dropped without a real summary.",
    vocab.ABORTED: "compress() calls that returned aborted: the summary model failed, the messages were kept "
                   "and the context stays full.",
}


def summary_failures(counts: pd.DataFrame) -> pd.DataFrame:
    """The summary-failure rows of ``incident_counts`` as [engine, kind, cause, count] (kind and cause
    as the metric labels them), most frequent first."""
    cols = ["engine", "kind", "cause", "count"]
    if counts is None or counts.empty:
        return pd.DataFrame(columns=cols)
    sf = counts[counts["event"] == vocab.EVENT_SUMMARY_FAILURE]
    if sf.empty:
        return pd.DataFrame(columns=cols)
    out = pd.DataFrame({"engine": sf["engine"], "kind": sf["kind"], "cause": sf["reason"], "count": sf["count"]})
    out = out.groupby(["engine", "kind", "cause"], dropna=False, as_index=False)["count"].sum()
    return out.sort_values(["count", "engine", "kind", "cause"], ascending=[False, True, True, True])[cols] \
        .reset_index(drop=True)


def summary_failure_note(by_kind: dict, by_cause: dict, approx: str = "") -> str:
    """One sentence for the operator: how many compress() calls lost their summary, and why."""
    n = sum(by_kind.values())
    causes = ", ".join(f"{c} {fmt_int(by_cause[c])}" for c in vocab.SUMMARY_FAILURE_CAUSES
                       if by_cause.get(c))
    return (f"**{fmt_int(n)} compress() call{'s' if n != 1 else ''} returned although the summary model "
            f"failed{approx}:** {fmt_int(by_kind.get(vocab.FALLBACK_SUMMARY, 0))} with a fallback summary "
            f"(middle turns dropped without a real summary), {fmt_int(by_kind.get(vocab.ABORTED, 0))} aborted "
            "(messages kept, the context stays full). Cause: " + (causes or "–") + ". The outcomes count "
            f"these calls by what happened to the message list (a fallback reads `{vocab.COMPRESSED}`).")


def render_decisions(ctx: Ctx) -> None:
    """Why compression did or did not happen: the checks' answers, and what is blocked now."""
    dec, blocked = ctx.q("decisions")
    if blocked is not None and not blocked.empty:
        parts = ", ".join(f"{literal(r.engine)} {literal(r.reason)}"
                          + (f" ({plural(int(r.sessions), 'session')})" if ctx.exact else "")
                          for r in blocked.itertuples())
        st.error(f"**Automatic compression is blocked now:** {parts}. The engine will not compress until the "
                 "block ends (a summary-failure cooldown ends by time); the prompt can outgrow the window meanwhile.")
    if dec is None or dec.empty:
        return
    st.markdown("##### Compression decisions")
    wide = dec.pivot_table(index=["engine", "hook"], columns="decision", values="count", aggfunc="sum",
                           fill_value=0).reset_index()
    for d in vocab.DECISIONS:
        if d not in wide:
            wide[d] = 0
    st.dataframe(wide[["engine", "hook", *vocab.DECISIONS]], hide_index=True, width="stretch")
    st.caption(f"What the engine answered when the host asked: `{vocab.DECISION_COMPRESS}` / "
               f"`{vocab.DECISION_SKIP}` (should_compress*), `{vocab.DECISION_DEFER}` (wait for the real usage) / "
               f"`{vocab.DECISION_ESTIMATE}` (go on with the host's estimate). Each check's tokens, threshold and "
               "reason are in the session timeline" + ("." if ctx.exact else "; counts from increase()."))


def render(ctx: Ctx) -> None:
    summary, series = ctx.q("compressions")
    note_skipped(summary)
    render_decisions(ctx)
    render_prunes(ctx)
    if summary.empty:
        st.info("No compress() calls in this range.")
        return
    outcomes = list(vocab.COMPRESS_OUTCOMES)
    tot = summary[outcomes].sum()
    cols = st.columns(6)
    for col, o in zip(cols, outcomes):
        col.metric(o.capitalize(), fmt_int(tot[o]))
    tb = (summary["tokens_before_avg"] * summary[vocab.COMPRESSED]).sum()
    ta = (summary["tokens_after_avg"] * summary[vocab.COMPRESSED]).sum()
    cols[4].metric("Tokens after / before", fmt_pct(ta / tb if tb else None, 0),
                   help="Sum of tokens after over tokens before, compressed calls.")
    p95 = summary["p95_s"].max()
    cols[5].metric("p95 latency", fmt_seconds(p95), help="compress() p95 of the slowest engine.")
    failed = summary_failures(ctx.q("incident_counts"))
    if not failed.empty:
        by_kind = failed.groupby("kind")["count"].sum().to_dict()
        by_cause = failed.groupby("cause")["count"].sum().to_dict()
        st.warning(summary_failure_note(by_kind, by_cause, "" if ctx.exact else " (from increase(), approximate)"))
    left, right = st.columns([2, 3])
    with left:
        st.markdown("##### Outcomes per engine")
        long = summary.melt(id_vars=["engine"], value_vars=outcomes, var_name="outcome", value_name="count")
        chart(charts.outcome_bars(long[long["count"] > 0], "outcome", charts.OUTCOME_COLORS, outcomes))
    with right:
        st.markdown("##### Over time")
        if not series.empty:
            chart(charts.stacked_bars_over_time(series, "outcome", charts.OUTCOME_COLORS, outcomes,
                                                ctx.f.step, height=200, span_s=ctx.f.span, x_domain=ctx.x_domain))
    st.markdown("##### Per engine")
    table = pd.DataFrame({
        "engine": summary["engine"],
        **{o: summary[o] for o in outcomes},
        **{k: summary[k] for k in vocab.SUMMARY_FAILURE_KINDS},
        "p50 s": summary["p50_s"], "p95 s": summary["p95_s"], "p99 s": summary["p99_s"],
        "avg tokens before": pd.to_numeric(summary["tokens_before_avg"], errors="coerce").round().astype("Int64"),
        "avg tokens after": pd.to_numeric(summary["tokens_after_avg"], errors="coerce").round().astype("Int64"),
        "after / before": summary["ratio"],
    })
    num = st.column_config.NumberColumn
    st.dataframe(numeric(table), hide_index=True, width="stretch", column_config={
        "p50 s": num(format="%.2f"), "p95 s": num(format="%.2f"), "p99 s": num(format="%.2f"),
        "avg tokens before": num(format="localized"), "avg tokens after": num(format="localized"),
        "after / before": num(format="percent"),
        **{k: num(help=h) for k, h in KIND_HELP.items()},
    })
    if not failed.empty:
        st.markdown("##### Summary failures by kind and cause")
        st.dataframe(numeric(failed, skip=("engine", "kind", "cause")), hide_index=True, width="stretch")
    kinds = " / ".join(f"`{k}`" for k in vocab.SUMMARY_FAILURE_KINDS)
    note = (f"Timeout = a compression the engine's watchdog saw pass its deadline (`{vocab.DEADLINE_EXCEEDED}`); "
            "host-reported and late completions are listed under Alerts & incidents. "
            f"{kinds} = calls among them that returned although the summary model "
            "failed (as the engine reports it; the built-in compressor does). ")
    if ctx.exact:
        note += "Latency percentiles are over compress() calls (exact up to 3,000 calls per engine)."
    else:
        note += "Counts are Prometheus increase() over the range (extrapolated); percentiles come from " \
                "histogram buckets."
    st.caption(note)

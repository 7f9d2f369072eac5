"""Above the tabs: the alert banner and the headline numbers."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from observed_engine.contract import vocabulary as vocab

from .context import Ctx, cached
from .format import fmt_int, fmt_pct, literal
from .options import PROMETHEUS
from .sources import ALERT_COLUMNS, CAP_SESSIONS, HOOK_COMPRESS, HOOK_SESSION_END, HOOK_UPDATE, SourceError
from .tabs.alerts import TITLE as TAB_ALERTS

TIMEOUT_EVENTS = (vocab.DEADLINE_EXCEEDED, vocab.HOST_REPORTED)


def active_alerts(ctx: Ctx) -> pd.DataFrame:
    """The source's alerts, plus Prometheus' rule alerts when a Prometheus URL is configured
    next to the store: [alert, severity, state, engine, detail, since, from]."""
    frames = []
    a = ctx.q("alerts", ctx.f.end)
    if a is not None and not a.empty:
        frames.append(a.assign(**{"from": PROMETHEUS if ctx.src.kind == PROMETHEUS else "store"}))
    if ctx.alerts_from is not None:
        try:
            p = cached(ctx.alerts_from.cache_key(), "alerts", ctx.f.key(), (ctx.f.end,), _src=ctx.alerts_from,
                       _f=ctx.f)
            if p is not None and not p.empty:
                frames.append(p.assign(**{"from": PROMETHEUS}))
        except SourceError as exc:
            ctx.alerts_error = str(exc)
    if not frames:
        return pd.DataFrame(columns=[*ALERT_COLUMNS, "from"])
    return pd.concat(frames, ignore_index=True)


def render_alert_banner(ctx: Ctx) -> pd.DataFrame:
    alerts = active_alerts(ctx)
    if alerts is None or alerts.empty:
        return alerts
    firing = alerts[alerts["state"] == "firing"] if "state" in alerts else alerts
    if not firing.empty:
        names = ", ".join(literal(n) for n in sorted(set(firing["alert"].astype(str))))
        st.error(f"**{len(firing)} active alert(s):** {names} — details under *{TAB_ALERTS}*.")
    return alerts


OVER_WINDOW_HELP = ("Above 100 %: the prompt outgrew the model's window. The host sends it anyway when "
                    "compression did not happen: it was blocked (the cooldown after a summary failure), "
                    "aborted (the summary model failed, messages kept) or not effective; the provider then "
                    "rejects or truncates it. The session timeline shows which.")


def render_session_kpis(ctx: Ctx) -> None:
    """The headline figures of the focused session only, from its own rows."""
    tl = ctx.q("timeline", 5000)
    cols = st.columns([1, 1, 1.35, 0.85, 1.1, 1.25])
    if tl is None or tl.empty:
        cols[0].metric("Session", "–", help="No rows of this session in the range.")
        return
    calls = tl[tl["event"] == vocab.EVENT_CALL]
    comp = calls[calls["hook"] == HOOK_COMPRESS]
    ended = bool((tl["hook"] == HOOK_SESSION_END).any())
    cols[0].metric("Session", "ended" if ended else "open", help="This session only: open until its on_session_end.")
    cols[1].metric("Compressions", fmt_int(len(comp)), help="compress() calls of this session; "
                   f"{int((comp['outcome'] == vocab.COMPRESSED).sum()):,} compressed.")
    cols[2].metric("Compression timeouts", fmt_int(int(tl["event"].isin(TIMEOUT_EVENTS).sum())),
                   help="This session's compressions past their deadline (deadline_exceeded, host_reported).")
    cols[3].metric("Fail-opens", fmt_int(int((tl["event"] == vocab.FAIL_OPEN).sum())),
                   help="This session's hook failures the host fell open on.")
    cols[4].metric("Summary failures", fmt_int(int((tl["event"] == vocab.EVENT_SUMMARY_FAILURE).sum())),
                   help="This session's compress() calls that returned although the summary model failed.")
    upd = tl[(tl["hook"] == HOOK_UPDATE) & pd.to_numeric(tl["window_tokens"], errors="coerce").gt(0)]
    if upd.empty:
        cols[5].metric("Context usage", "–", help="No update_from_response of this session in the range.")
        return
    last = upd.iloc[-1]
    ratio = float(last["prompt_tokens"]) / float(last["window_tokens"])
    cols[5].metric("Context usage", fmt_pct(ratio, 0),
                   help=f"Latest response of this session: {fmt_int(last['prompt_tokens'])} of "
                        f"{fmt_int(last['window_tokens'])} tokens (threshold {fmt_int(last['threshold_tokens'])})."
                        + (" " + OVER_WINDOW_HELP if ratio > 1 else ""))


def render_kpis(ctx: Ctx) -> None:
    if ctx.f.session and ctx.src.supports(CAP_SESSIONS):
        render_session_kpis(ctx)
        return
    cols = st.columns([1, 1, 1.35, 0.85, 1.1, 1.25])       # room for the longer labels
    comp, _ = ctx.q("compressions")
    counts = ctx.q("incident_counts")
    timeouts = int(counts.loc[counts["event"].isin(TIMEOUT_EVENTS), "count"].sum()) if not counts.empty else 0
    fail_opens = int(counts.loc[counts["event"] == vocab.FAIL_OPEN, "count"].sum()) if not counts.empty else 0
    approx = "" if ctx.exact else " (from increase(), approximate)"
    if ctx.src.supports(CAP_SESSIONS):
        sessions = ctx.q("sessions")
        ended = int(sessions["ended"].fillna(False).astype(bool).sum()) if "ended" in sessions else 0
        cols[0].metric("Active sessions", fmt_int(len(sessions) - ended),
                       help=f"Sessions with events in the range that have not ended (no on_session_end as their "
                            f"latest event); {ended:,} of the {len(sessions):,} in the range ended.")
        recent = tuple(sessions["session"].head(20))
    else:
        engines = ctx.q("engines")
        cols[0].metric("Engines", fmt_int(len(engines)), help="Engines with series in Prometheus.")
        recent = tuple(engines)
    total = int(comp["total"].sum()) if not comp.empty else 0
    compressed = int(comp[vocab.COMPRESSED].sum()) if not comp.empty else 0
    cols[1].metric("Compressions", fmt_int(total), help=f"compress() calls in the range{approx}; "
                   f"{compressed:,} compressed.")
    cols[2].metric("Compression timeouts", fmt_int(timeouts),
                   help="Compressions past their deadline (deadline_exceeded, host_reported)" + approx)
    cols[3].metric("Fail-opens", fmt_int(fail_opens), help="Hook failures the host fell open on" + approx)
    sf = {k: int(comp[k].sum()) if not comp.empty and k in comp else 0 for k in vocab.SUMMARY_FAILURE_KINDS}
    cols[4].metric("Summary failures", fmt_int(sum(sf.values())),
                   help="compress() calls that returned although the summary model failed: "
                        f"{sf[vocab.FALLBACK_SUMMARY]:,} with a fallback summary, {sf[vocab.ABORTED]:,} aborted"
                        + approx + ". Kinds and causes under *Compressions*.")
    now = ctx.q("usage_now", recent) if recent else pd.DataFrame()
    if now is not None and not now.empty and now["ratio"].notna().any():
        top = now.loc[now["ratio"].idxmax()]
        cols[5].metric("Highest context usage", fmt_pct(top["ratio"], 0),
                       help=f"{literal(top['series'])}: {fmt_int(top['prompt_tokens'])} of "
                            f"{fmt_int(top['window_tokens'])} tokens (threshold {fmt_int(top['threshold_tokens'])}), "
                            "latest response." + (" " + OVER_WINDOW_HELP if top["ratio"] > 1 else ""))
    else:
        cols[5].metric("Highest context usage", "–", help="No update_from_response in the range.")

"""One session end to end: every hook call in order (tokens, decision, compress outcome, latency,
tokens and messages before/after, summary model), fail-opens, timeouts and blocked periods.

Opened by the sidebar's session pick or a link ``?session=<id>`` (every session id in the
dashboard's tables links here). The session id is shown as literal text only."""

from __future__ import annotations

from typing import List, Tuple

import pandas as pd
import streamlit as st

from observed_engine.contract import vocabulary as vocab

from .. import charts
from ..context import Ctx, chart, note_skipped
from ..format import SESSION_LINK_TEXT, fmt_int, fmt_seconds, literal, plural, session_href, to_dt
from ..sources import CAP_SESSIONS, HOOK_COMPRESS, HOOK_SESSION_END
from .usage import TOKEN_NOTE

TITLE = "Session timeline"
LIMIT = 5000


def blocked_periods(tl: pd.DataFrame) -> List[Tuple[float, float, str, bool]]:
    """(start, end, reason, still_blocked) from the compression_blocked rows: a block that has not
    ended runs to the session's latest row."""
    if tl is None or tl.empty:
        return []
    rows = tl[tl["event"] == vocab.EVENT_COMPRESSION_BLOCKED]
    last = float(tl["ts"].max())
    open_: dict = {}
    out = []
    for r in rows.itertuples():
        reason = str(r.reason) if r.reason is not None else vocab.BLOCKED_OTHER
        if r.outcome == vocab.BLOCK_STARTED:
            open_.setdefault(reason, float(r.ts))
        elif r.outcome == vocab.BLOCK_ENDED and reason in open_:
            out.append((open_.pop(reason), float(r.ts), reason, False))
    out += [(t0, last, reason, True) for reason, t0 in open_.items()]
    return sorted(out)


def what(row) -> str:
    """The one word a timeline row is drawn as: a compress outcome, a decision, or the event."""
    if row["event"] == vocab.EVENT_CALL:
        if row["hook"] == HOOK_COMPRESS or row["hook"] == "select_context":
            return str(row["outcome"])
        if isinstance(row["decision"], str) and row["decision"]:
            return str(row["decision"])
        return str(row["outcome"] or "ok")
    if row["event"] == vocab.DEADLINE_EXCEEDED:
        return vocab.TIMEOUT
    if row["event"] == vocab.EVENT_SUMMARY_FAILURE:
        return f"summary {row['outcome']}"
    if row["event"] == vocab.EVENT_COMPRESSION_BLOCKED:
        return f"blocked {row['outcome']}"
    return str(row["event"])


def _tokens(row):
    for c in ("checked_tokens", "prompt_tokens"):
        v = row[c]
        if v is not None and v == v:
            return v
    return None


def table(tl: pd.DataFrame) -> pd.DataFrame:
    num = lambda c: pd.to_numeric(tl[c], errors="coerce")  # noqa: E731
    return pd.DataFrame({
        "time": to_dt(tl["ts"]).to_numpy(),
        "hook": tl["hook"].astype(str),
        "what": [what(r) for _, r in tl.iterrows()],
        "reason": tl["reason"],
        "tokens": pd.to_numeric(pd.Series([_tokens(r) for _, r in tl.iterrows()], dtype="float64"),
                                errors="coerce").round().astype("Int64").to_numpy(),
        "threshold": num("threshold_tokens").round().astype("Int64").to_numpy(),
        "tokens before": num("tokens_before").round().astype("Int64").to_numpy(),
        "tokens after": num("tokens_after").round().astype("Int64").to_numpy(),
        "messages before": num("messages_before").astype("Int64").to_numpy(),
        "messages after": num("messages_after").astype("Int64").to_numpy(),
        "ms": (num("duration_s") * 1000.0).to_numpy(),
        "summary model": tl["summary_model"],
        "summary tokens in": num("summary_input_tokens").astype("Int64").to_numpy(),
        "summary tokens out": num("summary_output_tokens").astype("Int64").to_numpy(),
        "cache read": num("cache_read_tokens").astype("Int64").to_numpy(),
        "cache hit": (num("cache_read_tokens") / num("prompt_tokens").where(num("prompt_tokens") > 0)).to_numpy(),
        "cache rewrite": num("cache_rewrite_tokens").astype("Int64").to_numpy(),
    })


def _pick_hint(ctx: Ctx) -> None:
    st.info("Pick a session in the sidebar, or open a link below (`?session=<id>` in the address).")
    sessions = ctx.q("sessions")
    if sessions is None or sessions.empty:
        st.caption("No sessions with events in this range.")
        return
    s = sessions.head(50)
    st.dataframe(pd.DataFrame({
        "session": [session_href(x) for x in s["session"]], "engine": s["engine"],
        "last event": to_dt(s["last_ts"]).to_numpy(),
        "state": ["ended" if e else "open" for e in s.get("ended", [False] * len(s))],
    }), hide_index=True, width="stretch", column_config={
        "session": st.column_config.LinkColumn("session", display_text=SESSION_LINK_TEXT),
        "last event": st.column_config.DatetimeColumn(format="YYYY-MM-DD HH:mm:ss")})


def render(ctx: Ctx) -> None:
    if not ctx.src.supports(CAP_SESSIONS):
        st.info("Prometheus has no session ids (they are never metric labels): the timeline of one session "
                "needs the SQLite store (`OBSERVED_STORE`).")
        return
    if not ctx.f.session:
        _pick_hint(ctx)
        return
    tl = ctx.q("timeline", LIMIT)
    note_skipped(tl)
    if tl is None or tl.empty:
        st.info(f"No rows of session {literal(ctx.f.session)} in this range. Widen the time range.")
        return
    tl = tl.reset_index(drop=True)
    calls = tl[tl["event"] == vocab.EVENT_CALL]
    comp = calls[calls["hook"] == HOOK_COMPRESS]
    ended = bool((tl["hook"] == HOOK_SESSION_END).any())
    periods = blocked_periods(tl)
    engines = ", ".join(literal(e) for e in sorted(set(tl["engine"].dropna().astype(str))))
    span = float(tl["ts"].max() - tl["ts"].min())
    st.markdown(
        f"Session {literal(ctx.f.session)} · engine {engines} · {plural(len(calls), 'hook call')} over "
        f"{fmt_seconds(span)} · {plural(int((comp['outcome'] == vocab.COMPRESSED).sum()), 'compression')} of "
        f"{fmt_int(len(comp))} compress() calls · "
        f"{plural(int((tl['event'] == vocab.FAIL_OPEN).sum()), 'fail-open')} · "
        f"{plural(int(tl['event'].isin(vocab.TIMEOUT_KINDS).sum()), 'timeout event')} · "
        f"{plural(len(periods), 'blocked period')} · " + ("ended" if ended else "not ended"))
    if len(tl) >= LIMIT:
        st.caption(f"The latest {LIMIT:,} rows of this session in the range.")
    chart(charts.session_timeline(tl.assign(what=[what(r) for _, r in tl.iterrows()]), periods,
                                  span_s=max(span, 1.0)))
    st.caption("One lane per hook, in call order; colour: the compress outcome, the decision of a "
               "should_compress* / defer check, or the event (timeout, fail_open, summary failure). Shaded: "
               "automatic compression blocked (the engine's own state, e.g. the cooldown after a summary "
               "failure). Tokens: what a check was asked about (`checked_tokens`), else the prompt tokens "
               "after the call.")
    st.caption(TOKEN_NOTE)
    if periods:
        st.dataframe(pd.DataFrame({
            "blocked from": to_dt([p[0] for p in periods]).to_numpy(),
            "until": to_dt([p[1] for p in periods]).to_numpy(),
            "reason": [p[2] for p in periods], "still blocked": [p[3] for p in periods],
        }), hide_index=True, width="stretch")
    st.markdown("##### Every hook call and event, in order")
    num = st.column_config.NumberColumn
    st.dataframe(table(tl), hide_index=True, width="stretch", height=min(600, 38 + 35 * len(tl)), column_config={
        "time": st.column_config.DatetimeColumn(format="YYYY-MM-DD HH:mm:ss.SSS"),
        "ms": num(format="%.2f"), "tokens": num(format="localized"), "threshold": num(format="localized"),
        "tokens before": num(format="localized"), "tokens after": num(format="localized"),
        "cache read": num(format="localized"), "cache hit": num(format="percent"),
        "summary tokens in": num(format="localized"), "summary tokens out": num(format="localized"),
        "cache rewrite": num(format="localized")})

"""Context usage: the sawtooth of each drawn session (prompt tokens against threshold and
window, compressions marked), and the compressions and message text of one session."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from observed_engine.contract import vocabulary as vocab

from .. import charts
from ..context import Ctx, chart, note_skipped
from ..format import SESSION_LINK_TEXT, fmt_tokens, literal, plural, session_href, to_dt
from ..sources import CAP_CONTENT, CAP_SESSIONS, HOOK_COMPRESS, HOOK_UPDATE

TITLE = "Context usage"
TOKEN_NOTE = (
    "Which token numbers these are: *prompt tokens* are the provider's own count of the whole request "
    "(`usage.prompt_tokens`, as the host passed it to update_from_response). *Tokens before / after* a "
    "compression count the message contents only, with the store's tokenizer (tiktoken o200k_base, or an "
    "estimate; column `tokenizer`): no system prompt, tool schemas or per-message overhead. Hermes' own lines "
    "(\"Preflight compression: ~59,294 tokens >= 54,400 threshold\") print its rough whole-request estimate "
    "(characters / 4 of messages, system prompt and tools), so its number differs from both; that estimate (or "
    "the last real usage) is what the host passes to the compression checks, shown as their tokens "
    "(`checked_tokens`) in the session timeline.")


def render(ctx: Ctx) -> None:
    if ctx.src.supports(CAP_SESSIONS):
        if ctx.f.session:
            series = [ctx.f.session]
            st.caption(f"Session {literal(ctx.f.session)}: prompt tokens after every response against the "
                       "compression threshold and the model's window; ▼ marks compress() calls.")
        else:
            sessions = ctx.q("sessions")
            series = list(sessions["session"].head(ctx.max_series))
            st.caption(f"The {len(series)} most recently active of {len(sessions):,} sessions in the range "
                       "(pick one in the sidebar to focus it). Prompt tokens after every response against "
                       "the compression threshold and the window; ▼ marks compress() calls.")
    else:
        series = list(ctx.q("engines"))
        st.info("Prometheus has no session ids (they are never metric labels), so this shows each engine's "
                "gauges: the last prompt of the engine, not of one session. Per-session sawtooths need the "
                "SQLite store (`OBSERVED_STORE`).")
    if not series:
        st.info("No sessions with events in this range. Widen the time range or clear the engine filter.")
        return
    lines, marks = ctx.q("usage", tuple(series))
    now = ctx.q("usage_now", tuple(series))
    latest = {r.series: r for r in now.itertuples()} if now is not None and not now.empty else {}
    note_skipped(lines)
    if lines.empty and marks.empty:
        st.info("No update_from_response or compress rows for these sessions in the range.")
        return
    single = len(series) == 1
    over = [r for r in latest.values() if r.ratio == r.ratio and r.ratio > 1]
    if over:
        st.warning(f"{plural(len(over), 'session')} above 100 % of the window "
                   f"({', '.join(literal(r.series) for r in over[:5])}): the prompt outgrew the model's window. "
                   "The host sends it anyway when no compression shrank it: compression was blocked (the "
                   "engine's cooldown after a summary failure), aborted (the summary model failed and the "
                   "messages were kept) or not effective. The session's timeline shows which.")
    st.markdown(charts.SAWTOOTH_LEGEND)
    grid = st.columns(1 if single else 2)
    for i, s in enumerate(series):
        ln = lines[lines["series"] == s]
        mk = marks[marks["series"] == s] if not marks.empty else marks
        if ln.empty and (mk is None or mk.empty):
            continue
        r = latest.get(s)
        title = str(s)                                   # a Vega title: plain text, not Markdown
        if r is not None:
            if r.engine != s:
                title += f"  ·  {r.engine}"
            title += f"  ·  {fmt_tokens(r.prompt_tokens)} / {fmt_tokens(r.window_tokens)}"
            if r.ratio == r.ratio:
                title += f" ({r.ratio:.0%})"
        n_comp = 0 if mk is None or mk.empty else int((mk["outcome"] == vocab.COMPRESSED).sum())
        if n_comp:
            title += f"  ·  {n_comp} compression{'s' if n_comp > 1 else ''}"
        with grid[i % len(grid)]:
            chart(charts.sawtooth(ln, mk, title=title, height=320 if single else 200, span_s=ctx.f.span))
    st.caption(TOKEN_NOTE)
    if ctx.src.supports(CAP_SESSIONS) and not single:
        st.dataframe(pd.DataFrame({"session": [session_href(s) for s in series]}), hide_index=True,
                     column_config={"session": st.column_config.LinkColumn(
                         "open a session's timeline", display_text=SESSION_LINK_TEXT)})
    if single and ctx.src.supports(CAP_SESSIONS):
        _session_details(ctx, marks)


def _cache_hits(ctx: Ctx) -> None:
    """The focused session's prompt-cache hit ratio per response, compactions marked."""
    tl = ctx.q("timeline", 5000)
    if tl is None or tl.empty:
        return
    num = lambda c: pd.to_numeric(tl[c], errors="coerce")  # noqa: E731
    upd = tl[(tl["hook"] == HOOK_UPDATE) & (tl["event"] == vocab.EVENT_CALL) & num("prompt_tokens").gt(0)
             & num("cache_read_tokens").notna()]
    if upd.empty:
        return
    points = pd.DataFrame({"ts": upd["ts"], "ratio": num("cache_read_tokens")[upd.index] / num("prompt_tokens")[upd.index]})
    comp = tl[(tl["hook"] == HOOK_COMPRESS) & (tl["event"] == vocab.EVENT_CALL)]
    marks = pd.DataFrame({"ts": comp["ts"], "outcome": comp["outcome"], "rewrite": num("cache_rewrite_tokens")[comp.index]})
    st.markdown("##### Prompt-cache hit ratio")
    chart(charts.cache_hit_ratio(points, marks, span_s=ctx.f.span))
    rewrite = marks["rewrite"].sum(min_count=1)
    st.caption("cache_read_tokens / prompt_tokens of each response, as the host passed its usage; the dashed rules "
               "are this session's compress() calls" + (f"; {fmt_tokens(rewrite)} tokens were written into the "
                                                        "cache again after them." if rewrite == rewrite else "."))


def _session_details(ctx: Ctx, marks: pd.DataFrame) -> None:
    _cache_hits(ctx)
    if marks is not None and not marks.empty:
        st.markdown("##### Compressions of this session")
        t = marks.sort_values("ts", ascending=False)
        st.dataframe(pd.DataFrame({
            "time": to_dt(t["ts"]).to_numpy(), "outcome": t["outcome"], "tokens before": t["tokens_before"],
            "tokens after": t["tokens_after"], "seconds": t["duration_s"],
        }), hide_index=True, width="stretch",
            column_config={"seconds": st.column_config.NumberColumn(format="%.2f"),
                           "tokens before": st.column_config.NumberColumn(format="localized"),
                           "tokens after": st.column_config.NumberColumn(format="localized"),
                           "time": st.column_config.DatetimeColumn(format="YYYY-MM-DD HH:mm:ss")})
    if ctx.src.supports(CAP_CONTENT):
        content = ctx.q("content", 50)
        if content is not None and not content.empty:
            with st.expander(f"Captured message text ({len(content)} rows, capture_content was on)"):
                for r in content.itertuples():
                    st.markdown(f"**{to_dt([r.ts])[0]:%H:%M:%S}** · {literal(r.hook)}")
                    st.text(str(r.content)[:4000])
        else:
            st.caption("No message text recorded for this session (capture_content is off).")

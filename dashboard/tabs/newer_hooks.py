"""Panels of the hooks Hermes 0.20+ calls, shown in the tabs they belong to: tool-result prunes
(prune_tool_results_only) beside the compressions, finished turns (on_turn_complete, the complement
of select_context) beside the selections, per-agent engine copies (clone_for_agent, 0.22+) beside
the hook latency. Each panel shows nothing when its hook was not called in the range (older
Hermes, or an engine that does not define it)."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from observed_engine.contract import vocabulary as vocab
from observed_engine.contract.catalogue import BY_KEY

from ..context import Ctx, note_skipped
from ..format import fmt_int, fmt_tokens, numeric, plural


def render_prunes(ctx: Ctx) -> None:
    prunes = ctx.q("prunes")
    note_skipped(prunes)
    if prunes is None or prunes.empty:
        return
    st.markdown("##### Tool-result prunes")
    tot = prunes[[*vocab.PRUNE_OUTCOMES, "total", "results_pruned", "tokens_reclaimed"]].sum()
    cols = st.columns(4)
    cols[0].metric("Prunes committed", fmt_int(tot[vocab.PRUNED]),
                   help="prune_tool_results_only calls whose new list the host went on with.")
    cols[1].metric("Prune calls", fmt_int(tot["total"]),
                   help="The host asks after each tool iteration that did not compress (Hermes 0.20+).")
    cols[2].metric("Tool results pruned", fmt_int(tot["results_pruned"]))
    cols[3].metric("Tokens reclaimed", fmt_tokens(tot["tokens_reclaimed"]),
                   help="Tokens before minus after, committed prunes (counted like compression tokens).")
    table = prunes.rename(columns={"results_pruned": "results pruned", "tokens_reclaimed": "tokens reclaimed"})
    num = st.column_config.NumberColumn
    st.dataframe(numeric(table), hide_index=True, width="stretch",
                 column_config={"tokens reclaimed": num(format="localized")})
    st.caption(f"`{vocab.PRUNED}`: the host went on with the pruned list (a prompt-cache boundary, like a "
               f"compaction); `{vocab.NOOP}`: nothing pruned; `{vocab.UNCOMMITTED}`: a count, but the input list "
               f"came back, so the host kept it; `{vocab.FAIL_OPEN}` / `{vocab.CALL_ERROR}`: not a (list, n) pair / "
               "raised, the host went on unchanged." + ("" if ctx.exact else " Counts from increase()."))


def render_turns(ctx: Ctx) -> None:
    turns = ctx.q("turns")
    note_skipped(turns)
    if turns is None or turns.empty:
        return
    st.markdown("##### Finished turns (on_turn_complete)")
    by_outcome = turns.groupby("outcome")["turns"].sum().to_dict()
    total = int(turns["turns"].sum())
    calls = pd.to_numeric(turns["api_calls"], errors="coerce")
    cols = st.columns(4)
    cols[0].metric("Turns", fmt_int(total))
    cols[1].metric("Interrupted", fmt_int(by_outcome.get(vocab.TURN_INTERRUPTED, 0)))
    cols[2].metric("Failed", fmt_int(by_outcome.get(vocab.TURN_FAILED, 0)))
    cols[3].metric("Provider calls per turn",
                   f"{calls.sum() / total:.1f}" if total and calls.notna().any() else "–",
                   help="api_call_count the host reported, averaged over the turns.")
    table = turns.rename(columns={"exit_reason": "exit reason", "api_calls": "provider calls"})
    st.dataframe(numeric(table, skip=("engine", "outcome", "exit reason")), hide_index=True, width="stretch")
    st.caption("The exit reason is the host's word (its detail, which may quote an error, is not recorded)"
               + ("." if ctx.exact else f"; a word outside the 0.22 vocabulary is `{vocab.EXIT_REASON_OTHER}`, "
                                        "counts from increase()."))


def render_clones(ctx: Ctx) -> None:
    clones = ctx.q("clones")
    if clones is None or clones.empty:
        return
    st.markdown("##### Per-agent engine copies (clone_for_agent)")
    tot = clones[[*vocab.CLONE_OUTCOMES, "total"]].sum()
    lost = int(tot[vocab.CLONE_UNOBSERVED] + tot[vocab.CALL_ERROR])
    cols = st.columns(3)
    cols[0].metric("Copies", fmt_int(tot["total"]), help="One per agent Hermes built with the plugin engine.")
    cols[1].metric("Observed", fmt_int(tot[vocab.CLONE_OBSERVED]),
                   help="A new engine on the same pipeline: one worker and one store writer for all of them.")
    cols[2].metric("Not observed", fmt_int(lost))
    if lost:
        st.warning(f"**{plural(lost, 'agent')} without an observed engine:** the copy could not be observed or "
                   f"clone_for_agent() raised (Hermes then uses its built-in compressor); see "
                   f"`{BY_KEY['clones'].prom_name}`.")
    st.dataframe(numeric(clones), hide_index=True, width="stretch")

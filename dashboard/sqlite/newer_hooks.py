"""The hooks of Hermes 0.20+, from the store: tool-result prunes (prune_tool_results_only), finished
turns (on_turn_complete) and per-agent engine copies (clone_for_agent), per engine over the range.
Stores without the columns of schema 3 (``pruned_results``, ``api_calls``) read them as NULL.
A row whose numbers are not numbers is left out and counted."""

from __future__ import annotations

import pandas as pd

from observed_engine.contract import vocabulary as vocab

from ..sources import (
    CLONE_COLUMNS,
    HOOK_CLONE,
    HOOK_PRUNE,
    HOOK_TURN,
    PRUNE_COLUMNS,
    TURN_COLUMNS,
    Filters,
    with_skipped,
)
from .reader import StoreReader, in_list, numeric
from .timeline import store_columns


def _where(db: StoreReader, f: Filters, hook: str, params: dict) -> str:
    params.update(lo=f.start, hi=f.end)
    return (f"engine IN {in_list(db.engine_list(f), 'e', params)} AND hook = '{hook}' "
            f"AND event = '{vocab.EVENT_CALL}' AND ts >= :lo AND ts < :hi")


def prunes(db: StoreReader, f: Filters) -> pd.DataFrame:
    """[engine, *PRUNE_OUTCOMES, total, results_pruned, tokens_reclaimed] (the last two of the
    committed prunes)."""
    with db.snapshot():
        cols = store_columns(db)
        params: dict = {}
        where = _where(db, f, HOOK_PRUNE, params)
        pruned = "pruned_results" if "pruned_results" in cols else "NULL"
        ok = numeric("tokens_before", "tokens_after", pruned)
        committed = f"outcome = '{vocab.PRUNED}'"
        sums = ", ".join(f"SUM(outcome = '{o}') AS {o}" for o in vocab.PRUNE_OUTCOMES)
        df = db.frame(f"SELECT engine, {sums}, COUNT(*) AS total, "
                      f"TOTAL(CASE WHEN {committed} THEN {pruned} END) AS results_pruned, "
                      f"TOTAL(CASE WHEN {committed} THEN MAX(tokens_before - tokens_after, 0) END) AS tokens_reclaimed "
                      f"FROM events WHERE {where} AND {ok} GROUP BY engine ORDER BY engine", params)
        skipped = db.rows(f"SELECT COUNT(*) FROM events WHERE {where} AND NOT ({ok})", params)[0][0]
    if df.empty:
        return with_skipped(pd.DataFrame(columns=PRUNE_COLUMNS), skipped)
    for c in PRUNE_COLUMNS[1:]:
        df[c] = pd.to_numeric(df[c]).fillna(0).astype(int)
    return with_skipped(df[PRUNE_COLUMNS], skipped)


def turns(db: StoreReader, f: Filters) -> pd.DataFrame:
    """[engine, outcome, exit_reason, turns, api_calls]: finished turns by outcome and the host's exit
    reason (its word), with their provider calls (a raising hook's turn has outcome 'error')."""
    with db.snapshot():
        cols = store_columns(db)
        params: dict = {}
        where = _where(db, f, HOOK_TURN, params)
        calls = "api_calls" if "api_calls" in cols else "NULL"
        ok = numeric(calls)
        df = db.frame(f"SELECT engine, outcome, COALESCE(reason, '{vocab.UNSPECIFIED}') AS exit_reason, "
                      f"COUNT(*) AS turns, TOTAL({calls}) AS api_calls FROM events WHERE {where} AND {ok} "
                      "GROUP BY engine, outcome, exit_reason ORDER BY engine, turns DESC, outcome, exit_reason", params)
        skipped = db.rows(f"SELECT COUNT(*) FROM events WHERE {where} AND NOT ({ok})", params)[0][0]
    if df.empty:
        return with_skipped(pd.DataFrame(columns=TURN_COLUMNS), skipped)
    df["turns"] = df["turns"].astype(int)
    df["api_calls"] = pd.to_numeric(df["api_calls"]).fillna(0).astype(int)
    return with_skipped(df[TURN_COLUMNS], skipped)


def clones(db: StoreReader, f: Filters) -> pd.DataFrame:
    """[engine, *CLONE_OUTCOMES, total]."""
    with db.snapshot():
        params: dict = {}
        where = _where(db, f, HOOK_CLONE, params)
        sums = ", ".join(f"SUM(outcome = '{o}') AS {o}" for o in vocab.CLONE_OUTCOMES)
        df = db.frame(f"SELECT engine, {sums}, COUNT(*) AS total FROM events WHERE {where} "
                      "GROUP BY engine ORDER BY engine", params)
    if df.empty:
        return pd.DataFrame(columns=CLONE_COLUMNS)
    for c in CLONE_COLUMNS[1:]:
        df[c] = pd.to_numeric(df[c]).fillna(0).astype(int)
    return df[CLONE_COLUMNS]

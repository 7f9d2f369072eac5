"""Compare engines, replay runs: the reports ``observed-engine compare`` wrote.

A run is a directory holding ``compare.json`` (``kind: observed-engine-compare``). Runs are
listed from one directory only, ``$OBSERVED_COMPARE_DIR`` or else
``$HERMES_HOME/observed/compare`` (where the command writes by default): no typed path is
ever opened. A replay's numbers are shown apart from the live views and marked as a replay;
they never mix with the store's or Prometheus' data.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import pandas as pd
import streamlit as st

from ..format import fmt_int, fmt_seconds, fmt_tokens, literal

KIND = "observed-engine-compare"
JSON_NAME = "compare.json"
MAX_BYTES = 64 * 1024 * 1024


def compare_root() -> Path:
    env = os.environ.get("OBSERVED_COMPARE_DIR")
    if env:
        return Path(env).expanduser()
    home = os.environ.get("HERMES_HOME") or str(Path.home() / ".hermes")
    return Path(home).expanduser() / "observed" / "compare"


def list_runs(root: Optional[Path] = None) -> List[Path]:
    """The run directories under ``root`` (newest first) that hold a compare.json."""
    root = compare_root() if root is None else root
    try:
        runs = [d for d in root.iterdir() if d.is_dir() and (d / JSON_NAME).is_file()]
    except OSError:
        return []
    return sorted(runs, key=lambda d: (d / JSON_NAME).stat().st_mtime, reverse=True)


def load_run(run: Path) -> Tuple[Optional[Dict[str, Any]], Optional[str]]:
    """``(report, None)``, or ``(None, why it cannot be shown)``."""
    path = run / JSON_NAME
    try:
        if path.stat().st_size > MAX_BYTES:
            return None, "the report is larger than 64 MiB"
        report = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return None, f"cannot read the report ({type(exc).__name__})"
    if not isinstance(report, dict) or report.get("kind") != KIND or not report.get("replay"):
        return None, "not an observed-engine compare report"
    if not isinstance(report.get("engines"), list) or not isinstance(report.get("totals"), dict):
        return None, "the report has no engines"
    return report, None


def _num(value: Any, fmt=fmt_int) -> str:
    return "–" if value is None else fmt(value)


def engine_frame(report: Dict[str, Any]) -> pd.DataFrame:
    """One row per engine: the run's totals, formatted."""
    rows = []
    for name in report["engines"]:
        t = report["totals"].get(name) or {}
        if t.get("unavailable"):
            rows.append({"engine": name, "status": f"unavailable: {t['unavailable']}"})
            continue
        rows.append({
            "engine": name, "status": f"{t.get('conversations', 0)} replayed, {t.get('errors', 0)} with errors, "
                                      f"{t.get('skipped', 0)} skipped",
            "compressions": _num(t.get("compressions")), "compress calls": _num(t.get("compress_calls")),
            "tokens before": _num(t.get("tokens_before"), fmt_tokens),
            "tokens after": _num(t.get("tokens_after"), fmt_tokens),
            "tokens saved": _num(t.get("tokens_saved"), fmt_tokens),
            "messages before → after": f"{_num(t.get('messages_before'))} → {_num(t.get('messages_after'))}",
            "compress p50": _num(t.get("compress_p50_s"), fmt_seconds),
            "compress p95": _num(t.get("compress_p95_s"), fmt_seconds),
            "summary failures": _num(t.get("summary_failures")),
            "cache prefix tokens lost": _num(t.get("cache_prefix_lost_tokens"), fmt_tokens),
            "turns over window": _num(t.get("over_window_turns")),
            "final tokens": _num(t.get("final_tokens"), fmt_tokens),
        })
    return pd.DataFrame(rows)


def conversation_frame(conv: Dict[str, Any], engines: List[str]) -> pd.DataFrame:
    rows = []
    for name in engines:
        r = (conv.get("engines") or {}).get(name) or {}
        if r.get("status") == "skipped" or not r:
            rows.append({"engine": name, "status": "skipped", "notes": r.get("reason") or ""})
            continue
        rows.append({
            "engine": name, "status": r.get("status"),
            "compressions": _num(r.get("compressions")),
            "tokens before → after": f"{_num(r.get('tokens_before'), fmt_tokens)} → "
                                     f"{_num(r.get('tokens_after'), fmt_tokens)}",
            "messages before → after": f"{_num(r.get('messages_before'))} → {_num(r.get('messages_after'))}",
            "compress p95": _num(r.get("compress_p95_s"), fmt_seconds),
            "summary failures": _num(r.get("summary_failures")),
            "cache prefix tokens lost": _num(r.get("cache_prefix_lost_tokens"), fmt_tokens),
            "turns over window": ", ".join(map(str, r.get("over_window_turns") or [])) or "–",
            "final": f"{_num(r.get('final_messages'))} msgs, {_num(r.get('final_tokens'), fmt_tokens)} tokens",
            "notes": "; ".join(([r["error"]] if r.get("error") else []) + list(r.get("divergences") or [])[:3]),
        })
    return pd.DataFrame(rows)


def render() -> None:
    root = compare_root()
    runs = list_runs(root)
    if not runs:
        st.info(f"No replay run in {literal(str(root))}. Make one with "
                "`observed-engine compare --engines compressor,<name>` (it replays the conversations in "
                "Hermes' state.db through each engine and writes its report there).")
        return
    run = st.selectbox("Replay run", runs, format_func=lambda d: d.name, key="compare_replay_run")
    report, problem = load_run(run)
    if report is None:
        st.error(f"Cannot show {literal(run.name)}: {problem}.")
        return
    st.warning("Replay: these numbers come from replaying recorded conversations through each engine "
               "(`observed-engine compare`), not from live traffic.")
    st.caption(f"{len(report.get('conversations') or [])} conversation(s) from {literal(str(report.get('state_db')))}"
               f" · summaries {literal(str(report.get('summary')))} · usage {literal(str(report.get('usage')))}"
               f" · window {fmt_int(report.get('context_length') or 0)} tokens")
    st.markdown("##### Per engine")
    st.dataframe(engine_frame(report), hide_index=True, width="stretch")
    st.markdown("##### Per conversation")
    for conv in report.get("conversations") or []:
        title = f"{conv.get('session_id')} ({conv.get('turns', 0)} turns)"
        with st.expander(title, expanded=False):
            if conv.get("skip"):
                st.markdown(f"Skipped: {literal(str(conv['skip']))}")
                continue
            st.dataframe(conversation_frame(conv, report["engines"]), hide_index=True, width="stretch")

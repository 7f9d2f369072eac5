"""Compare engines, sweeps: the reports ``observed-engine tune`` wrote.

A sweep is a directory holding ``tune.json`` (``kind: observed-engine-tune``). Sweeps are listed
from one directory only, ``$OBSERVED_TUNE_DIR`` or else ``$HERMES_HOME/observed/tune`` (where the
command writes by default): no typed path is ever opened. Shown apart from the live views and
marked as a replay: each variant's overflow turns, summary tokens and cache loss against the swept
setting, the recommendation marked, and per conversation each variant's numbers with a link to the
session's timeline (``?session=<id>``, the live store's view of the recorded session).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import pandas as pd
import streamlit as st

from ..context import chart
from ..format import SESSION_LINK_TEXT, fmt_int, fmt_tokens, literal, session_href

KIND = "observed-engine-tune"
JSON_NAME = "tune.json"
MAX_BYTES = 64 * 1024 * 1024
PLOTTED = [("overflow_turns", "overflow turns"), ("summary_tokens", "summary tokens"),
           ("cache_prefix_lost_tokens", "cache prefix tokens lost")]


def tune_root() -> Path:
    env = os.environ.get("OBSERVED_TUNE_DIR")
    if env:
        return Path(env).expanduser()
    home = os.environ.get("HERMES_HOME") or str(Path.home() / ".hermes")
    return Path(home).expanduser() / "observed" / "tune"


def list_sweeps(root: Optional[Path] = None) -> List[Path]:
    """The sweep directories under ``root`` (newest first) that hold a tune.json."""
    root = tune_root() if root is None else root
    try:
        found = [d for d in root.iterdir() if d.is_dir() and (d / JSON_NAME).is_file()]
    except OSError:
        return []
    return sorted(found, key=lambda d: (d / JSON_NAME).stat().st_mtime, reverse=True)


def load_sweep(path: Path) -> Tuple[Optional[Dict[str, Any]], Optional[str]]:
    """``(report, None)``, or ``(None, why it cannot be shown)``."""
    f = path / JSON_NAME
    try:
        if f.stat().st_size > MAX_BYTES:
            return None, "the report is larger than 64 MiB"
        report = json.loads(f.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return None, f"cannot read the report ({type(exc).__name__})"
    if not isinstance(report, dict) or report.get("kind") != KIND or not report.get("replay"):
        return None, "not an observed-engine tune report"
    if not isinstance(report.get("variants"), list) or not isinstance(report.get("recommendation"), dict):
        return None, "the report has no variants"
    return report, None


def swept_settings(report: Dict[str, Any]) -> List[str]:
    """The settings that take more than one value across the variants."""
    values: Dict[str, set] = {}
    for v in report["variants"]:
        for k, x in (v.get("settings") or {}).items():
            values.setdefault(k, set()).add(json.dumps(x))
    return [k for k, xs in values.items() if len(xs) > 1] or list(values)


def variant_frame(report: Dict[str, Any]) -> pd.DataFrame:
    """One row per variant: its settings, totals, rank, and whether it is the recommendation."""
    best = report["recommendation"].get("best")
    rows = []
    for v in report["variants"]:
        t = v.get("totals") or {}
        row = {"variant": v["label"], "recommended": v["label"] == best,
               "current": v["label"] == report.get("current"), "rank": v.get("rank"),
               "why not": v.get("why_not") or ""}
        for k, x in (v.get("settings") or {}).items():
            row[k] = x
        for key, name in PLOTTED + [("prompt_tokens", "prompt tokens"), ("compressions", "compressions")]:
            row[name] = t.get(key)
        row["threshold tokens"] = (v.get("engine_settings") or {}).get("threshold_tokens")
        rows.append(row)
    return pd.DataFrame(rows)


def metric_chart(df: pd.DataFrame, axis: str, metric: str, color: Optional[str]) -> dict:
    """``metric`` against ``axis`` (the swept setting), one line per value of ``color``; the
    recommendation drawn larger."""
    data = df[df[axis].notna()] if axis in df else df.iloc[0:0]
    records = []
    for r in data.to_dict("records"):
        records.append({"x": r.get(axis), "y": r.get(metric), "variant": r["variant"],
                        "series": str(r.get(color)) if color else "variants",
                        "recommended": "recommended" if r["recommended"] else "other"})
    return {
        "data": {"values": records}, "height": 200,
        "title": metric,
        "layer": [
            {"mark": {"type": "line", "point": False},
             "encoding": {"x": {"field": "x", "type": "quantitative", "title": axis, "scale": {"zero": False}},
                          "y": {"field": "y", "type": "quantitative", "title": metric},
                          "color": {"field": "series", "type": "nominal", "title": color or ""}}},
            {"mark": {"type": "point", "filled": True},
             "encoding": {"x": {"field": "x", "type": "quantitative"}, "y": {"field": "y", "type": "quantitative"},
                          "color": {"field": "series", "type": "nominal"},
                          "size": {"field": "recommended", "type": "nominal",
                                   "scale": {"domain": ["recommended", "other"], "range": [260, 40]},
                                   "title": ""},
                          "shape": {"field": "recommended", "type": "nominal",
                                    "scale": {"domain": ["recommended", "other"], "range": ["diamond", "circle"]}},
                          "tooltip": [{"field": "variant"}, {"field": "y", "title": metric, "format": ","}]}},
        ],
    }


def conversation_frame(report: Dict[str, Any]) -> pd.DataFrame:
    """One row per conversation: a link to its timeline, the best variant there, the recommended
    and the current settings' numbers, the prompt size against the recording."""
    rec = report["recommendation"]
    best, current = rec.get("best"), report.get("current")
    rows = []
    for c in report.get("conversations") or []:
        row = {"session": session_href(c.get("session_id")), "turns": c.get("turns")}
        if c.get("skip"):
            row["best here"] = "skipped: " + str(c["skip"])
            rows.append(row)
            continue
        row["best here"] = (rec.get("best_per_conversation") or {}).get(c["session_id"]) or "–"
        cells = c.get("variants") or {}
        for label, name in ((best, "recommended"), (current, "current")):
            cell = cells.get(label) or {}
            row[f"{name}: overflow"] = fmt_int(cell.get("overflow_turns"))
            row[f"{name}: summary tokens"] = fmt_tokens(cell.get("summary_tokens"))
            row[f"{name}: cache lost"] = fmt_tokens(cell.get("cache_prefix_lost_tokens"))
        ps = c.get("prompt_size") or {}
        row["prompt size vs recorded"] = ("–" if ps.get("difference_pct") is None else f"{ps['difference_pct']:+.1f}%")
        rows.append(row)
    return pd.DataFrame(rows)


def render() -> None:
    root = tune_root()
    found = list_sweeps(root)
    if not found:
        st.info(f"No sweep in {literal(str(root))}. Make one with `observed-engine tune` (it replays the "
                "conversations in Hermes' state.db through a grid of settings and writes its report there).")
        return
    path = st.selectbox("Sweep", found, format_func=lambda d: d.name, key="tune_sweep")
    report, problem = load_sweep(path)
    if report is None:
        st.error(f"Cannot show {literal(path.name)}: {problem}.")
        return
    st.warning("Replay: these numbers come from replaying recorded conversations through each variant "
               "(`observed-engine tune`), not from live traffic.")
    t = report.get("throughput") or {}
    st.caption(f"{len([c for c in report.get('conversations') or [] if not c.get('skip')])} conversation(s) × "
               f"{len(report['variants'])} variant(s) of {literal(str(report.get('engine')))} · objective "
               f"{literal(str(report.get('objective')))} · window {fmt_int(report.get('context_length') or 0)} tokens"
               f" · {fmt_int(t.get('replayed'))} replayed, {fmt_int(t.get('reused'))} kept, "
               f"{fmt_int(t.get('shared') or 0)} shared (same settings)")
    rec = report["recommendation"]
    if rec.get("best") is None:
        st.markdown(f"**No recommendation**: {literal(str(rec.get('why_none')))}")
    elif rec.get("is_current"):
        st.markdown(f"**Recommendation: keep the current settings** ({literal(str(rec['current']))}).")
    else:
        m = rec.get("margin_overall") or {}
        st.markdown(f"**Recommendation: {literal(rec['best'])}** against {literal(str(rec['current']))}: "
                    + ", ".join(f"{name} {m.get(key, 0):+,}" for key, name in PLOTTED) + ".")
        st.code(rec.get("config_yaml") or "", language="yaml")
    df = variant_frame(report)
    axes = [a for a in swept_settings(report) if a in df and pd.api.types.is_numeric_dtype(df[a].dropna())]
    if axes:
        c1, c2 = st.columns(2)
        axis = c1.selectbox("Swept setting (x)", axes, key="tune_axis")
        others = [a for a in swept_settings(report) if a != axis and a in df]
        color = c2.selectbox("One line per", ["–"] + others, key="tune_color")
        cols = st.columns(len(PLOTTED))
        for col, (_, name) in zip(cols, PLOTTED):
            with col:
                chart(metric_chart(df, axis, name, None if color == "–" else color))
    st.markdown("##### Variants")
    st.dataframe(df, hide_index=True, width="stretch")
    st.markdown("##### Per conversation")
    st.dataframe(conversation_frame(report), hide_index=True, width="stretch",
                 column_config={"session": st.column_config.LinkColumn("session", display_text=SESSION_LINK_TEXT)})

"""Vega-Lite charts of the dashboard, built as plain spec dicts.

Plain dicts (drawn with ``st.vega_lite_chart``) instead of Altair objects: the
Altair layer validates every spec against the Vega-Lite JSON schema, which cost
~0.3 s per chart on the benchmark machine; a dict costs nothing. Data goes in
``spec["datasets"]`` as DataFrames (Streamlit ships them as Arrow).

Inputs are the small frames the sources return; times are epoch seconds (``ts``)
and are drawn as epoch milliseconds, so the browser shows its local time.
"""

from __future__ import annotations

import math
from typing import Optional, Sequence

import numpy as np
import pandas as pd

from observed_engine.contract import vocabulary as vocab

OUTCOME_COLORS = {vocab.COMPRESSED: "#2e9d5b", vocab.NOOP: "#9aa5b1", vocab.CALL_ERROR: "#d64545",
                  vocab.TIMEOUT: "#f0a030"}
RESULT_COLORS = {vocab.UNCHANGED: "#9aa5b1", vocab.SAME_SELECTION: "#5b8def", vocab.CHANGED_SELECTION: "#f0a030",
                 vocab.FAIL_OPEN: "#d64545"}
SUMMARY_FAILURE_COLOR = "#8e44ad"     # a compress() call whose summary model failed (ring around its mark)
MEASURE_COLORS = {"prompt tokens": "#3566c8", "threshold": "#e8833a", "window": "#6b7280"}
QUANTILE_COLORS = {"p50": "#8fb8f5", "p95": "#3566c8", "p99": "#0a2d6e"}
PAIR_COLORS = ["#3566c8", "#e8833a"]
HEIGHT = 240

SAWTOOTH_LEGEND = (
    ":blue[**━** prompt tokens]  :orange[**╍** compression threshold]  :gray[**┈** context window]  "
    "▼ compress(): :green[compressed] · :gray[noop] · :red[error] · :orange[timeout] · "
    ":violet[◯ summary model failed (fallback / aborted)]"
)

_SCHEMA = "https://vega.github.io/schema/vega-lite/v6.json"


def _scale(mapping: dict, domain: Sequence[str]) -> dict:
    return {"domain": list(domain), "range": [mapping[d] for d in domain]}


def _legend(**kw) -> dict:
    """A legend above the chart that wraps into columns and never shortens a label."""
    return {"orient": "top", "title": None, "columns": 4, "labelLimit": 0, **kw}


def _ms(ts) -> pd.Series:
    return pd.to_numeric(pd.Series(ts), errors="coerce").astype(float) * 1000.0


def time_format(span_s: float) -> str:
    if span_s <= 20 * 60:
        return "%H:%M:%S"
    if span_s <= 2 * 86400:
        return "%H:%M"
    return "%b %d %H:%M"


def time_x(span_s: float, domain: Optional[Sequence[float]] = None, field: str = "t") -> dict:
    """A temporal x over epoch milliseconds; ``domain`` (epoch seconds) pins it to the selected range."""
    x = {"field": field, "type": "temporal", "title": None,
         "axis": {"format": time_format(span_s), "labelOverlap": True, "tickCount": 8}}
    if domain is not None:
        x["scale"] = {"domain": [float(domain[0]) * 1000.0, float(domain[1]) * 1000.0]}
    return x


def _spec(**kw) -> dict:
    spec = {"$schema": _SCHEMA, **kw}
    return spec


def _clean(df: pd.DataFrame) -> pd.DataFrame:
    """Arrow-friendly: plain floats/strings, no object columns of mixed None/NaN."""
    out = df.copy()
    for c in out.columns:
        if out[c].dtype == object:
            if c in ("engine", "hook", "series", "outcome", "result", "measure", "quantile", "label", "o"):
                out[c] = out[c].astype(str)
            else:
                out[c] = pd.to_numeric(out[c], errors="coerce")
    return out


# --- the sawtooth --------------------------------------------------------------

def sawtooth(lines: pd.DataFrame, marks: pd.DataFrame, title: str = "", height: int = 220,
             span_s: float = 3600.0) -> dict:
    """Prompt tokens against threshold and window of one series, compressions marked.
    No legend (the page shows ``SAWTOOTH_LEGEND`` once above the grid)."""
    lines = lines.sort_values("ts")
    ts = pd.to_numeric(lines["ts"], errors="coerce").to_numpy(dtype=float)
    vals = [pd.to_numeric(lines[c], errors="coerce").to_numpy(dtype=float)
            for c in ("prompt_tokens", "threshold_tokens", "window_tokens")]
    names = list(MEASURE_COLORS)
    t_long = np.concatenate([ts, ts, ts]) * 1000.0
    tok = np.concatenate(vals)
    keep = ~np.isnan(tok)
    long = pd.DataFrame({"t": t_long[keep], "measure": np.repeat(names, len(ts))[keep], "tokens": tok[keep]})
    failed = None
    if marks is not None and not marks.empty:
        # a summary failure is a row of its own next to the compress() call: a ring around that mark
        is_failed = marks["outcome"].isin(vocab.SUMMARY_FAILURE_KINDS)
        failed, marks = marks[is_failed], marks[~is_failed]
    m_ts = pd.to_numeric(marks["ts"], errors="coerce").to_numpy(dtype=float) if marks is not None and \
        not marks.empty else np.array([])
    t_all = np.concatenate([ts, m_ts])
    extent = float(t_all.max() - t_all.min()) if len(t_all) else span_s
    x = time_x(extent or span_s)
    line_mark = {"type": "line", "interpolate": "step-after", "strokeWidth": 2}
    if len(ts) <= 3:                      # too few points for a line to show: mark them
        line_mark["point"] = {"size": 40, "filled": True}
    layers = [{
        "data": {"name": "lines"},
        "mark": line_mark,
        "encoding": {
            "x": x,
            "y": {"field": "tokens", "type": "quantitative", "title": None, "axis": {"format": "~s"}},
            "color": {"field": "measure", "type": "nominal", "scale": _scale(MEASURE_COLORS, names),
                      "legend": None},
            "strokeDash": {"field": "measure", "type": "nominal", "legend": None,
                           "scale": {"domain": names, "range": [[1, 0], [6, 4], [2, 3]]}},
            "tooltip": [{"field": "t", "type": "temporal", "format": "%H:%M:%S", "title": "time"},
                        {"field": "measure", "type": "nominal"},
                        {"field": "tokens", "type": "quantitative", "format": ","}],
        },
    }]
    datasets = {"lines": long}
    if len(m_ts):
        before = pd.to_numeric(marks["tokens_before"], errors="coerce").to_numpy(dtype=float)
        # where the prompt stood when compress() ran (a timeout has no "before")
        idx = np.searchsorted(ts, m_ts, side="right") - 1
        prompt_at = np.where(idx >= 0, vals[0][np.clip(idx, 0, max(len(ts) - 1, 0))] if len(ts) else np.nan,
                             np.nan)
        y = np.where(np.isnan(before), prompt_at, before)
        m = pd.DataFrame({
            "t": m_ts * 1000.0, "y": np.nan_to_num(y, nan=0.0), "o": marks["outcome"].astype(str).to_numpy(),
            "tokens_before": before,
            "tokens_after": pd.to_numeric(marks["tokens_after"], errors="coerce").to_numpy(dtype=float),
            "duration_s": pd.to_numeric(marks["duration_s"], errors="coerce").to_numpy(dtype=float),
        })
        color = {"field": "o", "type": "nominal", "scale": _scale(OUTCOME_COLORS, vocab.COMPRESS_OUTCOMES),
                 "legend": None}
        layers.append({"data": {"name": "marks"}, "mark": {"type": "rule", "strokeDash": [2, 3], "opacity": 0.45},
                       "encoding": {"x": x, "color": color}})
        layers.append({
            "data": {"name": "marks"},
            "mark": {"type": "point", "shape": "triangle-down", "size": 150, "filled": True, "opacity": 1},
            "encoding": {
                "x": x, "y": {"field": "y", "type": "quantitative"}, "color": color,
                "tooltip": [{"field": "t", "type": "temporal", "format": "%H:%M:%S", "title": "time"},
                            {"field": "o", "type": "nominal", "title": "outcome"},
                            {"field": "tokens_before", "type": "quantitative", "format": ","},
                            {"field": "tokens_after", "type": "quantitative", "format": ","},
                            {"field": "duration_s", "type": "quantitative", "format": ".2f", "title": "seconds"}],
            },
        })
        datasets["marks"] = m
    if failed is not None and not failed.empty:
        f_ts = pd.to_numeric(failed["ts"], errors="coerce").to_numpy(dtype=float)
        # around the mark of the call it belongs to (same time), else where the prompt stood
        call_y = dict(zip(datasets["marks"]["t"], datasets["marks"]["y"])) if "marks" in datasets else {}
        idx = np.searchsorted(ts, f_ts, side="right") - 1
        prompt_at = np.where(idx >= 0, vals[0][np.clip(idx, 0, max(len(ts) - 1, 0))] if len(ts) else np.nan,
                             np.nan)
        y = np.array([call_y.get(t * 1000.0, p) for t, p in zip(f_ts, prompt_at)], dtype=float)
        datasets["summary_failures"] = pd.DataFrame({
            "t": f_ts * 1000.0, "y": np.nan_to_num(y, nan=0.0), "o": failed["outcome"].astype(str).to_numpy()})
        layers.append({
            "data": {"name": "summary_failures"},
            "mark": {"type": "point", "shape": "circle", "size": 420, "filled": False, "strokeWidth": 2.5,
                     "color": SUMMARY_FAILURE_COLOR, "opacity": 1},
            "encoding": {
                "x": x, "y": {"field": "y", "type": "quantitative"},
                "tooltip": [{"field": "t", "type": "temporal", "format": "%H:%M:%S", "title": "time"},
                            {"field": "o", "type": "nominal", "title": "summary failure"}],
            },
        })
    spec = _spec(height=height, layer=layers, resolve={"scale": {"color": "independent"}}, datasets=datasets)
    if title:
        spec["title"] = {"text": title, "anchor": "start", "fontSize": 13, "fontWeight": "normal"}
    return spec


# --- bars and lines ----------------------------------------------------------------

def stacked_bars_over_time(df: pd.DataFrame, category: str, colors: dict, domain: Sequence[str], step: int,
                           height: int = HEIGHT, span_s: float = 3600.0,
                           x_domain: Optional[Sequence[float]] = None) -> dict:
    """Counts per bucket, stacked by ``category``; ``df`` is [ts, engine, <category>, count]."""
    d = df.copy()
    d["t"] = _ms(d["ts"]).to_numpy()
    d["t2"] = d["t"] + step * 1000.0
    return _spec(
        height=height, data={"name": "d"}, datasets={"d": _clean(d[["t", "t2", "engine", category, "count"]])},
        mark={"type": "bar", "opacity": 0.9},
        encoding={
            "x": time_x(span_s, x_domain), "x2": {"field": "t2"},
            "y": {"aggregate": "sum", "field": "count", "type": "quantitative", "title": "count", "stack": "zero"},
            "color": {"field": category, "type": "nominal", "scale": _scale(colors, domain), "legend": _legend()},
            "tooltip": [{"field": "t", "type": "temporal", "format": "%Y-%m-%d %H:%M", "title": "from"},
                        {"field": category, "type": "nominal"}, {"field": "engine", "type": "nominal"},
                        {"aggregate": "sum", "field": "count", "type": "quantitative", "format": ",.0f",
                         "title": "count"}],
        })


def outcome_bars(df: pd.DataFrame, category: str, colors: dict, domain: Sequence[str],
                 normalize: bool = False) -> dict:
    """Horizontal stacked bars per engine; ``df`` is long: [engine, <category>, count]."""
    d = df.copy()
    order = {v: i for i, v in enumerate(domain)}
    d["order"] = d[category].map(order).fillna(len(domain))
    axis = {"format": "%"} if normalize else {"format": ",d", "tickMinStep": 1}
    return _spec(
        height={"step": 34}, data={"name": "d"}, datasets={"d": _clean(d[["engine", category, "count", "order"]])},
        mark={"type": "bar"},
        encoding={
            "y": {"field": "engine", "type": "nominal", "title": None},
            "x": {"field": "count", "type": "quantitative", "stack": "normalize" if normalize else "zero",
                  "title": "share" if normalize else "count", "axis": axis},
            "color": {"field": category, "type": "nominal", "scale": _scale(colors, domain),
                      "legend": _legend(columns=2)},
            "order": {"field": "order", "type": "quantitative"},
            "tooltip": [{"field": "engine", "type": "nominal"}, {"field": category, "type": "nominal"},
                        {"field": "count", "type": "quantitative", "format": ","}],
        })


def lines_over_time(df: pd.DataFrame, y: str, color: str, y_title: str, fmt: str = ",.2f",
                    dash: Optional[str] = None, height: int = HEIGHT, y_format: str = ",.3~r",
                    span_s: float = 3600.0, x_domain: Optional[Sequence[float]] = None) -> dict:
    d = df.copy()
    d["t"] = _ms(d["ts"]).to_numpy()
    cols = ["t", y, color] + ([dash] if dash and dash != color else [])
    x = time_x(span_s)          # (an explicit scale domain collapses line marks in Streamlit's Vega)
    enc = {
        "x": x,
        "y": {"field": y, "type": "quantitative", "title": y_title, "axis": {"format": y_format}},
        "color": {"field": color, "type": "nominal", "legend": _legend(columns=3)},
        "tooltip": [{"field": "t", "type": "temporal", "format": "%Y-%m-%d %H:%M", "title": "time"},
                    {"field": color, "type": "nominal"}, {"field": y, "type": "quantitative", "format": fmt}],
    }
    if dash:
        enc["strokeDash"] = {"field": dash, "type": "nominal", "legend": _legend()}
        enc["tooltip"].insert(1, {"field": dash, "type": "nominal"})
    layers = [{"data": {"name": "d"},
               "mark": {"type": "line", "interpolate": "linear", "strokeWidth": 1.6, "point": {"size": 18}},
               "encoding": enc}]
    datasets = {"d": _clean(d[cols])}
    if x_domain is not None:
        # an invisible point at each end of the selected range pins the x axis to it
        datasets["extent"] = pd.DataFrame({"t": [float(x_domain[0]) * 1000.0, float(x_domain[1]) * 1000.0]})
        layers.append({"data": {"name": "extent"}, "mark": {"type": "point", "opacity": 0},
                       "encoding": {"x": x}})
    return _spec(height=height, layer=layers, datasets=datasets)


def latency_dots(df: pd.DataFrame, color_by: Optional[str] = None, order: Optional[Sequence[str]] = None) -> dict:
    """p50 / p95 / p99 per hook on a log axis: a p50-p99 rule and a dot per quantile.
    ``df`` is [engine, hook, p50_ms, p95_ms, p99_ms]."""
    d = df.dropna(subset=["p50_ms", "p99_ms"]).copy()
    d = d[(d["p50_ms"] > 0) & (d["p99_ms"] > 0)]
    multi = d["engine"].nunique() > 1
    d["label"] = (d["hook"] + "  ·  " + d["engine"]) if (multi and color_by is None) else d["hook"]
    long = d.melt(id_vars=["engine", "hook", "label"], value_vars=["p50_ms", "p95_ms", "p99_ms"],
                  var_name="quantile", value_name="ms")
    long["quantile"] = long["quantile"].str.replace("_ms", "", regex=False)
    long = long[long["ms"] > 0]
    lo = float(long["ms"].min()) if len(long) else 0.001
    hi = float(long["ms"].max()) if len(long) else 1000.0
    ticks = [10.0 ** k for k in range(int(math.floor(math.log10(max(lo, 1e-6)))),
                                      int(math.ceil(math.log10(max(hi, 1e-6)))) + 1)]
    x_axis = {"values": ticks, "format": "~g", "title": "milliseconds (log)"}
    y = {"field": "label", "type": "nominal", "title": None, "sort": "ascending", "axis": {"labelLimit": 320}}
    offset = {"yOffset": {"field": "engine", "type": "nominal"}} if color_by else {}
    rule = {"data": {"name": "ranges"}, "mark": {"type": "rule", "strokeWidth": 2, "opacity": 0.5,
                                                 "color": "#9aa5b1"},
            "encoding": {"y": y, "x": {"field": "p50_ms", "type": "quantitative", "scale": {"type": "log"},
                                       "axis": x_axis},
                         "x2": {"field": "p99_ms"}, **offset}}
    if color_by:
        scale = {"range": PAIR_COLORS}
        if order:
            scale["domain"] = list(order)
        color = {"field": color_by, "type": "nominal", "scale": scale, "legend": _legend()}
        shape = {"field": "quantile", "type": "nominal", "legend": _legend(),
                 "scale": {"domain": ["p50", "p95", "p99"], "range": ["circle", "diamond", "triangle-right"]}}
    else:
        color = {"field": "quantile", "type": "nominal", "scale": _scale(QUANTILE_COLORS, ["p50", "p95", "p99"]),
                 "legend": _legend()}
        shape = {"value": "circle"}
    dots = {"data": {"name": "dots"}, "mark": {"type": "point", "filled": True, "size": 70, "opacity": 1},
            "encoding": {"y": y, "x": {"field": "ms", "type": "quantitative", "scale": {"type": "log"},
                                       "axis": x_axis},
                         "color": color, "shape": shape,
                         "tooltip": [{"field": "engine", "type": "nominal"}, {"field": "hook", "type": "nominal"},
                                     {"field": "quantile", "type": "nominal"},
                                     {"field": "ms", "type": "quantitative", "format": ",.3f"}], **offset}}
    return _spec(height={"step": 40 if color_by else 30}, layer=[rule, dots],
                 datasets={"ranges": _clean(d[["engine", "hook", "label", "p50_ms", "p99_ms"]]),
                           "dots": _clean(long[["engine", "hook", "label", "quantile", "ms"]])})


# --- one session --------------------------------------------------------------------

TIMELINE_COLORS = {
    vocab.COMPRESSED: "#2e9d5b", vocab.NOOP: "#9aa5b1", vocab.CALL_ERROR: "#d64545", vocab.TIMEOUT: "#f0a030",
    vocab.FAIL_OPEN: "#d64545", vocab.DECISION_COMPRESS: "#e8833a", vocab.DECISION_SKIP: "#8fb8f5",
    vocab.DECISION_DEFER: "#0f766e", vocab.DECISION_ESTIMATE: "#5b8def", vocab.CALL_OK: "#6b7280",
    f"blocked {vocab.BLOCK_STARTED}": "#7f1d1d", f"blocked {vocab.BLOCK_ENDED}": "#fca5a5",
    f"summary {vocab.ABORTED}": SUMMARY_FAILURE_COLOR, f"summary {vocab.FALLBACK_SUMMARY}": "#c084fc",
    vocab.LATE_COMPLETION: "#b45309",
}


def session_timeline(tl: pd.DataFrame, blocked: Sequence[tuple] = (), span_s: float = 3600.0) -> dict:
    """Every row of one session: a lane per hook, a dot per call coloured by ``what`` (outcome,
    decision or event), blocked periods shaded. ``tl`` has ts, hook, what and the token columns."""
    d = pd.DataFrame({
        "t": _ms(tl["ts"]).to_numpy(), "hook": tl["hook"].astype(str).to_numpy(),
        "what": tl["what"].astype(str).to_numpy(),
        "tokens": pd.to_numeric(tl["checked_tokens"], errors="coerce").fillna(
            pd.to_numeric(tl["prompt_tokens"], errors="coerce")).to_numpy(),
        "before": pd.to_numeric(tl["tokens_before"], errors="coerce").to_numpy(),
        "after": pd.to_numeric(tl["tokens_after"], errors="coerce").to_numpy(),
        "ms": (pd.to_numeric(tl["duration_s"], errors="coerce") * 1000.0).to_numpy(),
        "model": tl["summary_model"].astype(str).where(tl["summary_model"].notna(), "").to_numpy(),
    })
    known = [w for w in TIMELINE_COLORS if w in set(d["what"])]
    others = sorted(set(d["what"]) - set(known))
    palette = ["#6b7280", "#b45309", "#0f766e", "#be185d", "#4338ca", "#65a30d", "#0369a1", "#a16207"]
    domain = known + others
    rng = [TIMELINE_COLORS[w] for w in known] + [palette[i % len(palette)] for i in range(len(others))]
    x = time_x(span_s)
    y = {"field": "hook", "type": "nominal", "title": None, "axis": {"labelLimit": 320, "labelOverlap": False},
         "sort": {"field": "t", "op": "min"}}
    layers = []
    datasets = {"rows": d}
    if blocked:
        datasets["blocked"] = pd.DataFrame({"t": [b[0] * 1000.0 for b in blocked],
                                            "t2": [b[1] * 1000.0 for b in blocked],
                                            "reason": [str(b[2]) for b in blocked]})
        layers.append({"data": {"name": "blocked"}, "mark": {"type": "rect", "color": "#d64545", "opacity": 0.12},
                       "encoding": {"x": x, "x2": {"field": "t2"},
                                    "tooltip": [{"field": "reason", "type": "nominal", "title": "blocked"}]}})
    layers.append({
        "data": {"name": "rows"},
        "mark": {"type": "point", "filled": True, "size": 80, "opacity": 0.9},
        "encoding": {
            "x": x, "y": y,
            "color": {"field": "what", "type": "nominal", "scale": {"domain": domain, "range": rng},
                      "legend": _legend(columns=5, labelLimit=0)},
            "tooltip": [{"field": "t", "type": "temporal", "format": "%H:%M:%S.%L", "title": "time"},
                        {"field": "hook", "type": "nominal"}, {"field": "what", "type": "nominal"},
                        {"field": "tokens", "type": "quantitative", "format": ",.0f"},
                        {"field": "before", "type": "quantitative", "format": ",.0f", "title": "tokens before"},
                        {"field": "after", "type": "quantitative", "format": ",.0f", "title": "tokens after"},
                        {"field": "ms", "type": "quantitative", "format": ",.2f"},
                        {"field": "model", "type": "nominal", "title": "summary model"}],
        },
    })
    return _spec(height={"step": 24}, layer=layers, datasets=datasets)


def cache_hit_ratio(points: pd.DataFrame, marks: pd.DataFrame, span_s: float = 3600.0, height: int = 160) -> dict:
    """The prompt-cache hit ratio of each response (``points``: ts, ratio) with the compactions
    marked (``marks``: ts, outcome, rewrite: the tokens the next requests wrote into the cache again)."""
    x = time_x(span_s)
    p = pd.DataFrame({"t": _ms(points["ts"]).to_numpy(),
                      "ratio": pd.to_numeric(points["ratio"], errors="coerce").to_numpy()})
    layers = [{"data": {"name": "ratio"},
               "mark": {"type": "line", "interpolate": "step-after", "strokeWidth": 2, "color": "#0f766e",
                        "point": {"size": 30, "filled": True, "color": "#0f766e"}},
               "encoding": {"x": x, "y": {"field": "ratio", "type": "quantitative", "title": "cache hit",
                                          "axis": {"format": "%"}, "scale": {"domain": [0, 1]}},
                            "tooltip": [{"field": "t", "type": "temporal", "format": "%H:%M:%S", "title": "time"},
                                        {"field": "ratio", "type": "quantitative", "format": ".1%",
                                         "title": "cache read / prompt"}]}}]
    datasets = {"ratio": p}
    if marks is not None and not marks.empty:
        datasets["marks"] = pd.DataFrame({
            "t": _ms(marks["ts"]).to_numpy(), "o": marks["outcome"].astype(str).to_numpy(),
            "rewrite": pd.to_numeric(marks["rewrite"], errors="coerce").to_numpy()})
        layers.append({"data": {"name": "marks"}, "mark": {"type": "rule", "strokeDash": [2, 3], "strokeWidth": 2},
                       "encoding": {"x": x, "color": {"field": "o", "type": "nominal", "legend": None,
                                                      "scale": _scale(OUTCOME_COLORS, vocab.COMPRESS_OUTCOMES)},
                                    "tooltip": [{"field": "t", "type": "temporal", "format": "%H:%M:%S"},
                                                {"field": "o", "type": "nominal", "title": "compress()"},
                                                {"field": "rewrite", "type": "quantitative", "format": ",.0f",
                                                 "title": "cache tokens written again"}]}})
    return _spec(height=height, layer=layers, datasets=datasets)

"""Altair charts of the dashboard. Inputs are the small frames the sources return."""

from __future__ import annotations

from typing import Optional, Sequence

import altair as alt
import numpy as np
import pandas as pd

from dashboard.sources import COMPRESS_OUTCOMES, SELECTION_RESULTS

OUTCOME_COLORS = {
    "compressed": "#2e9d5b", "noop": "#9aa5b1", "error": "#d64545", "timeout": "#f0a030",
}
RESULT_COLORS = {
    "unchanged": "#9aa5b1", "same_selection": "#5b8def", "changed_selection": "#f0a030", "fail_open": "#d64545",
}
MEASURE_COLORS = {"prompt tokens": "#3566c8", "threshold": "#e8833a", "window": "#6b7280"}

HEIGHT = 240


def _scale(mapping: dict, domain: Sequence[str]) -> alt.Scale:
    return alt.Scale(domain=list(domain), range=[mapping[d] for d in domain])


def time_axis(span_s: float) -> alt.Axis:
    if span_s <= 20 * 60:
        fmt = "%H:%M:%S"
    elif span_s <= 2 * 86400:
        fmt = "%H:%M"
    else:
        fmt = "%b %d %H:%M"
    return alt.Axis(format=fmt, labelOverlap=True, title=None)


def time_x(span_s: float, domain: Optional[Sequence] = None) -> alt.X:
    """A temporal x; ``domain`` (two naive local datetimes) pins it to the selected range."""
    scale = alt.Scale(domain=[d.isoformat() for d in domain]) if domain is not None else alt.Undefined
    return alt.X("time:T", axis=time_axis(span_s), scale=scale)


SAWTOOTH_LEGEND = (
    ":blue[**━** prompt tokens]  :orange[**╍** compression threshold]  :gray[**┈** context window]  "
    "▼ compress(): :green[compressed] · :gray[noop] · :red[error] · :orange[timeout]"
)


def sawtooth(lines: pd.DataFrame, marks: pd.DataFrame, title: str = "", height: int = 220,
             span_s: float = 3600.0) -> alt.Chart:
    """Prompt tokens against threshold and window of one series, compressions marked.

    No legend (the page shows ``SAWTOOTH_LEGEND`` once above the grid)."""
    long = lines.melt(id_vars=["time"], value_vars=["prompt_tokens", "threshold_tokens", "window_tokens"],
                      var_name="measure", value_name="tokens").dropna(subset=["tokens"])
    long["measure"] = long["measure"].map({"prompt_tokens": "prompt tokens", "threshold_tokens": "threshold",
                                           "window_tokens": "window"})
    domain = list(MEASURE_COLORS)
    t = pd.concat([lines["time"], marks["time"]]) if marks is not None and not marks.empty else lines["time"]
    extent = (t.max() - t.min()).total_seconds() if len(t) else span_s
    x = alt.X("time:T", axis=time_axis(extent or span_s))
    line = alt.Chart(long).mark_line(interpolate="step-after", strokeWidth=2).encode(
        x=x,
        y=alt.Y("tokens:Q", title=None, axis=alt.Axis(format="~s")),
        color=alt.Color("measure:N", scale=_scale(MEASURE_COLORS, domain), legend=None),
        strokeDash=alt.StrokeDash("measure:N", scale=alt.Scale(domain=domain, range=[[1, 0], [6, 4], [2, 3]]),
                                  legend=None),
        tooltip=[alt.Tooltip("time:T", format="%H:%M:%S"), "measure:N", alt.Tooltip("tokens:Q", format=",")],
    )
    layers = [line]
    if marks is not None and not marks.empty:
        m = marks.copy()
        # where the prompt stood when compress() ran (a timeout or a noop has no "after")
        m = m.sort_values("time")
        ref = lines[["time", "prompt_tokens"]].dropna().sort_values("time")
        if not ref.empty:
            m = pd.merge_asof(m, ref.rename(columns={"prompt_tokens": "_prompt"}), on="time", direction="backward")
        else:
            m["_prompt"] = None
        m["y"] = m["tokens_before"].where(m["tokens_before"].notna(), m["_prompt"]).fillna(0)
        m["outcome_"] = m["outcome"].astype(str)
        rule = alt.Chart(m).mark_rule(strokeDash=[2, 3], opacity=0.45).encode(
            x=x, color=alt.Color("outcome_:N", scale=_scale(OUTCOME_COLORS, COMPRESS_OUTCOMES), legend=None))
        pts = alt.Chart(m).mark_point(shape="triangle-down", size=150, filled=True, opacity=1).encode(
            x=x, y="y:Q",
            color=alt.Color("outcome_:N", scale=_scale(OUTCOME_COLORS, COMPRESS_OUTCOMES), legend=None),
            tooltip=[alt.Tooltip("time:T", format="%H:%M:%S"), alt.Tooltip("outcome_:N", title="outcome"),
                     alt.Tooltip("tokens_before:Q", format=","), alt.Tooltip("tokens_after:Q", format=","),
                     alt.Tooltip("duration_s:Q", format=".2f", title="seconds")],
        )
        layers += [rule, pts]
    chart = alt.layer(*layers).resolve_scale(color="independent").properties(height=height)
    if title:
        chart = chart.properties(title=alt.TitleParams(title, anchor="start", fontSize=13, fontWeight="normal"))
    return chart


def stacked_bars_over_time(df: pd.DataFrame, category: str, colors: dict, domain: Sequence[str], step: int,
                           y_title: str = "count", height: int = HEIGHT, span_s: float = 3600.0,
                           x_domain: Optional[Sequence] = None) -> alt.Chart:
    d = df.copy()
    d["time_end"] = d["time"] + pd.to_timedelta(step, unit="s")
    return alt.Chart(d).mark_bar(opacity=0.9).encode(
        x=time_x(span_s, x_domain),
        x2="time_end:T",
        y=alt.Y("sum(count):Q", title=y_title, stack="zero"),
        color=alt.Color(f"{category}:N", scale=_scale(colors, domain), legend=alt.Legend(orient="top", title=None)),
        tooltip=[alt.Tooltip("time:T", format="%Y-%m-%d %H:%M"), f"{category}:N", "engine:N",
                 alt.Tooltip("sum(count):Q", format=",.0f", title="count")],
    ).properties(height=height)


def outcome_bars(df: pd.DataFrame, category: str, colors: dict, domain: Sequence[str],
                 normalize: bool = False) -> alt.Chart:
    """Horizontal stacked bars per engine; ``df`` is long: [engine, <category>, count]."""
    return alt.Chart(df).mark_bar().encode(
        y=alt.Y("engine:N", title=None),
        x=alt.X("count:Q", stack="normalize" if normalize else "zero",
                title="share" if normalize else "count",
                axis=alt.Axis(format="%") if normalize else alt.Axis(format=",d", tickMinStep=1)),
        color=alt.Color(f"{category}:N", scale=_scale(colors, domain), legend=alt.Legend(orient="top", title=None)),
        order=alt.Order(f"{category}_order:Q"),
        tooltip=["engine:N", f"{category}:N", alt.Tooltip("count:Q", format=",")],
    ).transform_calculate(**{f"{category}_order": _order_expr(category, domain)}).properties(
        height=alt.Step(34))


def _order_expr(field: str, domain: Sequence[str]) -> str:
    expr = str(len(domain))
    for i, v in reversed(list(enumerate(domain))):
        expr = f"datum.{field} === '{v}' ? {i} : ({expr})"
    return expr


def lines_over_time(df: pd.DataFrame, y: str, color: str, y_title: str, fmt: str = ",.2f",
                    dash: Optional[str] = None, height: int = HEIGHT, y_format: str = ",~g",
                    span_s: float = 3600.0, x_domain: Optional[Sequence] = None) -> alt.Chart:
    enc = dict(
        x=time_x(span_s, x_domain),
        y=alt.Y(f"{y}:Q", title=y_title, axis=alt.Axis(format=y_format)),
        color=alt.Color(f"{color}:N", legend=alt.Legend(orient="top", title=None)),
        tooltip=[alt.Tooltip("time:T", format="%Y-%m-%d %H:%M"), f"{color}:N",
                 alt.Tooltip(f"{y}:Q", format=fmt)],
    )
    if dash:
        enc["strokeDash"] = alt.StrokeDash(f"{dash}:N", legend=alt.Legend(orient="top", title=None))
        enc["tooltip"].insert(1, f"{dash}:N")
    return alt.Chart(df).mark_line(point=alt.OverlayMarkDef(size=18), interpolate="linear", strokeWidth=1.6
                                   ).encode(**enc).properties(height=height)


QUANTILE_COLORS = {"p50": "#8fb8f5", "p95": "#3566c8", "p99": "#0a2d6e"}


def latency_dots(df: pd.DataFrame, color_by: Optional[str] = None) -> alt.Chart:
    """p50 / p95 / p99 per hook on a log axis: a p50-p99 rule and a dot per quantile.
    ``df`` is [engine, hook, p50_ms, p95_ms, p99_ms]."""
    d = df.dropna(subset=["p50_ms", "p99_ms"]).copy()
    d = d[(d["p50_ms"] > 0) & (d["p99_ms"] > 0)]
    multi = d["engine"].nunique() > 1
    d["label"] = (d["hook"] + "  ·  " + d["engine"]) if (multi and color_by is None) else d["hook"]
    long = d.melt(id_vars=["engine", "hook", "label"], value_vars=["p50_ms", "p95_ms", "p99_ms"],
                  var_name="quantile", value_name="ms")
    long["quantile"] = long["quantile"].str.replace("_ms", "", regex=False)
    y = alt.Y("label:N", title=None, sort=alt.SortField("label"), axis=alt.Axis(labelLimit=320))
    x_scale = alt.Scale(type="log")
    lo = float(long["ms"].min()) if len(long) else 0.001
    hi = float(long["ms"].max()) if len(long) else 1000.0
    ticks = [10.0 ** k for k in range(int(np.floor(np.log10(max(lo, 1e-6)))),
                                      int(np.ceil(np.log10(max(hi, 1e-6)))) + 1)]
    x_axis = alt.Axis(values=ticks, format="~g", title="milliseconds (log)")
    offset = {"yOffset": alt.YOffset("engine:N")} if color_by else {}
    rule = alt.Chart(d).mark_rule(strokeWidth=2, opacity=0.5, color="#9aa5b1").encode(
        y=y, x=alt.X("p50_ms:Q", scale=x_scale, axis=x_axis), x2="p99_ms:Q", **offset)
    if color_by:
        color = alt.Color(f"{color_by}:N", scale=alt.Scale(range=["#3566c8", "#e8833a"]),
                          legend=alt.Legend(orient="top", title=None))
        shape = alt.Shape("quantile:N", scale=alt.Scale(domain=["p50", "p95", "p99"],
                                                        range=["circle", "diamond", "triangle-right"]),
                          legend=alt.Legend(orient="top", title=None))
    else:
        color = alt.Color("quantile:N", scale=_scale(QUANTILE_COLORS, ["p50", "p95", "p99"]),
                          legend=alt.Legend(orient="top", title=None))
        shape = alt.value("circle")
    dots = alt.Chart(long).mark_point(filled=True, size=70, opacity=1).encode(
        y=y, x=alt.X("ms:Q", scale=x_scale, axis=x_axis), color=color, shape=shape,
        tooltip=["engine:N", "hook:N", "quantile:N", alt.Tooltip("ms:Q", format=",.3f")], **offset)
    return alt.layer(rule, dots).properties(height=alt.Step(40 if color_by else 30))

"""Formatting shared by the tabs: numbers, times, and text from outside as literal Markdown.

:func:`literal` is the one way a value the dashboard did not write itself (an engine name, a
session id, a hook, a reason, an alert name, a path, a URL, an error message) goes into
anything Streamlit renders as Markdown (``st.markdown``, ``caption``, ``info``, ``warning``,
``error``, ``success``, a metric's ``help``). Tables, chart titles and widget options show
text as it is and need nothing.
"""

from __future__ import annotations

import re
import string
from datetime import datetime
from typing import Sequence

import pandas as pd

# Every ASCII punctuation character may be backslash-escaped in CommonMark, and an escaped one
# is always literal: emphasis, code spans, links, images, autolinks, raw HTML, entities,
# tables, Streamlit's :color[...] directives, :emoji: shortcodes and $math$ all need one.
_ESCAPE = {c: "\\" + c for c in string.punctuation}
_ESCAPE_TABLE = str.maketrans(_ESCAPE)
_CONTROL = re.compile(r"[\x00-\x1f\x7f\u2028\u2029]+")      # line breaks would start new blocks


def literal(value) -> str:
    """``value`` as Markdown source that renders as exactly its text (line breaks as spaces)."""
    return _CONTROL.sub(" ", str(value)).translate(_ESCAPE_TABLE)


def to_dt(ts) -> pd.Series:
    """Epoch seconds -> naive local datetimes (what Vega-Lite and the tables show)."""
    s = pd.to_datetime(pd.Series(ts, dtype="float64"), unit="s", utc=True)
    tz = datetime.now().astimezone().tzinfo
    return s.dt.tz_convert(tz).dt.tz_localize(None)


def fmt_int(v) -> str:
    if v is None or (isinstance(v, float) and pd.isna(v)):
        return "–"
    return f"{int(round(float(v))):,}"


def fmt_pct(v, digits: int = 1) -> str:
    if v is None or pd.isna(v):
        return "–"
    return f"{100.0 * float(v):.{digits}f}%"


def fmt_seconds(v) -> str:
    if v is None or pd.isna(v):
        return "–"
    v = float(v)
    if v >= 1:
        return f"{v:.2f} s"
    if v >= 0.001:
        return f"{v * 1000:.1f} ms"
    return f"{v * 1e6:.0f} µs"


def fmt_tokens(v) -> str:
    if v is None or pd.isna(v):
        return "–"
    v = float(v)
    if abs(v) >= 1e6:
        return f"{v / 1e6:.2f}M"
    if abs(v) >= 1e4:
        return f"{v / 1e3:.1f}k"
    return f"{v:,.0f}"


def numeric(df: pd.DataFrame, skip: Sequence[str] = ("engine", "hook")) -> pd.DataFrame:
    """Numbers as floats/ints (a missing percentile is a blank cell, not 'None')."""
    out = df.copy()
    for c in out.columns:
        if c not in skip:
            out[c] = pd.to_numeric(out[c], errors="coerce")
    return out


def plural(n: int, word: str) -> str:
    return f"{n:,} {word}{'' if n == 1 else 's'}"

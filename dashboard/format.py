"""Formatting shared by the tabs: numbers, times, and text from outside as literal Markdown.

When editing: :func:`literal` is the one way a value the dashboard did not write itself goes
into anything Streamlit renders as Markdown; it makes a code span, because backslash escapes do
not stop autolinks. Tables, chart titles and widget options show text as it is.

The full account: docs/design/internals.md, *dashboard/format.py*.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Sequence

import pandas as pd

_CONTROL = re.compile(r"[\x00-\x1f\x7f\u2028\u2029]")      # a blank line would end the code span
_TICKS = re.compile(r"`+")


def literal(value) -> str:
    """``value`` as a Markdown code span that renders as exactly its text (line breaks as spaces).

    The fence is one backtick longer than the longest run of backticks in the value, so no
    backtick of the value can end the span (CommonMark); the value is padded with a space on each
    side, which CommonMark strips again (a value may begin or end with a backtick)."""
    text = _CONTROL.sub(" ", str(value))
    fence = "`" * (max((len(m) for m in _TICKS.findall(text)), default=0) + 1)
    return f"{fence} {text} {fence}"


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


SESSION_PARAM = "session"          # ?session=<id> opens that session's timeline
SESSION_LINK_TEXT = r"\?session=(.*)"  # a LinkColumn shows the id the link carries


def session_href(session) -> str:
    """The page's own address with ``?session=<id>`` (percent-encoded: the id is never markup)."""
    from urllib.parse import quote

    return f"?{SESSION_PARAM}={quote(str(session), safe='')}"

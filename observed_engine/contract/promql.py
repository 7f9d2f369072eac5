"""PromQL query shapes shared by the Streamlit dashboard and the Grafana board generator.

Every function returns a PromQL string; the shapes are written once here. When editing: label
values from the outside go through ``eq`` / ``one_of`` (escaped twice for ``=~``), and this file
stays standard library only with no imports from the package, because the board generator
loads it by path without the project installed.

The full account: docs/design/internals.md, *observed_engine/contract/promql.py*.
"""

from __future__ import annotations

from typing import Iterable, Sequence

# What Go's regexp.QuoteMeta escapes: RE2's metacharacters, nothing else (RE2 rejects a backslash
# before a letter or digit that is no escape it knows; Python's re.escape suits Python's re only).
_RE2_META = frozenset("\\.+*?()|[]{}^$")

# Escapes of a PromQL double-quoted string (Go syntax). A raw newline ends the string with an
# error; the other control characters are written as escapes so the query stays one readable line.
_STRING_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t", "\a": "\\a", "\b": "\\b",
                   "\f": "\\f", "\v": "\\v"}


def string(text: str) -> str:
    """``text`` as a PromQL double-quoted string literal, quotes included.

    Backslashes and double quotes are escaped, control characters written as Go escapes
    (``\\n``, ``\\x1f``); everything else (unicode included) stays as it is.
    """
    out = []
    for c in text:
        esc = _STRING_ESCAPES.get(c)
        if esc is None and (c < " " or c == "\x7f"):
            esc = f"\\x{ord(c):02x}"
        out.append(c if esc is None else esc)
    return '"' + "".join(out) + '"'


def regex_escape(text: str) -> str:
    """An RE2 regex matching exactly ``text`` (Go's ``regexp.QuoteMeta``): a backslash before
    each of ``\\.+*?()|[]{}^$``. Not yet a string literal: pass the result through ``string``."""
    return "".join("\\" + c if c in _RE2_META else c for c in text)


def eq(label: str, value: str) -> str:
    """The matcher ``label="value"`` (``value`` taken literally)."""
    return f"{label}={string(value)}"


def one_of(label: str, values: Iterable[str]) -> str:
    """A matcher for ``label`` equal to one of ``values`` (taken literally, duplicates dropped).

    One value: ``label="v"``; several: ``label=~"v1|v2"``, each value regex-escaped, the whole
    regex then escaped as a string (Prometheus anchors it: ``^(?:v1|v2)$``).
    """
    vals = list(dict.fromkeys(values))
    if not vals:
        raise ValueError(f"one_of({label!r}): no values (a matcher for nothing)")
    if len(vals) == 1:
        return eq(label, vals[0])
    return f"{label}=~{string('|'.join(regex_escape(v) for v in vals))}"


def series(metric: str, sel: str = "", suffix: str = "") -> str:
    """``metric{sel}``."""
    return f"{metric}{suffix}{{{sel}}}"


def agg(op: str, by: Sequence[str], expr: str) -> str:
    """``op by (a, b) (expr)``, or ``op(expr)`` without labels."""
    return f"{op} by ({', '.join(by)}) ({expr})" if by else f"{op}({expr})"


def over(fn: str, metric: str, sel: str, window: str, suffix: str = "") -> str:
    """A range function over one series selector: ``fn(metric{sel}[window])``."""
    return f"{fn}({series(metric, sel, suffix)}[{window}])"


def sum_over(fn: str, metric: str, by: Sequence[str], sel: str, window: str, suffix: str = "") -> str:
    """``sum by (by) (fn(metric{sel}[window]))`` for a range function ``fn``."""
    return agg("sum", by, over(fn, metric, sel, window, suffix))


def rate_sum(metric: str, by: Sequence[str], sel: str, window: str, suffix: str = "") -> str:
    """``sum by (by) (rate(metric{sel}[window]))``: per-second rate of a counter."""
    return sum_over("rate", metric, by, sel, window, suffix)


def increase_sum(metric: str, by: Sequence[str], sel: str, window: str, suffix: str = "") -> str:
    """``sum by (by) (increase(metric{sel}[window]))``: events of a counter within the window."""
    return sum_over("increase", metric, by, sel, window, suffix)


def gauge(op: str, metric: str, by: Sequence[str], sel: str) -> str:
    """``op by (by) (metric{sel})``: a gauge's current value per group (op: max, sum, ...)."""
    return agg(op, by, series(metric, sel))


def quantile(q: float, metric: str, by: Sequence[str], sel: str, window: str, fn: str = "rate") -> str:
    """``histogram_quantile(q, sum by (le, by) (fn(metric_bucket{sel}[window])))``.

    ``fn`` is ``rate`` (a moving percentile) or ``increase`` (the percentile over the whole window):
    the same quantile, the bucket counts only scale.
    """
    return f"histogram_quantile({q}, {sum_over(fn, metric, ('le', *by), sel, window, '_bucket')})"


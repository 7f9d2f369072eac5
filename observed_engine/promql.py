"""PromQL query shapes shared by the Streamlit dashboard and the Grafana board generator.

``dashboard/prometheus_source.py`` and ``deploy/grafana/build_dashboard.py`` ask the same
questions of the catalogue's metrics (per-label rates and increases, histogram percentiles,
gauges per engine); the shapes are written once here. Every function returns a PromQL string.

* ``metric``: a Prometheus series name from ``observed_engine.catalogue`` (``BY_KEY[key].prom_name``);
  ``suffix`` picks a histogram's ``_bucket`` / ``_sum`` / ``_count`` series;
* ``by``: the grouping labels, in order (empty: aggregate everything);
* ``sel``: the label matchers without braces, e.g. ``'engine=~"$engine"'`` ('' for none);
* ``window``: a range, e.g. ``"5m"`` or ``"$__rate_interval"``.

Standard library only and no imports from the package, so the board generator (which runs
without the project installed) can load this file by path.
"""

from __future__ import annotations

from typing import Sequence


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


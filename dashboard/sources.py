"""Data sources of the dashboard: one interface, two implementations.

``SQLiteSource(path)``
    The embedded store written by the engine (``observed_engine.store``), opened
    read-only. It has everything: per-session rows, exact counts, the
    individual timeout / fail-open events and, when ``capture_content`` was on,
    message text.

``PrometheusSource(url)``
    A Prometheus server scraping the engine's ``/metrics``: PromQL over the
    catalogue's metric names through ``/api/v1/query``, ``/api/v1/query_range``
    and ``/api/v1/alerts``. Metrics carry no session ids and no individual
    events, so per-session views and the event table need the store; counts
    come from ``increase()`` and are extrapolated.

Both return the same pandas frames (small, already aggregated), so the views do
not care where the numbers come from. Every method takes a :class:`Filters`.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Dict, FrozenSet, Optional, Sequence, Tuple

import pandas as pd

# --- vocabulary (the telemetry contract) -------------------------------------

COMPRESS_OUTCOMES: Tuple[str, ...] = ("compressed", "noop", "error", "timeout")
SELECTION_RESULTS: Tuple[str, ...] = ("unchanged", "same_selection", "changed_selection", "fail_open")
TIMEOUT_EVENTS: Tuple[str, ...] = ("deadline_exceeded", "host_reported", "late_completion")
# compress() calls that returned although the summary model failed (catalogue key "summary_failures";
# store rows event='summary_failure', outcome=kind, reason=cause). The dashboard names the incident by
# its kind: SUMMARY_EVENTS[kind].
SUMMARY_KINDS: Tuple[str, ...] = ("fallback_summary", "aborted")
SUMMARY_CAUSES: Tuple[str, ...] = ("auth", "network", "other")
SUMMARY_EVENTS: Dict[str, str] = {"fallback_summary": "summary_fallback", "aborted": "summary_aborted"}
SUMMARY_FAILURE_EVENTS: Tuple[str, ...] = tuple(SUMMARY_EVENTS[k] for k in SUMMARY_KINDS)
INCIDENT_EVENTS: Tuple[str, ...] = TIMEOUT_EVENTS + ("fail_open",) + SUMMARY_FAILURE_EVENTS

# Capabilities a source may have; views say what is missing when one is absent.
CAP_SESSIONS = "sessions"          # per-session rows (the sawtooth of one session)
CAP_EVENTS = "events"              # the individual timeout / fail-open events
CAP_CONTENT = "content"            # message text (only if capture_content was on)
CAP_EXACT = "exact_counts"         # counts are exact, not extrapolated
CAP_ALERTS = "alert_rules"         # alerts evaluated by Prometheus rules

# --- time ranges -------------------------------------------------------------

RANGE_PRESETS: Dict[str, float] = {
    "Last 15 minutes": 15 * 60,
    "Last hour": 3600,
    "Last 6 hours": 6 * 3600,
    "Last 24 hours": 24 * 3600,
    "Last 7 days": 7 * 86400,
    "Last 14 days": 14 * 86400,
}
DEFAULT_RANGE = "Last 6 hours"

# Bucket widths the charts use; the smallest giving at most ~180 buckets wins.
_NICE_STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 180, 300, 600, 900, 1800, 3600, 7200, 10800,
               21600, 43200, 86400)
MAX_BUCKETS = 180


def step_for(span_s: float) -> int:
    for s in _NICE_STEPS:
        if span_s / s <= MAX_BUCKETS:
            return s
    return int(math.ceil(span_s / MAX_BUCKETS / 86400.0)) * 86400


@dataclass(frozen=True)
class Filters:
    """What every query is restricted to. ``start`` is aligned to ``step``."""

    start: float
    end: float
    step: int
    engines: Tuple[str, ...] = ()      # empty: every engine
    session: Optional[str] = None      # store only

    @property
    def span(self) -> float:
        return max(1.0, self.end - self.start)

    def key(self) -> tuple:
        return (self.start, self.end, self.step, self.engines, self.session)


def make_filters(span_s: float, now: float, *, engines: Sequence[str] = (), session: Optional[str] = None,
                 quantum: float = 5.0, end: Optional[float] = None) -> Filters:
    """A range ending now (quantised to ``quantum`` so reruns within one refresh share caches)."""
    if end is None:
        q = max(1.0, float(quantum))
        end = (math.floor(now / q) + 1) * q
    step = step_for(span_s)
    start = math.floor((end - span_s) / step) * step
    return Filters(start=float(start), end=float(end), step=step, engines=tuple(sorted(engines)),
                   session=session or None)


# --- status ------------------------------------------------------------------

@dataclass
class Status:
    state: str                     # "missing" | "empty" | "ok" | "error"
    message: str = ""
    first_ts: Optional[float] = None
    last_ts: Optional[float] = None
    events: Optional[int] = None   # rows in the store (approximate for big stores)

    @property
    def ok(self) -> bool:
        return self.state == "ok"


class SourceError(RuntimeError):
    """A source could not answer (unreachable server, unreadable file)."""


# --- the interface -----------------------------------------------------------

class Source:
    """The interface every view is written against. Frames are documented per method."""

    kind: str = "abstract"
    label: str = ""
    capabilities: FrozenSet[str] = frozenset()

    def supports(self, cap: str) -> bool:
        return cap in self.capabilities

    def cache_key(self) -> str:
        return f"{self.kind}:{self.label}"

    def status(self) -> Status:
        raise NotImplementedError

    def engines(self, f: Filters) -> list:
        """Engine names seen (in the range where the source can tell)."""
        raise NotImplementedError

    def sessions(self, f: Filters, limit: Optional[int] = None) -> pd.DataFrame:
        """[session, engine, last_ts] active in the range, most recent first."""
        return pd.DataFrame(columns=["session", "engine", "last_ts"])

    def usage(self, f: Filters, series: Sequence[str]) -> Tuple[pd.DataFrame, pd.DataFrame]:
        """The sawtooth. Lines: [ts, series, prompt_tokens, threshold_tokens, window_tokens];
        compression marks: [ts, series, outcome, tokens_before, tokens_after, duration_s].
        ``series`` are session ids (store) or engine names (Prometheus)."""
        raise NotImplementedError

    def compressions(self, f: Filters) -> Tuple[pd.DataFrame, pd.DataFrame]:
        """Per engine: [engine, compressed, noop, error, timeout, host_reported, late_completion,
        summary_fallback, summary_aborted, total, p50_s, p95_s, p99_s, tokens_before_avg,
        tokens_after_avg, ratio]; over time: [ts, engine, outcome, count].
        ``summary_fallback`` / ``summary_aborted``: calls among them that returned although the
        summary model failed (a fallback summary was inserted / the compression was aborted)."""
        raise NotImplementedError

    def selections(self, f: Filters) -> Tuple[pd.DataFrame, pd.DataFrame]:
        """Per engine: [engine, unchanged, same_selection, changed_selection, fail_open, total,
        churn, cache_lost_tokens]; over time: [ts, engine, result, count]."""
        raise NotImplementedError

    def latency(self, f: Filters) -> Tuple[pd.DataFrame, pd.DataFrame]:
        """Per engine and hook: [engine, hook, calls, calls_per_s, errors, p50_ms, p95_ms, p99_ms];
        over time: [ts, engine, hook, calls_per_s]."""
        raise NotImplementedError

    def incidents(self, f: Filters, limit: int = 500) -> pd.DataFrame:
        """Timeout, fail-open and summary-failure events, newest first:
        [ts, session, engine, hook, event, reason, duration_s, content].
        ``event`` is one of INCIDENT_EVENTS (a summary failure: summary_fallback / summary_aborted,
        with its cause as ``reason``)."""
        return pd.DataFrame(columns=["ts", "session", "engine", "hook", "event", "reason", "duration_s",
                                     "content"])

    def incident_counts(self, f: Filters) -> pd.DataFrame:
        """[engine, hook, event, reason, count] over the range (events and reasons as in ``incidents``)."""
        raise NotImplementedError

    def alerts(self, f: Filters, now: float) -> pd.DataFrame:
        """Active alerts: [alert, severity, state, engine, detail, since]."""
        raise NotImplementedError

    def content(self, f: Filters, limit: int = 50) -> pd.DataFrame:
        """Captured message text of the selected session: [ts, hook, content] (store only)."""
        return pd.DataFrame(columns=["ts", "hook", "content"])

    def kpis(self, f: Filters) -> Dict[str, Optional[float]]:
        """Headline numbers: sessions, compressions, timeouts, fail_opens, usage_ratio, usage_session."""
        raise NotImplementedError


# --- choosing a source from the environment ----------------------------------

ENV_STORE = "OBSERVED_STORE"
ENV_PROMETHEUS = "OBSERVED_PROMETHEUS_URL"
ENV_REFRESH = "OBSERVED_REFRESH_SECONDS"
ENV_SOURCE = "OBSERVED_SOURCE"       # optional: "sqlite" or "prometheus" to force the default


def default_store_path() -> str:
    from observed_engine.host import default_store_path as _default
    return str(_default())


def env_store_path() -> str:
    return os.environ.get(ENV_STORE) or default_store_path()


def env_prometheus_url() -> str:
    return os.environ.get(ENV_PROMETHEUS, "")


def env_default_kind() -> str:
    forced = os.environ.get(ENV_SOURCE, "").strip().lower()
    if forced in ("sqlite", "prometheus"):
        return forced
    if os.environ.get(ENV_PROMETHEUS) and not os.environ.get(ENV_STORE):
        return "prometheus"
    return "sqlite"


def env_refresh_seconds(default: float = 5.0) -> float:
    try:
        v = float(os.environ.get(ENV_REFRESH, default))
    except ValueError:
        return default
    return v if v > 0 else default


def open_source(kind: str, target: str) -> Source:
    if kind == "prometheus":
        from dashboard.prometheus_source import PrometheusSource
        return PrometheusSource(target)
    from dashboard.sqlite_source import SQLiteSource
    return SQLiteSource(target)


def __getattr__(name):   # SQLiteSource / PrometheusSource importable from here
    if name == "SQLiteSource":
        from dashboard.sqlite_source import SQLiteSource
        return SQLiteSource
    if name == "PrometheusSource":
        from dashboard.prometheus_source import PrometheusSource
        return PrometheusSource
    raise AttributeError(name)

"""What every tab asks a data source, and the filters it asks with.

:class:`Source` is a ``typing.Protocol``: exactly the members the tabs, the header and the app
call, satisfied structurally by ``SQLiteSource`` and ``PrometheusSource`` (this module imports
neither; ``factory.open_source`` builds one). When editing: both return the same small,
aggregated pandas frames, and values are the contract's words (``contract.vocabulary``), never
renamed here.

The full account: docs/design/internals.md, *dashboard/sources.py*.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ContextManager, Dict, Optional, Protocol, Sequence, Tuple, runtime_checkable

import pandas as pd

from observed_engine.contract import vocabulary as _vocab
from observed_engine.contract.hooks import BY_NAME as _HOOKS

# The hooks the views single out (names checked against the contract's hook table at import).
HOOK_COMPRESS = _HOOKS["compress"].name
HOOK_SELECT = _HOOKS["select_context"].name
HOOK_UPDATE = _HOOKS["update_from_response"].name
HOOK_SESSION_END = _HOOKS["on_session_end"].name
HOOK_PRUNE = _HOOKS["prune_tool_results_only"].name      # Hermes 0.20+
HOOK_TURN = _HOOKS["on_turn_complete"].name
HOOK_CLONE = _HOOKS["clone_for_agent"].name              # Hermes 0.22+

# Capabilities a source may have; views say what is missing when one is absent.
CAP_SESSIONS = "sessions"          # per-session rows (the sawtooth of one session)
CAP_EVENTS = "events"              # the individual timeout / fail-open / summary-failure events
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


# --- status and errors ---------------------------------------------------------

@dataclass
class Status:
    state: str                     # "missing" | "empty" | "ok" | "error"
    message: str = ""
    first_ts: Optional[float] = None
    events: Optional[int] = None   # rows in the store (approximate for big stores)
    skipped: int = 0               # rows whose time is not a number (never in any range)

    @property
    def ok(self) -> bool:
        return self.state == "ok"


class SourceError(RuntimeError):
    """A source could not answer (unreachable server, unreadable file). The message is the
    dashboard's own wording: never a fetched body."""


# --- rows left out ----------------------------------------------------------------

def skipped(df: Optional[pd.DataFrame]) -> int:
    """How many store rows the query behind ``df`` left out because a numeric column held
    something that is not a number (SQLite is dynamically typed)."""
    if df is None:
        return 0
    return int(df.attrs.get("skipped", 0))


def with_skipped(df: pd.DataFrame, n: int) -> pd.DataFrame:
    df.attrs["skipped"] = int(n)
    return df


# --- the interface -------------------------------------------------------------------

@runtime_checkable
class Source(Protocol):
    """What the tabs, the header and the app call on a source. Frames are documented per method;
    event / outcome / kind / reason values are the contract's words."""

    kind: str                          # "sqlite" | "prometheus"
    label: str                         # what the page calls it (a path, a URL)

    def supports(self, cap: str) -> bool:
        """Whether the source has a capability (CAP_*); views say what is missing without it."""
        ...

    def cache_key(self) -> str:
        ...

    def snapshot(self) -> ContextManager[object]:
        """One consistent read for everything inside (the store: one read transaction)."""
        ...

    def status(self) -> Status:
        ...

    def engines(self, f: Optional[Filters]) -> list:
        """Engine names seen (in the range where the source can tell)."""
        ...

    def sessions(self, f: Filters) -> pd.DataFrame:
        """[session, engine, last_ts, ended] active in the range, most recent first (``ended``: its
        latest row is on_session_end; empty without CAP_SESSIONS)."""
        ...

    def usage(self, f: Filters, series: Sequence[str]) -> Tuple[pd.DataFrame, pd.DataFrame]:
        """The sawtooth. Lines: [ts, series, prompt_tokens, threshold_tokens, window_tokens];
        compression marks: [ts, series, outcome, tokens_before, tokens_after, duration_s].
        ``series`` are session ids (store) or engine names (Prometheus). A mark's outcome is the
        call's outcome, ``timeout`` for a deadline, a summary-failure kind, or the event."""
        ...

    def usage_now(self, f: Filters, series: Sequence[str]) -> pd.DataFrame:
        """Latest [series, engine, ts, prompt_tokens, threshold_tokens, window_tokens, ratio]."""
        ...

    def compressions(self, f: Filters) -> Tuple[pd.DataFrame, pd.DataFrame]:
        """Per engine: [engine, *COMPRESS_OUTCOMES, host_reported, late_completion,
        *SUMMARY_FAILURE_KINDS, total, p50_s, p95_s, p99_s, tokens_before_avg, tokens_after_avg,
        ratio]; over time: [ts, engine, outcome, count]. The SUMMARY_FAILURE_KINDS columns
        (fallback_summary, aborted) count the calls among them that returned although the
        summary model failed."""
        ...

    def selections(self, f: Filters) -> Tuple[pd.DataFrame, pd.DataFrame]:
        """Per engine: [engine, *SELECTION_RESULTS, total, churn, cache_lost_tokens];
        over time: [ts, engine, result, count]."""
        ...

    def latency(self, f: Filters) -> Tuple[pd.DataFrame, pd.DataFrame]:
        """Per engine and hook: [engine, hook, calls, calls_per_s, errors, p50_ms, p95_ms, p99_ms];
        over time: [ts, engine, hook, calls_per_s]."""
        ...

    def incidents(self, f: Filters, limit: int) -> pd.DataFrame:
        """Incident rows (vocabulary.INCIDENT_EVENTS), newest first:
        [ts, session, engine, hook, event, kind, reason, duration_s, content]; ``kind`` is the
        summary-failure kind of a summary_failure row (its reason: the cause). Empty without
        CAP_EVENTS."""
        ...

    def incident_counts(self, f: Filters) -> pd.DataFrame:
        """[engine, hook, event, kind, reason, count] over the range (as in ``incidents``)."""
        ...

    def alerts(self, f: Filters, now: float) -> pd.DataFrame:
        """Active alerts: [alert, severity, state, engine, detail, since]."""
        ...

    def decisions(self, f: Filters) -> Tuple[pd.DataFrame, pd.DataFrame]:
        """The compression checks' answers over the range: [engine, hook, decision, count]; and
        automatic compression blocked at the range's end: [engine, reason, sessions] (the store:
        sessions whose latest block row says started; Prometheus: the blocked gauge's sum)."""
        ...

    def prunes(self, f: Filters) -> pd.DataFrame:
        """prune_tool_results_only per engine (Hermes 0.20+): [PRUNE_COLUMNS] = [engine,
        *PRUNE_OUTCOMES, total, results_pruned, tokens_reclaimed] (the last two of committed prunes)."""
        ...

    def turns(self, f: Filters) -> pd.DataFrame:
        """Finished turns (on_turn_complete, Hermes 0.20+): [TURN_COLUMNS] = [engine, outcome,
        exit_reason, turns, api_calls]; exit_reason as the store has it (the metric: its label,
        words it does not know as 'other')."""
        ...

    def clones(self, f: Filters) -> pd.DataFrame:
        """clone_for_agent per engine (Hermes 0.22+): [CLONE_COLUMNS] = [engine, *CLONE_OUTCOMES, total]."""
        ...

    def timeline(self, f: Filters, limit: int) -> pd.DataFrame:
        """Every row of the selected session in the range, oldest first: [TIMELINE_COLUMNS]
        (columns an older store lacks are NULL; empty without CAP_SESSIONS)."""
        ...

    def content(self, f: Filters, limit: int) -> pd.DataFrame:
        """Captured message text of the selected session: [ts, hook, content] (empty without
        CAP_CONTENT)."""
        ...


SESSION_COLUMNS = ["session", "engine", "last_ts", "ended"]
INCIDENT_COLUMNS = ["ts", "session", "engine", "hook", "event", "kind", "reason", "duration_s", "content"]
INCIDENT_COUNT_COLUMNS = ["engine", "hook", "event", "kind", "reason", "count"]
CONTENT_COLUMNS = ["ts", "hook", "content"]
DECISION_COLUMNS = ["engine", "hook", "decision", "count"]
BLOCKED_COLUMNS = ["engine", "reason", "sessions"]
TIMELINE_COLUMNS = ["ts", "engine", "hook", "event", "outcome", "reason", "decision", "checked_tokens",
                    "prompt_tokens", "threshold_tokens", "window_tokens", "tokens_before", "tokens_after",
                    "messages_before", "messages_after", "duration_s", "summary_model", "summary_input_tokens",
                    "summary_output_tokens", "input_tokens", "cache_read_tokens", "cache_rewrite_tokens",
                    "tokenizer", "pruned_results", "api_calls"]
ALERT_COLUMNS = ["alert", "severity", "state", "engine", "detail", "since"]
PRUNE_COLUMNS = ["engine", *_vocab.PRUNE_OUTCOMES, "total", "results_pruned", "tokens_reclaimed"]
TURN_COLUMNS = ["engine", "outcome", "exit_reason", "turns", "api_calls"]
CLONE_COLUMNS = ["engine", *_vocab.CLONE_OUTCOMES, "total"]

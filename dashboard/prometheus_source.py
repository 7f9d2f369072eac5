"""Prometheus as a dashboard source: PromQL over the catalogue's metric names.

Only the HTTP API, through urllib. When editing: it cannot show per-session views, individual
events or message text (metrics carry none); counts are ``increase()`` and percentiles
``histogram_quantile()``, with the query shapes from ``observed_engine.contract.promql``
(shared with the Grafana board generator).

The full account: docs/design/internals.md, *dashboard/prometheus_source.py*.
"""

from __future__ import annotations

import math
import time
from contextlib import nullcontext
from datetime import datetime
from typing import ContextManager, Dict, List, Optional, Sequence, Tuple

import pandas as pd

from observed_engine.contract import vocabulary as vocab
from observed_engine.contract.catalogue import BY_KEY
from observed_engine.contract.promql import agg, eq, gauge, increase_sum, one_of, over, quantile, rate_sum

from .prom_http import PrometheusHTTP
from .sources import (
    ALERT_COLUMNS,
    BLOCKED_COLUMNS,
    CAP_ALERTS,
    CLONE_COLUMNS,
    CONTENT_COLUMNS,
    DECISION_COLUMNS,
    HOOK_COMPRESS,
    INCIDENT_COLUMNS,
    INCIDENT_COUNT_COLUMNS,
    PRUNE_COLUMNS,
    SESSION_COLUMNS,
    TIMELINE_COLUMNS,
    TURN_COLUMNS,
    Filters,
    SourceError,
    Status,
)


def _metric(key: str) -> str:
    return BY_KEY[key].prom_name


HOOK_CALLS = _metric("hook_calls")
HOOK_DURATION = _metric("hook_duration")
PROMPT = _metric("prompt_tokens")
THRESHOLD = _metric("threshold_tokens")
WINDOW = _metric("window_tokens")
USAGE_RATIO = _metric("usage_ratio")
COMPRESSIONS = _metric("compressions")
COMPRESSION_DURATION = _metric("compression_duration")
COMPRESSION_TOKENS = _metric("compression_tokens")
TIMEOUTS = _metric("compression_timeouts")
SUMMARY_FAILURES = _metric("summary_failures")
FAIL_OPEN = _metric("fail_open")
SELECTIONS = _metric("selections")
CACHE_LOST = _metric("cache_prefix_lost")
PRUNES = _metric("tool_result_prunes")
PRUNE_RESULTS = _metric("tool_result_prune_results")
PRUNE_RECLAIMED = _metric("tool_result_prune_reclaimed_tokens")
TURNS = _metric("turns")
CLONES = _metric("clones")

ANY_SERIES = '{__name__=~"hermes_context_.+"}'
LOOKBACK_ALL = 14 * 86400
BEFORE, AFTER = vocab.STAGES


def _dur(seconds: float) -> str:
    return f"{max(1, int(math.ceil(seconds)))}s"


def _num(v) -> Optional[float]:
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(x) or math.isinf(x) else x


def _count(v) -> int:
    """increase() extrapolates: 0.97 events is one event; a tiny positive value still counts."""
    x = _num(v) or 0.0
    if x <= 0:
        return 0
    return max(1, int(round(x)))


class PrometheusSource:
    """Implements ``sources.Source`` over the Prometheus HTTP API."""

    kind = "prometheus"
    capabilities = frozenset({CAP_ALERTS})

    def __init__(self, url: str, timeout: float = 5.0) -> None:
        self.http = PrometheusHTTP(url, timeout)
        self.url = self.http.url
        self.label = self.url

    def supports(self, cap: str) -> bool:
        return cap in self.capabilities

    def cache_key(self) -> str:
        return f"{self.kind}:{self.label}"

    def snapshot(self) -> ContextManager[object]:
        return nullcontext()           # every query is one HTTP request; nothing to hold open

    def query(self, promql: str, at: Optional[float] = None) -> List[dict]:
        params = {"query": promql}
        if at is not None:
            params["time"] = f"{at:.3f}"
        data = self.http.get("/api/v1/query", params)
        return data.get("result", []) if isinstance(data, dict) else []

    def query_range(self, promql: str, start: float, end: float, step: float) -> List[dict]:
        data = self.http.get("/api/v1/query_range", {"query": promql, "start": f"{start:.3f}",
                                                     "end": f"{end:.3f}", "step": f"{max(1.0, step):g}"})
        return data.get("result", []) if isinstance(data, dict) else []

    # -- helpers -------------------------------------------------------------

    @staticmethod
    def _sel(f: Optional[Filters], **extra: str) -> str:
        """Label matchers (no braces) for the engine filter and ``extra``; values are taken literally
        (engine names are arbitrary strings: ``observed_engine.contract.promql`` escapes them for PromQL)."""
        parts = [eq(k, v) for k, v in extra.items()]
        if f is not None and f.engines:
            parts.append(one_of("engine", f.engines))
        return ", ".join(parts)

    @staticmethod
    def _at(f: Filters) -> float:
        return min(f.end, time.time())

    def _vec(self, promql: str, f: Filters, labels: Sequence[str]) -> Dict[tuple, float]:
        out: Dict[tuple, float] = {}
        for r in self.query(promql, self._at(f)):
            key = tuple(r.get("metric", {}).get(name) for name in labels)
            v = _num(r.get("value", [None, None])[1])
            if v is not None:
                out[key] = v
        return out

    def _matrix(self, promql: str, f: Filters, labels: Sequence[str], shift: float = 0.0) -> pd.DataFrame:
        rows = []
        for r in self.query_range(promql, f.start + f.step, self._at(f), f.step):
            key = tuple(r.get("metric", {}).get(name) for name in labels)
            for ts, v in r.get("values", []):
                x = _num(v)
                if x is not None:
                    rows.append((float(ts) - shift, *key, x))
        return pd.DataFrame(rows, columns=["ts", *labels, "value"])

    def _window(self, f: Filters) -> str:
        return _dur(max(f.step, 30))

    # -- the interface ---------------------------------------------------------

    def status(self) -> Status:
        try:
            r = self.query(f"count(last_over_time({ANY_SERIES}[{_dur(LOOKBACK_ALL)}]))")
        except SourceError as exc:
            return Status("error", str(exc))
        n = int(_num(r[0]["value"][1]) or 0) if r else 0
        if not n:
            return Status("empty", f"Prometheus at {self.url} has no hermes_context_* series.")
        return Status("ok", "", events=None)

    def engines(self, f: Optional[Filters] = None) -> list:
        span = f.span if f is not None else LOOKBACK_ALL
        r = self.query(f'group by (engine) (last_over_time({ANY_SERIES}[{_dur(span)}]))',
                       self._at(f) if f is not None else None)
        names = sorted({x.get("metric", {}).get("engine") for x in r} - {None, ""})
        if f is not None and f.engines:
            names = [n for n in names if n in f.engines]
        return names

    def usage(self, f: Filters, series: Sequence[str]) -> Tuple[pd.DataFrame, pd.DataFrame]:
        sel = self._sel(f)
        frames = []
        for col, metric in (("prompt_tokens", PROMPT), ("threshold_tokens", THRESHOLD), ("window_tokens", WINDOW)):
            m = self._matrix(gauge("max", metric, ["engine"], sel), f, ["engine"])
            frames.append(m.rename(columns={"value": col}).set_index(["ts", "engine"]))
        lines = pd.concat(frames, axis=1).reset_index().rename(columns={"engine": "series"})
        # the instant values close each line at "now" (a young series has no range samples yet)
        now = self.usage_now(f, series)
        if not now.empty:
            lines = pd.concat([lines, now[["ts", "series", "prompt_tokens", "threshold_tokens", "window_tokens"]]],
                              ignore_index=True).sort_values(["series", "ts"])
        lines = lines[lines["series"].isin(series)] if len(series) else lines
        w = self._window(f)
        mk = self._matrix(increase_sum(COMPRESSIONS, ["engine", "outcome"], sel, w) + " > 0", f,
                          ["engine", "outcome"])
        marks = pd.DataFrame({"ts": mk["ts"], "series": mk["engine"], "outcome": mk["outcome"],
                              "tokens_before": None, "tokens_after": None, "duration_s": None})
        return (lines[["ts", "series", "prompt_tokens", "threshold_tokens", "window_tokens"]].reset_index(drop=True),
                marks.reset_index(drop=True))

    def usage_now(self, f: Filters, series: Sequence[str]) -> pd.DataFrame:
        sel = self._sel(f)
        cols = {}
        for col, metric in (("prompt_tokens", PROMPT), ("threshold_tokens", THRESHOLD), ("window_tokens", WINDOW),
                            ("ratio", USAGE_RATIO)):
            cols[col] = self._vec(agg("max", ["engine"], over("last_over_time", metric, sel, _dur(f.span))), f,
                                  ["engine"])
        engines = sorted({k[0] for c in cols.values() for k in c} - {None})
        rows = []
        for e in engines:
            if series and e not in series:
                continue
            p, t, w = (cols[c].get((e,)) for c in ("prompt_tokens", "threshold_tokens", "window_tokens"))
            ratio = cols["ratio"].get((e,))
            if ratio is None and p is not None and w:
                ratio = p / w
            rows.append((e, e, self._at(f), p, t, w, ratio))
        return pd.DataFrame(rows, columns=["series", "engine", "ts", "prompt_tokens", "threshold_tokens",
                                           "window_tokens", "ratio"])

    def sessions(self, f: Filters) -> pd.DataFrame:  # noqa: ARG002 (the Source protocol's signature)
        return pd.DataFrame(columns=SESSION_COLUMNS)          # session ids are never metric labels

    def incidents(self, f: Filters, limit: int) -> pd.DataFrame:  # noqa: ARG002
        return pd.DataFrame(columns=INCIDENT_COLUMNS)         # counters, not events

    def decisions(self, f: Filters) -> Tuple[pd.DataFrame, pd.DataFrame]:
        sel, rng = self._sel(f), _dur(f.span)
        checks = self._vec(increase_sum(_metric("compression_checks"), ["engine", "hook", "decision"], sel, rng), f,
                           ["engine", "hook", "decision"])
        dec = pd.DataFrame([(*k, int(round(v))) for k, v in sorted(checks.items()) if round(v) > 0],
                           columns=DECISION_COLUMNS)
        blocked = self._vec(gauge("sum", _metric("compression_blocked"), ["engine", "reason"], sel), f,
                            ["engine", "reason"])
        return dec, pd.DataFrame([(*k, int(v)) for k, v in sorted(blocked.items()) if v > 0], columns=BLOCKED_COLUMNS)

    def prunes(self, f: Filters) -> pd.DataFrame:
        sel, rng = self._sel(f), _dur(f.span)
        counts = self._vec(increase_sum(PRUNES, ["engine", "outcome"], sel, rng), f, ["engine", "outcome"])
        results = self._vec(increase_sum(PRUNE_RESULTS, ["engine"], sel, rng), f, ["engine"])
        reclaimed = self._vec(increase_sum(PRUNE_RECLAIMED, ["engine"], sel, rng), f, ["engine"])
        rows = []
        for e in sorted({k[0] for k in counts} - {None}):
            c = [_count(counts.get((e, o))) for o in vocab.PRUNE_OUTCOMES]
            if any(c):
                rows.append((e, *c, sum(c), _count(results.get((e,))), _count(reclaimed.get((e,)))))
        return pd.DataFrame(rows, columns=PRUNE_COLUMNS)

    def turns(self, f: Filters) -> pd.DataFrame:
        sel, rng = self._sel(f), _dur(f.span)
        by = ["engine", "outcome", "exit_reason"]
        counts = self._vec(increase_sum(TURNS, by, sel, rng), f, by)
        rows = [(*k, _count(n), None) for k, n in sorted(counts.items(), key=lambda kv: (kv[0][0], -kv[1], kv[0]))
                if k[0] is not None and _count(n)]      # provider calls per turn: a histogram per engine only
        return pd.DataFrame(rows, columns=TURN_COLUMNS)

    def clones(self, f: Filters) -> pd.DataFrame:
        sel, rng = self._sel(f), _dur(f.span)
        counts = self._vec(increase_sum(CLONES, ["engine", "outcome"], sel, rng), f, ["engine", "outcome"])
        rows = []
        for e in sorted({k[0] for k in counts} - {None}):
            c = [_count(counts.get((e, o))) for o in vocab.CLONE_OUTCOMES]
            if any(c):
                rows.append((e, *c, sum(c)))
        return pd.DataFrame(rows, columns=CLONE_COLUMNS)

    def timeline(self, f: Filters, limit: int) -> pd.DataFrame:  # noqa: ARG002
        return pd.DataFrame(columns=TIMELINE_COLUMNS)         # session ids are never metric labels

    def content(self, f: Filters, limit: int) -> pd.DataFrame:  # noqa: ARG002
        return pd.DataFrame(columns=CONTENT_COLUMNS)          # message text is never exported

    def compressions(self, f: Filters) -> Tuple[pd.DataFrame, pd.DataFrame]:
        sel, rng = self._sel(f), _dur(f.span)
        counts = self._vec(increase_sum(COMPRESSIONS, ["engine", "outcome"], sel, rng), f, ["engine", "outcome"])
        kinds = self._vec(increase_sum(TIMEOUTS, ["engine", "kind"], sel, rng), f, ["engine", "kind"])
        failed = self._vec(increase_sum(SUMMARY_FAILURES, ["engine", "kind"], sel, rng), f, ["engine", "kind"])
        q = {p: self._vec(quantile(p, COMPRESSION_DURATION, ["engine"], sel, rng, fn="increase"), f, ["engine"])
             for p in (0.5, 0.95, 0.99)}
        tsum, tcnt = (self._vec(increase_sum(COMPRESSION_TOKENS, ["engine", "stage"], sel, rng, suffix), f,
                                ["engine", "stage"]) for suffix in ("_sum", "_count"))
        engines = sorted(({k[0] for k in counts} | {k[0] for k in kinds}) - {None})
        late_kinds = (vocab.HOST_REPORTED, vocab.LATE_COMPLETION)
        rows = []
        for e in engines:
            c = {o: _count(counts.get((e, o))) for o in vocab.COMPRESS_OUTCOMES}
            if not any(c.values()) and not any(_count(kinds.get((e, k))) for k in late_kinds):
                continue
            b_sum, a_sum = tsum.get((e, BEFORE)), tsum.get((e, AFTER))
            b_n, a_n = tcnt.get((e, BEFORE)), tcnt.get((e, AFTER))
            rows.append((e, *(c[o] for o in vocab.COMPRESS_OUTCOMES), *(_count(kinds.get((e, k))) for k in late_kinds),
                         *(_count(failed.get((e, k))) for k in vocab.SUMMARY_FAILURE_KINDS), sum(c.values()),
                         q[0.5].get((e,)), q[0.95].get((e,)), q[0.99].get((e,)),
                         b_sum / b_n if b_sum is not None and b_n else None,
                         a_sum / a_n if a_sum is not None and a_n else None,
                         a_sum / b_sum if a_sum is not None and b_sum else None))
        summary = pd.DataFrame(rows, columns=["engine", *vocab.COMPRESS_OUTCOMES, *late_kinds,
                                              *vocab.SUMMARY_FAILURE_KINDS, "total", "p50_s", "p95_s", "p99_s",
                                              "tokens_before_avg", "tokens_after_avg", "ratio"])
        m = self._matrix(increase_sum(COMPRESSIONS, ["engine", "outcome"], sel, _dur(f.step)), f,
                         ["engine", "outcome"], shift=f.step)
        m = m[m["value"] > 0.05].rename(columns={"value": "count"})
        return summary, m[["ts", "engine", "outcome", "count"]].reset_index(drop=True)

    def selections(self, f: Filters) -> Tuple[pd.DataFrame, pd.DataFrame]:
        sel, rng = self._sel(f), _dur(f.span)
        counts = self._vec(increase_sum(SELECTIONS, ["engine", "result"], sel, rng), f, ["engine", "result"])
        lost = self._vec(increase_sum(CACHE_LOST, ["engine"], sel, rng), f, ["engine"])
        rows = []
        for e in sorted({k[0] for k in counts} - {None}):
            c = {r: _count(counts.get((e, r))) for r in vocab.SELECTION_RESULTS}
            total = sum(c.values())
            if not total:
                continue
            rows.append((e, *(c[r] for r in vocab.SELECTION_RESULTS), total, c[vocab.CHANGED_SELECTION] / total,
                         int(round(lost.get((e,), 0.0)))))
        summary = pd.DataFrame(rows, columns=["engine", *vocab.SELECTION_RESULTS, "total", "churn",
                                              "cache_lost_tokens"])
        m = self._matrix(increase_sum(SELECTIONS, ["engine", "result"], sel, _dur(f.step)), f,
                         ["engine", "result"], shift=f.step)
        m = m[m["value"] > 0.05].rename(columns={"value": "count"})
        return summary, m[["ts", "engine", "result", "count"]].reset_index(drop=True)

    def latency(self, f: Filters) -> Tuple[pd.DataFrame, pd.DataFrame]:
        sel, rng = self._sel(f), _dur(f.span)
        by = ["engine", "hook"]
        calls = self._vec(increase_sum(HOOK_CALLS, by, sel, rng), f, by)
        errors = self._vec(increase_sum(HOOK_CALLS, by, self._sel(f, outcome=vocab.CALL_ERROR), rng), f, by)
        q = {p: self._vec(quantile(p, HOOK_DURATION, by, sel, rng, fn="increase"), f, by) for p in (0.5, 0.95, 0.99)}
        span = max(1.0, self._at(f) - f.start)
        rows = []
        for key in sorted(k for k in calls if k[0] is not None):
            n = _count(calls[key])
            if not n:
                continue
            rows.append((*key, n, calls[key] / span, _count(errors.get(key)),
                         *(None if q[p].get(key) is None else q[p][key] * 1000.0 for p in (0.5, 0.95, 0.99))))
        table = pd.DataFrame(rows, columns=["engine", "hook", "calls", "calls_per_s", "errors", "p50_ms", "p95_ms",
                                            "p99_ms"])
        m = self._matrix(rate_sum(HOOK_CALLS, by, sel, self._window(f)), f, by)
        m = m.rename(columns={"value": "calls_per_s"})
        return table, m[["ts", "engine", "hook", "calls_per_s"]].reset_index(drop=True)

    def incident_counts(self, f: Filters) -> pd.DataFrame:
        """Fail-opens per engine, hook and reason; timeouts per engine and kind (the kind is the
        store's event); summary failures per engine, kind and cause (reason)."""
        sel, rng = self._sel(f), _dur(f.span)
        rows = []
        for (e, h, r), n in self._vec(increase_sum(FAIL_OPEN, ["engine", "hook", "reason"], sel, rng), f,
                                      ["engine", "hook", "reason"]).items():
            if _count(n):
                rows.append((e, h, vocab.FAIL_OPEN, None, r, _count(n)))
        for (e, k), n in self._vec(increase_sum(TIMEOUTS, ["engine", "kind"], sel, rng), f,
                                   ["engine", "kind"]).items():
            if _count(n):
                rows.append((e, HOOK_COMPRESS, k, None, None, _count(n)))
        for (e, k, c), n in self._vec(increase_sum(SUMMARY_FAILURES, ["engine", "kind", "cause"], sel, rng), f,
                                      ["engine", "kind", "cause"]).items():
            if _count(n):
                rows.append((e, HOOK_COMPRESS, vocab.EVENT_SUMMARY_FAILURE, k, c, _count(n)))
        df = pd.DataFrame(rows, columns=INCIDENT_COUNT_COLUMNS)
        return df.sort_values("count", ascending=False).reset_index(drop=True)

    def alerts(self, f: Filters, now: float) -> pd.DataFrame:  # noqa: ARG002 (Prometheus evaluates at its now)
        data = self.http.get("/api/v1/alerts") or {}
        rows = []
        for a in data.get("alerts", []) if isinstance(data, dict) else []:
            labels, ann = a.get("labels", {}), a.get("annotations", {})
            engine = labels.get("engine")
            if f.engines and engine and engine not in f.engines:
                continue
            since = None
            if a.get("activeAt"):
                try:
                    since = datetime.fromisoformat(str(a["activeAt"]).replace("Z", "+00:00")).timestamp()
                except ValueError:
                    since = None
            rows.append((labels.get("alertname", "?"), labels.get("severity", ""), a.get("state", ""), engine,
                         ann.get("summary") or ann.get("description") or "", since))
        return pd.DataFrame(rows, columns=ALERT_COLUMNS)

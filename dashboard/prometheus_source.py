"""Prometheus as a dashboard source: PromQL over the catalogue's metric names.

Uses only the HTTP API (``/api/v1/query``, ``/api/v1/query_range``,
``/api/v1/alerts``) through urllib. What it cannot show, and why:

* per-session views: session ids are never metric labels (the contract);
  the usage view shows each engine's gauges instead;
* individual timeout / fail-open / summary-failure events: Prometheus has
  counters, so the incident view shows totals per engine, hook and reason;
* message text: never exported.

Counts over the range are ``increase()`` (extrapolated, rounded); percentiles
are ``histogram_quantile()`` over the histogram buckets. The query shapes come
from ``observed_engine.contract.promql``, shared with the Grafana board generator.
"""

from __future__ import annotations

import json
import math
import time
import urllib.error
import urllib.parse
import urllib.request
from datetime import datetime
from typing import Dict, List, Optional, Sequence, Tuple

import pandas as pd

from dashboard.sources import (
    CAP_ALERTS, COMPRESS_OUTCOMES, SELECTION_RESULTS, SUMMARY_EVENTS, SUMMARY_FAILURE_EVENTS, SUMMARY_KINDS,
    Filters, Source, SourceError, Status,
)

from observed_engine.contract.catalogue import BY_KEY
from observed_engine.contract.promql import agg, eq, gauge, increase_sum, one_of, over, quantile, rate_sum


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

METRICS_USED = (HOOK_CALLS, HOOK_DURATION + "_bucket", PROMPT, THRESHOLD, WINDOW, USAGE_RATIO, COMPRESSIONS,
                COMPRESSION_DURATION + "_bucket", COMPRESSION_TOKENS + "_sum", COMPRESSION_TOKENS + "_count",
                TIMEOUTS, SUMMARY_FAILURES, FAIL_OPEN, SELECTIONS, CACHE_LOST)

ANY_SERIES = '{__name__=~"hermes_context_.+"}'
LOOKBACK_ALL = 14 * 86400


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


class PrometheusSource(Source):
    kind = "prometheus"
    capabilities = frozenset({CAP_ALERTS})

    RETRY_AFTER_S = 10.0    # after a connection failure, answer "unreachable" at once for this long

    def __init__(self, url: str, timeout: float = 5.0) -> None:
        self.url = (url or "").rstrip("/")
        self.label = self.url
        self.timeout = timeout
        self.requests = 0
        self._down_until = 0.0
        self._down_error = ""

    # -- HTTP ----------------------------------------------------------------

    def _get(self, path: str, params: Optional[dict] = None):
        if not self.url:
            raise SourceError("no Prometheus URL configured (OBSERVED_PROMETHEUS_URL)")
        q = ("?" + urllib.parse.urlencode(params)) if params else ""
        if time.monotonic() < self._down_until:       # a dead server must not stall every refresh
            raise SourceError(self._down_error)
        self.requests += 1
        try:
            with urllib.request.urlopen(self.url + path + q, timeout=self.timeout) as resp:
                body = json.loads(resp.read().decode("utf-8"))
        except urllib.error.HTTPError as exc:
            try:
                body = json.loads(exc.read().decode("utf-8"))
                raise SourceError(f"Prometheus {path}: {body.get('error', exc)}") from exc
            except (ValueError, AttributeError):
                raise SourceError(f"Prometheus {path}: HTTP {exc.code}") from exc
        except (urllib.error.URLError, OSError, ValueError) as exc:
            self._down_error = f"cannot reach Prometheus at {self.url}: {getattr(exc, 'reason', exc)}"
            if not isinstance(exc, ValueError):
                self._down_until = time.monotonic() + self.RETRY_AFTER_S
            raise SourceError(self._down_error) from exc
        if body.get("status") != "success":
            raise SourceError(f"Prometheus {path}: {body.get('error', 'query failed')}")
        return body.get("data")

    def query(self, promql: str, at: Optional[float] = None) -> List[dict]:
        params = {"query": promql}
        if at is not None:
            params["time"] = f"{at:.3f}"
        data = self._get("/api/v1/query", params)
        return data.get("result", []) if isinstance(data, dict) else []

    def query_range(self, promql: str, start: float, end: float, step: float) -> List[dict]:
        data = self._get("/api/v1/query_range", {"query": promql, "start": f"{start:.3f}", "end": f"{end:.3f}",
                                                 "step": f"{max(1.0, step):g}"})
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
            key = tuple(r.get("metric", {}).get(l) for l in labels)
            v = _num(r.get("value", [None, None])[1])
            if v is not None:
                out[key] = v
        return out

    def _matrix(self, promql: str, f: Filters, labels: Sequence[str], shift: float = 0.0) -> pd.DataFrame:
        rows = []
        for r in self.query_range(promql, f.start + f.step, self._at(f), f.step):
            key = tuple(r.get("metric", {}).get(l) for l in labels)
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
        rows = []
        for e in engines:
            c = {o: _count(counts.get((e, o))) for o in COMPRESS_OUTCOMES}
            if not any(c.values()) and not any(_count(kinds.get((e, k))) for k in ("host_reported",
                                                                                   "late_completion")):
                continue
            b_sum, a_sum = tsum.get((e, "before")), tsum.get((e, "after"))
            b_n, a_n = tcnt.get((e, "before")), tcnt.get((e, "after"))
            rows.append((e, *(c[o] for o in COMPRESS_OUTCOMES), _count(kinds.get((e, "host_reported"))),
                         _count(kinds.get((e, "late_completion"))),
                         *(_count(failed.get((e, k))) for k in SUMMARY_KINDS), sum(c.values()),
                         q[0.5].get((e,)), q[0.95].get((e,)), q[0.99].get((e,)),
                         b_sum / b_n if b_sum is not None and b_n else None,
                         a_sum / a_n if a_sum is not None and a_n else None,
                         a_sum / b_sum if a_sum is not None and b_sum else None))
        summary = pd.DataFrame(rows, columns=["engine", *COMPRESS_OUTCOMES, "host_reported", "late_completion",
                                              *SUMMARY_FAILURE_EVENTS, "total", "p50_s", "p95_s", "p99_s",
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
            c = {r: _count(counts.get((e, r))) for r in SELECTION_RESULTS}
            total = sum(c.values())
            if not total:
                continue
            rows.append((e, *(c[r] for r in SELECTION_RESULTS), total, c["changed_selection"] / total,
                         int(round(lost.get((e,), 0.0)))))
        summary = pd.DataFrame(rows, columns=["engine", *SELECTION_RESULTS, "total", "churn", "cache_lost_tokens"])
        m = self._matrix(increase_sum(SELECTIONS, ["engine", "result"], sel, _dur(f.step)), f,
                         ["engine", "result"], shift=f.step)
        m = m[m["value"] > 0.05].rename(columns={"value": "count"})
        return summary, m[["ts", "engine", "result", "count"]].reset_index(drop=True)

    def latency(self, f: Filters) -> Tuple[pd.DataFrame, pd.DataFrame]:
        sel, rng = self._sel(f), _dur(f.span)
        by = ["engine", "hook"]
        calls = self._vec(increase_sum(HOOK_CALLS, by, sel, rng), f, by)
        errors = self._vec(increase_sum(HOOK_CALLS, by, self._sel(f, outcome="error"), rng), f, by)
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
        sel, rng = self._sel(f), _dur(f.span)
        rows = []
        for (e, h, r), v in self._vec(increase_sum(FAIL_OPEN, ["engine", "hook", "reason"], sel, rng), f,
                                      ["engine", "hook", "reason"]).items():
            if _count(v):
                rows.append((e, h, "fail_open", r, _count(v)))
        for (e, k), v in self._vec(increase_sum(TIMEOUTS, ["engine", "kind"], sel, rng), f,
                                   ["engine", "kind"]).items():
            if _count(v):
                rows.append((e, "compress", k, None, _count(v)))
        for (e, k, c), v in self._vec(increase_sum(SUMMARY_FAILURES, ["engine", "kind", "cause"], sel, rng), f,
                                      ["engine", "kind", "cause"]).items():
            if _count(v):
                rows.append((e, "compress", SUMMARY_EVENTS.get(k, f"summary_{k}"), c, _count(v)))
        df = pd.DataFrame(rows, columns=["engine", "hook", "event", "reason", "count"])
        return df.sort_values("count", ascending=False).reset_index(drop=True)

    def alerts(self, f: Filters, now: float) -> pd.DataFrame:
        data = self._get("/api/v1/alerts") or {}
        rows = []
        for a in data.get("alerts", []):
            labels, ann = a.get("labels", {}), a.get("annotations", {})
            engine = labels.get("engine")
            if f.engines and engine and engine not in f.engines:
                continue
            since = None
            if a.get("activeAt"):
                try:
                    since = datetime.fromisoformat(a["activeAt"].replace("Z", "+00:00")).timestamp()
                except ValueError:
                    since = None
            rows.append((labels.get("alertname", "?"), labels.get("severity", ""), a.get("state", ""), engine,
                         ann.get("summary") or ann.get("description") or "", since))
        return pd.DataFrame(rows, columns=["alert", "severity", "state", "engine", "detail", "since"])

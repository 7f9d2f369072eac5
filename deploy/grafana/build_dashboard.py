#!/usr/bin/env python3
"""Generate deploy/grafana/dashboards/hermes-context-engine.json.

    python deploy/grafana/build_dashboard.py          # rewrite the JSON
    python deploy/grafana/build_dashboard.py --check  # exit 1 if the committed JSON is stale

The board is built from small helpers so every query uses the same template-variable selector and
every panel the same datasource variable. Metric names come from observed_engine/contract/catalogue.py
and the query shapes from observed_engine/contract/promql.py, which the Streamlit dashboard's Prometheus source
uses too (tests/deploy/test_static.py checks the generated exprs against the catalogue).
Standard library only, so it runs without the project installed: the checkout's root goes on
sys.path and the contract modules are imported from it (the package root is lazy, so this imports
nothing of the engine side)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parent / "dashboards" / "hermes-context-engine.json"
REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from observed_engine.contract import catalogue, promql  # noqa: E402  (after the path above)

agg, gauge, increase_sum, quantile, rate_sum, series = (
    promql.agg, promql.gauge, promql.increase_sum, promql.quantile, promql.rate_sum, promql.series)


def metric(key: str) -> str:
    """The Prometheus name of a catalogue metric."""
    return catalogue.BY_KEY[key].prom_name


DS = {"type": "prometheus", "uid": "${datasource}"}
TEMPO_DS = {"type": "tempo", "uid": "tempo"}
# Selector for series with an engine label, and for the wrapper's own series (no engine label).
JOB_SEL = 'job=~"$job"'
PROC_SEL = JOB_SEL + ', instance=~"$instance"'
SEL = PROC_SEL + ', engine=~"$engine"'
HOOK_SEL = SEL + ', hook=~"$hook"'
RI = "$__rate_interval"
PER_ENGINE = ["job", "instance", "engine"]      # gauges: one line per process and engine
QUANTILES = (("p50", 0.5), ("p95", 0.95), ("p99", 0.99))


class Board:
    def __init__(self) -> None:
        self.panels: list = []
        self._id = 0
        self._y = 0          # top of the current row of panels
        self._x = 0
        self._row_h = 0

    def next_id(self) -> int:
        self._id += 1
        return self._id

    def row(self, title: str) -> None:
        self._newline()
        self.panels.append({
            "type": "row", "id": self.next_id(), "title": title, "collapsed": False, "panels": [],
            "gridPos": {"h": 1, "w": 24, "x": 0, "y": self._y},
        })
        self._y += 1

    def _newline(self) -> None:
        if self._x:
            self._y += self._row_h
            self._x = 0
            self._row_h = 0

    def add(self, panel: dict, w: int = 12, h: int = 8) -> None:
        if self._x + w > 24:
            self._newline()
        panel["id"] = self.next_id()
        panel["gridPos"] = {"h": h, "w": w, "x": self._x, "y": self._y}
        self.panels.append(panel)
        self._x += w
        self._row_h = max(self._row_h, h)


def target(expr: str, legend: str, ref: str, **extra) -> dict:
    t = {"datasource": DS, "refId": ref, "expr": expr, "legendFormat": legend, "range": True}
    t.update(extra)
    return t


def refs(exprs):
    """[(expr, legend), ...] -> targets with refIds A, B, C..."""
    return [target(e, legend, chr(ord("A") + i)) for i, (e, legend) in enumerate(exprs)]


def timeseries(title: str, description: str, exprs, unit: str = "short", *, stack: bool = False,
               bars: bool = False, percent: bool = False, min_zero: bool = True,
               thresholds=None, overrides=None) -> dict:
    custom = {
        "drawStyle": "bars" if bars else "line",
        "lineWidth": 1,
        "fillOpacity": 60 if bars else (20 if stack else 5),
        "showPoints": "never",
        "spanNulls": False,
        "stacking": {"mode": "percent" if percent else ("normal" if stack else "none"), "group": "A"},
    }
    if thresholds:
        custom["thresholdsStyle"] = {"mode": "dashed"}
    defaults = {"unit": unit, "custom": custom}
    if min_zero:
        defaults["min"] = 0
    if thresholds:
        defaults["thresholds"] = {"mode": "absolute", "steps": thresholds}
    return {
        "type": "timeseries", "title": title, "description": description, "datasource": DS,
        "targets": refs(exprs),
        "fieldConfig": {"defaults": defaults, "overrides": overrides or []},
        "options": {
            "legend": {"displayMode": "table", "placement": "bottom", "calcs": ["lastNotNull", "max"]},
            "tooltip": {"mode": "multi", "sort": "desc"},
        },
    }


def stat(title: str, description: str, expr: str, unit: str = "short", thresholds=None) -> dict:
    return {
        "type": "stat", "title": title, "description": description, "datasource": DS,
        "targets": [target(expr, "", "A", instant=True, range=False)],
        "fieldConfig": {"defaults": {
            "unit": unit, "decimals": 0,
            "thresholds": {"mode": "absolute", "steps": thresholds or [{"color": "green", "value": None}]},
        }, "overrides": []},
        "options": {"colorMode": "background", "graphMode": "none", "justifyMode": "auto",
                    "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                    "textMode": "value"},
    }


def quantiles(key: str, by: str, sel: str, label: str):
    return [(quantile(q, metric(key), [by], sel, RI), f"{name} {label}") for name, q in QUANTILES]


def red_above(v):
    return [{"color": "green", "value": None}, {"color": "red", "value": v}]


def query_var(name: str, label: str, query: str) -> dict:
    return {
        "type": "query", "name": name, "label": label, "datasource": DS,
        "query": {"query": query, "refId": f"{name}-var", "qryType": 1},
        "definition": query, "refresh": 2, "sort": 1,
        "multi": True, "includeAll": True, "allValue": ".*",
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        "options": [], "hide": 0, "regex": "",
    }


def build() -> dict:
    b = Board()

    b.row("Overview")
    b.add(stat("Processes reporting", "Hermes processes (job/instance) with an observed context engine.",
               agg("count", [], agg("count", ["job", "instance"], series(metric("hook_calls"), SEL)))), w=4, h=4)
    b.add(stat("Compressions (1h)", "compress() calls in the last hour, all outcomes.",
               increase_sum(metric("compressions"), [], SEL, "1h")), w=5, h=4)
    b.add(stat("Timeouts (1h)", "Compressions past their deadline in the last hour (alert: HermesContextCompressionTimeout).",
               increase_sum(metric("compression_timeouts"), [], SEL, "1h"),
               thresholds=red_above(1)), w=5, h=4)
    b.add(stat("Fail-opens (1h)", "Hook failures the host fell open on in the last hour (alert: HermesContextEngineFailOpen).",
               increase_sum(metric("fail_open"), [], SEL, "1h"),
               thresholds=red_above(1)), w=5, h=4)
    b.add(stat("Summary failures (1h)",
               "compress() calls in the last hour that returned although the summary model failed: a fallback "
               "summary (middle turns dropped without a real summary) or an abort (context still full). "
               "Kind and cause in the Compression row (alert: HermesContextSummaryFailing).",
               increase_sum(metric("summary_failures"), [], SEL, "1h"),
               thresholds=red_above(1)), w=5, h=4)

    b.row("Context window")
    b.add(timeseries(
        "Context usage vs threshold & window",
        "Last prompt tokens against the compression threshold and the model's context window. "
        "Prompt above threshold without compressions: check compression.enabled / compression.threshold.",
        [(gauge("max", metric("prompt_tokens"), PER_ENGINE, SEL), "prompt {{engine}} {{instance}}"),
         (gauge("max", metric("threshold_tokens"), PER_ENGINE, SEL), "threshold {{engine}} {{instance}}"),
         (gauge("max", metric("window_tokens"), PER_ENGINE, SEL), "window {{engine}} {{instance}}")],
        unit="short"))
    b.add(timeseries(
        "Usage ratio (prompt / window)",
        "Above 90 % for 5 minutes fires HermesContextNearWindow. The dashed line is the alert threshold; "
        "'threshold' is the engine's compression point as a fraction of the window.",
        [(gauge("max", metric("usage_ratio"), PER_ENGINE, SEL), "usage {{engine}} {{instance}}"),
         (gauge("max", metric("threshold_tokens"), PER_ENGINE, SEL)
          + " / " + agg("max", PER_ENGINE, series(metric("window_tokens"), SEL) + " > 0"),
          "threshold {{engine}} {{instance}}")],
        unit="percentunit", thresholds=[{"color": "green", "value": None}, {"color": "red", "value": 0.9}]))

    b.row("Compression")
    b.add(timeseries(
        "Compression rate by outcome",
        "compress() results per second: compressed, noop, error, timeout (errors: HermesContextCompressionErrors).",
        [(rate_sum(metric("compressions"), ["engine", "outcome"], SEL, RI), "{{engine}} {{outcome}}")],
        unit="ops", stack=True))
    b.add(timeseries(
        "Compression latency p50 / p95 / p99",
        "From the compress() latency histogram (buckets up to 600 s). Compare p99 with the deadline below.",
        quantiles("compression_duration", "engine", SEL, "{{engine}}"),
        unit="s"))
    b.add(timeseries(
        "Tokens before / after compression",
        "Mean tokens going into and out of compress(), and the mean size after/before.",
        [(rate_sum(metric("compression_tokens"), ["engine", "stage"], SEL, RI, "_sum")
          + " / " + rate_sum(metric("compression_tokens"), ["engine", "stage"], SEL, RI, "_count"),
          "{{stage}} {{engine}}"),
         (rate_sum(metric("compression_tokens"), ["engine"], SEL + ', stage="after"', RI, "_sum")
          + " / " + rate_sum(metric("compression_tokens"), ["engine"], SEL + ', stage="before"', RI, "_sum"),
          "after/before {{engine}}")],
        unit="short",
        overrides=[{"matcher": {"id": "byRegexp", "options": "after/before.*"},
                    "properties": [{"id": "unit", "value": "percentunit"},
                                   {"id": "custom.axisPlacement", "value": "right"}]}]))
    b.add(timeseries(
        "Compressions in flight / oldest age vs deadline",
        "Oldest running compress() against its deadline; above it fires HermesContextCompressionStuck.",
        [(gauge("max", metric("compression_oldest_age"), PER_ENGINE, SEL), "oldest age {{engine}} {{instance}}"),
         (gauge("max", metric("compression_deadline"), PER_ENGINE, SEL), "deadline {{engine}} {{instance}}"),
         (gauge("sum", metric("compression_in_flight"), PER_ENGINE, SEL), "in flight {{engine}} {{instance}}")],
        unit="s",
        overrides=[
            {"matcher": {"id": "byRegexp", "options": "in flight.*"},
             "properties": [{"id": "unit", "value": "short"}, {"id": "custom.axisPlacement", "value": "right"},
                            {"id": "custom.drawStyle", "value": "bars"}]},
            {"matcher": {"id": "byRegexp", "options": "deadline.*"},
             "properties": [{"id": "custom.lineStyle", "value": {"fill": "dash", "dash": [10, 10]}},
                            {"id": "color", "value": {"mode": "fixed", "fixedColor": "red"}}]},
        ]))
    b.add(timeseries(
        "Timeouts by kind",
        "deadline_exceeded: still running past the deadline; late_completion: finished late; "
        "host_reported: the host gave up. Events per interval.",
        [(increase_sum(metric("compression_timeouts"), ["engine", "kind"], SEL, RI), "{{engine}} {{kind}}")],
        unit="short", bars=True, stack=True), w=8)
    b.add(timeseries(
        "Summary failures by kind / cause",
        "compress() calls that returned although the summary model failed, as the engine reports it (the built-in "
        "compressor does not raise then: the outcome panels do not show it). kind fallback_summary: the "
        "middle turns were dropped without a real summary; aborted: the messages were kept, the context stays "
        "full. cause auth (401/402/403, quota, missing key: does not heal), network, other. Calls per interval "
        "(alert: HermesContextSummaryFailing).",
        [(increase_sum(metric("summary_failures"), ["engine", "kind", "cause"], SEL, RI),
          "{{engine}} {{kind}} {{cause}}")],
        unit="short", bars=True, stack=True), w=8)
    b.add(timeseries(
        "Fail-opens by hook / reason",
        "Hook calls the host fell open on. exception: the inner engine raised; invalid_return: wrong return type. "
        "Events per interval.",
        [(increase_sum(metric("fail_open"), ["engine", "hook", "reason"], SEL, RI), "{{engine}} {{hook}} {{reason}}")],
        unit="short", bars=True, stack=True), w=8)

    b.row("Compression decisions, blocks and cost")
    b.add(timeseries(
        "Compression decisions by hook / decision",
        "What the host asked and what the engine answered: should_compress* compress / skip, "
        "should_defer_preflight_to_real_usage defer / estimate. Decisions per interval; the store rows "
        "(checked_tokens, threshold_tokens, reason) say why each one went that way.",
        [(increase_sum(metric("compression_checks"), ["engine", "hook", "decision"], SEL, RI),
          "{{engine}} {{hook}} {{decision}}")],
        unit="short", bars=True, stack=True), w=8)
    b.add(timeseries(
        "Automatic compression blocked, by reason",
        "1 while the engine's own state blocks automatic compression: summary_cooldown (the summary model "
        "failed), ineffective_compression / fallback_streak (the built-in's breakers), attempts_exhausted, "
        "other. Blocked above 80 % of the window fires HermesContextCompressionBlocked.",
        [(gauge("max", metric("compression_blocked"), PER_ENGINE + ["reason"], SEL),
          "{{engine}} {{reason}} {{instance}}")],
        unit="short"), w=8)
    b.add(timeseries(
        "Summary model tokens / prompt-cache rewrite after compaction",
        "Tokens the summary model used (Hermes' own usage record of task 'compression'), per token type, and "
        "the prompt tokens the first response after a compaction had to write into the cache again. Per interval.",
        [(increase_sum(metric("summary_tokens"), ["engine", "token_type"], SEL, RI),
          "summary {{token_type}} {{engine}}"),
         (increase_sum(metric("cache_rewrite_tokens"), ["engine"], SEL, RI), "cache rewrite {{engine}}")],
        unit="short", bars=True), w=8)
    b.add(timeseries(
        "Prompt-cache read ratio",
        "cache_read / prompt tokens of the responses (usage passed to update_from_response); it drops "
        "after each compaction (new prefix) and climbs back as the cache warms.",
        [(rate_sum(metric("usage_tokens"), ["engine"], SEL + ', token_type="cache_read"', RI)
          + " / " + rate_sum(metric("usage_tokens"), ["engine"], SEL + ', token_type="prompt"', RI),
          "cache read {{engine}}")],
        unit="percentunit"), w=12)
    b.add(timeseries(
        "Threshold vs window (dead zone)",
        "The compression threshold as a fraction of the window; at or above 1 the engine can never compress "
        "(HermesContextThresholdDeadZone).",
        [(gauge("max", metric("threshold_tokens"), PER_ENGINE, SEL)
          + " / " + agg("max", PER_ENGINE, series(metric("window_tokens"), SEL) + " > 0"),
          "threshold/window {{engine}} {{instance}}")],
        unit="percentunit", thresholds=[{"color": "green", "value": None}, {"color": "red", "value": 1.0}]), w=12)

    b.row("select_context")
    b.add(timeseries(
        "select_context outcome mix",
        "Share of select_context results: unchanged, same_selection, changed_selection, fail_open.",
        [(rate_sum(metric("selections"), ["result"], SEL, RI), "{{result}}")],
        unit="percentunit", stack=True, percent=True), w=8)
    b.add(timeseries(
        "Selection churn rate",
        "changed_selection / all selections: each change invalidates the prompt-cache prefix.",
        [(rate_sum(metric("selections"), ["engine"], SEL + ', result="changed_selection"', RI)
          + " / " + rate_sum(metric("selections"), ["engine"], SEL, RI), "churn {{engine}}")],
        unit="percentunit"), w=8)
    b.add(timeseries(
        "Prompt-cache tokens lost",
        "Prompt-cache prefix tokens invalidated by changed selections, per second.",
        [(rate_sum(metric("cache_prefix_lost"), ["engine"], SEL, RI), "{{engine}}")],
        unit="short"), w=8)

    b.row("Hooks")
    b.add(timeseries(
        "Hook latency p50 / p95 / p99",
        "Hook latency as the host sees it, per hook (filter with the hook variable).",
        quantiles("hook_duration", "hook", HOOK_SEL, "{{hook}}"),
        unit="s"))
    b.add(timeseries(
        "Hook calls/s by hook",
        "Every hook call, by hook and outcome (ok, error).",
        [(rate_sum(metric("hook_calls"), ["hook", "outcome"], HOOK_SEL, RI), "{{hook}} {{outcome}}")],
        unit="ops"))

    b.row("Usage and telemetry health")
    b.add(timeseries(
        "Tokens from responses by type",
        "Usage reported to update_from_response: prompt, completion, cache_read, cache_write, reasoning.",
        [(rate_sum(metric("usage_tokens"), ["token_type"], SEL, RI), "{{token_type}}")],
        unit="short", stack=True))
    b.add(timeseries(
        "Telemetry errors / drops",
        "observed-engine's own swallowed failures (by component) and items dropped from full queues "
        "(by signal); non-zero fires HermesObservedTelemetryErrors. The agent is not affected.",
        [(increase_sum(metric("telemetry_errors"), ["job", "instance", "component"], PROC_SEL, RI),
          "error {{component}} {{instance}}"),
         (increase_sum(metric("telemetry_dropped"), ["job", "instance", "signal"], PROC_SEL, RI),
          "dropped {{signal}} {{instance}}")],
        unit="short", bars=True))

    b.row("Traces")
    b.add({
        "type": "table", "title": "Failed compress() traces (Tempo)",
        "description": "Recent context_engine.compress spans with status error; click a trace id to open it.",
        "datasource": TEMPO_DS,
        "targets": [{"datasource": TEMPO_DS, "refId": "A", "queryType": "traceql", "limit": 20,
                     "tableType": "traces",
                     "query": '{ name = "context_engine.compress" && status = error }'}],
        "fieldConfig": {"defaults": {}, "overrides": []},
        "options": {"showHeader": True},
    }, w=24, h=8)

    return {
        "uid": "hermes-context-engine",
        "title": "Hermes context engine",
        "description": "observed-engine: context usage, compression, select_context, hooks and telemetry health "
                       "(generated by deploy/grafana/build_dashboard.py).",
        "tags": ["hermes", "observed-engine", "context-engine"],
        "editable": False,
        "graphTooltip": 1,
        "schemaVersion": 39,
        "version": 1,
        "time": {"from": "now-6h", "to": "now"},
        "refresh": "30s",
        "timezone": "",
        "fiscalYearStartMonth": 0,
        "liveNow": False,
        "links": [],
        "annotations": {"list": [{
            "builtIn": 1, "datasource": {"type": "grafana", "uid": "-- Grafana --"}, "enable": True,
            "hide": True, "iconColor": "rgba(0, 211, 255, 1)", "name": "Annotations & Alerts", "type": "dashboard",
        }]},
        "templating": {"list": [
            {"type": "datasource", "name": "datasource", "label": "Prometheus", "query": "prometheus",
             "current": {"selected": False, "text": "Prometheus", "value": "prometheus"},
             "hide": 0, "includeAll": False, "multi": False, "options": [], "refresh": 1, "regex": ""},
            query_var("job", "job", f"label_values({metric('hook_calls')}, job)"),
            query_var("instance", "instance", f"label_values({series(metric('hook_calls'), JOB_SEL)}, instance)"),
            query_var("engine", "engine", f"label_values({series(metric('hook_calls'), PROC_SEL)}, engine)"),
            query_var("hook", "hook", f"label_values({series(metric('hook_calls'), SEL)}, hook)"),
        ]},
        "panels": b.panels,
    }


def render() -> str:
    return json.dumps(build(), indent=2) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="fail if the committed JSON differs")
    ap.add_argument("--output", type=Path, default=OUT)
    args = ap.parse_args(argv)
    text = render()
    if args.check:
        current = args.output.read_text() if args.output.exists() else ""
        if current != text:
            print(f"{args.output} is stale: run python deploy/grafana/build_dashboard.py", file=sys.stderr)
            return 1
        return 0
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

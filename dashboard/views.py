"""The dashboard's views. Each takes a :class:`Ctx` and draws with Streamlit.

Data comes only through ``Ctx.q`` (``st.cache_data`` keyed by source, method
and filters; the filters end on the refresh tick, so every browser session
viewing the same range shares one query per refresh).
"""

from __future__ import annotations

import dataclasses
import os
import threading
from dataclasses import dataclass
from datetime import datetime
from typing import Callable, Optional, Sequence

import pandas as pd
import streamlit as st

from dashboard import charts
from dashboard.sources import (
    CAP_ALERTS, CAP_CONTENT, CAP_EVENTS, CAP_EXACT, CAP_SESSIONS, COMPRESS_OUTCOMES, SELECTION_RESULTS,
    SUMMARY_CAUSES, SUMMARY_EVENTS, SUMMARY_FAILURE_EVENTS, Filters, Source, SourceError, Status,
)

TAB_USAGE = "Context usage"
TAB_COMPRESS = "Compressions"
TAB_SELECT = "select_context"
TAB_ALERTS = "Alerts & incidents"
TAB_LATENCY = "Hook latency"
TAB_COMPARE = "Compare engines"
TABS = (TAB_USAGE, TAB_COMPRESS, TAB_SELECT, TAB_ALERTS, TAB_LATENCY, TAB_COMPARE)


# --- querying ----------------------------------------------------------------

@st.cache_data(ttl=600, max_entries=512, show_spinner=False)
def _cached(source_key: str, method: str, fkey: tuple, args: tuple, _src: Source, _f: Filters):
    return getattr(_src, method)(_f, *args)


@dataclass
class Ctx:
    src: Source
    f: Filters
    now: float
    refresh: float
    status: Status
    max_series: int = 4
    all_engines: Sequence[str] = ()
    alerts_from: Optional[Source] = None      # Prometheus next to the store, for its rule alerts
    alerts_error: Optional[str] = None

    def q(self, method: str, *args, f: Optional[Filters] = None):
        f = f or self.f
        return _cached(self.src.cache_key(), method, f.key(), args, _src=self.src, _f=f)

    @property
    def x_domain(self) -> tuple:
        """The selected range in epoch seconds (over-time charts are pinned to it)."""
        return (self.f.start, min(self.f.end, max(self.now, self.f.start + 1)))

    @property
    def exact(self) -> bool:
        return self.src.supports(CAP_EXACT)


# --- formatting ----------------------------------------------------------------

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


def chart(spec: dict) -> None:
    st.vega_lite_chart(spec=spec, width="stretch")


def _guard(fn: Callable, *args, **kwargs):
    """Run a view; a source failure becomes a warning in place, not a crash."""
    try:
        return fn(*args, **kwargs)
    except SourceError as exc:
        st.warning(f"The source could not answer: {exc}")
    return None


# --- background prefetch -------------------------------------------------------

_PREFETCHED: dict = {}
_PREFETCH_LOCK = threading.Lock()
PREFETCH_METHODS = ("compressions", "incident_counts", "selections", "latency")


def prefetch(src: Source, f: Filters) -> Optional[threading.Thread]:
    """Warm the source's own caches for the other tabs, once per source and range, on a
    background thread: the first click on a tab then only queries the newest buckets.
    (The store source keeps closed buckets in memory; Prometheus needs no warming.)"""
    if src.kind != "sqlite":
        return None
    key = (src.cache_key(), f.span // f.step, f.step, f.engines)
    with _PREFETCH_LOCK:
        if key in _PREFETCHED:
            return None
        _PREFETCHED[key] = True
        if len(_PREFETCHED) > 64:
            _PREFETCHED.clear()

    def work():
        for method in PREFETCH_METHODS:
            try:
                getattr(src, method)(f)
            except Exception:            # a prefetch failure shows up when the tab really runs
                return

    t = threading.Thread(target=work, name="dashboard-prefetch", daemon=True)
    t.start()
    return t


# --- empty state -------------------------------------------------------------

def render_empty_state(src: Source, status: Status, refresh: float) -> None:
    hermes_home = os.environ.get("HERMES_HOME", "~/.hermes")
    if src.kind == "prometheus":
        if status.state == "error":
            st.error(f"Cannot reach Prometheus at `{src.label}`: {status.message}")
        st.markdown(
            f"""
### No observed-engine metrics in Prometheus yet

Prometheus at `{src.label}` has no `hermes_context_*` series. To feed it:

1. Turn the engine on in `{hermes_home}/config.yaml` (`$HERMES_HOME/config.yaml`):
   ```yaml
   context:
     engine: observed
   observed:
     prometheus: {{enabled: true, host: 127.0.0.1, port: 9464}}
   ```
2. Install it into your Hermes home: `observed-engine install`
3. Add a scrape job for `127.0.0.1:9464` to `prometheus.yml` (and the alert rules from `deploy/`).
4. No live agent at hand? `observed-engine demo` runs sample sessions through the engine.

This page checks again every {refresh:g} s. Per-session views need the SQLite store
(`OBSERVED_STORE=/path/to/telemetry.sqlite`).
""")
        return
    if status.state == "error":
        st.error(f"The store cannot be read: {status.message}")
        return
    title = ("No telemetry store yet" if status.state == "missing"
             else "The telemetry store is empty")
    where = ("does not exist yet" if status.state == "missing" else "exists but holds no events yet")
    st.markdown(
        f"""
### {title}

The dashboard reads **`{src.label}`**, which {where}. The observed engine creates it the first time
Hermes calls its context engine. To start recording:

1. **Enable the engine** in `{hermes_home}/config.yaml` (`$HERMES_HOME/config.yaml`):
   ```yaml
   context:
     engine: observed
   ```
2. **Install it** into your Hermes home: `observed-engine install`
3. **See it work without a live agent:** `observed-engine demo` runs sample sessions through the
   engine and writes them to this store.
4. Run a Hermes turn. This page checks again every {refresh:g} s and fills in by itself.

Reading another store? Set `OBSERVED_STORE=/path/to/telemetry.sqlite` (or pick it in the sidebar).
Already scraping the engine's `/metrics`? Set `OBSERVED_PROMETHEUS_URL=http://127.0.0.1:9090`.
The dashboard only reads: it never writes the store.
""")


# --- header: alerts and headline numbers ------------------------------------

def active_alerts(ctx: Ctx) -> pd.DataFrame:
    """The source's alerts, plus Prometheus' rule alerts when a Prometheus URL is configured
    next to the store: [alert, severity, state, engine, detail, since, from]."""
    frames = []
    a = ctx.q("alerts", ctx.f.end)
    if a is not None and not a.empty:
        frames.append(a.assign(**{"from": "prometheus" if ctx.src.kind == "prometheus" else "store"}))
    if ctx.alerts_from is not None:
        try:
            p = _cached(ctx.alerts_from.cache_key(), "alerts", ctx.f.key(), (ctx.f.end,), _src=ctx.alerts_from,
                        _f=ctx.f)
            if p is not None and not p.empty:
                frames.append(p.assign(**{"from": "prometheus"}))
        except SourceError as exc:
            ctx.alerts_error = str(exc)
    if not frames:
        return pd.DataFrame(columns=["alert", "severity", "state", "engine", "detail", "since", "from"])
    return pd.concat(frames, ignore_index=True)


def render_alert_banner(ctx: Ctx) -> pd.DataFrame:
    alerts = active_alerts(ctx)
    if alerts is None or alerts.empty:
        return alerts
    firing = alerts[alerts["state"] == "firing"] if "state" in alerts else alerts
    if not firing.empty:
        names = ", ".join(sorted(set(firing["alert"])))
        st.error(f"**{len(firing)} active alert(s):** {names} — details under *{TAB_ALERTS}*.")
    return alerts


def summary_failures(counts: pd.DataFrame) -> pd.DataFrame:
    """The summary-failure rows of ``incident_counts`` as [engine, kind, cause, count] (kind and cause
    as the metric labels them), most frequent first."""
    cols = ["engine", "kind", "cause", "count"]
    if counts is None or counts.empty:
        return pd.DataFrame(columns=cols)
    kind_of = {ev: kind for kind, ev in SUMMARY_EVENTS.items()}
    sf = counts[counts["event"].isin(SUMMARY_FAILURE_EVENTS)]
    if sf.empty:
        return pd.DataFrame(columns=cols)
    out = pd.DataFrame({"engine": sf["engine"], "kind": sf["event"].map(kind_of), "cause": sf["reason"],
                        "count": sf["count"]})
    out = out.groupby(["engine", "kind", "cause"], dropna=False, as_index=False)["count"].sum()
    return out.sort_values(["count", "engine", "kind", "cause"], ascending=[False, True, True, True])[cols] \
        .reset_index(drop=True)


def summary_failure_note(by_kind: dict, by_cause: dict, approx: str = "") -> str:
    """One sentence for the operator: how many compress() calls lost their summary, and why."""
    n = sum(by_kind.values())
    causes = ", ".join(f"{c} {fmt_int(by_cause[c])}" for c in SUMMARY_CAUSES if by_cause.get(c))
    return (f"**{fmt_int(n)} compress() call{'s' if n != 1 else ''} returned although the summary model "
            f"failed{approx}:** {fmt_int(by_kind.get('fallback_summary', 0))} with a fallback summary (middle "
            f"turns dropped without a real summary), {fmt_int(by_kind.get('aborted', 0))} aborted (messages "
            f"kept, the context stays full). Cause: {causes or '–'}. The outcomes count these calls by what "
            "happened to the message list (a fallback reads `compressed`).")


def render_kpis(ctx: Ctx) -> None:
    cols = st.columns([1, 1, 1.35, 0.85, 1.1, 1.25])       # room for the longer labels
    comp, _ = ctx.q("compressions")
    counts = ctx.q("incident_counts")
    timeouts = int(counts.loc[counts["event"].isin(["deadline_exceeded", "host_reported"]), "count"].sum()) \
        if not counts.empty else 0
    fail_opens = int(counts.loc[counts["event"] == "fail_open", "count"].sum()) if not counts.empty else 0
    approx = "" if ctx.exact else " (from increase(), approximate)"
    if ctx.src.supports(CAP_SESSIONS):
        sessions = ctx.q("sessions")
        cols[0].metric("Active sessions", fmt_int(len(sessions)), help="Sessions with events in the range.")
        recent = tuple(sessions["session"].head(20))
    else:
        engines = ctx.q("engines")
        cols[0].metric("Engines", fmt_int(len(engines)), help="Engines with series in Prometheus.")
        recent = tuple(engines)
    total = int(comp["total"].sum()) if not comp.empty else 0
    compressed = int(comp["compressed"].sum()) if not comp.empty else 0
    cols[1].metric("Compressions", fmt_int(total), help=f"compress() calls in the range{approx}; "
                   f"{compressed:,} compressed.")
    cols[2].metric("Compression timeouts", fmt_int(timeouts),
                   help="Compressions past their deadline (deadline_exceeded, host_reported)" + approx)
    cols[3].metric("Fail-opens", fmt_int(fail_opens), help="Hook failures the host fell open on" + approx)
    sf = {ev: int(comp[ev].sum()) if not comp.empty and ev in comp else 0 for ev in SUMMARY_FAILURE_EVENTS}
    cols[4].metric("Summary failures", fmt_int(sum(sf.values())),
                   help="compress() calls that returned although the summary model failed: "
                        f"{sf['summary_fallback']:,} with a fallback summary, {sf['summary_aborted']:,} aborted"
                        + approx + ". Kinds and causes under *Compressions*.")
    now = ctx.q("usage_now", recent) if recent else pd.DataFrame()
    if now is not None and not now.empty and now["ratio"].notna().any():
        top = now.loc[now["ratio"].idxmax()]
        cols[5].metric("Highest context usage", fmt_pct(top["ratio"], 0),
                       help=f"{top['series']}: {fmt_int(top['prompt_tokens'])} of {fmt_int(top['window_tokens'])} "
                            f"tokens (threshold {fmt_int(top['threshold_tokens'])}), latest response.")
    else:
        cols[5].metric("Highest context usage", "–", help="No update_from_response in the range.")


# --- 1. context usage ----------------------------------------------------------

def view_usage(ctx: Ctx) -> None:
    if ctx.src.supports(CAP_SESSIONS):
        if ctx.f.session:
            series = [ctx.f.session]
            st.caption(f"Session `{ctx.f.session}`: prompt tokens after every response against the "
                       "compression threshold and the model's window; ▼ marks compress() calls.")
        else:
            sessions = ctx.q("sessions")
            series = list(sessions["session"].head(ctx.max_series))
            st.caption(f"The {len(series)} most recently active of {len(sessions):,} sessions in the range "
                       "(pick one in the sidebar to focus it). Prompt tokens after every response against "
                       "the compression threshold and the window; ▼ marks compress() calls.")
    else:
        series = list(ctx.q("engines"))
        st.info("Prometheus has no session ids (they are never metric labels), so this shows each engine's "
                "gauges: the last prompt of the engine, not of one session. Per-session sawtooths need the "
                "SQLite store (`OBSERVED_STORE`).")
    if not series:
        st.info("No sessions with events in this range. Widen the time range or clear the engine filter.")
        return
    lines, marks = ctx.q("usage", tuple(series))
    now = ctx.q("usage_now", tuple(series))
    latest = {r.series: r for r in now.itertuples()} if now is not None and not now.empty else {}
    if lines.empty and marks.empty:
        st.info("No update_from_response or compress rows for these sessions in the range.")
        return
    single = len(series) == 1
    st.markdown(charts.SAWTOOTH_LEGEND)
    grid = st.columns(1 if single else 2)
    for i, s in enumerate(series):
        ln = lines[lines["series"] == s]
        mk = marks[marks["series"] == s] if not marks.empty else marks
        if ln.empty and (mk is None or mk.empty):
            continue
        r = latest.get(s)
        title = str(s)
        if r is not None:
            if r.engine != s:
                title += f"  ·  {r.engine}"
            title += f"  ·  {fmt_tokens(r.prompt_tokens)} / {fmt_tokens(r.window_tokens)}"
            if r.ratio == r.ratio:
                title += f" ({r.ratio:.0%})"
        n_comp = 0 if mk is None or mk.empty else int((mk["outcome"] == "compressed").sum())
        if n_comp:
            title += f"  ·  {n_comp} compression{'s' if n_comp > 1 else ''}"
        with grid[i % len(grid)]:
            chart(charts.sawtooth(ln, mk, title=title, height=320 if single else 200, span_s=ctx.f.span))
    if single and ctx.src.supports(CAP_SESSIONS):
        _session_details(ctx, marks)


def _session_details(ctx: Ctx, marks: pd.DataFrame) -> None:
    if marks is not None and not marks.empty:
        st.markdown("##### Compressions of this session")
        t = marks.sort_values("ts", ascending=False)
        st.dataframe(pd.DataFrame({
            "time": to_dt(t["ts"]).to_numpy(), "outcome": t["outcome"], "tokens before": t["tokens_before"],
            "tokens after": t["tokens_after"], "seconds": t["duration_s"],
        }), hide_index=True, width="stretch",
            column_config={"seconds": st.column_config.NumberColumn(format="%.2f"),
                           "tokens before": st.column_config.NumberColumn(format="localized"),
                           "tokens after": st.column_config.NumberColumn(format="localized"),
                           "time": st.column_config.DatetimeColumn(format="YYYY-MM-DD HH:mm:ss")})
    if ctx.src.supports(CAP_CONTENT):
        content = ctx.q("content", 50)
        if content is not None and not content.empty:
            with st.expander(f"Captured message text ({len(content)} rows, capture_content was on)"):
                for r in content.itertuples():
                    st.markdown(f"**{to_dt([r.ts])[0]:%H:%M:%S} · {r.hook}**")
                    st.text(str(r.content)[:4000])
        else:
            st.caption("No message text recorded for this session (capture_content is off).")


# --- 2. compressions -------------------------------------------------------------

def view_compressions(ctx: Ctx) -> None:
    summary, series = ctx.q("compressions")
    if summary.empty:
        st.info("No compress() calls in this range.")
        return
    tot = summary[list(COMPRESS_OUTCOMES)].sum()
    cols = st.columns(6)
    for col, o in zip(cols, COMPRESS_OUTCOMES):
        col.metric(o.capitalize(), fmt_int(tot[o]))
    tb = (summary["tokens_before_avg"] * summary["compressed"]).sum()
    ta = (summary["tokens_after_avg"] * summary["compressed"]).sum()
    cols[4].metric("Tokens after / before", fmt_pct(ta / tb if tb else None, 0),
                   help="Sum of tokens after over tokens before, compressed calls.")
    p95 = summary["p95_s"].max()
    cols[5].metric("p95 latency", fmt_seconds(p95), help="compress() p95 of the slowest engine.")
    failed = summary_failures(ctx.q("incident_counts"))
    if not failed.empty:
        by_kind = failed.groupby("kind")["count"].sum().to_dict()
        by_cause = failed.groupby("cause")["count"].sum().to_dict()
        st.warning(summary_failure_note(by_kind, by_cause, "" if ctx.exact else " (from increase(), approximate)"))
    left, right = st.columns([2, 3])
    with left:
        st.markdown("##### Outcomes per engine")
        long = summary.melt(id_vars=["engine"], value_vars=list(COMPRESS_OUTCOMES), var_name="outcome",
                            value_name="count")
        chart(charts.outcome_bars(long[long["count"] > 0], "outcome", charts.OUTCOME_COLORS, COMPRESS_OUTCOMES))
    with right:
        st.markdown("##### Over time")
        if not series.empty:
            chart(charts.stacked_bars_over_time(series, "outcome", charts.OUTCOME_COLORS, COMPRESS_OUTCOMES,
                                                ctx.f.step, height=200, span_s=ctx.f.span, x_domain=ctx.x_domain))
    st.markdown("##### Per engine")
    table = pd.DataFrame({
        "engine": summary["engine"],
        **{o: summary[o] for o in COMPRESS_OUTCOMES},
        **{ev: summary[ev] for ev in SUMMARY_FAILURE_EVENTS},
        "p50 s": summary["p50_s"], "p95 s": summary["p95_s"], "p99 s": summary["p99_s"],
        "avg tokens before": summary["tokens_before_avg"], "avg tokens after": summary["tokens_after_avg"],
        "after / before": summary["ratio"],
    })
    num = st.column_config.NumberColumn
    st.dataframe(numeric(table), hide_index=True, width="stretch", column_config={
        "p50 s": num(format="%.2f"), "p95 s": num(format="%.2f"), "p99 s": num(format="%.2f"),
        "avg tokens before": num(format="localized"), "avg tokens after": num(format="localized"),
        "after / before": num(format="percent"),
        "summary_fallback": num(help="compress() calls that returned with a fallback summary: the summary model "
                                     "failed, the middle turns were dropped without a real summary."),
        "summary_aborted": num(help="compress() calls that returned aborted: the summary model failed, the "
                                    "messages were kept and the context stays full."),
    })
    if not failed.empty:
        st.markdown("##### Summary failures by kind and cause")
        st.dataframe(numeric(failed, skip=("engine", "kind", "cause")), hide_index=True, width="stretch")
    note = ("Timeout = a compression the engine's watchdog saw pass its deadline (`deadline_exceeded`); "
            "host-reported and late completions are listed under Alerts & incidents. "
            "summary_fallback / summary_aborted = calls among them that returned although the summary model "
            "failed (as the engine reports it; the built-in compressor does). ")
    if ctx.exact:
        note += "Latency percentiles are over compress() calls (exact up to 3,000 calls per engine)."
    else:
        note += "Counts are Prometheus increase() over the range (extrapolated); percentiles come from " \
                "histogram buckets."
    st.caption(note)


# --- 3. select_context -------------------------------------------------------------

def view_selection(ctx: Ctx) -> None:
    summary, series = ctx.q("selections")
    if summary.empty:
        st.info("No select_context calls in this range (the host only calls it when the engine defines it).")
        return
    tot = summary[[*SELECTION_RESULTS, "total", "cache_lost_tokens"]].sum()
    churn = tot["changed_selection"] / tot["total"] if tot["total"] else None
    cols = st.columns(4)
    cols[0].metric("Selections", fmt_int(tot["total"]))
    cols[1].metric("Churn rate", fmt_pct(churn), help="changed_selection / all select_context calls.")
    cols[2].metric("Fail-open", fmt_int(tot["fail_open"]), help="Selections the host fell open on.")
    cols[3].metric("Prompt-cache tokens lost", fmt_tokens(tot["cache_lost_tokens"]),
                   help="Cached prefix tokens invalidated by changed selections.")
    left, right = st.columns([2, 3])
    with left:
        st.markdown("##### Outcome mix")
        long = summary.melt(id_vars=["engine"], value_vars=list(SELECTION_RESULTS), var_name="result",
                            value_name="count")
        chart(charts.outcome_bars(long[long["count"] > 0], "result", charts.RESULT_COLORS, SELECTION_RESULTS,
                                  normalize=True))
    with right:
        st.markdown("##### Churn over time")
        if not series.empty:
            wide = series.pivot_table(index=["ts", "engine"], columns="result", values="count", aggfunc="sum",
                                      fill_value=0).reset_index()
            total = sum(wide[r] for r in SELECTION_RESULTS if r in wide)
            changed = wide["changed_selection"] if "changed_selection" in wide else 0
            wide["churn"] = changed / total.where(total > 0)
            chart(charts.lines_over_time(wide, "churn", "engine", "churn", fmt=".1%", height=200, y_format="%",
                                         span_s=ctx.f.span, x_domain=ctx.x_domain))
    if not series.empty:
        st.markdown("##### Results over time")
        chart(charts.stacked_bars_over_time(series, "result", charts.RESULT_COLORS, SELECTION_RESULTS, ctx.f.step,
                                            height=180, span_s=ctx.f.span, x_domain=ctx.x_domain))
    st.markdown("##### Per engine")
    num = st.column_config.NumberColumn
    st.dataframe(numeric(summary.rename(columns={"cache_lost_tokens": "cache tokens lost"})), hide_index=True,
                 width="stretch", column_config={"churn": num(format="percent"),
                                                 "cache tokens lost": num(format="localized")})


# --- 4. alerts and incidents -------------------------------------------------------

def view_alerts(ctx: Ctx, alerts: Optional[pd.DataFrame]) -> None:
    st.markdown("##### Active alerts")
    if ctx.src.supports(CAP_ALERTS):
        st.caption(f"From Prometheus `/api/v1/alerts` ({ctx.src.label}).")
    else:
        note = ("Derived from the store (`from` = store): timeouts, fail-opens, compress() errors and sessions "
                "above 90 % of their window in the last 15 minutes, summary failures in the last 30. ")
        if ctx.alerts_from is not None:
            note += f"Rule alerts from Prometheus `{ctx.alerts_from.label}` (`from` = prometheus)."
        else:
            note += "Set `OBSERVED_PROMETHEUS_URL` to add the Prometheus rule alerts."
        st.caption(note)
        if ctx.alerts_error:
            st.warning(f"Prometheus alerts unavailable: {ctx.alerts_error}")
    if alerts is None or alerts.empty:
        st.success("No active alerts.")
    else:
        a = alerts.copy()
        a["since"] = to_dt(a["since"])
        st.dataframe(a, hide_index=True, width="stretch",
                     column_config={"since": st.column_config.DatetimeColumn(format="YYYY-MM-DD HH:mm:ss")})
    counts = ctx.q("incident_counts")
    st.markdown("##### Timeouts and fail-opens, summary failures")
    if counts.empty:
        st.success("No timeouts, fail-opens or summary failures in this range.")
        return
    by_event = counts.groupby("event")["count"].sum()
    events = ("deadline_exceeded", "host_reported", "late_completion", "fail_open", *SUMMARY_FAILURE_EVENTS)
    helps = {"summary_fallback": "compress() returned with a fallback summary (the summary model failed); "
                                 "reason = cause.",
             "summary_aborted": "compress() returned aborted, messages kept (the summary model failed); "
                                "reason = cause."}
    cols = st.columns(len(events))
    for col, ev in zip(cols, events):
        col.metric(ev, fmt_int(by_event.get(ev, 0)), help=helps.get(ev))
    if ctx.src.supports(CAP_EVENTS):
        inc = ctx.q("incidents", 500)
        table = pd.DataFrame({
            "time": to_dt(inc["ts"]), "session": inc["session"], "engine": inc["engine"], "hook": inc["hook"],
            "event": inc["event"], "reason": inc["reason"],
            "seconds": pd.to_numeric(inc["duration_s"], errors="coerce"),
        })
        if inc["content"].notna().any():      # only when capture_content was on
            table["content"] = inc["content"]
        st.dataframe(table, hide_index=True, width="stretch", height=min(600, 38 + 35 * len(table)),
                     column_config={"time": st.column_config.DatetimeColumn(format="YYYY-MM-DD HH:mm:ss"),
                                    "seconds": st.column_config.NumberColumn(format="%.2f")})
        st.caption(f"Newest first; at most 500 rows ({int(counts['count'].sum()):,} in the range).")
    else:
        st.info("Prometheus has counters, not events: totals per engine, hook and reason below. The table of "
                "individual events (time, session) needs the SQLite store.")
        st.dataframe(counts, hide_index=True, width="stretch")


# --- 5. hook latency -------------------------------------------------------------------

def view_latency(ctx: Ctx) -> None:
    table, series = ctx.q("latency")
    if table.empty:
        st.info("No hook calls in this range.")
        return
    left, right = st.columns([1, 1])
    with left:
        st.markdown("##### p50 / p95 / p99 per hook")
        chart(charts.latency_dots(table))
    with right:
        st.markdown("##### Calls per second")
        if not series.empty:
            multi = series["engine"].nunique() > 1
            chart(charts.lines_over_time(series, "calls_per_s", "hook", "calls/s", fmt=",.3f",
                                         dash="engine" if multi else None, span_s=ctx.f.span,
                                         x_domain=ctx.x_domain))
    num = st.column_config.NumberColumn
    st.dataframe(numeric(table.rename(columns={"calls_per_s": "calls/s", "p50_ms": "p50 ms", "p95_ms": "p95 ms",
                                               "p99_ms": "p99 ms"})), hide_index=True, width="stretch",
                 column_config={"calls/s": num(format="%.4f"), "p50 ms": num(format="%.3f"),
                                "p95 ms": num(format="%.3f"), "p99 ms": num(format="%.3f"),
                                "calls": num(format="localized")})
    if ctx.exact:
        st.caption("calls/s is the average over the range. Percentiles are exact up to 3,000 calls per hook, "
                   "otherwise from a time-stratified sample of 3,000 calls (refreshed at most every 30 s).")
    else:
        st.caption("From hermes_context_engine_hook_duration_seconds buckets (histogram_quantile) and "
                   "rate(hermes_context_engine_hook_calls_total).")


# --- 6. engine comparison ----------------------------------------------------------------

def view_compare(ctx: Ctx) -> None:
    engines = list(ctx.all_engines)
    if len(engines) < 2:
        st.info("Comparison needs two engines; the source has " +
                (f"only `{engines[0]}`." if engines else "none yet."))
        return
    c1, c2 = st.columns(2)
    a = c1.selectbox("Engine A", engines, index=0, key="compare_a")
    b_opts = [e for e in engines if e != a]
    b = c2.selectbox("Engine B", b_opts, index=0, key="compare_b")
    # the same (cached) queries as the other views, over every engine, then the two picked
    f2 = dataclasses.replace(ctx.f, engines=())
    pair = [a, b]

    def two(df):
        return df[df["engine"].isin(pair)] if df is not None and not df.empty else df

    comp = two(ctx.q("compressions", f=f2)[0])
    sel = two(ctx.q("selections", f=f2)[0])
    lat = two(ctx.q("latency", f=f2)[0])
    inc = two(ctx.q("incident_counts", f=f2))

    def row(df, eng):
        r = df[df["engine"] == eng]
        return r.iloc[0] if not r.empty else None

    def metrics_of(eng) -> dict:
        c, s = row(comp, eng), row(sel, eng)
        i = inc[inc["engine"] == eng] if not inc.empty else inc
        timeouts = int(i.loc[i["event"].isin(["deadline_exceeded", "host_reported"]), "count"].sum()) \
            if not i.empty else 0
        fails = int(i.loc[i["event"] == "fail_open", "count"].sum()) if not i.empty else 0
        summary_failed = int(sum(c[ev] for ev in SUMMARY_FAILURE_EVENTS)) if c is not None else 0
        l = lat[lat["engine"] == eng]
        return {
            "compressions": 0 if c is None else c["total"],
            "compressed": 0 if c is None else c["compressed"],
            "compress errors": 0 if c is None else c["error"],
            "compression timeouts": timeouts,
            "summary failures": summary_failed,
            "compress p50": None if c is None else c["p50_s"],
            "compress p95": None if c is None else c["p95_s"],
            "compress p99": None if c is None else c["p99_s"],
            "tokens after / before": None if c is None else c["ratio"],
            "selections": 0 if s is None else s["total"],
            "churn rate": None if s is None else s["churn"],
            "prompt-cache tokens lost": 0 if s is None else s["cache_lost_tokens"],
            "fail-opens": fails,
            "hook calls": int(l["calls"].sum()) if not l.empty else 0,
            "hook errors": int(l["errors"].sum()) if not l.empty else 0,
        }

    ma, mb = metrics_of(a), metrics_of(b)
    fmts = {"compress p50": fmt_seconds, "compress p95": fmt_seconds, "compress p99": fmt_seconds,
            "tokens after / before": lambda v: fmt_pct(v, 0), "churn rate": fmt_pct,
            "prompt-cache tokens lost": fmt_tokens}
    headline = ["compressions", "compress p95", "tokens after / before", "churn rate", "fail-opens",
                "compression timeouts"]
    for col, eng, m in ((c1, a, ma), (c2, b, mb)):
        with col:
            st.markdown(f"#### `{eng}`")
            cells = st.columns(3)
            for j, k in enumerate(headline):
                cells[j % 3].metric(k, fmts.get(k, fmt_int)(m[k]))
    left, right = st.columns(2)
    with left:
        st.markdown("##### Hook latency p50 / p95 / p99")
        if not lat.empty:
            chart(charts.latency_dots(lat, color_by="engine", order=pair))
    with right:
        if not comp.empty:
            st.markdown("##### compress() outcomes")
            long = comp.melt(id_vars=["engine"], value_vars=list(COMPRESS_OUTCOMES), var_name="outcome",
                             value_name="count")
            chart(charts.outcome_bars(long[long["count"] > 0], "outcome", charts.OUTCOME_COLORS,
                                      COMPRESS_OUTCOMES, normalize=True))
        if not sel.empty:
            st.markdown("##### select_context results")
            long = sel.melt(id_vars=["engine"], value_vars=list(SELECTION_RESULTS), var_name="result",
                            value_name="count")
            chart(charts.outcome_bars(long[long["count"] > 0], "result", charts.RESULT_COLORS,
                                      SELECTION_RESULTS, normalize=True))
    st.markdown("##### Side by side")
    st.dataframe(pd.DataFrame({"metric": list(ma), a: [fmts.get(k, fmt_int)(v) for k, v in ma.items()],
                               b: [fmts.get(k, fmt_int)(v) for k, v in mb.items()]}),
                 hide_index=True, width="stretch")

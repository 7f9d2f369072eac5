"""observed-engine dashboard: ``streamlit run dashboard/app.py``.

Source from the environment (flags after ``--`` override it):
  OBSERVED_STORE=<path>            the SQLite store (default: the current Hermes home's store)
  OBSERVED_PROMETHEUS_URL=<url>    a Prometheus scraping the engine (http://127.0.0.1:9090)
  OBSERVED_REFRESH_SECONDS=<s>     live refresh interval (default 5)
  streamlit run dashboard/app.py -- --store PATH | --prometheus URL [--refresh S]

Read-only: the store is opened with mode=ro and PRAGMA query_only.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path

_ROOT = Path(__file__).resolve().parent.parent
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

import streamlit as st  # noqa: E402

from dashboard import views  # noqa: E402
from dashboard.sources import (  # noqa: E402
    CAP_SESSIONS, DEFAULT_RANGE, RANGE_PRESETS, SourceError, env_default_kind, env_prometheus_url,
    env_refresh_seconds, env_store_path, make_filters, open_source,
)

RANGE_ALL = "All data"
RANGE_CUSTOM = "Custom range"
ALL_SESSIONS = "All sessions"
SESSION_CHOICES = 500            # the most recent sessions offered in the sidebar


def _flags() -> argparse.Namespace:
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--store")
    p.add_argument("--prometheus")
    p.add_argument("--refresh", type=float)
    args, _ = p.parse_known_args(sys.argv[1:])
    return args


@st.cache_resource(show_spinner=False)
def get_source(kind: str, target: str):
    return open_source(kind, target)


@st.cache_resource(show_spinner=False)
def get_alert_source(url: str):
    """Prometheus next to the store, asked only for its rule alerts (short timeout)."""
    from dashboard.prometheus_source import PrometheusSource
    return PrometheusSource(url, timeout=1.5)


def sidebar():
    flags = _flags()
    default_kind = "prometheus" if flags.prometheus and not flags.store else env_default_kind()
    with st.sidebar:
        st.markdown("## Observed context engine")
        kind = st.radio("Source", ["sqlite", "prometheus"], index=0 if default_kind == "sqlite" else 1,
                        format_func={"sqlite": "SQLite store", "prometheus": "Prometheus"}.get,
                        horizontal=True, key="source_kind")
        if kind == "sqlite":
            target = st.text_input("Store file", value=flags.store or env_store_path(), key="store_path",
                                   help="OBSERVED_STORE; opened read-only.")
        else:
            target = st.text_input("Prometheus URL", value=flags.prometheus or env_prometheus_url()
                                   or "http://127.0.0.1:9090", key="prom_url", help="OBSERVED_PROMETHEUS_URL")
        src = get_source(kind, target.strip())
        status = _safe_status(src)
        options = [*RANGE_PRESETS, RANGE_ALL, RANGE_CUSTOM]
        range_label = st.selectbox("Time range", options, index=options.index(DEFAULT_RANGE), key="range")
        custom = None
        now = time.time()
        if range_label == RANGE_CUSTOM:
            default_end = datetime.now().replace(second=0, microsecond=0)
            c_start = st.datetime_input("From", value=default_end - timedelta(hours=1), key="range_from",
                                        format="YYYY-MM-DD", step=timedelta(minutes=5))
            c_end = st.datetime_input("To", value=default_end, key="range_to", format="YYYY-MM-DD",
                                      step=timedelta(minutes=5))
            if c_start and c_end and c_end > c_start:
                custom = (c_start.timestamp(), c_end.timestamp())
            else:
                st.warning("'To' must be after 'From'.")
        all_engines = []
        if status.ok:
            try:
                all_engines = list(src.engines(None))
            except SourceError:
                all_engines = []
        engines = st.multiselect("Engines", all_engines, default=[], key="engines", placeholder="All engines")
        refresh = float(st.number_input("Refresh every (seconds)", min_value=1.0, max_value=3600.0,
                                        value=float(flags.refresh or env_refresh_seconds()), step=1.0,
                                        key="refresh"))
        span, end = _span(range_label, custom, status, now)
        f0 = make_filters(span, now, engines=engines, quantum=refresh, end=end)
        session = None
        max_series = 4
        if src.supports(CAP_SESSIONS):
            sessions = []
            if status.ok:
                try:
                    sessions = list(views._cached(src.cache_key(), "sessions", f0.key(), (), _src=src,
                                                  _f=f0)["session"].head(SESSION_CHOICES))
                except SourceError:
                    sessions = []
            pick = st.selectbox("Session", [ALL_SESSIONS, *sessions], index=0, key="session",
                                help="Sessions active in the range, most recent first.")
            session = None if pick == ALL_SESSIONS else pick
            if session is None:
                max_series = st.slider("Sessions drawn", 1, 12, 4, key="max_series",
                                       help="How many of the most recent sessions the usage view draws.")
        else:
            st.selectbox("Session", [ALL_SESSIONS], disabled=True, key="session_disabled",
                         help="Prometheus has no session ids; per-session views need the SQLite store.")
        live = st.toggle("Live", value=True, key="live", help="Re-query every refresh interval.")
        st.caption("Read-only: the dashboard never writes the store.")
    prom_url = (flags.prometheus or env_prometheus_url()).strip()
    alerts_from = get_alert_source(prom_url) if kind == "sqlite" and prom_url else None
    return dict(src=src, status=status, range_label=range_label, custom=custom, engines=tuple(engines),
                session=session, max_series=max_series, refresh=refresh, live=live, all_engines=all_engines,
                alerts_from=alerts_from)


@st.cache_data(ttl=10, max_entries=64, show_spinner=False)
def _status(key: str, second: int, exists: bool, _src):
    return _src.status()


def _safe_status(src):
    """The source's status, shared by the sidebar and the panel of one run (one COUNT(*))."""
    try:
        path = getattr(src, "path", None)
        return _status(src.cache_key(), int(time.time()), bool(path and os.path.exists(path)), _src=src)
    except SourceError as exc:
        from dashboard.sources import Status
        return Status("error", str(exc))


def _span(range_label, custom, status, now):
    if range_label == RANGE_CUSTOM and custom:
        return custom[1] - custom[0], custom[1]
    if range_label == RANGE_ALL:
        first = status.first_ts if status.first_ts else now - 3600
        return max(60.0, now - first + 1), None
    return RANGE_PRESETS.get(range_label, RANGE_PRESETS[DEFAULT_RANGE]), None


def main_panel(cfg: dict) -> None:
    src = cfg["src"]
    now = time.time()
    status = _safe_status(src)
    was_ok = st.session_state.get("_status_ok")
    st.session_state["_status_ok"] = status.ok
    if status.ok and was_ok is False:
        st.rerun()            # the store just appeared: rebuild the sidebar (engines, sessions)
    st.markdown("### Context engine observatory")
    if not status.ok:
        st.caption(f"Checked {datetime.now():%H:%M:%S} · again every {cfg['refresh']:g} s")
        views.render_empty_state(src, status, cfg["refresh"])
        return
    span, end = _span(cfg["range_label"], cfg["custom"], status, now)
    f = make_filters(span, now, engines=cfg["engines"], session=cfg["session"], quantum=cfg["refresh"], end=end)
    source_txt = ("SQLite store" if src.kind == "sqlite" else "Prometheus") + f" `{src.label}`"
    if status.events is not None:
        source_txt += f" · {status.events:,} events"
    st.caption(f"{source_txt} · {cfg['range_label'].lower()} · updated {datetime.now():%H:%M:%S}"
               + (f", live every {cfg['refresh']:g} s" if cfg["live"] else ", paused"))
    ctx = views.Ctx(src=src, f=f, now=now, refresh=cfg["refresh"], status=status, max_series=cfg["max_series"],
                    all_engines=cfg["all_engines"], alerts_from=cfg["alerts_from"])
    snap = getattr(src, "snapshot", None)
    if snap is not None:
        with snap():
            _panels(ctx)
    else:
        _panels(ctx)


def _panels(ctx) -> None:
    alerts = views._guard(views.render_alert_banner, ctx)
    views._guard(views.render_kpis, ctx)
    tabs = st.tabs(list(views.TABS), key="view", on_change="rerun")
    renderers = {
        views.TAB_USAGE: lambda: views.view_usage(ctx),
        views.TAB_COMPRESS: lambda: views.view_compressions(ctx),
        views.TAB_SELECT: lambda: views.view_selection(ctx),
        views.TAB_ALERTS: lambda: views.view_alerts(ctx, alerts),
        views.TAB_LATENCY: lambda: views.view_latency(ctx),
        views.TAB_COMPARE: lambda: views.view_compare(ctx),
    }
    for tab, name in zip(tabs, views.TABS):
        with tab:
            if tab.open is False:          # lazy: only the selected tab queries
                continue
            views._guard(renderers[name])
    views.prefetch(ctx.src, ctx.f)         # warm the other tabs in the background


st.set_page_config(page_title="Observed context engine", page_icon="📈", layout="wide")
st.markdown("<style>[data-testid='stMainBlockContainer']{padding-top:2.2rem;padding-bottom:2rem}</style>",
            unsafe_allow_html=True)
def _run() -> None:
    cfg = sidebar()
    st.fragment(run_every=cfg["refresh"] if cfg["live"] else None)(main_panel)(cfg)


if os.environ.get("OBSERVED_DASHBOARD_PROFILE"):      # debugging aid: cProfile of each run, appended
    import cProfile
    import pstats

    _prof = cProfile.Profile()
    _prof.runcall(_run)
    with open(os.environ["OBSERVED_DASHBOARD_PROFILE"], "a") as _out:
        pstats.Stats(_prof, stream=_out).sort_stats("cumulative").print_stats(60)
else:
    _run()

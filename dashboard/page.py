"""The page: the sidebar (source, range, engines, session), then one ``st.fragment`` that
re-queries on every refresh tick without reloading the page: alert banner, headline numbers,
and the tabs (lazy: only the open one queries; the others are warmed in the background).
``app.py`` is the Streamlit script that runs :func:`main`."""


from __future__ import annotations

import os
import time
from datetime import datetime, timedelta

import streamlit as st

from . import options
from .about import about_line
from .context import Ctx, cached, guard, status_of
from .empty_state import render_empty_state
from .factory import alert_source, open_source
from .format import SESSION_PARAM, literal, plural, session_href
from .header import render_alert_banner, render_kpis
from .prefetch import prefetch
from .prom_http import check_url
from .sources import (
    CAP_SESSIONS,
    DEFAULT_RANGE,
    RANGE_PRESETS,
    SourceError,
    Status,
    make_filters,
)
from .tabs import TABS
from .tabs.session import TITLE as SESSION_TAB

RANGE_ALL = "All data"
RANGE_CUSTOM = "Custom range"
ALL_SESSIONS = "All sessions"
SESSION_CHOICES = 500            # the most recent sessions offered in the sidebar
KIND_NAMES = {options.SQLITE: "SQLite store", options.PROMETHEUS: "Prometheus"}
TARGET_LABELS = {options.SQLITE: "Store file", options.PROMETHEUS: "Prometheus URL"}


@st.cache_resource(show_spinner=False, max_entries=16)
def get_source(kind: str, target: str, probe: bool):
    return open_source(kind, target, probe=probe)


@st.cache_resource(show_spinner=False, max_entries=4)
def get_alert_source(url: str):
    return alert_source(url)


def _choose_source(opts: options.Options):
    """(kind, target, typed): the configured source, or, unless pinned, what the viewer picked.
    ``typed``: a target other than the configured one (never probed, see sqlite_source)."""
    configured = {options.SQLITE: opts.store_path(),
                  options.PROMETHEUS: opts.prometheus_url() or options.DEFAULT_PROMETHEUS_URL}
    default_kind = opts.default_kind()
    if opts.pinned:          # shown, not a widget: there is no state a client could send to change it
        kind, target = default_kind, configured[default_kind]
        st.markdown(f"**{KIND_NAMES[kind]}** (pinned)")
        st.code(target, language=None, wrap_lines=True)
        st.caption("Set on the command line (`--store` / `--prometheus`). Start the dashboard with "
                   "`--allow-source-change` to change it here.")
        return kind, target, False
    kind = st.radio("Source", list(options.KINDS), index=options.KINDS.index(default_kind),
                    format_func=KIND_NAMES.get, horizontal=True, key="source_kind")
    if kind == options.SQLITE:
        target = st.text_input(TARGET_LABELS[kind], value=configured[kind], key="store_path",
                               help="OBSERVED_STORE; opened read-only.")
    else:
        target = st.text_input(TARGET_LABELS[kind], value=configured[kind], key="prom_url",
                               help="OBSERVED_PROMETHEUS_URL; http:// or https:// only.")
    target = target.strip()
    return kind, target, target != configured[kind]


def sidebar():
    opts = options.parse()
    with st.sidebar:
        st.markdown("## Observed context engine")
        kind, target, typed = _choose_source(opts)
        bad_url = check_url(target) if kind == options.PROMETHEUS else None
        if bad_url:
            st.error(bad_url)
        src = get_source(kind, target, not typed)
        status = status_of(src) if not bad_url else Status("error", bad_url)
        options_ = [*RANGE_PRESETS, RANGE_ALL, RANGE_CUSTOM]
        range_label = st.selectbox("Time range", options_, index=options_.index(DEFAULT_RANGE), key="range")
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
                                        value=opts.refresh_seconds(), step=1.0, key="refresh"))
        span, end = _span(range_label, custom, status, now)
        f0 = make_filters(span, now, engines=engines, quantum=refresh, end=end)
        session = None
        max_series = 4
        if src.supports(CAP_SESSIONS):
            sessions = []
            if status.ok:
                try:
                    sessions = list(cached(src.cache_key(), "sessions", f0.key(), (), _src=src,
                                           _f=f0)["session"].head(SESSION_CHOICES))
                except SourceError:
                    sessions = []
            wanted = st.query_params.get(SESSION_PARAM) or None       # ?session=<id>: a link to its timeline
            if wanted is not None and wanted not in sessions:
                sessions.insert(0, wanted)
            choices = [ALL_SESSIONS, *sessions]
            pick = st.selectbox("Session", choices, index=choices.index(wanted) if wanted else 0, key="session",
                                help="Sessions active in the range, most recent first; its timeline is under "
                                     f"*{SESSION_TAB}*. A link: `?{SESSION_PARAM}=<id>`.")
            session = None if pick == ALL_SESSIONS else pick
            if session != wanted:                 # the address always says which session is focused
                if session is None:
                    st.query_params.pop(SESSION_PARAM, None)
                else:
                    st.query_params[SESSION_PARAM] = session
            if session is None:
                max_series = st.slider("Sessions drawn", 1, 12, 4, key="max_series",
                                       help="How many of the most recent sessions the usage view draws.")
        else:
            st.selectbox("Session", [ALL_SESSIONS], disabled=True, key="session_disabled",
                         help="Prometheus has no session ids; per-session views need the SQLite store.")
        live = st.toggle("Live", value=True, key="live", help="Re-query every refresh interval.")
        st.caption("Read-only: the dashboard never writes the store.")
        st.caption(f"About: {literal(about_line())}")
    prom_url = opts.prometheus_url()
    alerts_from = get_alert_source(prom_url) if kind == options.SQLITE and prom_url else None
    return dict(src=src, status=status, bad_url=bad_url, typed=typed, range_label=range_label, custom=custom,
                engines=tuple(engines), session=session, max_series=max_series, refresh=refresh, live=live,
                all_engines=all_engines, alerts_from=alerts_from)


def _ago(seconds: float) -> str:
    seconds = max(0.0, float(seconds))
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _span(range_label, custom, status, now):
    if range_label == RANGE_CUSTOM and custom:
        return custom[1] - custom[0], custom[1]
    if range_label == RANGE_ALL:
        first = status.first_ts if status.first_ts else now - 3600
        return max(60.0, now - first + 1), None
    preset = RANGE_PRESETS.get(range_label, RANGE_PRESETS[DEFAULT_RANGE])
    return fitted(preset, status, now), None


FITTED_SPANS = (300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400, 172800, 604800, 1209600)


def fitted(span: float, status, now: float) -> float:
    """A preset range fitted to the data: a store younger than the range is drawn from its first
    row (plus a margin), not as a sliver at the right edge of a "last 6 hours" chart."""
    first = getattr(status, "first_ts", None)
    if not isinstance(first, (int, float)) or first <= now - span:
        return span
    need = max(0.0, now - float(first)) * 1.1 + 30.0
    # a round width (stable from one refresh to the next, so cached queries and rates stay put)
    return min(span, next((w for w in FITTED_SPANS if w >= need), span))


def main_panel(cfg: dict) -> None:
    src = cfg["src"]
    now = time.time()
    st.markdown("### Context engine observatory")
    if cfg["bad_url"]:
        st.error(cfg["bad_url"])          # nothing was fetched
        return
    status = status_of(src)
    was_ok = st.session_state.get("_status_ok")
    st.session_state["_status_ok"] = status.ok
    if status.ok and was_ok is False:
        st.rerun()            # the store just appeared: rebuild the sidebar (engines, sessions)
    if not status.ok:
        st.caption(f"Checked {datetime.now():%H:%M:%S} · again every {cfg['refresh']:g} s")
        render_empty_state(src, status, cfg["refresh"], typed=cfg["typed"])
        return
    span, end = _span(cfg["range_label"], cfg["custom"], status, now)
    f = make_filters(span, now, engines=cfg["engines"], session=cfg["session"], quantum=cfg["refresh"], end=end)
    source_txt = f"{KIND_NAMES.get(src.kind, src.kind)} {literal(src.label)}"
    if status.events is not None:
        source_txt += f" · {status.events:,} events"
    if status.skipped:
        source_txt += f" · {plural(status.skipped, 'row')} without a numeric time skipped"
    range_txt = cfg["range_label"].lower()
    if cfg["range_label"] in RANGE_PRESETS and span < RANGE_PRESETS[cfg["range_label"]]:
        range_txt += (f" (the data begins {_ago(now - status.first_ts)} ago: the last {_ago(span)} are drawn)")
    st.caption(f"{source_txt} · {range_txt} · updated {datetime.now():%H:%M:%S}"
               + (f", live every {cfg['refresh']:g} s" if cfg["live"] else ", paused"))
    if cfg["session"]:
        st.caption(f"Focused on session {literal(cfg['session'])}: the headline figures, *Context usage*, "
                   f"*{SESSION_TAB}* and the incidents under *Alerts & incidents* are this session's only; "
                   "*Compressions*, *select_context*, *Hook latency*, *Compare engines* and the active alerts "
                   f"stay fleet-wide (all sessions of the selected engines). Link: `{session_href(cfg['session'])}`")
    ctx = Ctx(src=src, f=f, now=now, refresh=cfg["refresh"], status=status, max_series=cfg["max_series"],
              all_engines=cfg["all_engines"], alerts_from=cfg["alerts_from"])
    with src.snapshot():
        _panels(ctx)


def _panels(ctx: Ctx) -> None:
    ctx.alerts = guard(render_alert_banner, ctx)
    guard(render_kpis, ctx)
    tabs = st.tabs(list(TABS), key="view", on_change="rerun")
    for tab, (_name, render) in zip(tabs, TABS.items()):
        with tab:
            if tab.open is False:          # lazy: only the selected tab queries
                continue
            guard(render, ctx)
    prefetch(ctx.src, ctx.f)               # warm the other tabs in the background


def _run() -> None:
    st.set_page_config(page_title="Observed context engine", page_icon="📈", layout="wide")
    st.markdown("<style>[data-testid='stMainBlockContainer']{padding-top:2.2rem;padding-bottom:2rem}</style>",
                unsafe_allow_html=True)
    cfg = sidebar()
    st.fragment(run_every=cfg["refresh"] if cfg["live"] else None)(main_panel)(cfg)


def main() -> None:
    """One run of the page (``app.py`` calls it on every Streamlit rerun)."""
    if os.environ.get("OBSERVED_DASHBOARD_PROFILE"):      # debugging aid: cProfile of each run, appended
        import cProfile
        import pstats

        prof = cProfile.Profile()
        prof.runcall(_run)
        with open(os.environ["OBSERVED_DASHBOARD_PROFILE"], "a") as out:
            pstats.Stats(prof, stream=out).sort_stats("cumulative").print_stats(60)
    else:
        _run()

"""The dashboard in a real browser: ``streamlit run`` + headless Debian Chromium via Playwright.

The store and the Prometheus target come from the feeds of ``support.dashboard_feeds`` (by
default a real observed session, and the engine's own /metrics scraped by a real Prometheus);
one of each per module. Saves screenshots into ``test-artifacts/`` (gitignored):
``dashboard.png`` (the first view) and one per tab.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest
from support import browser, dashboard_feeds
from support.browser import ARTIFACTS, CHROMIUM, kpi, start_streamlit, wait_charts, wait_tables
from support.dashboard_app import PAYLOAD, drawn_sessions, open_sessions, payload_rows, pct0, write_store
from support.real_feeds import copy_store

from observed_engine.contract.store_schema import make_row
from observed_engine.store import StoreWriter

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not os.path.exists(CHROMIUM) and not os.environ.get("OBSERVED_REQUIRE_TOOLS"),
                       reason="Debian chromium not installed"),
]

# fixtures: the swappable feeds, shared with the AppTest checks (one of each per module), and a page
fed, metrics_endpoint, prometheus = dashboard_feeds.fed, dashboard_feeds.metrics_endpoint, dashboard_feeds.prometheus
page = browser.page


@pytest.fixture
def store(fed, tmp_path) -> Path:
    """A copy of the module's filled store (the live-refresh test writes to it)."""
    return copy_store(fed.path, tmp_path / "observed" / "telemetry.sqlite")


@pytest.fixture
def server(store, tmp_path, request) -> str:
    return start_streamlit(tmp_path, request, OBSERVED_STORE=str(store))


def test_dashboard_in_chromium(server, page, fed):
    ARTIFACTS.mkdir(exist_ok=True)
    t0 = time.time()
    page.goto(server)
    page.get_by_text("Context engine observatory").wait_for(timeout=60_000)
    wait_charts(page, len(drawn_sessions(fed)))
    first_paint = time.time() - t0
    body = page.inner_text("body")
    for text in ("Active sessions", "Compressions", "Compression timeouts", "Fail-opens", "Highest context usage",
                 "HermesContextCompressionTimeout", "HermesContextEngineFailOpen", "prompt tokens",
                 "compression threshold", "context window", "SQLite store"):
        assert text in body, text
    assert kpi(page, "Active sessions") == str(len(open_sessions(fed.path, fed.sessions)))
    assert kpi(page, "Compression timeouts") == str(fed.timeouts)
    assert kpi(page, "Fail-opens") == str(fed.fail_opens)
    assert kpi(page, "Highest context usage") == pct0(fed.highest_usage()[1])
    for session in drawn_sessions(fed):              # one sawtooth per drawn session, titled with its id
        assert session in body, session
    time.sleep(1.0)                  # let the last chart finish its transition
    page.screenshot(path=str(ARTIFACTS / "dashboard.png"), full_page=True)

    # every tab renders, with its charts
    for tab, expect, charts in (("Compressions", "Outcomes per engine", 2), ("select_context", "Churn rate", 3),
                                ("Alerts & incidents", "Timeouts and fail-opens", 0),
                                ("Hook latency", "Calls per second", 2), ("Compare engines", "Side by side", 3)):
        page.get_by_role("tab", name=tab).click()
        page.get_by_text(expect).first.wait_for(timeout=30_000)
        if charts:
            wait_charts(page, charts)
        wait_tables(page)
        time.sleep(0.8)
        slug = re.sub(r"[^a-z]+", "-", tab.lower()).strip("-")
        page.screenshot(path=str(ARTIFACTS / f"dashboard-{slug}.png"), full_page=True)
    assert not page.js_errors, page.js_errors
    print(f"first paint with charts: {first_paint:.2f} s")


def test_live_refresh_without_reload(server, page, store, fed):
    page.goto(server)
    page.get_by_text("Context engine observatory").wait_for(timeout=60_000)
    wait_charts(page, len(drawn_sessions(fed)))
    before, after = str(fed.fail_opens), str(fed.fail_opens + 1)
    assert kpi(page, "Fail-opens") == before
    page.evaluate("window.__marker = 'still the same page'")
    w = StoreWriter(store, retention_days=0)
    w.submit([make_row(ts=time.time(), host="h", pid=1, session=fed.sessions[0], engine=fed.engines[0],
                       hook="select_context", event="fail_open", reason="exception")])
    assert w.flush(20)
    w.close()
    deadline = time.time() + 20
    while time.time() < deadline and kpi(page, "Fail-opens") != after:
        time.sleep(0.5)
    assert kpi(page, "Fail-opens") == after
    assert page.evaluate("window.__marker") == "still the same page"     # no reload


@pytest.mark.prometheus
def test_prometheus_source_in_chromium(prometheus, metrics_endpoint, page, tmp_path, request):
    ARTIFACTS.mkdir(exist_ok=True)
    url = start_streamlit(tmp_path, request, OBSERVED_PROMETHEUS_URL=prometheus)
    page.goto(url)
    page.get_by_text("Context engine observatory").wait_for(timeout=60_000)
    page.get_by_text("never metric labels").wait_for(timeout=30_000)
    wait_charts(page, len(metrics_endpoint.engines))          # each engine's usage gauges
    body = page.inner_text("body")
    assert "Prometheus" in body and "HermesContextEngineFailOpen" in body
    assert kpi(page, "Engines") == str(len(metrics_endpoint.engines))
    time.sleep(1.0)
    page.screenshot(path=str(ARTIFACTS / "dashboard-prometheus.png"), full_page=True)
    page.get_by_role("tab", name="Compressions").click()
    page.get_by_text("Outcomes per engine").wait_for(timeout=30_000)
    wait_charts(page, 1)
    wait_tables(page)
    time.sleep(0.8)
    page.screenshot(path=str(ARTIFACTS / "dashboard-prometheus-compressions.png"), full_page=True)
    assert not page.js_errors, page.js_errors


MARKDOWN_ELEMENTS = '[data-testid="stMarkdownContainer"], [data-testid="stCaptionContainer"]'


def test_identifiers_render_as_text_in_chromium(page, tmp_path, request):
    """An engine and a session named like Markdown with an image, a link and HTML: Streamlit's own
    renderer shows the text; the page holds no image or link from it and fetches nothing."""
    from observed_engine.dashboard.sample_data import scenario_rows

    now = time.time()
    store = write_store(tmp_path / "observed" / "telemetry.sqlite", scenario_rows(now) + payload_rows(now))
    asked = []
    page.on("request", lambda r: asked.append(r.url))
    page.goto(start_streamlit(tmp_path, request, OBSERVED_STORE=str(store)))
    page.get_by_text("Context engine observatory").wait_for(timeout=60_000)
    # the session named PAYLOAD, picked in the sidebar: its id in the usage caption, its hook above
    # the captured text
    page.get_by_role("combobox", name="Session").click()
    page.get_by_role("option", name=PAYLOAD, exact=True).click()
    page.locator('[data-testid="stCaptionContainer"]', has_text="prompt tokens after every response against the "
                 "compression threshold and the model").wait_for(timeout=30_000)
    page.get_by_text("Captured message text").click()             # open the expander: the hook's line
    page.get_by_text("text of ").first.wait_for(timeout=30_000)
    shown = []
    for tab, expect in ((None, "Compressions of this session"), ("Compare engines", "Side by side"),
                        ("Alerts & incidents", "Timeouts and fail-opens")):
        if tab:
            page.get_by_role("tab", name=tab).click()
        page.get_by_text(expect).first.wait_for(timeout=30_000)
        time.sleep(0.5)
        texts = page.locator(MARKDOWN_ELEMENTS).all_inner_texts()
        shown += [t for t in texts if PAYLOAD in t]
        assert page.locator("img[src='x'], img[src*='beacon']").count() == 0, tab
        assert page.locator("a[href*='127.0.0.1:9/']").count() == 0, tab
        assert page.locator("strong", has_text="bold").count() == 0, tab
    assert len(shown) >= 3, shown          # the session caption, the hook, the compare header
    assert not [u for u in asked if "127.0.0.1:9/" in u], asked
    assert not page.js_errors, page.js_errors


def test_no_deploy_button_and_no_usage_statistics_without_flags(page, tmp_path, request, store):
    """``streamlit run dashboard/app.py`` with none of the launcher's flags: the dashboard's own
    configuration (.streamlit/config.toml next to app.py) turns the developer toolbar (Deploy) and
    usage statistics off; the page asks nothing from anywhere but the dashboard."""
    from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
    from streamlit.proto.NewSession_pb2 import Config

    configs = []

    def on_ws(ws):
        def frame(payload):
            if isinstance(payload, (bytes, bytearray)):
                msg = ForwardMsg.FromString(bytes(payload))
                if msg.WhichOneof("type") == "new_session":
                    configs.append(msg.new_session.config)
        ws.on("framereceived", frame)

    asked = []
    page.on("websocket", on_ws)
    page.on("request", lambda r: asked.append(r.url))
    url = start_streamlit(tmp_path, request, flags=(), OBSERVED_STORE=str(store))
    page.goto(url)
    page.get_by_text("Context engine observatory").wait_for(timeout=60_000)
    page.get_by_text("Active sessions").first.wait_for(timeout=30_000)
    time.sleep(1.0)
    assert configs, "no NewSession message seen"
    assert all(c.toolbar_mode == Config.ToolbarMode.VIEWER for c in configs)
    assert not any(c.gather_usage_stats for c in configs)
    assert page.locator('[data-testid="stAppDeployButton"]').count() == 0
    assert page.get_by_role("button", name="Deploy").count() == 0
    assert [u for u in asked if not u.startswith(url.rstrip("/"))] == []
    assert not page.js_errors, page.js_errors

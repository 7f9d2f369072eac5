"""The dashboard in a real browser: ``streamlit run`` + headless Debian Chromium via Playwright.

The store and the Prometheus target come from the feeds of ``test_dashboard_apptest`` (by
default a real observed session, and the engine's own /metrics scraped by a real Prometheus);
one of each per module. Saves screenshots into ``test-artifacts/`` (gitignored):
``dashboard.png`` (the first view) and one per tab.
"""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path
from typing import Sequence

import pytest

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not os.path.exists(CHROMIUM) and not os.environ.get("OBSERVED_REQUIRE_TOOLS"),
                       reason="Debian chromium not installed"),
]

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from support.real_feeds import copy_store  # noqa: E402
from support.servers import ServerProcess  # noqa: E402

import tests.dashboard.test_apptest as apptest  # noqa: E402
from tests.dashboard.test_apptest import drawn_sessions, open_sessions, pct0, write_store  # noqa: E402
from tests.dashboard.test_markdown import PAYLOAD, payload_rows  # noqa: E402

# the swappable feeds, shared with the AppTest module (fixtures: one of each per module)
fed, metrics_endpoint, prometheus = apptest.fed, apptest.metrics_endpoint, apptest.prometheus

from observed_engine.contract.store_schema import make_row  # noqa: E402
from observed_engine.store import StoreWriter  # noqa: E402


@pytest.fixture
def store(fed, tmp_path) -> Path:
    """A copy of the module's filled store (the live-refresh test writes to it)."""
    return copy_store(fed.path, tmp_path / "observed" / "telemetry.sqlite")


class StreamlitServer(ServerProcess):
    """``streamlit run dashboard/app.py`` from the repo root, ready when /_stcore/health answers."""

    name = "streamlit"
    ready_path = "/_stcore/health"

    # what ``observed-engine dashboard`` passes (observed_engine.demo.dashboard_command)
    LAUNCHER_FLAGS = ("--browser.gatherUsageStats", "false", "--client.toolbarMode", "viewer")

    def start(self, env: dict, flags: Sequence[str] = LAUNCHER_FLAGS) -> StreamlitServer:
        self._spawn([sys.executable, "-m", "streamlit", "run", "dashboard/app.py", "--server.headless", "true",
                     "--server.address", "127.0.0.1", "--server.port", str(self.port), *flags], env=env, cwd=ROOT)
        self.wait_ready(timeout=60)
        return self


def start_streamlit(tmp_path, request, flags: Sequence[str] = StreamlitServer.LAUNCHER_FLAGS, **env_vars) -> str:
    env = dict(os.environ, OBSERVED_REFRESH_SECONDS="2")
    for var in ("OBSERVED_STORE", "OBSERVED_PROMETHEUS_URL", "OBSERVED_SOURCE"):
        env.pop(var, None)
    env.update(env_vars)
    streamlit = StreamlitServer(tmp_path)
    request.addfinalizer(streamlit.stop)  # kills the recorded PID, even if startup fails
    return streamlit.start(env, flags).url + "/"


@pytest.fixture
def server(store, tmp_path, request) -> str:
    return start_streamlit(tmp_path, request, OBSERVED_STORE=str(store))


@pytest.fixture
def page(request):
    sync_api = pytest.importorskip("playwright.sync_api")
    pw = sync_api.sync_playwright().start()
    browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
    pg = browser.new_page(viewport={"width": 1440, "height": 1700})
    errors = []
    pg.on("pageerror", lambda e: errors.append(str(e)))

    def stop():
        browser.close()
        pw.stop()

    request.addfinalizer(stop)
    pg.js_errors = errors
    return pg


def _wait_charts(pg, n: int, timeout_s: float = 60.0) -> int:
    """Wait until ``n`` vega-embed charts have drawn (a canvas or an svg with marks)."""
    deadline = time.time() + timeout_s
    drawn = 0
    while time.time() < deadline:
        drawn = pg.locator(".vega-embed canvas, .vega-embed svg.marks").count()
        if drawn >= n:
            return drawn
        time.sleep(0.25)
    raise AssertionError(f"only {drawn} of {n} charts rendered")


def _wait_tables(pg, timeout_s: float = 30.0) -> None:
    """Wait until every st.dataframe on the page has drawn its grid."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        frames = pg.locator('[data-testid="stDataFrame"]').count()
        drawn = pg.locator('[data-testid="stDataFrame"] canvas').count()
        if drawn >= frames:
            return
        time.sleep(0.25)


def _kpi(pg, label: str) -> str:
    box = pg.locator('[data-testid="stMetric"]', has_text=label).first
    return box.locator('[data-testid="stMetricValue"]').inner_text().strip()


def test_dashboard_in_chromium(server, page, fed):
    ARTIFACTS.mkdir(exist_ok=True)
    t0 = time.time()
    page.goto(server)
    page.get_by_text("Context engine observatory").wait_for(timeout=60_000)
    _wait_charts(page, len(drawn_sessions(fed)))
    first_paint = time.time() - t0
    body = page.inner_text("body")
    for text in ("Active sessions", "Compressions", "Compression timeouts", "Fail-opens", "Highest context usage",
                 "HermesContextCompressionTimeout", "HermesContextEngineFailOpen", "prompt tokens",
                 "compression threshold", "context window", "SQLite store"):
        assert text in body, text
    assert _kpi(page, "Active sessions") == str(len(open_sessions(fed.path, fed.sessions)))
    assert _kpi(page, "Compression timeouts") == str(fed.timeouts)
    assert _kpi(page, "Fail-opens") == str(fed.fail_opens)
    assert _kpi(page, "Highest context usage") == pct0(fed.highest_usage()[1])
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
            _wait_charts(page, charts)
        _wait_tables(page)
        time.sleep(0.8)
        slug = re.sub(r"[^a-z]+", "-", tab.lower()).strip("-")
        page.screenshot(path=str(ARTIFACTS / f"dashboard-{slug}.png"), full_page=True)
    assert not page.js_errors, page.js_errors
    print(f"first paint with charts: {first_paint:.2f} s")


def test_live_refresh_without_reload(server, page, store, fed):
    page.goto(server)
    page.get_by_text("Context engine observatory").wait_for(timeout=60_000)
    _wait_charts(page, len(drawn_sessions(fed)))
    before, after = str(fed.fail_opens), str(fed.fail_opens + 1)
    assert _kpi(page, "Fail-opens") == before
    page.evaluate("window.__marker = 'still the same page'")
    w = StoreWriter(store, retention_days=0)
    w.submit([make_row(ts=time.time(), host="h", pid=1, session=fed.sessions[0], engine=fed.engines[0],
                       hook="select_context", event="fail_open", reason="exception")])
    assert w.flush(20)
    w.close()
    deadline = time.time() + 20
    while time.time() < deadline and _kpi(page, "Fail-opens") != after:
        time.sleep(0.5)
    assert _kpi(page, "Fail-opens") == after
    assert page.evaluate("window.__marker") == "still the same page"     # no reload


@pytest.mark.prometheus
def test_prometheus_source_in_chromium(prometheus, metrics_endpoint, page, tmp_path, request):
    ARTIFACTS.mkdir(exist_ok=True)
    url = start_streamlit(tmp_path, request, OBSERVED_PROMETHEUS_URL=prometheus)
    page.goto(url)
    page.get_by_text("Context engine observatory").wait_for(timeout=60_000)
    page.get_by_text("never metric labels").wait_for(timeout=30_000)
    _wait_charts(page, len(metrics_endpoint.engines))          # each engine's usage gauges
    body = page.inner_text("body")
    assert "Prometheus" in body and "HermesContextEngineFailOpen" in body
    assert _kpi(page, "Engines") == str(len(metrics_endpoint.engines))
    time.sleep(1.0)
    page.screenshot(path=str(ARTIFACTS / "dashboard-prometheus.png"), full_page=True)
    page.get_by_role("tab", name="Compressions").click()
    page.get_by_text("Outcomes per engine").wait_for(timeout=30_000)
    _wait_charts(page, 1)
    _wait_tables(page)
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

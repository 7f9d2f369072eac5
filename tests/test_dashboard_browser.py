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

import pytest

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not os.path.exists(CHROMIUM) and not os.environ.get("OBSERVED_REQUIRE_TOOLS"),
                       reason="Debian chromium not installed"),
]

sys.path.insert(0, str(Path(__file__).resolve().parent))
from support.real_feeds import copy_store  # noqa: E402
from support.servers import ServerProcess  # noqa: E402
import test_dashboard_apptest as apptest  # noqa: E402
from test_dashboard_apptest import drawn_sessions, pct0  # noqa: E402

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

    def start(self, env: dict) -> "StreamlitServer":
        self._spawn([sys.executable, "-m", "streamlit", "run", "dashboard/app.py", "--server.headless", "true",
                     "--server.address", "127.0.0.1", "--server.port", str(self.port),
                     "--browser.gatherUsageStats", "false", "--client.toolbarMode", "viewer"], env=env, cwd=ROOT)
        self.wait_ready(timeout=60)
        return self


def start_streamlit(tmp_path, request, **env_vars) -> str:
    env = dict(os.environ, OBSERVED_REFRESH_SECONDS="2")
    for var in ("OBSERVED_STORE", "OBSERVED_PROMETHEUS_URL", "OBSERVED_SOURCE"):
        env.pop(var, None)
    env.update(env_vars)
    streamlit = StreamlitServer(tmp_path)
    request.addfinalizer(streamlit.stop)  # kills the recorded PID, even if startup fails
    return streamlit.start(env).url + "/"


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
    assert _kpi(page, "Active sessions") == str(len(fed.sessions))
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

"""The dashboard in a real browser: ``streamlit run`` on 127.0.0.1 and headless Debian Chromium
driven by Playwright (as root it needs ``--no-sandbox``). Shared by the browser checks in
tests/e2e/."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Sequence

import pytest
from support.servers import ServerProcess

ROOT = Path(__file__).resolve().parents[2]             # the repository
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]



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


def wait_charts(pg, n: int, timeout_s: float = 60.0) -> int:
    """Wait until ``n`` vega-embed charts have drawn (a canvas or an svg with marks)."""
    deadline = time.time() + timeout_s
    drawn = 0
    while time.time() < deadline:
        drawn = pg.locator(".vega-embed canvas, .vega-embed svg.marks").count()
        if drawn >= n:
            return drawn
        time.sleep(0.25)
    raise AssertionError(f"only {drawn} of {n} charts rendered")


def wait_tables(pg, timeout_s: float = 30.0) -> None:
    """Wait until every st.dataframe on the page has drawn its grid."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        frames = pg.locator('[data-testid="stDataFrame"]').count()
        drawn = pg.locator('[data-testid="stDataFrame"] canvas').count()
        if drawn >= frames:
            return
        time.sleep(0.25)


def kpi(pg, label: str) -> str:
    box = pg.locator('[data-testid="stMetric"]', has_text=label).first
    return box.locator('[data-testid="stMetricValue"]').inner_text().strip()

"""The demo's store in a real browser (issue 15 items 6-8): ``observed-engine demo`` drives real
Hermes agents against its fake LLM for 45 s; then ``streamlit run`` on that store and headless
Debian Chromium (Playwright) take a screenshot of every view, the session timeline opened by its
``?session=`` link, into ``test-artifacts/demo-*.png``."""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import time
from pathlib import Path
from urllib.parse import quote

import pytest
from support import browser
from support.browser import ARTIFACTS, CHROMIUM, start_streamlit, wait_charts, wait_tables
from support.demo import demo_command, demo_env

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not os.path.exists(CHROMIUM) and not os.environ.get("OBSERVED_REQUIRE_TOOLS"),
                       reason="Debian chromium not installed"),
]

page = browser.page          # a fixture

DEMO_SECONDS = 45          # "every view populated within a minute"
# the demo's defaults (3 sessions, 3 s deadline, every 5th summary slow, every 4th failing), faster turns
DEMO_TRAFFIC = ["--turn-delay", "0.02", "--reply-chars", "60000"]


@pytest.fixture(scope="module")
def demo_store(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("demo-browser")
    store = tmp / "demo.sqlite"
    proc = subprocess.run(demo_command() + ["--duration", str(DEMO_SECONDS), "--no-dashboard", *DEMO_TRAFFIC,
                                            "--store", str(store)],
                          cwd=tmp, env=demo_env(tmp), capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return store


def _rows(store: Path, sql: str, params=()):
    with sqlite3.connect(f"file:{store}?mode=ro", uri=True) as db:
        return db.execute(sql, params).fetchall()


def test_demo_views_in_chromium(demo_store, page, tmp_path, request):  # noqa: F811 (the page fixture)
    ARTIFACTS.mkdir(exist_ok=True)
    # every view has its data after DEMO_SECONDS of the demo
    counts = dict(_rows(demo_store, "SELECT hook, COUNT(*) FROM events GROUP BY hook"))
    assert counts.get("update_from_response") and counts.get("compress") and counts.get("select_context")
    events = {e for (e,) in _rows(demo_store, "SELECT DISTINCT event FROM events")}
    assert {"deadline_exceeded", "fail_open"} & events, events
    # the session to open: the one with the most compress() rows (summary failures first)
    session = _rows(demo_store, "SELECT session, SUM(event = 'summary_failure') AS f, SUM(hook = 'compress') AS c "
                    "FROM events WHERE session IS NOT NULL GROUP BY session ORDER BY f DESC, c DESC, COUNT(*) DESC "
                    "LIMIT 1")[0][0]

    url = start_streamlit(tmp_path, request, OBSERVED_STORE=str(demo_store))
    page.goto(url)
    page.get_by_text("Context engine observatory").wait_for(timeout=60_000)
    wait_charts(page, 2)
    body = page.inner_text("body")
    assert "the data begins" in body                       # a young store: the range is fitted to it
    assert "whole-request estimate" in body
    time.sleep(1.0)
    page.screenshot(path=str(ARTIFACTS / "demo-context-usage.png"), full_page=True)
    for tab, expect, charts in (("Compressions", "Outcomes per engine", 2), ("select_context", "Churn rate", 3),
                                ("Alerts & incidents", "Timeouts and fail-opens", 0),
                                ("Hook latency", "Calls per second", 2)):
        page.get_by_role("tab", name=tab).click()
        page.get_by_text(expect).first.wait_for(timeout=30_000)
        if charts:
            wait_charts(page, charts)
        wait_tables(page)
        time.sleep(0.8)
        slug = re.sub(r"[^a-z]+", "-", tab.lower()).strip("-")
        page.screenshot(path=str(ARTIFACTS / f"demo-{slug}.png"), full_page=True)

    # the session timeline, by its link
    page.goto(url + "?session=" + quote(session, safe=""))
    page.get_by_text("Context engine observatory").wait_for(timeout=60_000)
    page.get_by_role("tab", name="Session timeline").click()
    page.get_by_text("Every hook call and event, in order").wait_for(timeout=30_000)
    wait_charts(page, 1)
    wait_tables(page)
    body = page.inner_text("body")
    assert session in body and "Focused on session" in body
    assert "Session" in body and ("ended" in body or "open" in body)
    time.sleep(1.0)
    page.screenshot(path=str(ARTIFACTS / "demo-session-timeline.png"), full_page=True)
    assert not page.js_errors, page.js_errors

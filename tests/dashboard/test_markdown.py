"""Identifiers and error texts are literal text, never Markdown (issue 13 item 5), under AppTest.

Engine names, session ids, hooks, reasons, alert names, paths, URLs and error messages come from
outside. Pasted into ``st.markdown`` / ``caption`` / ``info`` (once inside backticks, which a
backtick of their own ends), they rendered bold text, links and images -- and the browser
fetched the image. Every element that Streamlit renders as Markdown is rendered here with a
CommonMark renderer: none may hold an image, a link, emphasis or raw HTML from the payload, and
the payload must read exactly as it is wherever it is shown.
(tests/e2e/test_dashboard_browser.py checks the same in Chromium, Streamlit's own renderer.)
"""

from __future__ import annotations

import json
import time

import pytest
from observed_engine.dashboard.sample_data import scenario_rows
from support.dashboard_app import MARKDOWN, PAYLOAD, FakePrometheus, app, payload_rows, run_ok, show, texts, write_store
from support.servers import refused_port

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

BEACON = "127.0.0.1:9"
TABS = ("Context usage", "Compressions", "select_context", "Alerts & incidents", "Hook latency", "Compare engines")



@pytest.fixture
def store(tmp_path):
    now = time.time()
    return write_store(tmp_path / "observed" / "telemetry.sqlite", scenario_rows(now) + payload_rows(now))


def markdown_of(at) -> list:
    """(where, Markdown source) of everything Streamlit renders as Markdown."""
    out = [(e.type, e.value) for e in [*at.markdown, *at.caption, *at.info, *at.warning, *at.error, *at.success]]
    out += [("metric label", m.label) for m in at.metric] + [("metric help", m.proto.help) for m in at.metric]
    out += [("expander", e.label) for e in at.expander]
    return [(w, str(s)) for w, s in out if s]


def check_literal(at, payload: str = PAYLOAD) -> int:
    """No Markdown element renders ``payload`` as markup; returns how many show it (as text)."""
    shown = 0
    for where, source in markdown_of(at):
        html = MARKDOWN.render(source)
        assert "<img" not in html and "<a " not in html, (where, source, html)
        assert "<strong>bold</strong>" not in html, (where, html)
        assert "<code>**bold**</code>" not in html, (where, html)
        # GitHub's autolink literals (Streamlit's renderer has them, this one not) link a URL in
        # plain text, escaped or not: the payload's URLs must stand in code only
        assert not [t for t in _plain_text(source) if f"{BEACON}/" in t], (where, source)
        if "bold" in source:
            assert payload in _text(html), (where, source, html)
            shown += 1
    return shown


def _plain_text(source: str) -> list:
    """The plain-text pieces of a Markdown source (not code, not markup)."""
    out = []
    for block in MARKDOWN.parse(source):
        out += [c.content for c in block.children or () if c.type == "text"]
    return out


def _text(html: str) -> str:
    import html as htmllib
    import re

    return htmllib.unescape(re.sub(r"<[^>]+>", "", html))


def test_store_identifiers_are_literal_in_every_tab(monkeypatch, store):
    at = run_ok(app(monkeypatch, store=store))
    shown = check_literal(at)                       # the headline: the fullest session's id in a help
    for tab in TABS:
        show(at, tab)
        shown += check_literal(at)
    at.selectbox(key="session").set_value(PAYLOAD)
    show(at, "Context usage")
    shown += check_literal(at)
    assert any("capture_content was on" in e.label for e in at.expander)   # the hook's text was there
    show(at, "Alerts & incidents")
    shown += check_literal(at)
    # the session caption, the hook above its captured text, the compare header, the help
    assert shown >= 4, shown


def test_the_compare_tab_names_engines_literally(monkeypatch, store):
    at = show(run_ok(app(monkeypatch, store=store)), "Compare engines")
    headers = [m.value for m in at.markdown if m.value.startswith("#### ")]
    assert len(headers) == 2 and check_literal(at) >= 1
    assert PAYLOAD in _text(MARKDOWN.render(headers[0]))


def _fake_prometheus(name: str) -> FakePrometheus:
    labels = {"engine": name, "hook": name, "outcome": "compressed", "result": "unchanged", "kind": "deadline_exceeded",
              "reason": name, "cause": "auth", "stage": "before", "alertname": name, "severity": "warning"}

    def answer(path: str):
        now = time.time()
        if path.startswith("/api/v1/alerts"):
            data = {"alerts": [{"labels": labels, "annotations": {"summary": name}, "state": "firing",
                                "activeAt": "2026-01-01T00:00:00Z"}]}
        elif path.startswith("/api/v1/query_range"):
            data = {"resultType": "matrix", "result": [{"metric": labels, "values": [[now - 60, "5"], [now, "6"]]}]}
        else:
            data = {"resultType": "vector", "result": [{"metric": labels, "value": [now, "3"]}]}
        return 200, {"Content-Type": "application/json"}, json.dumps({"status": "success", "data": data})

    return FakePrometheus(answer)


def test_prometheus_labels_and_alert_names_are_literal(monkeypatch, store):
    """An engine label and an alert name from Prometheus: as the source, and next to the store."""
    fake = _fake_prometheus(PAYLOAD)
    try:
        at = run_ok(app(monkeypatch, prometheus=fake.url))
        shown = check_literal(at)
        for tab in TABS:
            show(at, tab)
            shown += check_literal(at)
        assert shown >= 2, shown           # the banner's alert name, the compare tab's "only <engine>"
        at = run_ok(app(monkeypatch, store=store, prometheus=fake.url))
        assert check_literal(at) >= 1      # the banner
    finally:
        fake.stop()


def test_paths_urls_and_errors_are_literal(monkeypatch, tmp_path):
    """A store path and a Prometheus URL holding the payload (as far as a path can), and the error
    messages that repeat them."""
    safe = PAYLOAD.replace("/", "|")
    missing = tmp_path / safe / "telemetry.sqlite"
    at = run_ok(app(monkeypatch, store=missing))
    assert "No telemetry store yet" in texts(at)
    assert check_literal(at, str(missing)) >= 1
    url = f"http://127.0.0.1:{refused_port()}/" + PAYLOAD.replace(" ", "%20")
    at = run_ok(app(monkeypatch, prometheus=url))
    assert at.error and "Cannot reach Prometheus" in texts(at)
    assert check_literal(at, url) >= 1

"""The dashboard as an attack surface (issue 13 item 4), under AppTest.

* Started with ``--store`` / ``--prometheus`` the source is pinned: the sidebar shows it read-only
  and no widget state (not even one injected for the disabled widgets) points the dashboard
  elsewhere, unless ``--allow-source-change`` or ``OBSERVED_ALLOW_SOURCE_CHANGE=1``.
* A Prometheus URL is http:// or https:// only: anything else is refused, with one clear
  sentence, before any request; so is a redirect to another scheme.
* A fetched body never reaches the page: a failed answer shows its HTTP status only.
* A store path typed into the sidebar is never looked up on disk, and every way of not being
  able to open it reads the same.
"""

from __future__ import annotations

import json
import os
import re
import socket
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from observed_engine.dashboard.prom_http import BAD_URL
from observed_engine.dashboard.sample_data import scenario_rows
from support.dashboard_app import (
    FakePrometheus,
    app,
    markdown_elements,
    metrics,
    rendered,
    run_ok,
    texts,
    write_store,
)

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

SCENARIO_SESSIONS = 3            # sess-alpha, sess-beta, sess-gamma
UNOPENABLE = "Cannot open the store at that path."


@pytest.fixture
def stores(tmp_path):
    """(store, other): the scenario, and a store of one of its sessions only."""
    now = time.time()
    rows = scenario_rows(now)
    store = write_store(tmp_path / "pinned" / "telemetry.sqlite", rows)
    other = write_store(tmp_path / "other" / "telemetry.sqlite", [r for r in rows if r[3] == "sess-gamma"])
    return store, other


def everything_shown(at) -> str:
    """Every text the page holds: Markdown sources and what they render to, metric labels, values
    and help, widget labels and values, table cells."""
    parts = [e.value for e in markdown_elements(at)] + [texts(at)]
    parts += [f"{m.label} {m.value} {m.proto.help}" for m in at.metric]
    for kind in ("text_input", "radio", "selectbox", "multiselect"):
        for w in at.get(kind):
            parts.append(f"{w.proto.label} {getattr(w, 'value', '')} {list(getattr(w.proto, 'options', []))}")
    for df in at.dataframe:
        parts.append(df.value.to_csv())
    parts += [t.value for t in at.get("text")] + [c.value for c in at.get("code")]
    return "\n".join(str(p) for p in parts)


def source_label(at) -> str:
    """The caption above the headline numbers that names the source."""
    return next(rendered(c.value) for c in at.caption if "updated" in c.value)


# --- a pinned source ------------------------------------------------------------------------

def test_pinned_store_is_shown_read_only_and_cannot_be_changed(monkeypatch, stores):
    store, other = stores
    at = run_ok(app(monkeypatch, argv=["--store", store]))
    assert metrics(at)["Active sessions"] == str(SCENARIO_SESSIONS)
    assert str(store) in source_label(at)
    # read-only in the sidebar: the store shown as text, no widget that picks a source
    assert [c.value for c in at.sidebar.code] == [str(store)] and "pinned" in texts(at)
    assert not at.sidebar.text_input and not at.sidebar.radio
    # widget state a client sends anyway (the keys of an unpinned page's source widgets) points
    # nowhere else
    for key, value in (("store_path", str(other)), ("source_kind", "prometheus"),
                       ("prom_url", "http://127.0.0.1:1")):
        at.session_state[key] = value
    run_ok(at)
    assert metrics(at)["Active sessions"] == str(SCENARIO_SESSIONS)
    assert str(store) in source_label(at) and str(other) not in everything_shown(at)


def test_pinned_prometheus_is_shown_read_only_and_cannot_be_changed(monkeypatch, stores):
    store, _ = stores
    fake = FakePrometheus(lambda path: (200, {"Content-Type": "application/json"},
                                        json.dumps({"status": "success", "data": {"resultType": "vector",
                                                                                    "result": []}})))
    try:
        at = run_ok(app(monkeypatch, store=store, argv=["--prometheus", fake.url]))
        assert [c.value for c in at.sidebar.code] == [fake.url]
        assert not at.sidebar.text_input and not at.sidebar.radio
        assert "No observed-engine metrics in Prometheus yet" in texts(at) and fake.url in texts(at)
        for key, value in (("source_kind", "sqlite"), ("store_path", str(store)), ("prom_url", "http://127.0.0.1:1")):
            at.session_state[key] = value
        run_ok(at)
        assert "No observed-engine metrics in Prometheus yet" in texts(at) and fake.url in texts(at)
        assert "Active sessions" not in metrics(at) and "127.0.0.1:1" not in everything_shown(at)
        assert fake.paths and all(p.startswith("/api/v1/") for p in fake.paths)
    finally:
        fake.stop()


@pytest.mark.parametrize("how", ["flag", "env"])
def test_allow_source_change_unpins(monkeypatch, stores, how):
    store, other = stores
    argv = ["--store", store] + (["--allow-source-change"] if how == "flag" else [])
    at = app(monkeypatch, argv=argv)
    if how == "env":
        monkeypatch.setenv("OBSERVED_ALLOW_SOURCE_CHANGE", "1")
    run_ok(at)
    assert metrics(at)["Active sessions"] == str(SCENARIO_SESSIONS)
    field = at.text_input(key="store_path")
    assert not field.proto.disabled and field.value == str(store)
    field.set_value(str(other))
    run_ok(at)
    assert metrics(at)["Active sessions"] == "1"
    assert str(other) in source_label(at)


# --- Prometheus URLs: http and https only -------------------------------------------------------

NOT_HTTP = ["file:///etc/passwd", "ftp://127.0.0.1:21/pub", "gopher://127.0.0.1:70/", "data:text/plain,hello",
            "javascript:alert(1)", "127.0.0.1:9090", "http://", "https:///api"]


@pytest.fixture
def fetches(monkeypatch):
    """Every URL urllib is asked to open (the dashboard's only way of fetching)."""
    seen = []
    real = urllib.request.OpenerDirector.open

    def open_(self, fullurl, *args, **kwargs):
        seen.append(fullurl if isinstance(fullurl, str) else fullurl.full_url)
        return real(self, fullurl, *args, **kwargs)

    monkeypatch.setattr(urllib.request.OpenerDirector, "open", open_)
    return seen


@pytest.mark.parametrize("where", ["flag", "sidebar"])
@pytest.mark.parametrize("url", NOT_HTTP)
def test_prometheus_url_must_be_http_or_https(monkeypatch, stores, fetches, url, where):
    store, _ = stores
    if where == "flag":
        at = run_ok(app(monkeypatch, argv=["--prometheus", url]))
    else:
        at = run_ok(app(monkeypatch, store=store))
        at.radio(key="source_kind").set_value("prometheus")
        run_ok(at)                     # (asks the default http://127.0.0.1:9090: allowed)
        fetches.clear()
        at.text_input(key="prom_url").set_value(url)
        run_ok(at)
    assert BAD_URL in texts(at)
    assert "Cannot reach Prometheus" not in texts(at)
    assert fetches == [], "a URL that is not http(s) was opened"


@pytest.mark.parametrize("scheme", ["ftp", "file"])
def test_a_redirect_to_another_scheme_is_refused(monkeypatch, fetches, scheme):
    """Prometheus (or something posing as it) redirects to ftp:// or file://: not followed."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(5)
    listener.settimeout(0.2)
    accepted = []

    def accept():
        while True:
            try:
                accepted.append(listener.accept()[0])
            except TimeoutError:
                continue
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    port = listener.getsockname()[1]
    target = f"ftp://127.0.0.1:{port}/x" if scheme == "ftp" else "file:///etc/passwd"
    fake = FakePrometheus(lambda path: (302, {"Location": target}, ""))
    try:
        at = run_ok(app(monkeypatch, prometheus=fake.url))
        assert "HTTP 302 Found" in texts(at)
        assert "root:" not in everything_shown(at)
        time.sleep(0.3)
        assert accepted == [], "the redirect to ftp:// was followed"
        assert all(u.startswith(fake.url) for u in fetches), fetches
    finally:
        fake.stop()
        listener.close()


# --- a fetched body never reaches the page --------------------------------------------------------

SECRET = "SECRET-from-the-body"
JSON = {"Content-Type": "application/json"}
ANSWERS = {
    "400 with Prometheus' error JSON": (400, JSON, json.dumps({"status": "error", "errorType": "bad_data",
                                                                "error": f"{SECRET} <img src=x>"}),
                                        "HTTP 400 Bad Request"),
    "200 with an error status": (200, JSON, json.dumps({"status": "error", "error": SECRET}), "did not succeed"),
    "200 with HTML": (200, {"Content-Type": "text/html"}, f"<html><body>{SECRET}</body></html>",
                      "not Prometheus API JSON"),
    "503 with text": (503, {"Content-Type": "text/plain"}, f"{SECRET}: upstream down",
                      "HTTP 503 Service Unavailable"),
}


@pytest.mark.parametrize("next_to_store", [False, True], ids=["source", "alerts next to the store"])
@pytest.mark.parametrize("case", list(ANSWERS))
def test_a_failed_answer_shows_its_status_never_its_body(monkeypatch, stores, case, next_to_store):
    status, headers, body, shown = ANSWERS[case]
    fake = FakePrometheus(lambda path: (status, headers, body))
    store, _ = stores
    try:
        at = run_ok(app(monkeypatch, store=store if next_to_store else None, prometheus=fake.url))
        if next_to_store:
            at.session_state["view"] = "Alerts & incidents"
            run_ok(at)
            assert metrics(at)["Active sessions"] == str(SCENARIO_SESSIONS)
            assert "Prometheus alerts unavailable" in texts(at)
        assert fake.paths
        assert shown in texts(at)
        assert SECRET not in everything_shown(at)
    finally:
        fake.stop()


# --- a typed store path: no probe, one message ----------------------------------------------------

def _candidates(base: Path) -> dict:
    """Paths that cannot be opened as a store, each in its own way."""
    base.mkdir()
    (base / "dir").mkdir()
    (base / "text").write_text("this is not a database\n")
    (base / "empty").write_bytes(b"")
    (base / "locked").write_text("secret")
    os.chmod(base / "locked", 0)
    import sqlite3

    conn = sqlite3.connect(base / "foreign.sqlite")
    conn.execute("CREATE TABLE other (x)")
    conn.commit()
    conn.close()
    return {"missing file": base / "missing.sqlite", "missing directory": base / "nowhere" / "t.sqlite",
            "a directory": base / "dir", "a text file": base / "text", "an empty file": base / "empty",
            "no permission": base / "locked", "another program's database": base / "foreign.sqlite"}


def test_a_typed_store_path_never_tells_missing_from_unreadable(monkeypatch, stores, tmp_path):
    store, _ = stores
    token = "probe-7f3a"
    candidates = _candidates(tmp_path / token)
    probed = []
    for name in ("stat", "lstat", "access"):
        real = getattr(os, name)

        def spy(path, *args, _real=real, _name=name, **kwargs):
            if isinstance(path, (str, bytes, os.PathLike)) and token in os.fsdecode(path):
                probed.append((_name, os.fsdecode(path)))
            return _real(path, *args, **kwargs)

        monkeypatch.setattr(os, name, spy)
    pages = {}
    for what, path in candidates.items():
        at = run_ok(app(monkeypatch, store=store))
        assert metrics(at)["Active sessions"] == str(SCENARIO_SESSIONS)      # the configured store
        at.text_input(key="store_path").set_value(str(path))
        run_ok(at)
        shown = re.sub(r"\d\d:\d\d:\d\d", "<TIME>", texts(at).replace(str(path), "<PATH>"))
        assert UNOPENABLE in shown, (what, shown)
        assert not at.metric, what
        pages[what] = shown
    assert len(set(pages.values())) == 1, pages
    page = next(iter(pages.values())).lower()
    for telltale in ("does not exist", "no telemetry store yet", "not a database", "no such table",
                     "unable to open", "permission", "directory", "empty"):
        assert telltale not in page, telltale
    assert probed == [], probed

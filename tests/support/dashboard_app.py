"""The dashboard under Streamlit's AppTest: starting the app, reading what it shows, and the
stores and fake Prometheus answers the views are given. Shared by tests/dashboard/ and
tests/e2e/ (the browser checks read the same facts)."""

from __future__ import annotations

import hashlib
import html
import json
import re
import sys
import threading
from pathlib import Path
from typing import Callable

from markdown_it import MarkdownIt
from support import real_feeds
from support.paths import REPO
from support.real_feeds import StoreFacts

from observed_engine.contract.store_schema import INSERT_SQL, make_row
from observed_engine.store import connect

APP = str(REPO / "dashboard" / "app.py")
TIMEOUT = 120


# --- AppTest helpers ------------------------------------------------------------

def app(monkeypatch, *, store=None, prometheus=None, refresh="5", argv=()):
    """The app under AppTest, its source from the environment; ``argv``: the flags after ``--``."""
    from streamlit.testing.v1 import AppTest

    for var in ("OBSERVED_STORE", "OBSERVED_PROMETHEUS_URL", "OBSERVED_SOURCE", "OBSERVED_ALLOW_SOURCE_CHANGE"):
        monkeypatch.delenv(var, raising=False)
    if store is not None:
        monkeypatch.setenv("OBSERVED_STORE", str(store))
    if prometheus is not None:
        monkeypatch.setenv("OBSERVED_PROMETHEUS_URL", prometheus)
    monkeypatch.setenv("OBSERVED_REFRESH_SECONDS", refresh)
    monkeypatch.setattr(sys, "argv", ["app.py", *map(str, argv)])
    return AppTest.from_file(APP, default_timeout=TIMEOUT)


def write_store(path: Path, rows) -> Path:
    """A store holding exactly ``rows`` (tuples in COLUMNS order), written with plain SQL."""
    conn = connect(path)
    try:
        conn.execute("BEGIN")
        conn.executemany(INSERT_SQL, list(rows))
        conn.execute("COMMIT")
    finally:
        conn.close()
    return path


class FakePrometheus:
    """An HTTP server on 127.0.0.1 answering every GET with ``answer(path) -> (status, headers, body)``;
    ``paths`` are the paths asked for."""

    def __init__(self, answer: Callable[[str], tuple]) -> None:
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        fake = self
        self.paths: list = []

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                fake.paths.append(self.path)
                status, headers, body = answer(self.path)
                body = body if isinstance(body, bytes) else str(body).encode()
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def run_ok(at):
    at.run(timeout=TIMEOUT)
    assert not at.exception, [e.value for e in at.exception]
    return at


def show(at, tab: str):
    at.session_state["view"] = tab
    return run_ok(at)


def metrics(at) -> dict:
    return {m.label: m.value for m in at.metric}


MARKDOWN = MarkdownIt("commonmark").enable(["table", "strikethrough"])


def rendered(source: str) -> str:
    """The text a Markdown element shows (CommonMark, as Streamlit renders it): tags dropped,
    escapes and entities resolved."""
    return html.unescape(re.sub(r"<[^>]+>", "", MARKDOWN.render(str(source))))


def markdown_elements(at) -> list:
    """Every element whose text Streamlit renders as Markdown."""
    return [*at.markdown, *at.caption, *at.info, *at.error, *at.warning, *at.success]


def texts(at) -> str:
    """What the Markdown elements show."""
    return "\n".join(rendered(e.value) for e in markdown_elements(at))


def banner(at) -> str:
    return " ".join(e.value for e in at.error)


def frames(at) -> list:
    return [d.value for d in at.dataframe]


def frame_with(at, column: str):
    for df in frames(at):
        if column in df.columns:
            return df
    raise AssertionError(f"no table with column {column!r}: {[list(d.columns) for d in frames(at)]}")


def chart_specs(at) -> list:
    return [json.loads(c.proto.spec) for c in at.get("vega_lite_chart")]


def sawtooths(at) -> list:
    """The sawtooth charts (a layer on the "lines" data)."""
    return [s for s in chart_specs(at) if any(lay.get("data", {}).get("name") == "lines" for lay in s.get("layer", []))]


def chart_titles(at) -> list:
    out = []
    for spec in chart_specs(at):
        t = spec.get("title")
        if isinstance(t, dict):
            t = t.get("text")
        if t:
            out.append(t)
    return out


def file_digest(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def pct0(ratio: float) -> str:
    return f"{100.0 * ratio:.0f}%"


# The facts (support/real_feeds) name a summary_failure row by the kind-derived names the dashboard
# used to show (summary_fallback, summary_aborted); the dashboard shows the contract's words: event
# summary_failure, its kind (the row's outcome: fallback_summary, aborted), its cause as reason.
KIND_OF = {name: kind for kind, name in getattr(real_feeds, "SUMMARY_EVENTS", {}).items()}
SUMMARY_FAILURE = "summary_failure"


def shown_mark(outcome: str) -> str:
    """A sawtooth mark of the facts as the dashboard shows it."""
    return KIND_OF.get(outcome, outcome)


def shown_incident(row: dict) -> tuple:
    """(session, engine, hook, event, kind, reason) of an incident of the facts, as the table shows it."""
    kind = KIND_OF.get(row["event"])
    event = SUMMARY_FAILURE if kind else row["event"]
    return (row["session"], row["engine"], row["hook"], event, kind, row["reason"])


def text_or_none(v):
    return v if isinstance(v, str) else None


def open_sessions(path: Path, sessions) -> list:
    """The sessions whose latest row is not their on_session_end (what "Active sessions" counts)."""
    import sqlite3

    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        last = {s: h for s, h in db.execute(
            "SELECT session, hook FROM events e WHERE id = (SELECT id FROM events WHERE session = e.session "
            "ORDER BY ts DESC, id DESC LIMIT 1)")}
    return [s for s in sessions if last.get(s) != "on_session_end"]


def drawn_sessions(facts: StoreFacts, max_series: int = 4) -> list:
    """The sessions the usage view draws by default: the most recently active ones."""
    return facts.sessions[:max_series]


# --- a markup payload: identifiers from outside that must read as text -----------------

PAYLOAD = "`**bold**` ![x](http://127.0.0.1:9/beacon.png) <img src=x> [link](http://127.0.0.1:9/)"


def payload_rows(now: float, name: str = PAYLOAD) -> list:
    """An engine and a session named ``name``, a hook named ``name`` with captured text, and
    incidents whose reason is ``name``; the session is the fullest (its id is in a metric's help)."""
    common = dict(host="h", pid=1, session=name, engine=name)
    rows = []
    for i, p in enumerate((40_000, 90_000, 121_000)):
        rows.append(make_row(ts=now - 300 + 60 * i, hook="update_from_response", event="call", outcome="ok",
                             duration_s=0.0001, prompt_tokens=p, threshold_tokens=100_000, window_tokens=128_000,
                             **common))
    rows += [
        make_row(ts=now - 200, hook="compress", event="call", outcome="compressed", duration_s=2.0,
                 tokens_before=95_000, tokens_after=20_000, **common),
        make_row(ts=now - 190, hook="select_context", event="call", outcome="changed_selection", duration_s=0.01,
                 cache_lost_tokens=100, **common),
        make_row(ts=now - 180, hook="select_context", event="fail_open", reason=name, **common),
        make_row(ts=now - 170, hook="compress", event="deadline_exceeded", reason=name, duration_s=5.0, **common),
        make_row(ts=now - 160, hook="compress", event="summary_failure", outcome="fallback_summary", reason=name,
                 duration_s=1.0, **common),
        make_row(ts=now - 150, hook=name, event="fail_open", reason=name, content=f"text of {name}", **common),
    ]
    return rows

"""Security: message text stays in the process unless ``capture_content`` is on; servers bind
127.0.0.1 by default; the dashboard only reads the store.

A canary string is placed in every message (text, multimodal parts, tool-call arguments,
tool results), in tool arguments, the focus topic, the memory context, the messages given
to select_context / on_turn_complete / on_session_end, odd inputs, and in the messages of
exceptions the engines raise. With capture off it must appear in no span (name, attributes,
events, status), no metric (name, label value), no store row (any column) and no log line of
observed-engine (DEBUG included). With capture on the same scan must find it where the
contract puts it -- so the scan itself is known to work.
"""

from __future__ import annotations

import hashlib
import logging
import os
import socket
from pathlib import Path

import pytest
from support.builtin import eager_compressor
from support.engines import CANARY, LedgerEngine, SelectorEngine, ToolEngine, TouchyEngine, conversation
from support.llm import install_llm
from support.logs import our_records, record_text
from support.otel import Providers, span_texts
from support.servers import free_port
from support.store_rows import read_rows
from support.twins import run_hook

import observed_engine
from observed_engine import observe
from observed_engine.settings import Settings


class CanarySelector(SelectorEngine):
    """select_context returns garbage quoting the request, and raises quoting it too."""

    name = "canary-selector"

    def select_context(self, request_messages, *, conversation_messages=None, incoming_message=None,
                       budget_tokens=0):
        text = str(request_messages[-1].get("content"))
        if budget_tokens == 1:
            raise RuntimeError(f"cannot select for {text}")
        if budget_tokens == 2:
            return [text]                              # invalid: a list with a str item
        return [request_messages[0], {"role": "user", "content": f"selected: {text}"}]

    def on_turn_complete(self, messages, usage=None, **kwargs):
        super().on_turn_complete(messages, usage, **kwargs)
        raise RuntimeError(f"turn bookkeeping failed on {messages[-1].get('content')}")


def _drive_everything(pipeline, monkeypatch):
    """Every path content can take, with the canary in all of it."""
    install_llm(monkeypatch)
    messages = conversation(30, text=CANARY)
    messages.append({"role": "user", "content": [
        {"type": "text", "text": f"multimodal {CANARY}"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{CANARY}"}},
    ]})
    kw = {"current_tokens": 50_000, "focus_topic": f"focus {CANARY}", "memory_context": f"memory {CANARY}"}
    session = "session-1"

    compressor = pipeline.observe(eager_compressor())
    compressor.on_session_start(session, model="gpt-4o")
    compressor.update_from_response({"prompt_tokens": 150_000, "completion_tokens": 10, "total_tokens": 150_010})
    assert compressor.should_compress(150_000) in (True, False)
    result = compressor.compress(list(messages), **kw)
    assert any(CANARY in str(m.get("content")) for m in result)     # the engine does see the text
    compressor.on_session_end(session, messages)

    tools = pipeline.observe(ToolEngine())
    tools.on_session_start(session)
    for schema in tools.get_tool_schemas():
        tools.handle_tool_call(schema["name"], {"query": f"recall {CANARY}"}, messages=messages)
    outcome = run_hook(tools, "handle_tool_call", ("no_such_tool", {"query": CANARY}), {"messages": messages})
    assert CANARY in str(outcome.exc)
    outcome = run_hook(tools, "compress", (list(messages),), dict(kw, force=True))
    assert CANARY in str(outcome.exc)

    touchy = pipeline.observe(TouchyEngine())
    outcome = run_hook(touchy, "update_from_response", ({"prompt_tokens": CANARY},), {})
    assert CANARY in str(outcome.exc)
    outcome = run_hook(touchy, "should_compress", (CANARY,), {})
    assert CANARY in str(outcome.exc)
    run_hook(touchy, "on_session_end", (session, messages), {})
    run_hook(touchy, "compress", ([{"role": "user", "content": {"text": CANARY}}],), {"focus_topic": CANARY})

    ledger = pipeline.observe(LedgerEngine())
    ledger.update_from_response({"prompt_tokens": {"nested": CANARY}, CANARY: 3})
    ledger.compress([{"content": CANARY}, CANARY, {"role": "user", "content": 7}], focus_topic=CANARY)

    selector = pipeline.observe(CanarySelector())
    for budget in (0, 1, 2):       # a selection quoting the request, an exception quoting it, garbage
        request = [{"role": "system", "content": f"system {CANARY}"}, {"role": "user", "content": f"ask {CANARY}"}]
        run_hook(selector, "select_context", (request,),
                 {"conversation_messages": messages, "incoming_message": request[-1], "budget_tokens": budget})
    outcome = run_hook(selector, "on_turn_complete", (messages,), {"usage": {"prompt_tokens": 10}, "turn_id": "t1"})
    assert CANARY in str(outcome.exc)
    pipeline.flush()


def _leaks(pipeline, caplog):
    """Where the canary shows up: spans, metrics, store columns, log lines."""
    found = {}
    spans = pipeline.spans()
    assert len(spans) >= 20
    for span in spans:
        for text in span_texts(span):
            if CANARY in text:
                found.setdefault("span", set()).add(span.name)
        for k, v in dict(span.resource.attributes).items():
            if CANARY in str(k) or CANARY in str(v):
                found.setdefault("resource", set()).add(k)
        for event in span.events:
            for k, v in dict(event.attributes or {}).items():
                if CANARY in str(v):
                    found.setdefault("span_attribute", set()).add(k)
        for k, v in dict(span.attributes or {}).items():
            if CANARY in str(k) or CANARY in str(v):
                found.setdefault("span_attribute", set()).add(k)
    labels = pipeline.metric_names_and_labels()
    assert "hermes.context_engine.hook.calls" in labels
    if any(CANARY in text for text in labels):
        found["metric"] = {text for text in labels if CANARY in text}
    rows = read_rows(pipeline.settings["store"]["path"])
    assert len(rows) >= 20
    for row in rows:
        for column, value in row.items():
            if CANARY in str(value):
                found.setdefault("store", set()).add(column)
    records = our_records(caplog, logging.DEBUG)
    assert records, "the scan saw no log line at all"
    for record in records:
        if CANARY in record_text(record):
            found.setdefault("log", set()).add(record.getMessage()[:120])
    return found


@pytest.fixture(autouse=True)
def _debug_logs(caplog):
    caplog.set_level(logging.DEBUG, logger="observed_engine")


def test_capture_off_the_canary_goes_nowhere(tmp_path, monkeypatch, caplog):
    pipeline = Providers({"store": {"path": str(tmp_path / "store.sqlite")}})
    try:
        _drive_everything(pipeline, monkeypatch)
        assert _leaks(pipeline, caplog) == {}
    finally:
        pipeline.shutdown()


def test_capture_on_the_canary_is_where_the_contract_puts_it(tmp_path, monkeypatch, caplog):
    pipeline = Providers({"store": {"path": str(tmp_path / "store.sqlite")}, "capture_content": True})
    try:
        _drive_everything(pipeline, monkeypatch)
        found = _leaks(pipeline, caplog)
    finally:
        pipeline.shutdown()
    # the scan finds it: the focus topic, tool arguments and exception messages are recorded
    assert {"hermes.context.focus_topic", "gen_ai.tool.call.arguments", "exception.message"} <= \
        found.get("span_attribute", set()), found
    assert found.get("store") == {"content"}, found
    # still never a metric label, never a log line
    assert "metric" not in found and "log" not in found, found


# --------------------------------------------------------------------------- servers bind 127.0.0.1


def test_prometheus_listens_on_loopback_by_default():
    assert Settings().prometheus.host == "127.0.0.1"
    assert Settings.from_mapping({"prometheus": {"enabled": True}}).prometheus.host == "127.0.0.1"
    psutil = pytest.importorskip("psutil")
    port = free_port()
    engine = observe(LedgerEngine(), settings={"prometheus": {"enabled": True, "port": port}, "store": False})
    engine.should_compress(1)
    from observed_engine.capture import observed_meta

    assert observed_meta(engine).pipeline.built.prometheus_address == ("127.0.0.1", port)
    listening = [c.laddr for c in psutil.Process(os.getpid()).net_connections(kind="inet")
                 if c.status == psutil.CONN_LISTEN and c.laddr.port == port]
    assert listening and all(addr.ip == "127.0.0.1" for addr in listening), listening
    # and it is not reachable on another interface of this machine
    other = _non_loopback_ip()
    if other is not None:
        with socket.socket() as s:
            s.settimeout(1.0)
            assert s.connect_ex((other, port)) != 0
    observed_engine.shutdown(5.0)


def _non_loopback_ip():
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("10.255.255.255", 1))          # picks an interface; sends nothing
            ip = s.getsockname()[0]
    except OSError:
        return None
    return None if ip.startswith("127.") else ip


def test_demo_dashboard_binds_loopback_by_default(tmp_path, monkeypatch):
    """The demo's default host is 127.0.0.1 and its Streamlit command says so (the real demo's
    dashboard, started without --host, listens on 127.0.0.1 only: tests/demo/test_demo.py)."""
    from observed_engine import demo

    args = demo.build_parser().parse_args([])
    assert args.host == "127.0.0.1"
    started = []
    monkeypatch.setattr(demo.subprocess, "Popen", lambda cmd, **kwargs: started.append(list(cmd)))
    if not demo.DASHBOARD_APP.exists():
        pytest.skip(f"{demo.DASHBOARD_APP} does not exist yet")
    demo.start_dashboard(tmp_path / "demo.sqlite", args.host, free_port(), log=tmp_path / "dashboard.log")
    [cmd] = started
    assert cmd[cmd.index("--server.address") + 1] == "127.0.0.1"


# --------------------------------------------------------------------------- the dashboard only reads


def _fingerprint(directory: Path):
    """Bytes and mtime of the database and of a non-empty WAL. Not the -shm index (readers use
    it), nor an empty -wal a read-only WAL reader may leave behind (no data in it)."""
    out = {}
    for path in sorted(directory.iterdir()):
        if path.name.endswith("-shm") or (path.name.endswith("-wal") and path.stat().st_size == 0):
            continue
        data = path.read_bytes()
        out[path.name] = (hashlib.sha256(data).hexdigest(), path.stat().st_mtime_ns, len(data))
    return out


def test_dashboard_source_leaves_the_store_untouched(tmp_path, monkeypatch):
    from observed_engine.dashboard import sources
    from observed_engine.dashboard.factory import open_source

    directory = tmp_path / "store"
    directory.mkdir()
    path = directory / "telemetry.sqlite"
    install_llm(monkeypatch)
    pipeline = Providers({"store": {"path": str(path)}, "capture_content": True})
    engine = pipeline.observe(eager_compressor())
    engine.on_session_start("s1")
    engine.update_from_response({"prompt_tokens": 150_000, "completion_tokens": 5, "total_tokens": 150_005})
    engine.compress(conversation(30, text="dash"), current_tokens=150_000, focus_topic="x")
    pipeline.flush()
    observed_engine.shutdown(5.0)                       # the writer is gone: nothing else touches the file
    before = _fingerprint(directory)
    assert "telemetry.sqlite" in before

    import time

    source = open_source("sqlite", str(path))
    try:
        f = sources.make_filters(3600, time.time())
        assert source.status().ok
        assert "compressor" in source.engines(f)
        queries = {
            "sessions": (f,), "usage": (f, ["s1"]), "usage_now": (f, ["s1"]), "compressions": (f,),
            "selections": (f,), "latency": (f,), "incidents": (f,), "incident_counts": (f,),
            "alerts": (f, time.time()), "content": (f,), "kpis": (f,), "hooks": ("compressor",),
        }
        ran = 0
        for name, args in queries.items():
            method = getattr(source, name, None)
            if method is None:
                continue
            try:
                method(*args)
            except NotImplementedError:
                continue
            ran += 1
        assert ran >= 8, "the dashboard's queries did not run"
        # and it could not write if it tried
        with source.snapshot() as conn:
            with pytest.raises(Exception):
                conn.execute("DELETE FROM events")
    finally:
        close = getattr(source, "close", None)
        if close:
            close()
    assert _fingerprint(directory) == before

"""``observed-engine demo``: real Hermes agents (``AIAgent.run_conversation``) against the demo's own
fake LLM on 127.0.0.1, their telemetry in the store, and the dashboard it serves on 127.0.0.1.

Both tests run the installed console script (``observed-engine demo``) as a child process with a
private ``HERMES_HOME``, from a directory outside the repository.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil
import pytest
from support.real_feeds import store_facts
from support.servers import free_port


def demo_command() -> list:
    script = Path(sys.executable).with_name("observed-engine")
    if script.exists():
        return [str(script), "demo"]
    return [sys.executable, "-m", "observed_engine.demo"]


def demo_env(tmp_path: Path) -> dict:
    env = dict(os.environ, HERMES_HOME=str(tmp_path / "home"), PYTHONUNBUFFERED="1")
    for var in ("OBSERVED_STORE", "OBSERVED_PROMETHEUS_URL", "OBSERVED_SOURCE", "OTEL_EXPORTER_OTLP_ENDPOINT"):
        env.pop(var, None)
    return env


TRAFFIC = ["--sessions", "3", "--turn-delay", "0.02", "--deadline", "0.5", "--slow-every", "3", "--fail-every", "2",
           "--router-every", "2", "--reply-chars", "60000"]
DURATION = "40"


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    """``observed-engine demo --duration 40 --no-dashboard ...`` once: (its output, the store's facts, home)."""
    tmp_path = tmp_path_factory.mktemp("demo")
    store = tmp_path / "demo" / "demo.sqlite"
    proc = subprocess.run(demo_command() + ["--duration", DURATION, "--no-dashboard", *TRAFFIC, "--store", str(store)],
                          cwd=tmp_path, env=demo_env(tmp_path), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return proc.stdout, store_facts(store), tmp_path


def test_demo_fills_the_store(demo_run):
    out, facts, tmp_path = demo_run
    store = facts.path
    assert f"demo: writing telemetry to {store}" in out
    assert re.search(r"demo: +\d+s +turns +\d+ +compressions +\d+", out), out[-500:]      # the progress line
    assert re.search(r"demo: done \(\d+ turns, \d+ compressions\)", out), out[-500:]
    assert "dashboard on" not in out                                                     # --no-dashboard

    # both engines, several sessions of each
    assert facts.engines == ["compressor", "topic-router"]
    assert facts.engine_sessions("compressor") and facts.engine_sessions("topic-router")
    assert len(facts.sessions) >= 2
    import sqlite3

    with sqlite3.connect(f"file:{store}?mode=ro", uri=True) as db:
        db.row_factory = sqlite3.Row
        rows = [dict(r) for r in db.execute("select * from events order by ts")]
    hooks = {(r["engine"], r["hook"]) for r in rows}
    # what only the real host does: the preflight hooks, the session lifecycle, real compress_context
    for engine in ("compressor", "topic-router"):
        assert {(engine, h) for h in ("update_model", "on_session_start", "update_from_response",
                                       "should_compress", "should_defer_preflight_to_real_usage",
                                       "on_session_end")} <= hooks, sorted(hooks)
    assert facts.compress["compressor"]["compressed"] >= 1
    assert facts.compress["topic-router"]["compressed"] >= 1
    # after a compaction the host's next check (its -1 sentinel: awaiting real usage, so a fresh
    # estimate) is asked about the smaller prompt, and says skip
    comp = [r for r in rows if r["hook"] == "compress" and r["outcome"] == "compressed"]
    assert all(r["messages_after"] < r["messages_before"] for r in comp)
    after = []
    for c in comp:
        nxt = next((r for r in rows if r["session"] == c["session"] and r["ts"] > c["ts"]
                    and r["hook"] == "should_compress"), None)
        if nxt is not None and c["session"]:
            after.append((nxt["checked_tokens"], nxt["decision"], c["tokens_before"]))
    assert after and all(t < before and d == "skip" for t, d, before in after), after
    # a slow summary passed the 0.5 s deadline
    deadline = [r for r in facts.incidents if r["event"] == "deadline_exceeded"]
    assert deadline and all(r["duration_s"] >= 0.5 for r in deadline)
    # select_context, called before every provider request (head's call, from Hermes' hook)
    router = facts.selections["topic-router"]
    assert router["changed_selection"] >= 1
    fail_open = [r for r in facts.incidents if r["event"] == "fail_open"]
    assert {(r["engine"], r["hook"], r["reason"]) for r in fail_open} <= {
        ("topic-router", "select_context", "invalid_return")}
    # the fake LLM reported prompt-cache reads, and the host passed them on
    assert any((r["cache_read_tokens"] or 0) > 0 for r in rows if r["hook"] == "update_from_response")
    # the summariser failed (401, dropped connection): the built-in's failures are counted as such
    failures = [r for r in rows if r["event"] == "summary_failure"]
    assert {r["reason"] for r in failures} <= {"auth", "network", "other"}
    assert re.search(r"summaries +\d+ \([1-9]\d* failed\)", out), out[-500:]
    # every hook call of a session carries its id (the router too: bound like the host binds its engine)
    assert not [r for r in rows if r["session"] is None and r["hook"] not in ("update_model",)
                and r["event"] == "call"], "hook calls without a session id"
    # no message text without capture_content, and nothing written into the operator's Hermes home
    assert all(r["content"] is None for r in rows)
    assert not (tmp_path / "home" / "observed" / "telemetry.sqlite").exists()
    assert (store.parent / "demo-hermes-home" / "config.yaml").exists()


def test_demo_router_leaves_untagged_requests_unchanged(demo_run):
    _, facts, _ = demo_run
    assert facts.selections["topic-router"]["unchanged"] >= 1


def _health(port: int) -> str:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as r:
            return r.read().decode().strip()
    except OSError:
        return ""


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def test_demo_serves_the_dashboard_and_stops_on_sigterm(tmp_path):
    store = tmp_path / "demo.sqlite"
    port = free_port()
    log_path = tmp_path / "demo.log"
    log = open(log_path, "wb")
    proc = subprocess.Popen(
        demo_command() + [*TRAFFIC, "--store", str(store), "--host", "127.0.0.1", "--port", str(port)],
        cwd=tmp_path, env=demo_env(tmp_path), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    log.close()
    children: list = []
    try:
        deadline = time.monotonic() + 60
        while _health(port) != "ok":
            assert proc.poll() is None, f"demo exited with {proc.returncode}:\n{log_path.read_text()[-3000:]}"
            assert time.monotonic() < deadline, "dashboard never healthy:\n" + log_path.read_text()[-3000:]
            time.sleep(0.3)
        children = psutil.Process(proc.pid).children(recursive=True)
        assert children, "the dashboard is not a child of the demo"
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as r:
            assert r.status == 200
        time.sleep(1.0)                   # some traffic

        t0 = time.monotonic()
        os.kill(proc.pid, signal.SIGTERM)
        rc = proc.wait(20)
        stopped_in = time.monotonic() - t0
        out = log_path.read_text()
        assert rc == 0, out[-3000:]
        assert f"dashboard on http://127.0.0.1:{port}" in out
        assert "demo: done" in out, out[-2000:]
        # the dashboard went with it: no process left, nothing listening on its port
        gone, alive = psutil.wait_procs(children, timeout=5)
        assert not alive, [p.pid for p in alive]
        assert not _listening(port)
        # what ran until the signal is in the store
        facts = store_facts(store)
        assert facts.engines == ["compressor", "topic-router"] and facts.events > 0
        print(f"demo stopped {stopped_in:.1f} s after SIGTERM")
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(5)
        for child in children:
            try:
                child.kill()
            except psutil.NoSuchProcess:
                pass

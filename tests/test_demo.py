"""``observed-engine demo``: real traffic into the store, and the dashboard it serves on 127.0.0.1.

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


TRAFFIC = ["--sessions", "2", "--turn-delay", "0.02", "--deadline", "0.5", "--slow-every", "3", "--fail-every", "4"]


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    """``observed-engine demo --duration 8 --no-dashboard ...`` once: (its output, the store's facts, home)."""
    tmp_path = tmp_path_factory.mktemp("demo")
    store = tmp_path / "demo" / "demo.sqlite"
    proc = subprocess.run(demo_command() + ["--duration", "8", "--no-dashboard", *TRAFFIC, "--store", str(store)],
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
    # the real built-in compressor compressed, and a slow summary passed the 0.5 s deadline
    assert facts.compress["compressor"]["compressed"] >= 1
    assert facts.compress["topic-router"]["compressed"] >= 1
    deadline = [r for r in facts.incidents if r["event"] == "deadline_exceeded"]
    assert deadline and {r["engine"] for r in deadline} == {"compressor"}
    assert all(r["duration_s"] >= 0.5 for r in deadline)
    assert facts.count("late_completion", "compressor") >= 1
    # select_context fell open: the router returned garbage, the host went on without it
    fail_open = [r for r in facts.incidents if r["event"] == "fail_open"]
    assert fail_open
    assert {(r["engine"], r["hook"], r["reason"]) for r in fail_open} == {
        ("topic-router", "select_context", "invalid_return")}
    router = facts.selections["topic-router"]
    assert router["fail_open"] >= 1 and router["changed_selection"] >= 1 and router["same_selection"] >= 1
    # the summary model failed now and then: the built-in went on without a real summary, counted
    import sqlite3

    with sqlite3.connect(f"file:{store}?mode=ro", uri=True) as db:
        failures = db.execute("select engine, hook, outcome, reason from events where event='summary_failure'").fetchall()
    assert failures, "no summary_failure rows"
    assert {(e, h) for e, h, _, _ in failures} == {("compressor", "compress")}
    assert {o for _, _, o, _ in failures} <= {"fallback_summary", "aborted"}
    assert {r for _, _, _, r in failures} <= {"other", "network"}
    assert re.search(r"summaries +\d+ \(\d+ failed\)", out), out[-500:]
    # no message text without capture_content, and nothing written into the Hermes home
    assert all(r["content"] is None for r in facts.incidents)
    assert not (tmp_path / "home" / "observed" / "telemetry.sqlite").exists()


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

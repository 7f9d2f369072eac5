"""``observed-engine demo``: real Hermes agents (``AIAgent.run_conversation``) against the demo's own
fake LLM on 127.0.0.1, their telemetry in the store, and the dashboard it serves on 127.0.0.1.

The demo runs as the installed console script (``observed-engine demo``), a child process with a
private ``HERMES_HOME``, from a directory outside the repository. Issue 25: with the default
dashboard port held by another server, the demo serves on the next free port and prints the
address its own Streamlit answers on; run with ``HOME`` an empty directory, it writes nothing
outside its own directory; an explicit ``--port`` that is taken, a Streamlit that cannot start
and wrong arguments are one line on stderr each (exit 2 before anything is created, 1 when the
dashboard does not start).
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import psutil
import pytest
from support.demo import demo_command, demo_env
from support.real_feeds import store_facts
from support.servers import free_port


def _traffic(deadline: float) -> list:
    return ["--sessions", "3", "--turn-delay", "0.02", "--deadline", str(deadline), "--slow-every", "3",
            "--fail-every", "2", "--router-every", "2", "--reply-chars", "60000"]


TRAFFIC = _traffic(0.5)
# The store-filling run's deadline: a slow summary (the demo makes it 1.5 x the deadline) must pass
# it and an ordinary one must not. An ordinary compress takes 0.15-0.37 s here idle and 0.30-0.55 s
# under five busy processes on 2 cores, so a 0.5 s deadline turned every compression into a
# timeout in CI (no 'compressed' row in 180 s); 2 s keeps a margin of about 4x under that load.
FILL_DEADLINE = 2.0
FILL_TRAFFIC = _traffic(FILL_DEADLINE)
MOST_SECONDS = 180          # the run stops once the store shows what the tests read (~40 s on an idle machine)


def _store_shows_it_all(store: Path) -> bool:
    """What test_demo_fills_the_store reads that takes the traffic a while: both engines
    compressed, a compress past its deadline, a summary failure, the router's changed and
    unchanged selections, the host's check after a compaction."""
    if not store.exists():
        return False
    try:
        facts = store_facts(store)
    except Exception:                        # the demo is still creating it
        return False
    compressed = all(facts.compress.get(e, {}).get("compressed", 0) >= 1 for e in ("compressor", "topic-router"))
    router = facts.selections.get("topic-router", {})
    if not (compressed and router.get("changed_selection", 0) >= 1 and router.get("unchanged", 0) >= 1
            and any(r["event"] == "deadline_exceeded" for r in facts.incidents)
            and any(facts.summary_failures.values())):
        return False
    import sqlite3

    with sqlite3.connect(f"file:{store}?mode=ro", uri=True, timeout=10) as db:
        return db.execute("SELECT 1 FROM events c JOIN events n ON n.session = c.session AND n.ts > c.ts "
                          "AND n.hook = 'should_compress' WHERE c.hook = 'compress' AND c.event = 'call' "
                          "AND c.outcome = 'compressed' AND c.session IS NOT NULL LIMIT 1").fetchone() is not None


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    """``observed-engine demo --no-dashboard ...`` once, stopped by SIGTERM when the store shows
    what the tests read (at most MOST_SECONDS: a fixed duration was too short on a loaded machine,
    load average 15 on 2 cores): (its output, the store's facts, home)."""
    tmp_path = tmp_path_factory.mktemp("demo")
    store = tmp_path / "demo" / "demo.sqlite"
    out, err = tmp_path / "demo.out", tmp_path / "demo.err"
    with open(out, "wb") as stdout, open(err, "wb") as stderr:
        proc = subprocess.Popen(demo_command() + ["--no-dashboard", *FILL_TRAFFIC, "--store", str(store)],
                                cwd=tmp_path, env=demo_env(tmp_path), stdout=stdout, stderr=stderr)
    try:
        started = time.monotonic()
        while proc.poll() is None and time.monotonic() - started < MOST_SECONDS:
            time.sleep(2.0)
            if _store_shows_it_all(store):
                break
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    text = out.read_text(errors="replace")
    assert proc.returncode == 0, text[-2000:] + err.read_text(errors="replace")[-4000:]
    proc = subprocess.CompletedProcess(proc.args, proc.returncode, text, err.read_text(errors="replace"))
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
    # a slow summary passed the deadline
    deadline = [r for r in facts.incidents if r["event"] == "deadline_exceeded"]
    assert deadline and all(r["duration_s"] >= FILL_DEADLINE for r in deadline)
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


# -- issue 25: the port the dashboard gets, the home it leaves alone, wrong arguments -------------

DEFAULT_PORT = 8501


class OtherDashboard(BaseHTTPRequestHandler):
    """Another program on the dashboard's port that answers like a healthy, empty Streamlit: what
    the user saw at the printed address before the demo checked its port."""

    def do_GET(self):  # noqa: N802 (http.server's name)
        body = b"ok" if self.path == "/_stcore/health" else b"another, empty dashboard"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def hold_port(port: int, within: float = 20.0):
    """A server holding 127.0.0.1:*port* (retried while another test's holder has it), or None
    when something else keeps it the whole time: the port is then taken anyway."""
    deadline = time.monotonic() + within
    while True:
        try:
            server = ThreadingHTTPServer(("127.0.0.1", port), OtherDashboard)
        except OSError:
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.5)
            continue
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return server


def bare_env(home: Path) -> dict:
    """An environment whose HOME is *home* and that names no Hermes home, demo directory or cache."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OBSERVED_", "OTEL_", "XDG_", "STREAMLIT_"))
           and k not in ("HERMES_HOME", "TIKTOKEN_CACHE_DIR", "DATA_GYM_CACHE_DIR")}
    env.update(HOME=str(home), PYTHONUNBUFFERED="1")
    return env


def tree(root: Path) -> set:
    return {p.relative_to(root).as_posix() for p in root.rglob("*")}


def wait_for(log: Path, proc, pattern: str, timeout: float = 120.0):
    deadline = time.monotonic() + timeout
    while True:
        text = log.read_text(errors="replace")
        found = re.search(pattern, text)
        if found:
            return found
        assert proc.poll() is None, f"demo exited with {proc.returncode}:\n{text[-3000:]}"
        assert time.monotonic() < deadline, f"no {pattern!r} in:\n{text[-3000:]}"
        time.sleep(0.3)


def listeners(pid: int, port: int) -> list:
    """(pid, ip) of every socket of *pid*'s process tree listening on *port*."""
    out = []
    for p in [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]:
        try:
            out += [(p.pid, c.laddr.ip) for c in p.net_connections(kind="tcp")
                    if c.status == psutil.CONN_LISTEN and c.laddr.port == port]
        except psutil.NoSuchProcess:
            pass
    return out


TEST_ONLY_BINARIES = ("prometheus", "chromium", "alertmanager")     # what only scripts/test.sh installs


def path_without_test_tools(where: Path) -> str:
    """A PATH like this one, without the binaries only the tests run (the demo needs none)."""
    where.mkdir()
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        try:
            entries = list(Path(folder).iterdir())
        except OSError:
            continue
        for entry in entries:
            link = where / entry.name
            if not any(name in entry.name for name in TEST_ONLY_BINARIES) and not link.exists():
                link.symlink_to(entry)
    return str(where)


@pytest.fixture(scope="module")
def demo_beside_another_dashboard(tmp_path_factory):
    """``observed-engine demo`` with no --port, --host, --store or --dir, HOME an empty directory,
    no prometheus, alertmanager or chromium on the PATH, while another server answers like a
    dashboard on 127.0.0.1:8501; stopped by SIGTERM once its dashboard is up."""
    tmp = tmp_path_factory.mktemp("demo-port")
    home, cwd = tmp / "home", tmp / "cwd"
    home.mkdir()
    cwd.mkdir()
    env = dict(bare_env(home), PATH=path_without_test_tools(tmp / "bin"))
    holder = hold_port(DEFAULT_PORT)
    log = tmp / "demo.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(demo_command() + TRAFFIC, cwd=cwd, env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        found = wait_for(log, proc, r"demo: dashboard on http://127\.0\.0\.1:(\d+) ")
        port = int(found.group(1))
        seen = {"port": port, "health": _health(port), "listeners": listeners(proc.pid, port),
                "demo_pid": proc.pid, "default_still_other": _health(DEFAULT_PORT) == "ok",
                "held_here": holder is not None}
        time.sleep(1.0)
        os.kill(proc.pid, signal.SIGTERM)
        seen["rc"] = proc.wait(30)
        seen["out"] = log.read_text(errors="replace")
        yield seen, home, cwd
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)
        if holder is not None:
            holder.shutdown()
            holder.server_close()


def test_a_taken_default_port_gives_way_and_the_printed_address_is_the_demos(demo_beside_another_dashboard):
    seen, _, _ = demo_beside_another_dashboard
    out = seen["out"]
    assert seen["rc"] == 0, out[-3000:]
    assert seen["port"] != DEFAULT_PORT, out[-3000:]
    notes = re.findall(r"demo: 127\.0\.0\.1:(\d+) is in use by another program; the dashboard takes port (\d+)", out)
    # 8501 first; then, only if another demo took the next port meanwhile, the ports after it
    assert notes and notes[0][0] == str(DEFAULT_PORT) and notes[-1][1] == str(seen["port"]), out[-3000:]
    assert f"dashboard on http://127.0.0.1:{DEFAULT_PORT} " not in out
    # what answers at the printed address is the demo's own Streamlit, not the other server
    assert seen["health"] == "ok", seen
    assert seen["listeners"] and all(pid != seen["demo_pid"] for pid, _ in seen["listeners"]), seen
    if seen["held_here"]:           # else another program holds 8501, and may let it go meanwhile
        assert seen["default_still_other"]


def test_the_dashboard_listens_on_loopback_only_by_default(demo_beside_another_dashboard):
    seen, _, _ = demo_beside_another_dashboard
    assert {ip for _, ip in seen["listeners"]} == {"127.0.0.1"}, seen["listeners"]


def test_the_demo_writes_nothing_outside_its_own_directory(demo_beside_another_dashboard):
    seen, home, cwd = demo_beside_another_dashboard
    own = ".local/state/observed-engine/demo"
    assert f"demo: its own directory {home / own} (" in seen["out"]
    created = tree(home)
    outside = sorted(p for p in created if not (p == own or p.startswith(own + "/")
                                                 or (own.startswith(p + "/") and (home / p).is_dir())))
    assert not outside, (outside, seen["out"][-2000:])     # before issue 25: .hermes/SOUL.md, state.db, ... and .cache/
    assert not tree(cwd), tree(cwd)
    # Hermes' own files are in the demo's private home, the store and the token cache beside it
    for name in ("demo.sqlite", "demo-hermes-home/config.yaml", "demo-hermes-home/state.db",
                 "demo-hermes-home/SOUL.md", "dashboard.log"):
        assert f"{own}/{name}" in created, name
    # (tiktoken's cache, own/tiktoken/, is written once the engine first counts tokens: not yet in a short run)


def test_an_explicit_port_that_is_taken_is_refused_in_one_line(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = subprocess.run(demo_command() + ["--port", str(port), "--store", str(tmp_path / "demo" / "demo.sqlite")],
                              cwd=tmp_path, env=bare_env(home), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert f"--port {port}: 127.0.0.1:{port} is in use by another program; fix:" in proc.stderr
    assert not (tmp_path / "demo").exists() and not tree(home)


def test_a_dashboard_that_cannot_start_is_said_in_one_line(tmp_path):
    """Real Streamlit, refusing to start (a bad STREAMLIT_* variable in the environment): the demo
    says so with Streamlit's reason and stops, instead of printing an address nothing answers."""
    home = tmp_path / "home"
    home.mkdir()
    env = dict(bare_env(home), STREAMLIT_SERVER_MAX_UPLOAD_SIZE="not-a-number")
    port = free_port()
    proc = subprocess.run(demo_command() + [*TRAFFIC, "--duration", "300", "--port", str(port),
                                            "--store", str(tmp_path / "demo" / "demo.sqlite")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=150)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "dashboard on" not in proc.stdout
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("observed-engine demo:")]
    assert len(lines) == 1, proc.stderr[-3000:]
    assert f"the dashboard did not start on 127.0.0.1:{port}: Streamlit exited with code" in lines[0]
    assert "maxUploadSize" in lines[0] and str(tmp_path / "demo" / "dashboard.log") in lines[0]
    assert "Traceback" not in proc.stderr


# The demo's wrong arguments (ports, counts, durations, the window, --store, --dir, --host, a
# taken --prometheus-port, argparse's own errors) are rows of tests/cli/test_bad_input.py.


def test_a_server_that_took_the_port_meanwhile_is_not_the_dashboard(tmp_path):
    """The race behind item 4: another program takes the port between the demo's check and
    Streamlit's bind, and answers like a dashboard while the demo's own Streamlit is still starting.
    The demo waits for its own child (it listens there, by /proc), which exits: port not available
    (seen with two demos started at once: the second printed the first one's address)."""
    from observed_engine import demo

    other = hold_port(free_port())
    port = other.server_address[1]
    log = tmp_path / "dashboard.log"
    child = demo.start_dashboard(tmp_path / "demo.sqlite", "127.0.0.1", port, log=log)
    try:
        assert demo.health("127.0.0.1", port) == "ok"                 # the other one answers at once
        why = demo.wait_until_serving(child, "127.0.0.1", port, log=log, timeout=60)
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
        child.wait(10)
        other.shutdown()
        other.server_close()
    assert why is not None and why.startswith("Streamlit exited with code"), why
    assert f"Port {port} is not available" in why, why


def test_listens_tells_a_process_s_own_listening_socket():
    from observed_engine import demo

    with socket.socket() as mine, socket.socket() as bound_only:
        mine.bind(("127.0.0.1", 0))
        mine.listen()
        bound_only.bind(("127.0.0.1", 0))
        assert demo.listens(os.getpid(), mine.getsockname()[1]) is True
        assert demo.listens(os.getpid(), bound_only.getsockname()[1]) is False      # not listening
        assert demo.listens(os.getppid(), mine.getsockname()[1]) is False           # another process


def test_router_sessions_without_a_request_hook_are_said(monkeypatch):
    """The demo's router sessions select on Hermes' pre_api_request hook; a Hermes without it
    (no plugin manager) makes the demo say so instead of showing router sessions with no rows."""
    import hermes_cli.plugins as plugins

    from observed_engine.demo.run import observe_requests

    class Traffic:
        def on_request(self, **_kw):
            pass

    traffic = Traffic()
    manager = plugins.get_plugin_manager()
    try:
        assert observe_requests(traffic, router_every=3) is None           # the real hook: registered
        assert traffic.on_request in manager._hooks["pre_api_request"]
    finally:
        manager._hooks["pre_api_request"].remove(traffic.on_request)

    def no_manager():
        raise RuntimeError("no plugin manager in this Hermes")

    monkeypatch.setattr(plugins, "get_plugin_manager", no_manager)
    line = observe_requests(traffic, router_every=3)
    assert line is not None and "pre_api_request" in line and "select_context" in line
    assert observe_requests(traffic, router_every=0) is None              # no router sessions: nothing to say

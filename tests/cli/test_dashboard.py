"""``observed-engine dashboard``: the Streamlit command line it builds (the one the demo uses
too), its answer without Streamlit, and a real start on 127.0.0.1 that serves ``/`` and
``/_stcore/health``, listens on no other interface, stops cleanly on Ctrl-C (SIGINT) and
is killed by its PID whatever happens."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil
import pytest
from support.servers import free_port

from observed_engine import cli
from observed_engine import demo as demo_module
from observed_engine.cli import dashboard as cli_dashboard

STREAMLIT_FLAGS = ["--server.headless", "true", "--browser.gatherUsageStats", "false",
                   "--client.toolbarMode", "viewer"]


def flag(argv, name):
    return argv[argv.index(name) + 1]


def app_args(argv):
    """What the dashboard script receives: everything after ``--``."""
    return argv[argv.index("--") + 1:]


@pytest.fixture
def home(tmp_path, monkeypatch):
    h = tmp_path / "home"
    h.mkdir()
    monkeypatch.setenv("HERMES_HOME", str(h))
    return h


class Launched(list):
    """The (argv, env) pairs the command would exec; ``listen``: the (host, port) it checked."""

    def __init__(self) -> None:
        super().__init__()
        self.listen: list = []


@pytest.fixture
def launched(monkeypatch):
    """The (argv, env) the command would exec, instead of exec'ing it. Whether the port is free
    is not these tests' subject (the bad-input table and the busy-port test check it): in CI the
    other pytest process's dashboards may hold 8501 while these run, so the listen check is
    recorded instead of binding."""
    calls = Launched()

    def fake_exec(argv, env):
        calls.append((argv, env))
        return 0

    monkeypatch.setattr(cli_dashboard, "exec_streamlit", fake_exec)
    monkeypatch.setattr(cli_dashboard.inputs, "listen_address", lambda address, port: calls.listen.append((address, port)))
    return calls


# -- the command line -------------------------------------------------------------------------

def test_installed_app_is_the_package_s():
    import observed_engine.dashboard

    app = demo_module.DASHBOARD_APP
    assert app == Path(observed_engine.dashboard.__file__).parent / "app.py"
    assert app.is_file()


def test_default_command(home, launched):
    assert cli.main(["dashboard"]) == 0
    [(argv, env)] = launched
    app = demo_module.DASHBOARD_APP
    assert argv[:5] == [sys.executable, "-m", "streamlit", "run", str(app)]
    assert flag(argv, "--server.address") == "127.0.0.1"
    assert flag(argv, "--server.port") == "8501"
    for name, value in zip(STREAMLIT_FLAGS[::2], STREAMLIT_FLAGS[1::2]):
        assert flag(argv, name) == value
    assert app_args(argv) == ["--store", str(home / "observed" / "telemetry.sqlite")]   # the Hermes home's store
    assert env["OBSERVED_SOURCE"] == "sqlite"
    assert argv == demo_module.dashboard_command(app)                  # the one builder
    assert launched.listen == [("127.0.0.1", 8501)]                     # checked before Streamlit


def test_flags(home, launched, tmp_path):
    store = tmp_path / "other.sqlite"
    assert cli.main(["dashboard", "--store", str(store), "--host", "0.0.0.0", "--port", "9123",
                     "--allow-source-change"]) == 0
    assert cli.main(["dashboard", "--prometheus", "http://127.0.0.1:9090"]) == 0
    (argv, env), (prom_argv, prom_env) = launched
    assert flag(argv, "--server.address") == "0.0.0.0" and flag(argv, "--server.port") == "9123"
    assert app_args(argv) == ["--store", str(store), "--allow-source-change"]
    assert env["OBSERVED_SOURCE"] == "sqlite"
    assert flag(prom_argv, "--server.address") == "127.0.0.1"
    assert app_args(prom_argv) == ["--prometheus", "http://127.0.0.1:9090"]
    assert prom_env["OBSERVED_SOURCE"] == "prometheus"


def test_store_and_prometheus_exclude_each_other(home, launched, capsys):
    assert cli.main(["dashboard", "--store", "a.sqlite", "--prometheus", "http://x"]) == 2
    assert "not allowed with argument" in capsys.readouterr().err
    assert not launched


def test_without_streamlit(home, launched, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "streamlit", None)          # not importable
    assert cli.main(["dashboard"]) == 2
    out = capsys.readouterr()
    assert out.out == ""
    assert out.err == f"observed-engine dashboard: {demo_module.DASHBOARD_EXTRA}\n"
    assert "pip install '/path/to/observed-engine[dashboard]' (a checkout)" in out.err   # not on PyPI yet
    assert not launched


def test_the_demo_starts_the_same_command(monkeypatch, tmp_path):
    started = []

    class FakePopen:
        def __init__(self, cmd, **kwargs):
            started.append((cmd, kwargs))

    monkeypatch.setattr(demo_module.subprocess, "Popen", FakePopen)
    store = tmp_path / "demo.sqlite"
    assert isinstance(demo_module.start_dashboard(store, "127.0.0.1", 8765), FakePopen)
    [(cmd, kwargs)] = started
    assert cmd == demo_module.dashboard_command(demo_module.DASHBOARD_APP, store=store,
                                                address="127.0.0.1", port=8765)
    assert kwargs["start_new_session"] is True and kwargs["env"]["OBSERVED_STORE"] == str(store)


def test_the_demo_without_streamlit(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "streamlit", None)
    assert demo_module.start_dashboard(tmp_path / "demo.sqlite", "127.0.0.1", 8765) is None
    assert "pip install '/path/to/observed-engine[dashboard]'" in capsys.readouterr().err


# -- a real start ----------------------------------------------------------------------------

def _get(port: int, path: str):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=3) as r:
        return r.status, r.read().decode("utf-8", "replace")


def _other_addresses() -> list:
    """This machine's non-loopback IPv4 addresses."""
    return sorted({a.address for addrs in psutil.net_if_addrs().values() for a in addrs
                   if a.family == socket.AF_INET and not a.address.startswith("127.")})


def _refused(address: str, port: int) -> bool:
    try:
        with socket.create_connection((address, port), timeout=1):
            return False
    except OSError:
        return True


def dashboard_env(home: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "OBSERVED_"))}
    env["HERMES_HOME"] = str(home)
    return env


def test_real_start_on_loopback(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    port = free_port()
    log = tmp_path / "dashboard.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "observed_engine", "dashboard", "--port", str(port)],
                                cwd=tmp_path, env=dashboard_env(home), stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, f"exited with {proc.returncode}:\n{log.read_text()[-3000:]}"
            try:
                if _get(port, "/_stcore/health") == (200, "ok"):
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, "never healthy:\n" + log.read_text()[-3000:]
            time.sleep(0.3)
        status, body = _get(port, "/")
        assert status == 200 and "<html" in body.lower()

        # this PID is the server itself (the CLI exec'd Streamlit), listening on 127.0.0.1 only
        server = psutil.Process(proc.pid)
        assert "streamlit" in " ".join(server.cmdline())
        assert not server.children(recursive=True)
        listening = [c for c in server.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN]
        assert listening, "no listening socket"
        assert {(c.laddr.ip, c.laddr.port) for c in listening} == {("127.0.0.1", port)}
        for address in _other_addresses():
            assert _refused(address, port), address

        # Ctrl-C: Streamlit stops cleanly, and its exit code is the command's
        os.kill(proc.pid, signal.SIGINT)
        assert proc.wait(20) == 0
        text = log.read_text()
        assert "Traceback" not in text, text[-3000:]
        assert f"http://127.0.0.1:{port}" in text                  # what Streamlit printed
        assert _refused("127.0.0.1", port)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)


def test_busy_port_is_one_line_before_streamlit(tmp_path):
    """A port already taken: said on one line and exit code 2 before Streamlit starts (it used
    to be Streamlit's own message and exit 1, after its start-up)."""
    home = tmp_path / "home"
    home.mkdir()
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        proc = subprocess.run([sys.executable, "-m", "observed_engine", "dashboard", "--port", str(port)],
                              cwd=tmp_path, env=dashboard_env(home), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stdout == ""
    assert proc.stderr == (f"observed-engine dashboard: 127.0.0.1:{port} is in use by another program; "
                           f"fix: --port with a free port\n")


def test_without_the_dashboard_app(home, launched, monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(demo_module, "DASHBOARD_APP", tmp_path / "no-such" / "app.py")
    assert cli.main(["dashboard"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("observed-engine dashboard: this observed-engine installation lacks its dashboard app")
    assert err.count("\n") == 1 and not launched

"""Every documented way of starting the dashboard listens on 127.0.0.1 (issue 25 item 8).

``streamlit run dashboard/app.py`` without ``--server.address`` listened on every interface
(measured: ``::``, all of IPv4 and IPv6). Now the dashboard's own script-level config
(``dashboard/.streamlit/config.toml``) binds 127.0.0.1 whatever the working directory, and every
command in the documentation, the scripts and the deploy stack is ``observed-engine dashboard`` or
says ``--server.address 127.0.0.1``. The one exception is the container of
``deploy/docker-compose.yaml``, which listens on the container's interfaces and is published on the
host's 127.0.0.1 only (tests/deploy/test_static.py).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import psutil
from support.paths import REPO
from support.servers import free_port

from observed_engine import demo

SCANNED = [REPO / "README.md", REPO / "docs", REPO / "dashboard", REPO / "deploy", REPO / "scripts",
           REPO / "observed_engine", REPO / "benchmarks"]
SUFFIXES = {".md", ".py", ".sh", ".yaml", ".yml", ".toml", ".txt", ".cfg", ".ini"}
STREAMLIT_RUN = re.compile(r"streamlit run\s+\S*\.py\b[^\n`]*")       # a command: a script path, up to the line's end
LOOPBACK = re.compile(r"--server\.address[ =]127\.0\.0\.1\b")
WILDCARD = re.compile(r"(--server\.address[ =]|--host[ =])(0\.0\.0\.0|::)\b|STREAMLIT_SERVER_ADDRESS\s*[=:]\s*\"?0\.0\.0\.0")
COMPOSE = REPO / "deploy" / "docker-compose.yaml"


def documents():
    for root in SCANNED:
        paths = [root] if root.is_file() else sorted(root.rglob("*"))
        for path in paths:
            if path.is_file() and (path.suffix in SUFFIXES or path.name.startswith("Dockerfile")) \
                    and "__pycache__" not in path.parts:
                yield path


def test_every_documented_streamlit_run_binds_loopback():
    found, unbound = [], []
    for path in documents():
        for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            for command in STREAMLIT_RUN.findall(line):
                found.append(command)
                if not LOOPBACK.search(command):
                    unbound.append(f"{path.relative_to(REPO)}:{n}: {command.strip()}")
    assert found, "the scan found no command at all: the pattern is wrong"
    assert not unbound, "\n".join(unbound)


def test_nothing_documented_listens_on_every_interface_but_the_container():
    wide = [f"{path.relative_to(REPO)}:{n}: {line.strip()}"
            for path in documents() if path != COMPOSE
            for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1)
            if WILDCARD.search(line)]
    assert not wide, "\n".join(wide)


def test_a_plain_streamlit_run_of_the_dashboard_listens_on_loopback_only(tmp_path):
    """No flag, no configuration of the user's or of the working directory: the dashboard's own."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STREAMLIT_", "OBSERVED_"))}
    env.update(HOME=str(tmp_path), OBSERVED_STORE=str(tmp_path / "none.sqlite"))
    proc = subprocess.Popen([sys.executable, "-m", "streamlit", "run", str(demo.DASHBOARD_APP),
                             "--server.port", str(port), "--server.headless", "true"],
                            cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        listening = []
        while not listening:
            assert proc.poll() is None, f"streamlit exited with {proc.returncode}"
            assert time.monotonic() < deadline, "streamlit never listened"
            listening = [c.laddr.ip for c in psutil.Process(proc.pid).net_connections(kind="tcp")
                         if c.status == psutil.CONN_LISTEN and c.laddr.port == port]
            time.sleep(0.2)
        assert listening == ["127.0.0.1"], listening          # before: ['::']
    finally:
        proc.kill()
        proc.wait(10)

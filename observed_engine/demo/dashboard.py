"""The dashboard the demo (and ``observed-engine dashboard``) starts: its command line, its port,
and whether it answers there."""

from __future__ import annotations

import errno
import http.client
import importlib.util
import os
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import List, Optional

from ..host import default_store_path
from ..version import __version__
from .errors import DemoArgumentError

# Not on the package index yet: the extra comes from a checkout or a built wheel (README, Install).
DASHBOARD_EXTRA = ("the dashboard needs the [dashboard] extra: pip install '/path/to/observed-engine[dashboard]' "
                   f"(a checkout) or 'observed_engine-{__version__}-py3-none-any.whl[dashboard]' (a built wheel)")


def streamlit_installed() -> bool:
    """Streamlit is importable (found, not imported: the core install has no Streamlit)."""
    try:
        return importlib.util.find_spec("streamlit") is not None
    except (ImportError, ValueError):
        return False


def _dashboard_app() -> Path:
    """The dashboard's Streamlit script inside the installed package (``observed_engine.dashboard``,
    shipped in the wheel; its dependencies come with the ``[dashboard]`` extra). Found, not imported."""
    spec = importlib.util.find_spec("observed_engine.dashboard")
    if spec is not None and spec.origin:
        return Path(spec.origin).parent / "app.py"
    return Path(__file__).resolve().parent.parent / "dashboard" / "app.py"     # is_file() says it is missing


# The installed dashboard's Streamlit script, observed_engine/dashboard/app.py (may be missing:
# check is_file()).
DASHBOARD_APP = _dashboard_app()


def dashboard_command(app: Path, *, store: Optional[os.PathLike | str] = None, prometheus: Optional[str] = None,
                      address: str = "127.0.0.1", port: int = 8501, allow_source_change: bool = False) -> List[str]:
    """``python -m streamlit run <app> ... -- --store PATH | --prometheus URL [--allow-source-change]``:
    served on ``address:port`` only, headless, no usage statistics, the viewer toolbar. Without
    ``store`` or ``prometheus``: the current Hermes home's store."""
    cmd = [sys.executable, "-m", "streamlit", "run", str(app),
           "--server.address", address, "--server.port", str(port),
           "--server.headless", "true", "--browser.gatherUsageStats", "false",
           "--client.toolbarMode", "viewer", "--"]
    if prometheus:
        cmd += ["--prometheus", prometheus]
    else:
        cmd += ["--store", str(store if store is not None else default_store_path())]
    if allow_source_change:
        cmd.append("--allow-source-change")
    return cmd


def start_dashboard(store: Path, address: str, port: int,
                    log: Optional[Path] = None) -> Optional[subprocess.Popen]:
    """The dashboard on *store*, in a process group of its own (the demo stops it with the group),
    its output in *log* (so that the demo can say why it stopped); None, said on stderr, when
    Streamlit or the dashboard app is missing."""
    problem = (DASHBOARD_EXTRA if not streamlit_installed()
               else f"dashboard not found at {DASHBOARD_APP}" if not DASHBOARD_APP.is_file() else None)
    if problem:
        print(f"demo: {problem}; showing progress only", file=sys.stderr)
        return None
    env = dict(os.environ, OBSERVED_STORE=str(store), OBSERVED_REFRESH_SECONDS="2")
    cmd = dashboard_command(DASHBOARD_APP, store=store, address=address, port=port)
    out = open(log, "wb") if log is not None else subprocess.DEVNULL
    try:
        return subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT if log is not None else out,
                                start_new_session=True)
    finally:
        if log is not None:
            out.close()


DEFAULT_DASHBOARD_PORT = 8501


NEARBY_PORTS = 20               # tried after a taken default port, before any free port


def port_in_use(host: str, port: int) -> bool:
    """Something holds ``host:port``: a bind as Streamlit's (tornado's ``bind_sockets``: every
    address the host resolves to, SO_REUSEADDR, IPv6 sockets v6-only) fails with EADDRINUSE.
    Other failures (an address of no interface here, a name that does not resolve) raise OSError."""
    infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    for family, kind, proto, _, address in infos:
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6 and hasattr(socket, "IPPROTO_IPV6"):
                probe.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                probe.bind(address)
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    return True
                raise
    return False


def _any_free_port(host: str) -> int:
    infos = socket.getaddrinfo(host or None, 0, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.bind(address)
        return probe.getsockname()[1]


def choose_dashboard_port(host: str, requested: Optional[int], start: int = DEFAULT_DASHBOARD_PORT) -> tuple:
    """``(port, note)``: the port the dashboard will listen on. An explicit ``--port`` that is
    taken is a wrong argument (DemoArgumentError); the default one (*start*), when taken, gives
    way to the next free port (``note`` says so)."""
    port = start if requested is None else requested
    try:
        if not port_in_use(host, port):
            return port, None
        if requested is not None:
            raise DemoArgumentError(f"--port {port}: {_netloc(host, port)} is in use by another program; "
                                    "fix: --port with a free port, or no --port (the demo then takes the next free one)")
        for candidate in range(port + 1, min(port + 1 + NEARBY_PORTS, 65536)):
            if not port_in_use(host, candidate):
                break
        else:
            candidate = _any_free_port(host)
    except OSError as exc:
        why = exc.strerror or str(exc)
        if exc.errno in (errno.EACCES, errno.EPERM):
            raise DemoArgumentError(f"--port {port}: this user may not listen on {_netloc(host, port)} ({why}); "
                                    "fix: --port 1024 or above") from None
        raise DemoArgumentError(f"--host {host!r}: not an address of this machine ({why}); "
                                "fix: --host 127.0.0.1") from None
    return candidate, f"{_netloc(host, port)} is in use by another program; the dashboard takes port {candidate}"


RACE_RETRIES = 3


def _in_use(host: str, port: int) -> bool:
    try:
        return port_in_use(host, port)
    except OSError:
        return False


def _netloc(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _probe_host(host: str) -> str:
    """Where to ask a server listening on *host* (a wildcard address: its loopback)."""
    return {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)


def health(host: str, port: int, timeout: float = 2.0) -> Optional[str]:
    """The body of Streamlit's ``/_stcore/health`` on host:port (``ok`` once it serves), else None.
    A direct connection: no proxy from the environment comes between."""
    conn = http.client.HTTPConnection(_probe_host(host), port, timeout=timeout)
    try:
        conn.request("GET", "/_stcore/health")
        response = conn.getresponse()
        return response.read(64).decode("utf-8", "replace").strip() if response.status == 200 else None
    except (OSError, http.client.HTTPException):
        return None
    finally:
        conn.close()


def last_line(log: Optional[Path]) -> str:
    """The last non-blank line of the dashboard's log (Streamlit's reason for exiting), or ''."""
    try:
        lines = [ln.strip() for ln in log.read_text(encoding="utf-8", errors="replace").splitlines()]
    except (OSError, AttributeError):
        return ""
    return next((ln for ln in reversed(lines) if ln), "")[:300]


def listens(pid: int, port: int) -> Optional[bool]:
    """Process *pid* holds a socket listening on TCP *port*: its listening sockets of that port in
    ``/proc/PID/net/tcp{,6}`` against the socket inodes of its ``/proc/PID/fd``. None where /proc
    cannot say (not Linux)."""
    inodes = set()
    try:
        for table in ("tcp", "tcp6"):
            try:
                rows = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
            except FileNotFoundError:
                continue
            for row in rows:
                fields = row.split()
                if len(fields) > 9 and fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                    inodes.add(f"socket:[{fields[9]}]")
        fds = os.listdir(f"/proc/{pid}/fd")
    except (OSError, ValueError):
        return None
    for fd in fds:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") in inodes:
                return True
        except OSError:
            continue
    return False


def _log_says_it_serves(log: Optional[Path], port: int) -> bool:
    """Streamlit's own line once it listens: ``URL: http://127.0.0.1:8501``."""
    try:
        return re.search(rf"URL: https?://\S+:{port}\b", log.read_text(encoding="utf-8", errors="replace")) is not None
    except (OSError, AttributeError):
        return False


def wait_until_serving(proc: subprocess.Popen, host: str, port: int, *, log: Optional[Path] = None,
                       timeout: float = 90.0, stop: Optional[threading.Event] = None) -> Optional[str]:
    """Wait until the dashboard child answers ``/_stcore/health`` on host:port, and the server that
    answers is the child's own (it listens there: /proc, or else its log says so; another program
    may have taken the port between the check and the child's bind, and the child is still starting
    when that one answers): None then; else why not, in a few words (its exit code and the last
    line of its log)."""
    deadline = time.monotonic() + timeout
    while True:
        code = proc.poll()
        if code is None and health(host, port) == "ok":
            mine = listens(proc.pid, port)
            if (mine or (mine is None and _log_says_it_serves(log, port))) and proc.poll() is None:
                return None
            code = proc.poll()
        if code is not None:
            why = last_line(log)
            return f"Streamlit exited with code {code}" + (f" ({why})" if why else "")
        if stop is not None and stop.is_set():
            return "stopped before it answered"
        if time.monotonic() >= deadline:
            return f"it did not answer http://{_netloc(_probe_host(host), port)}/_stcore/health within {timeout:g} s"
        time.sleep(0.25)

"""Network helpers on 127.0.0.1: free ports, dead endpoints, /metrics scrapes, polling, real Prometheus /
Alertmanager, a webhook.

Servers are started as subprocesses (``ServerProcess``) with their PID recorded; ``stop()`` kills
exactly that PID.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence

import pytest
import yaml

PROMETHEUS_BIN = "/usr/bin/prometheus"
ALERTMANAGER_BIN = "/usr/bin/prometheus-alertmanager"


def find_binary(*candidates: str) -> Optional[str]:
    """The first candidate that is an executable file (a path) or on PATH (a bare name), else None."""
    for candidate in candidates:
        found = shutil.which(candidate)
        if found:
            return found
    return None


def require_binary(path: str) -> str:
    """The binary, else skip -- or fail when OBSERVED_REQUIRE_TOOLS is set (CI)."""
    found = find_binary(path, os.path.basename(path))
    if found:
        return found
    if os.environ.get("OBSERVED_REQUIRE_TOOLS"):
        pytest.fail(f"{path} is required (OBSERVED_REQUIRE_TOOLS is set) but missing")
    pytest.skip(f"{path} not installed")


def free_port() -> int:
    """A port of 127.0.0.1 nothing listens on, reserved for about a minute (TCP's TIME_WAIT).

    The port is handed to a server that binds it later, often another process that takes
    seconds to start. A port that was merely free when asked could be handed out again in
    that gap (to another test process running in parallel): the second server then fails
    to listen, and the test reads the first. So the port is left with one connection in
    TIME_WAIT: the kernel picks no such port for anyone's ``bind(port 0)`` and a plain
    ``bind`` of it fails, while a server that sets SO_REUSEADDR (Python's http.server,
    prometheus_client, tornado, Go's net.Listen) binds it at once."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        # the accepted socket, which ends in TIME_WAIT, inherits SO_REUSEADDR: only then may a
        # server that sets it too bind the port while the connection waits
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        port = listener.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port), timeout=5.0):
            accepted, _ = listener.accept()
            accepted.close()             # this side closes first: its (port, peer) waits in TIME_WAIT
    return port


def _listening_inodes(port: int) -> set:
    """The socket inodes listening on TCP ``port`` (IPv4 or IPv6, any address)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                next(f, None)
                for line in f:
                    fields = line.split()
                    if len(fields) > 9 and fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                        inodes.add(fields[9])
        except OSError:
            continue
    return inodes


def listener_pids(port: int, session: Optional[int] = None) -> set:
    """The PIDs holding a socket that listens on TCP ``port`` (only those of ``session``, a
    session id, when given; a process started with ``start_new_session`` leads its own)."""
    inodes = {f"socket:[{i}]" for i in _listening_inodes(port)}
    pids = set()
    if not inodes:
        return pids
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if session is not None and os.getsid(int(entry)) != session:
                continue
            fds = os.listdir(f"/proc/{entry}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{entry}/fd/{fd}") in inodes:
                    pids.add(int(entry))
                    break
            except OSError:
                continue
    return pids


def refused_port() -> int:
    """A port nothing listens on (connections are refused)."""
    return free_port()


class BlackHole:
    """A listening socket that never accepts nor answers: connects succeed, requests hang."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(128)
        self.port = self.sock.getsockname()[1]

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> BlackHole:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def http_get(url: str, timeout: float = 5.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return resp.read().decode()


def scrape(port: int, timeout: float = 5.0) -> str:
    """The text of GET http://127.0.0.1:<port>/metrics (an exporter's Prometheus endpoint)."""
    return http_get(f"http://127.0.0.1:{port}/metrics", timeout=timeout)


def prom_value(text: str, name: str, **labels) -> float:
    """Sum of the samples of ``name`` whose labels include ``labels`` in Prometheus text output."""
    from prometheus_client.parser import text_string_to_metric_families

    total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
    return total


def wait_until(predicate: Callable[[], Any], timeout: float = 10.0, interval: float = 0.05) -> Any:
    """Poll ``predicate`` (exceptions count as false) until it is truthy or ``timeout`` passed;
    returns its last value."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            result = predicate()
        except Exception:
            result = None
        if result or time.monotonic() >= deadline:
            return result
        time.sleep(interval)


class ServerProcess:
    """A server subprocess on 127.0.0.1:<free port>, its output in workdir/<name>.log, killed by its
    own PID. Subclasses start it with ``_spawn(argv)``, then ``wait_ready()`` polls ``ready_path``."""

    name = "server"
    ready_path = "/-/ready"
    stop_timeout = 10.0

    def __init__(self, workdir: Path) -> None:
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.proc: Optional[subprocess.Popen] = None
        self.pid: Optional[int] = None
        self.log_path = self.workdir / f"{self.name}.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _spawn(self, argv: Sequence[str], *, env: Optional[Dict[str, str]] = None,
               cwd: Optional[Path] = None) -> None:
        log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(list(argv), stdout=log, stderr=subprocess.STDOUT, env=env,
                                     cwd=self.workdir if cwd is None else cwd, start_new_session=True)
        log.close()
        self.pid = self.proc.pid

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Ready when ``ready_path`` answers on the port and the port's listener is this server
        (its process or a child of it): an answer from another process is not this one's."""
        def ready():
            if self.proc.poll() is not None:
                raise AssertionError(f"{self.name} exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                if http_get(self.url + self.ready_path, timeout=1.0) is None:
                    return False
            except OSError:
                return False
            holders = listener_pids(self.port)
            if holders and not listener_pids(self.port, session=self.pid):
                raise AssertionError(f"{self.name} (pid {self.pid}): port {self.port} is held by another "
                                     f"process {sorted(holders)}:\n{self.log_tail()}")
            return True
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if ready():
                return
            time.sleep(0.1)
        raise AssertionError(f"{self.name} not ready after {timeout}s:\n{self.log_tail()}")

    def log_tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            os.kill(self.pid, signal.SIGTERM)
            self.proc.wait(self.stop_timeout)
        except subprocess.TimeoutExpired:
            os.kill(self.pid, signal.SIGKILL)
            self.proc.wait(5)
        except ProcessLookupError:
            pass


class PrometheusServer(ServerProcess):
    """A real Prometheus. Either it scrapes ``targets`` as job ``job_name`` (``scrape_timeout``
    defaults to the scrape interval), or it runs a ready-made ``config`` dict, written as is."""

    name = "prometheus"

    def __init__(self, workdir: Path, targets: Sequence[str] = (), *, rule_files: Sequence[Any] = (),
                 alertmanager: Optional[str] = None, scrape_interval: str = "1s",
                 evaluation_interval: str = "1s", scrape_timeout: Optional[str] = None,
                 job_name: str = "hermes", config: Optional[Dict[str, Any]] = None,
                 binary: Optional[str] = None, log_level: str = "warn") -> None:
        super().__init__(workdir)
        self.binary = binary or require_binary(PROMETHEUS_BIN)
        self.log_level = log_level
        if config is not None:
            if targets or rule_files or alertmanager:
                raise TypeError("config is written as is: pass targets, rule_files, alertmanager in it")
        else:
            config = {
                "global": {"scrape_interval": scrape_interval, "evaluation_interval": evaluation_interval,
                           "scrape_timeout": scrape_timeout or scrape_interval},
                "scrape_configs": [{"job_name": job_name, "static_configs": [{"targets": list(targets)}]}],
            }
            if rule_files:
                config["rule_files"] = [str(p) for p in rule_files]
            if alertmanager:
                config["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": [alertmanager]}]}]}
        self.config_path = self.workdir / "prometheus.yml"
        self.config_path.write_text(yaml.safe_dump(config, sort_keys=False))

    def start(self) -> PrometheusServer:
        self._spawn([
            self.binary, f"--config.file={self.config_path}",
            f"--storage.tsdb.path={self.workdir / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.port}", f"--log.level={self.log_level}",
        ])
        self.wait_ready()
        return self

    def api(self, path: str, **params: Any) -> Any:
        """The ``data`` of a successful API answer (an HTTP error raises urllib.error.HTTPError)."""
        url = self.url + path + ("?" + urllib.parse.urlencode(params) if params else "")
        body = json.loads(http_get(url))
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> List[dict]:
        return self.api("/api/v1/query", query=expr)["result"]

    def scalar(self, expr: str) -> Optional[float]:
        """The single value of an instant vector query (None when empty)."""
        result = self.query(expr)
        if not result:
            return None
        assert len(result) == 1, result
        return float(result[0]["value"][1])

    def wait_value(self, expr: str, expected: float, timeout: float = 30.0) -> Optional[float]:
        """Poll until ``expr`` equals ``expected``; returns the last value seen."""
        last = [None]

        def check():
            last[0] = self.scalar(expr)
            return last[0] == expected
        wait_until(check, timeout, 0.25)
        return last[0]

    def targets_health(self) -> List[str]:
        return [t["health"] for t in self.api("/api/v1/targets")["activeTargets"]]

    def alerts(self) -> List[dict]:
        return self.api("/api/v1/alerts")["alerts"]


class AlertmanagerServer(ServerProcess):
    name = "alertmanager"

    def __init__(self, workdir: Path, config: Dict[str, Any], *, binary: Optional[str] = None,
                 log_level: str = "warn") -> None:
        super().__init__(workdir)
        self.binary = binary or require_binary(ALERTMANAGER_BIN)
        self.log_level = log_level
        self.config_path = self.workdir / "alertmanager.yml"
        self.config_path.write_text(yaml.safe_dump(config, sort_keys=False))

    def start(self) -> AlertmanagerServer:
        self._spawn([
            self.binary, f"--config.file={self.config_path}",
            f"--storage.path={self.workdir / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.port}", "--cluster.listen-address=",
            f"--log.level={self.log_level}",
        ])
        self.wait_ready()
        return self

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def alerts(self) -> List[dict]:
        return json.loads(http_get(self.url + "/api/v2/alerts"))


class WebhookReceiver:
    """Records Alertmanager webhook notifications (JSON bodies) posted to any path."""

    def __init__(self) -> None:
        self.notifications: List[dict] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                try:
                    payload = json.loads(body)
                except ValueError:
                    payload = {"raw": body.decode(errors="replace")}
                payload["_received_at"] = time.monotonic()
                with receiver._lock:
                    receiver.notifications.append(payload)
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/alerts"
        threading.Thread(target=self.server.serve_forever, name="webhook-receiver", daemon=True).start()

    def alerts(self, alertname: Optional[str] = None, status: Optional[str] = "firing") -> List[dict]:
        with self._lock:
            notes = list(self.notifications)
        out = []
        for n in notes:
            for a in n.get("alerts", []):
                if alertname and a.get("labels", {}).get("alertname") != alertname:
                    continue
                if status and a.get("status") != status:
                    continue
                out.append(dict(a, _received_at=n["_received_at"]))
        return out

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

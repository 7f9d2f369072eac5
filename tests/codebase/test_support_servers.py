"""The test helpers that hand out ports and start servers (tests/support/servers.py): a port
given to a server that binds it later stays its own, and a server counts as ready only when
its own process answers.

Several pytest processes run at once in CI, each starting servers on ports from
``free_port()``; a port that was merely free when asked could be handed to two of them."""

from __future__ import annotations

import errno
import os
import socket
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from support.servers import ServerProcess, free_port, listener_pids


def _plain_bind(port: int) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", port))


def test_a_free_port_cannot_be_taken_by_a_plain_bind():
    port = free_port()
    with pytest.raises(OSError) as err:
        _plain_bind(port)
    assert err.value.errno == errno.EADDRINUSE


def test_the_kernel_hands_a_reserved_port_to_no_one_else():
    reserved = {free_port() for _ in range(40)}
    assert len(reserved) == 40
    picked = set()
    for _ in range(1500):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            picked.add(s.getsockname()[1])
    assert not picked & reserved


def test_servers_that_reuse_the_address_bind_a_free_port_at_once():
    from prometheus_client import CollectorRegistry, start_http_server

    fake = ThreadingHTTPServer(("127.0.0.1", free_port()), _Ready)      # the fakes of tests/support
    port = free_port()
    httpd, _ = start_http_server(port, addr="127.0.0.1", registry=CollectorRegistry())   # the engine's /metrics
    try:
        assert listener_pids(port) == listener_pids(fake.server_address[1]) == {os.getpid()}
    finally:
        httpd.shutdown()
        httpd.server_close()
        fake.server_close()


class _Ready(BaseHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")


class _Idle(ServerProcess):
    """A process that never listens: whatever answers on its port is someone else."""

    name = "idle"

    def start(self) -> _Idle:
        self._spawn([sys.executable, "-c", "import time; time.sleep(60)"])
        self.wait_ready(timeout=10)
        return self


class _Http(ServerProcess):
    name = "http"
    ready_path = "/"

    def start(self) -> _Http:
        self._spawn([sys.executable, "-m", "http.server", "--bind", "127.0.0.1", str(self.port)])
        self.wait_ready(timeout=30)
        return self


def test_an_answer_from_another_process_is_not_the_server_being_ready(tmp_path):
    idle = _Idle(tmp_path)
    squatter = ThreadingHTTPServer(("127.0.0.1", idle.port), _Ready)   # answers on the server's port
    threading.Thread(target=squatter.serve_forever, daemon=True).start()
    try:
        with pytest.raises(AssertionError, match="held by another process"):
            idle.start()
    finally:
        idle.stop()
        squatter.shutdown()
        squatter.server_close()


def test_a_server_that_listens_on_its_port_is_ready(tmp_path):
    server = _Http(tmp_path)
    try:
        server.start()
        assert listener_pids(server.port) == {server.pid}
        assert listener_pids(server.port, session=server.pid) == {server.pid}
        assert listener_pids(server.port, session=server.pid + 100000) == set()
    finally:
        server.stop()

"""An OpenAI-compatible chat-completions server on 127.0.0.1, for the demo's and the replay's
fake LLMs (``demo.DemoLLM``, ``compare.replay_server.ReplayServer``).

This module holds the HTTP side, written once: ``GET …/models`` (``model_cards``) and
``POST …/chat/completions``, answered as JSON or as server-sent events when the request asks
for ``stream``. It also runs the thread-per-request server and its lifecycle (``start``/``stop``,
or ``with``). A subclass decides the answer in ``respond(body)``:

* ``(message, usage)``: the assistant message (``content``, optional ``tool_calls``) and its usage;
* an ``int``: fail with that HTTP status (``error_payload(status)``);
* ``DROP``: close the connection without an answer.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict, List, Tuple, Union

DROP = "drop"
STREAM_CHUNK_CHARS = 8192

Answer = Union[Tuple[Dict[str, Any], Dict[str, Any]], int, str]


def content_text(content: Any) -> str:
    """A chat message's ``content`` as text (a list of parts joined by spaces), what the fake
    LLMs measure a request by."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) if isinstance(p, dict) else str(p) for p in content)
    return "" if content is None else str(content)


# The words of prose(): a fake model's reply text.
_WORDS = ("context", "engine", "summary", "token", "window", "turn", "answer", "question", "budget",
          "prompt", "message", "history", "cache", "prefix", "request", "reply", "model", "session",
          "tool", "result", "note", "detail", "point", "topic", "state", "plan", "step", "check",
          "value", "count", "limit", "range", "record", "signal", "trace", "metric", "store", "row")


def prose(seed: int, chars: int) -> str:
    """``chars`` characters of text that does not repeat itself, the same for the same ``seed``:
    numbered sentences of words drawn by a generator seeded with it. A fake model's long reply
    must not be one sentence over and over: Hermes 0.22 stops such a reply as a model caught in a
    loop (its ``agent/repetition_guard.py``: "Response Stopped — Repetition Detected")."""
    import random

    rng = random.Random(seed)
    parts: List[str] = []
    size, n = 0, 0
    while size < chars:
        n += 1
        sentence = f"Point {n} of answer {seed}: " + " ".join(rng.choice(_WORDS) for _ in range(9)) + ". "
        parts.append(sentence)
        size += len(sentence)
    return "".join(parts)[:chars]


class LoopbackChatServer:
    owner = "loopback"              # the models' owned_by and the completion ids
    default_model = "loopback"
    thread_name = "loopback-llm"

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self._httpd = ThreadingHTTPServer((host, port), _handler_for(self))
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, name=self.thread_name, daemon=True)

    # -- what a subclass decides ----------------------------------------------------------

    def model_cards(self) -> List[Dict[str, Any]]:
        return [{"id": self.default_model, "object": "model", "owned_by": self.owner}]

    def respond(self, body: Dict[str, Any]) -> Answer:
        raise NotImplementedError

    def error_payload(self, status: int) -> Dict[str, Any]:
        return {"error": {"message": f"HTTP {status}"}}

    def reply_model(self, body: Dict[str, Any]) -> str:
        """The model an answer names: the requested one."""
        return body.get("model") or self.default_model

    # -- lifecycle --------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def start(self):
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def _handler_for(server: LoopbackChatServer):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):  # noqa: ARG002 (quiet)
            pass

        def _json(self, status: int, payload: Dict[str, Any]) -> None:
            body = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            if self.path.rstrip("/").endswith("/models"):
                self._json(200, {"object": "list", "data": server.model_cards()})
            else:
                self._json(404, {"error": {"message": f"no route {self.path}"}})

        def do_POST(self):
            length = int(self.headers.get("Content-Length") or 0)
            try:
                body = json.loads(self.rfile.read(length) or b"{}")
            except ValueError:
                self._json(400, {"error": {"message": "bad json"}})
                return
            if not self.path.rstrip("/").endswith("/chat/completions"):
                self._json(404, {"error": {"message": f"no route {self.path}"}})
                return
            answer = server.respond(body)
            if answer == DROP:
                self.close_connection = True
                self.connection.shutdown(2)
                return
            if isinstance(answer, int):
                self._json(answer, server.error_payload(answer))
                return
            message, usage = answer
            finish = "tool_calls" if message.get("tool_calls") else "stop"
            base = {"id": f"chatcmpl-{server.owner}-{time.time_ns()}", "created": int(time.time()),
                    "model": server.reply_model(body)}
            if not body.get("stream"):
                self._json(200, {**base, "object": "chat.completion", "usage": usage,
                                 "choices": [{"index": 0, "message": message, "finish_reason": finish}]})
                return
            self._stream({**base, "object": "chat.completion.chunk"}, message, usage, finish)

        def _stream(self, base, message, usage, finish) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            content = message.get("content") or ""
            deltas = [{"role": "assistant", "content": ""}]
            deltas += [{"content": content[i:i + STREAM_CHUNK_CHARS]}
                       for i in range(0, len(content), STREAM_CHUNK_CHARS)]
            for n, call in enumerate(message.get("tool_calls") or []):
                deltas.append({"tool_calls": [{**call, "index": n}]})
            choices = [{"index": 0, "delta": d, "finish_reason": None} for d in deltas]
            choices.append({"index": 0, "delta": {}, "finish_reason": finish})
            for choice in choices:
                self.wfile.write(b"data: " + json.dumps({**base, "choices": [choice]}).encode() + b"\n\n")
            self.wfile.write(b"data: " + json.dumps({**base, "choices": [], "usage": usage}).encode() + b"\n\n")
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
            self.close_connection = True

    return Handler

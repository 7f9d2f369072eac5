"""A small OpenAI-compatible chat-completions server for offline agent runs.

``POST /v1/chat/completions`` answers every request with a canned assistant
reply (plain JSON, or server-sent events when ``stream`` is true). Each reply is
long (``reply_chars``) so the conversation grows past the compression threshold
after a few turns, and ``usage.prompt_tokens`` is the request's size in tokens
(characters / 4), so it grows every turn as a real provider's would. A request
whose messages contain the compressor's summariser preamble is answered with a
summary text and counted in ``summary_requests``. ``GET /v1/models`` lists the
model with its context length.

    with FakeLLMServer(model="fake-model", context_length=64_000) as server:
        server.base_url   # http://127.0.0.1:<port>/v1
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict, List

SUMMARY_MARKER = "summarization agent"
SUMMARY_TEXT = (
    "## Goal\nKeep chatting about the fake topic.\n"
    "## Progress\nThe assistant answered every numbered question.\n"
    "## Remaining Work\nAnswer the next question."
)


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(part.get("text", "")) if isinstance(part, dict) else str(part)
                        for part in content)
    return "" if content is None else str(content)


class FakeLLMServer:
    def __init__(self, model: str = "fake-model", context_length: int = 64_000,
                 reply_chars: int = 40_000, host: str = "127.0.0.1", port: int = 0, *,
                 summary_status: int = 200, summary_delay: float = 0.0, summary_model: str | None = None,
                 cache: bool = False):
        # Faults and features of the summariser / provider (issue 15 tests):
        #   summary_status: an HTTP error status for every summary request (401: a bad key);
        #   summary_delay: seconds a summary request waits before its answer (a slow summariser);
        #   summary_model: the model the summary answers name (default: the requested one);
        #   cache: report prompt caching like OpenAI (usage.prompt_tokens_details.cached_tokens):
        #          the tokens of the leading messages equal to the previous chat request's.
        self.summary_status = summary_status
        self.summary_delay = summary_delay
        self.summary_model = summary_model
        self.cache = cache
        self._previous_chat: List[str] = []
        self.model = model
        self.context_length = context_length
        self.reply_chars = reply_chars
        self.requests: List[Dict[str, Any]] = []
        self.chat_requests: List[Dict[str, Any]] = []
        self.summary_requests: List[Dict[str, Any]] = []
        self.paths: List[str] = []
        self._lock = threading.Lock()
        self._turn = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def _send_json(self, status: int, payload: Dict[str, Any]) -> None:
                body = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                server.paths.append(f"GET {self.path}")
                if self.path.rstrip("/").endswith("/models"):
                    self._send_json(200, {"object": "list", "data": [{
                        "id": server.model, "object": "model", "owned_by": "fake",
                        "context_length": server.context_length,
                        "max_model_len": server.context_length,
                    }]})
                    return
                self._send_json(404, {"error": {"message": f"no route {self.path}"}})

            def do_POST(self):
                server.paths.append(f"POST {self.path}")
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b"{}"
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    self._send_json(400, {"error": {"message": "bad json"}})
                    return
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    self._send_json(404, {"error": {"message": f"no route {self.path}"}})
                    return
                content, usage = server._answer(body)
                if content is None:      # an injected summariser failure
                    self._send_json(usage, {"error": {"message": f"fake summariser error {usage}",
                                                      "type": "invalid_request_error", "code": usage}})
                    return
                if usage.pop("_summary", False) and server.summary_model:
                    body = {**body, "model": server.summary_model}
                if body.get("stream"):
                    self._stream(body, content, usage)
                else:
                    self._send_json(200, {
                        "id": f"chatcmpl-{time.time_ns()}", "object": "chat.completion",
                        "created": int(time.time()), "model": body.get("model") or server.model,
                        "choices": [{"index": 0, "finish_reason": "stop",
                                     "message": {"role": "assistant", "content": content}}],
                        "usage": usage,
                    })

            def _stream(self, body, content, usage):
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Connection", "close")
                self.end_headers()
                base = {"id": f"chatcmpl-{time.time_ns()}", "object": "chat.completion.chunk",
                        "created": int(time.time()), "model": body.get("model") or server.model}
                chunks = [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]
                step = 8192
                for i in range(0, len(content), step):
                    chunks.append({"index": 0, "delta": {"content": content[i:i + step]}, "finish_reason": None})
                chunks.append({"index": 0, "delta": {}, "finish_reason": "stop"})
                for choice in chunks:
                    self.wfile.write(b"data: " + json.dumps({**base, "choices": [choice]}).encode() + b"\n\n")
                self.wfile.write(b"data: " + json.dumps({**base, "choices": [], "usage": usage}).encode() + b"\n\n")
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()
                self.close_connection = True

        self._httpd = ThreadingHTTPServer((host, port), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="fake-llm", daemon=True)

    # -- behaviour ---------------------------------------------------------------

    def _answer(self, body: Dict[str, Any]):
        messages = body.get("messages") or []
        texts = [_text_of(m.get("content")) for m in messages if isinstance(m, dict)]
        prompt_chars = sum(len(t) for t in texts) + len(json.dumps(body.get("tools") or []))
        is_summary = any(SUMMARY_MARKER in t for t in texts)
        cached_chars = 0
        with self._lock:
            self.requests.append(body)
            if is_summary:
                self.summary_requests.append(body)
                if self.summary_status != 200:
                    return None, self.summary_status
                content = SUMMARY_TEXT
            else:
                if self.cache:
                    for now, before in zip(texts, self._previous_chat):
                        if now != before:
                            break
                        cached_chars += len(now)
                    self._previous_chat = texts
                self._turn += 1
                self.chat_requests.append(body)
                head = f"Answer {self._turn}: noted. "
                filler = ("The quick brown fox jumps over the lazy dog. " * (self.reply_chars // 45 + 1))
                content = (head + filler)[: self.reply_chars]
        prompt_tokens = max(1, prompt_chars // 4)
        completion_tokens = max(1, len(content) // 4)
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                 "total_tokens": prompt_tokens + completion_tokens}
        if self.cache and not is_summary:
            usage["prompt_tokens_details"] = {"cached_tokens": min(cached_chars // 4, prompt_tokens)}
        if is_summary:
            usage["_summary"] = True
            if self.summary_delay:
                time.sleep(self.summary_delay)
        return content, usage

    # -- lifecycle -----------------------------------------------------------------

    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> "FakeLLMServer":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> "FakeLLMServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

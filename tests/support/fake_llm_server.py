"""A small OpenAI-compatible chat-completions server for offline agent runs.

``POST /v1/chat/completions`` answers every request with a canned assistant
reply (plain JSON, or server-sent events when ``stream`` is true). Each reply is
long (``reply_chars``) so the conversation grows past the compression threshold
after a few turns, and ``usage.prompt_tokens`` is the request's size in tokens
(characters / 4), so it grows every turn as a real provider's would. A request
whose messages contain the compressor's summariser preamble is answered with a
summary text and counted in ``summary_requests``. ``GET /v1/models`` lists the
model with its context length. The HTTP side is the package's
``observed_engine.loopback_llm.LoopbackChatServer``, shared with the demo's and
the replay's fake LLMs.

    with FakeLLMServer(model="fake-model", context_length=64_000) as server:
        server.base_url   # http://127.0.0.1:<port>/v1
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any, Dict, List

from observed_engine.loopback_llm import LoopbackChatServer, content_text, prose

SUMMARY_MARKER = "summarization agent"
SUMMARY_TEXT = (
    "## Goal\nKeep chatting about the fake topic.\n"
    "## Progress\nThe assistant answered every numbered question.\n"
    "## Remaining Work\nAnswer the next question."
)


def varied_filler(turn: int, chars: int) -> str:
    """The varied replies' text (``FakeLLMServer(varied=True)``): ``loopback_llm.prose``, which
    Hermes 0.22's repetition guard lets through, unlike one sentence repeated."""
    return prose(turn, chars)


def _texts(body: Dict[str, Any]) -> List[str]:
    return [content_text(m.get("content")) for m in body.get("messages") or [] if isinstance(m, dict)]


class FakeLLMServer(LoopbackChatServer):
    owner = "fake"
    thread_name = "fake-llm"

    def __init__(self, model: str = "fake-model", context_length: int = 64_000,
                 reply_chars: int = 40_000, host: str = "127.0.0.1", port: int = 0, *,
                 summary_status: int = 200, summary_delay: float = 0.0, summary_model: str | None = None,
                 cache: bool = False, varied: bool = False):
        # Faults and features of the summariser / provider (issue 15 tests):
        #   summary_status: an HTTP error status for every summary request (401: a bad key);
        #   summary_delay: seconds a summary request waits before its answer (a slow summariser);
        #   summary_model: the model the summary answers name (default: the requested one);
        #   cache: report prompt caching like OpenAI (usage.prompt_tokens_details.cached_tokens):
        #          the tokens of the leading messages equal to the previous chat request's;
        #   varied: replies of prose that does not repeat itself (varied_filler), not one sentence
        #          over and over, which Hermes 0.22's repetition guard stops as a model in a loop.
        super().__init__(host, port)
        self.summary_status = summary_status
        self.summary_delay = summary_delay
        self.summary_model = summary_model
        self.cache = cache
        self.varied = varied
        self._previous_chat: List[str] = []
        self.model = self.default_model = model
        self.context_length = context_length
        self.reply_chars = reply_chars
        self.requests: List[Dict[str, Any]] = []
        self.chat_requests: List[Dict[str, Any]] = []
        self.summary_requests: List[Dict[str, Any]] = []
        self._lock = threading.Lock()
        self._turn = 0

    # -- what the shared server asks -----------------------------------------------

    def model_cards(self) -> List[Dict[str, Any]]:
        return [{"id": self.model, "object": "model", "owned_by": self.owner,
                 "context_length": self.context_length, "max_model_len": self.context_length}]

    def error_payload(self, status: int) -> Dict[str, Any]:     # an injected summariser failure
        return {"error": {"message": f"fake summariser error {status}", "type": "invalid_request_error",
                          "code": status}}

    def reply_model(self, body: Dict[str, Any]) -> str:
        if self.summary_model and any(SUMMARY_MARKER in t for t in _texts(body)):
            return self.summary_model
        return super().reply_model(body)

    def respond(self, body: Dict[str, Any]):
        texts = _texts(body)
        prompt_chars = sum(len(t) for t in texts) + len(json.dumps(body.get("tools") or []))
        is_summary = any(SUMMARY_MARKER in t for t in texts)
        cached_chars = 0
        with self._lock:
            self.requests.append(body)
            if is_summary:
                self.summary_requests.append(body)
                if self.summary_status != 200:
                    return self.summary_status
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
                if self.varied:
                    filler = varied_filler(self._turn, self.reply_chars)
                else:
                    filler = ("The quick brown fox jumps over the lazy dog. " * (self.reply_chars // 45 + 1))
                content = (head + filler)[: self.reply_chars]
        prompt_tokens = max(1, prompt_chars // 4)
        completion_tokens = max(1, len(content) // 4)
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                 "total_tokens": prompt_tokens + completion_tokens}
        if self.cache and not is_summary:
            usage["prompt_tokens_details"] = {"cached_tokens": min(cached_chars // 4, prompt_tokens)}
        if is_summary and self.summary_delay:
            time.sleep(self.summary_delay)
        return {"role": "assistant", "content": content}, usage

    # -- lifecycle -----------------------------------------------------------------

    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

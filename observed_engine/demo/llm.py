"""The demo's own LLM: an OpenAI-compatible server on 127.0.0.1 that answers chat and summary
requests, slowly or failing now and then."""

from __future__ import annotations

import threading
import time
from typing import Any, Dict, List

from ..loopback_llm import DROP, LoopbackChatServer, content_text, prose

SUMMARY_MARKER = "summarization agent"      # in the built-in compressor's summariser prompt


CHAT_MODEL = "demo-model"


SUMMARY_MODEL = "demo-summariser"


SUMMARY_TEXT = ("## Goal\nKeep the demo conversation going.\n## Progress\nThe assistant answered every "
                "question so far.\n## Remaining Work\nAnswer the next question.")


class DemoLLM(LoopbackChatServer):
    """A chat-completions server on 127.0.0.1 that answers the agent and its summariser.

    Chat replies are ``reply_chars`` long, so a conversation crosses the compression threshold
    after a few turns; ``usage.prompt_tokens`` is the request's size (characters / 4) and
    ``prompt_tokens_details.cached_tokens`` what a provider's prefix cache would have kept: the
    previous request of the same conversation, none after the prefix changed (a compaction).
    Summaries (requests with the summariser's preamble): every ``fail_every``-th fails, HTTP 401
    and a dropped connection in turn; every ``slow_every``-th takes ``slow_seconds``."""

    def __init__(self, *, reply_chars: int = 40_000, context_length: int = 64_000, slow_every: int = 0,
                 slow_seconds: float = 0.0, fail_every: int = 0, host_: str = "127.0.0.1", port: int = 0) -> None:
        self.reply_chars = reply_chars
        self.context_length = context_length
        self.slow_every, self.slow_seconds, self.fail_every = slow_every, slow_seconds, fail_every
        self.chats = 0
        self.summaries = 0
        self.failures = 0
        self._prefix: Dict[str, tuple] = {}      # conversation -> (first messages digest, prompt tokens)
        self._lock = threading.Lock()
        super().__init__(host_, port)

    thread_name = "demo-llm"
    owner = "demo"
    default_model = CHAT_MODEL

    def model_cards(self) -> List[Dict[str, Any]]:
        return [{"id": m, "object": "model", "owned_by": "demo", "context_length": self.context_length}
                for m in (CHAT_MODEL, SUMMARY_MODEL)]

    def error_payload(self, status: int) -> Dict[str, Any]:  # noqa: ARG002 (the demo fails with 401 only)
        return {"error": {"message": "invalid api key (demo)", "type": "auth_error", "code": "invalid_api_key"}}

    def respond(self, body: Dict[str, Any]):
        """(message, usage), an HTTP status to fail with, or DROP (close the connection)."""
        messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
        texts = [content_text(m.get("content")) for m in messages]
        prompt = max(1, (sum(len(t) for t in texts) + len(str(body.get("tools") or ""))) // 4)
        if any(SUMMARY_MARKER in t for t in texts):
            with self._lock:
                self.summaries += 1
                n = self.summaries
                failing = bool(self.fail_every) and n % self.fail_every == 0
                if failing:
                    self.failures += 1
                    nth = self.failures
            if failing:
                time.sleep(0.05)
                return 401 if nth % 2 else DROP
            time.sleep(self.slow_seconds if self.slow_every and n % self.slow_every == 0 else 0.05)
            return {"role": "assistant", "content": SUMMARY_TEXT}, {"prompt_tokens": prompt, "completion_tokens": len(SUMMARY_TEXT) // 4,
                                  "total_tokens": prompt + len(SUMMARY_TEXT) // 4}
        # the conversation: its first user message; the cached prefix: what the previous request sent
        first_user = next((t for m, t in zip(messages, texts) if m.get("role") == "user"), "")
        head = "\x00".join(texts[:3])
        with self._lock:
            self.chats += 1
            turn = self.chats
            prev = self._prefix.get(first_user[:200])
            self._prefix[first_user[:200]] = (head, prompt)
            if len(self._prefix) > 10_000:
                self._prefix.clear()
        cached = min(prev[1], prompt) * 9 // 10 if prev and prev[0] == head else 0
        # prose that does not repeat itself: Hermes 0.22 stops a reply of one repeated sentence
        content = (f"Answer {turn}: noted. " + prose(turn, self.reply_chars))[: self.reply_chars]
        completion = len(content) // 4
        return {"role": "assistant", "content": content}, {"prompt_tokens": prompt, "completion_tokens": completion,
                         "total_tokens": prompt + completion, "prompt_tokens_details": {"cached_tokens": cached}}

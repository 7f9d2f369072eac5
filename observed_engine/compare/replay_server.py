"""The replay LLM: an OpenAI-compatible chat-completions server on 127.0.0.1.

Each chat request gets the next recorded assistant message, with ``usage`` counted from the
request it received (tiktoken, or characters / 4), so the host and the engine see a request of
the replayed size; per request it records what the report needs. When editing: summariser
requests are answered by ``summarise`` and counted apart, and one server serves many replays in
turn (``reset`` before each), so a sweep worker pays Hermes' probes once.

The full account: docs/design/internals.md, *observed_engine/compare/replay_server.py*.
"""

from __future__ import annotations

import json
import threading
from typing import Any, Callable, Dict, List, Optional

from ..loopback_llm import LoopbackChatServer, content_text

SUMMARY_MARKER = "summarization agent"
NO_REPLY = "(replay: the recording has no reply for this request)"


class ReplayServer(LoopbackChatServer):
    def __init__(self, replies: List[Dict[str, Any]], *, model: str, context_length: int,
                 usage: str = "tiktoken", summarise: Optional[Callable[[str], str]] = None) -> None:
        if usage not in ("tiktoken", "chars"):
            raise ValueError(f"usage must be 'tiktoken' or 'chars', not {usage!r}")
        self.usage = usage
        self._lock = threading.Lock()
        self._tools_tokens: Dict[str, int] = {}      # tool schemas' JSON -> tokens (the same every request)
        self.reset(replies, model=model, context_length=context_length, summarise=summarise)
        super().__init__()

    def reset(self, replies: List[Dict[str, Any]], *, model: str, context_length: int,
              summarise: Optional[Callable[[str], str]] = None) -> None:
        """Serve another conversation: its replies, its model, from its first request on."""
        with self._lock:
            self.model = model
            self.context_length = context_length
            self.summarise = summarise or (lambda prompt: f"Summary of {len(prompt)} characters of earlier turns.")
            self._replies = list(replies)
            self._next = 0
            self.turn = 0                                 # set by the replay before each turn
            self._previous: Optional[List[Any]] = None
            self.requests: List[Dict[str, Any]] = []     # one per chat request: tokens, lost, over
            self.summary_requests = 0
            self.summary_prompt_tokens = 0
            self.summary_completion_tokens = 0
            self.unanswered = 0                           # chat requests past the recording
            self.tools_sent: Optional[Dict[str, int]] = None   # the first request's tools: count, tokens
            self._counter = None
            if self.usage == "tiktoken":
                from ..tokens import counter_for

                self._counter = counter_for("auto", model)

    thread_name = "observed-replay-llm"
    owner = "replay"

    @property
    def default_model(self) -> str:
        return self.model

    def model_cards(self) -> List[Dict[str, Any]]:
        return [{"id": self.model, "object": "model", "owned_by": "replay",
                 "context_length": self.context_length, "max_model_len": self.context_length}]

    # -- counting ---------------------------------------------------------------------------

    def count_text(self, text: str) -> int:
        """Tokens of a text as this server counts usage (tiktoken, or characters / 4)."""
        if self._counter is not None:
            return self._counter.count_text(text)
        return len(text) // 4

    def _tools(self, tools: Any) -> int:
        if not tools:
            return 0
        text = json.dumps(tools)
        known = self._tools_tokens.get(text)
        if known is None:
            known = self._tools_tokens[text] = (self._counter.count_text(text) if self._counter is not None
                                                else len(text))
            if len(self._tools_tokens) > 64:
                self._tools_tokens.clear()
                self._tools_tokens[text] = known
        return known

    def _tokens(self, messages: List[Any], tools: Any = None) -> int:
        if self._counter is not None:
            return self._counter.count_messages(messages) + self._tools(tools)
        chars = sum(len(content_text(m.get("content"))) for m in messages if isinstance(m, dict)) + self._tools(tools)
        return chars // 4

    def respond(self, body: Dict[str, Any]):
        messages = [m for m in (body.get("messages") or []) if isinstance(m, dict)]
        tools = body.get("tools") or []
        prompt = self._tokens(messages, tools)
        if any(SUMMARY_MARKER in content_text(m.get("content")) for m in messages):
            text = self.summarise(content_text(messages[0].get("content")) if messages else "")
            with self._lock:
                self.summary_requests += 1
                self.summary_prompt_tokens += prompt
                self.summary_completion_tokens += max(1, len(text) // 4)
            return ({"role": "assistant", "content": text},
                    {"prompt_tokens": prompt, "completion_tokens": max(1, len(text) // 4),
                     "total_tokens": prompt + max(1, len(text) // 4)})
        with self._lock:
            if self._next < len(self._replies):
                recorded = self._replies[self._next]
                self._next += 1
            else:
                recorded = {"role": "assistant", "content": NO_REPLY}
                self.unanswered += 1
            lost = 0
            if self._previous is not None:
                prev = self._previous
                same = 0
                while same < min(len(prev), len(messages)) and prev[same] == messages[same]:
                    same += 1
                if same < len(prev):
                    lost = self._tokens(prev) - self._tokens(prev[:same])
            self._previous = messages
            if self.tools_sent is None:
                self.tools_sent = {"tools": len(tools) if isinstance(tools, list) else 0,
                                   "tokens": self._tools(tools)}
            self.requests.append({"prompt_tokens": prompt, "cache_prefix_lost_tokens": max(0, lost),
                                  "over_window": prompt > self.context_length, "messages": len(messages),
                                  "turn": self.turn})
        message = {"role": "assistant", "content": recorded.get("content") or ""}
        if recorded.get("tool_calls"):
            message["tool_calls"] = recorded["tool_calls"]
        completion = max(1, len(content_text(message["content"])) // 4)
        return message, {"prompt_tokens": prompt, "completion_tokens": completion,
                         "total_tokens": prompt + completion}

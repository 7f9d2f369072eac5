"""Engines and transcripts for the tests: small scripted engines (the built-in offline: support/builtin.py)."""

from __future__ import annotations

import threading
from typing import Any, Callable, Dict, List, Optional

from agent.context_engine import ContextEngine

def transcript(n: int, words: int = 30, prefix: str = "message") -> List[Dict[str, Any]]:
    msgs: List[Dict[str, Any]] = [{"role": "system", "content": "You are a helpful assistant."}]
    for i in range(n):
        role = "user" if i % 2 == 0 else "assistant"
        msgs.append({"role": role, "content": " ".join(f"{prefix}-{i}-word{j}" for j in range(words))})
    return msgs


class ScriptedEngine(ContextEngine):
    """A ContextEngine whose hooks record their calls and do what ``behaviour`` says.

    ``behaviour[hook]`` is a callable taking the hook's arguments; its return value
    (or exception) is the hook's. Without one, each hook does something ordinary.
    """

    def __init__(self, name: str = "scripted", behaviour: Optional[Dict[str, Callable]] = None,
                 context_length: int = 100_000, threshold_tokens: int = 50_000) -> None:
        self._engine_name = name
        self.behaviour = dict(behaviour or {})
        self.calls: List[tuple] = []
        self._calls_lock = threading.Lock()
        self.context_length = context_length
        self.threshold_tokens = threshold_tokens
        self.last_prompt_tokens = 0

    @property
    def name(self) -> str:
        return self._engine_name

    def _do(self, hook: str, default: Callable[[], Any], *args, **kwargs):
        with self._calls_lock:
            self.calls.append((hook, args, kwargs))
        fn = self.behaviour.get(hook)
        if fn is not None:
            return fn(*args, **kwargs)
        return default()

    def calls_of(self, hook: str) -> List[tuple]:
        with self._calls_lock:
            return [(a, k) for h, a, k in self.calls if h == hook]

    # -- the ABC ------------------------------------------------------------------

    def update_from_response(self, usage):
        def default():
            # Tolerant on purpose: odd usage dicts must reach the wrapper's accounting.
            value = usage.get("prompt_tokens") if isinstance(usage, dict) else None
            if isinstance(value, int) and not isinstance(value, bool):
                self.last_prompt_tokens = value
        return self._do("update_from_response", default, usage)

    def should_compress(self, prompt_tokens=None):
        return self._do("should_compress", lambda: bool(prompt_tokens and prompt_tokens >= self.threshold_tokens),
                        prompt_tokens)

    def compress(self, messages, current_tokens=None, focus_topic=None, force=False, memory_context=""):
        def default():
            self.compression_count += 1
            return [messages[0], {"role": "user", "content": "summary"}] if len(messages) > 4 else messages
        return self._do("compress", default, messages, current_tokens=current_tokens)

    def on_session_start(self, session_id, **kwargs):
        return self._do("on_session_start", lambda: None, session_id, **kwargs)

    def on_session_end(self, session_id, messages):
        return self._do("on_session_end", lambda: None, session_id, messages)

    def on_session_reset(self):
        return self._do("on_session_reset", lambda: None)

    def get_tool_schemas(self):
        return self._do("get_tool_schemas", lambda: [{"name": "ctx_search", "description": "search",
                                                       "parameters": {"type": "object", "properties": {}}}])

    def handle_tool_call(self, name, args, **kwargs):
        return self._do("handle_tool_call", lambda: '{"ok": true}', name, args, **kwargs)

    # -- not on the 0.19.0 ABC -------------------------------------------------------

    def bind_session_state(self, session_db=None, session_id=None):
        return self._do("bind_session_state", lambda: None, session_db=session_db, session_id=session_id)

    def record_timeout_failure(self, reason, failure_kind=None):
        return self._do("record_timeout_failure", lambda: None, reason, failure_kind=failure_kind)


class SelectingEngine(ScriptedEngine):
    """Also overrides the head-only hooks the host calls only when overridden."""

    def select_context(self, request_messages, *, conversation_messages=None, incoming_message=None,
                       budget_tokens=None):
        return self._do("select_context", lambda: None, request_messages,
                        conversation_messages=conversation_messages, incoming_message=incoming_message,
                        budget_tokens=budget_tokens)

    def on_turn_complete(self, messages, usage=None, **kwargs):
        return self._do("on_turn_complete", lambda: None, messages, usage=usage, **kwargs)


def blocking_compress(release: threading.Event, started: Optional[threading.Event] = None,
                      timeout: Optional[float] = None):
    """A compress behaviour that blocks until ``release`` is set (or ``timeout``), then shrinks."""
    def compress(messages, current_tokens=None):
        if started is not None:
            started.set()
        release.wait(timeout)
        return messages[:1] + messages[-1:]
    return compress

"""A 0.19.0-shaped host, step by step: how it calls an engine's hooks (``host_compress_kwargs``,
``host_call``, ``host_writes``), whole sessions (``scripted_session``, ``standard_script``), and the
agent ``compress_context`` reads (``StandInAgent``)."""

from __future__ import annotations

import inspect
from typing import Any, Dict, List, Optional

from support.engines import agent_transcript, conversation

COMPRESS_CANDIDATES = ("current_tokens", "focus_topic", "force", "memory_context", "bypass_cooldown")

# Every call shape the hosts use: 0.19.0 (with/without memory context), manual /compress, head.
COMPRESS_SHAPES = (
    {},
    {"current_tokens": 12_345},
    {"current_tokens": 12_345, "focus_topic": "the database schema"},
    {"current_tokens": 12_345, "focus_topic": None, "force": False},
    {"current_tokens": 54_321, "focus_topic": "auth", "force": True, "memory_context": "user prefers tabs"},
    {"current_tokens": 54_321, "focus_topic": None, "force": False, "memory_context": "m", "bypass_cooldown": True},
)


def host_compress_kwargs(engine, candidates: Dict[str, Any]) -> Dict[str, Any]:
    """Filter ``candidates`` by ``inspect.signature(engine.compress)`` the way the host does."""
    try:
        params = inspect.signature(engine.compress).parameters
    except (TypeError, ValueError):
        return {k: v for k, v in candidates.items() if k == "current_tokens"}
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return dict(candidates)
    return {k: v for k, v in candidates.items() if k in params}


def call(log: list, label: str, fn, *args, **kwargs):
    """Call ``fn``; log ("ok", result) or ("raise", exception); return the result or None."""
    try:
        result = fn(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - the host sees every exception
        log.append((label, "raise", exc))
        return None
    log.append((label, "ok", result))
    return result


def scripted_session(engine, messages: Optional[List[Dict[str, Any]]] = None, session_id: str = "sess-1",
                     *, model: str = "gpt-4o", context_length: int = 200_000, after_compress=None) -> list:
    """One session the way a 0.19.0 host drives an engine; returns the call log."""
    messages = agent_transcript(40) if messages is None else messages
    log: list = []
    call(log, "update_model", engine.update_model, model=model, context_length=context_length,
         base_url="https://example.invalid/v1", api_key="sk-test", provider="openrouter", api_mode="chat_completions")
    call(log, "on_session_start", engine.on_session_start, session_id, hermes_home="/tmp/h", platform="cli",
         model=model, context_length=context_length, conversation_id="conv-1")
    bind = getattr(engine, "bind_session_state", None)
    if callable(bind):
        call(log, "bind_session_state", bind, session_db=None, session_id=session_id)
    call(log, "update_from_response", engine.update_from_response,
         {"prompt_tokens": 150_000, "completion_tokens": 800, "total_tokens": 150_800,
          "input_tokens": 150_000, "output_tokens": 800, "cache_read_tokens": 1000,
          "cache_write_tokens": 0, "reasoning_tokens": 50})
    call(log, "update_from_response:empty", engine.update_from_response, {})
    call(log, "should_compress", engine.should_compress, 150_000)
    call(log, "should_compress:low", engine.should_compress, 10)
    defer = getattr(engine, "should_defer_preflight_to_real_usage", None)
    if callable(defer):
        call(log, "should_defer_preflight_to_real_usage", defer, 160_000)
    call(log, "has_content_to_compress", engine.has_content_to_compress, messages)
    for i, shape in enumerate(COMPRESS_SHAPES):
        kwargs = host_compress_kwargs(engine, shape)
        result = call(log, f"compress:{i}", engine.compress, list(messages), **kwargs)
        if result is not None:
            host_writes(engine)
            if after_compress is not None:
                after_compress(engine)
    call(log, "compress:short", engine.compress, messages[:3], **host_compress_kwargs(engine, {"current_tokens": 1}))
    call(log, "get_status", engine.get_status)
    schemas = call(log, "get_tool_schemas", engine.get_tool_schemas) or []
    for schema in schemas:
        call(log, f"handle_tool_call:{schema['name']}", engine.handle_tool_call, schema["name"],
             {"query": "schema"}, messages=messages)
    call(log, "handle_tool_call:unknown", engine.handle_tool_call, "no_such_tool", {"x": 1}, messages=messages)
    call(log, "handle_tool_call:explode", engine.handle_tool_call, "explode", {"x": 2})
    call(log, "update_from_response:boom", engine.update_from_response,
         {"prompt_tokens": 1000, "completion_tokens": 10, "total_tokens": 1010, "boom": "bad"})
    call(log, "on_session_end", engine.on_session_end, session_id, messages)
    call(log, "on_session_reset", engine.on_session_reset)
    call(log, "get_status:after", engine.get_status)
    return log


def host_writes(engine):
    """What the 0.19.0 host writes on the engine after a compaction."""
    engine.last_prompt_tokens = -1
    engine.last_completion_tokens = 0
    engine.last_compression_rough_tokens = 4242
    engine.awaiting_real_usage_after_compression = True
    engine._verify_compaction_cleared_threshold = True


def host_call(engine, hook, payload):
    """(hook, args, kwargs) the host would call for this step, or None when it would not call it."""
    if hook == "update_model":
        return (), dict(payload)
    if hook == "on_session_start":
        session, reason = payload
        kw = {"hermes_home": "/tmp/h", "platform": "cli", "model": "gpt-4o", "conversation_id": "c1"}
        if reason:
            kw.update(boundary_reason=reason, old_session_id="s0")
        return (session,), kw
    if hook == "update_from_response":
        return (payload,), {}
    if hook == "should_compress":
        return (payload,), {}
    if hook == "compress":
        messages, candidates = payload
        return (messages,), host_compress_kwargs(engine, candidates)
    if hook in ("get_status", "on_session_reset"):
        return (), {}
    if hook == "on_session_end":
        return payload, {}
    if hook == "select_context":
        if not hasattr(engine, "select_context"):
            return None          # head skips engines that do not override it; 0.19.0 never calls it
        messages, budget = payload
        return (messages,), {"conversation_messages": messages, "incoming_message": messages[-1],
                             "budget_tokens": budget}
    if hook == "on_turn_complete":
        if not hasattr(engine, "on_turn_complete"):
            return None
        messages, usage = payload
        return (messages,), {"usage": usage, "turn_id": 1, "task_id": "t", "api_call_count": 2,
                             "interrupted": False, "failed": False, "turn_exit_reason": "done"}
    if hook == "has_content_to_compress":
        return (payload,), {}
    if hook == "handle_tool_call":
        name, query = payload
        return (name, {"query": query}), {"messages": [{"role": "user", "content": query}]}
    raise AssertionError(hook)


def standard_script(i: int = 0, text: str = "") -> List[tuple]:
    """One ordinary session: 7 hook calls, one of them a real compaction."""
    messages = conversation(12, text=text)
    return [
        ("update_model", {"model": "gpt-4o", "context_length": 8000, "base_url": "", "api_key": "",
                          "provider": "openai", "api_mode": "chat_completions"}),
        ("on_session_start", (f"s{i}", None)),
        ("update_from_response", {"prompt_tokens": 4100 + i, "completion_tokens": 30, "total_tokens": 4130 + i}),
        ("should_compress", 4100 + i),
        ("compress", (messages, {"current_tokens": 4100 + i, "focus_topic": f"topic {text}"})),
        ("get_status", None),
        ("on_session_end", (f"s{i}", messages)),
    ]


STANDARD_HOOKS = ("update_model", "on_session_start", "update_from_response", "should_compress", "compress",
                  "get_status", "on_session_end")


class MemoryManager:
    """An external memory provider: hands the compressor a memory context."""

    def __init__(self, text: str = "The user prefers short answers.") -> None:
        self.text = text
        self.pre_compress_calls = 0

    def on_pre_compress(self, messages):
        self.pre_compress_calls += 1
        return self.text

    def on_session_switch(self, *args, **kwargs):
        pass


class TodoStore:
    def format_for_injection(self):
        return ""


class StandInAgent:
    """The attributes ``agent.conversation_compression.compress_context`` (0.19.0) reads."""

    def __init__(self, engine, *, memory: Optional[MemoryManager] = None, session_id: str = "sess-cc") -> None:
        self.context_compressor = engine
        self.api_mode = "chat_completions"
        self.session_id = session_id
        self.model = "gpt-4o"
        self.platform = "cli"
        self.log_prefix = ""
        self.tools = None
        self.event_callback = None
        self.compression_in_place = False
        self._compression_feasibility_checked = True
        self._session_db = None
        self._memory_manager = memory
        self._todo_store = TodoStore()
        self._cached_system_prompt = "SYSTEM PROMPT"
        self._gateway_session_key = None
        self.statuses: List[str] = []
        self.warnings: List[str] = []
        self.prompt_builds = 0

    def _emit_status(self, message):
        self.statuses.append(message)

    def _emit_warning(self, message):
        self.warnings.append(message)

    def _build_system_prompt(self, system_message=None):
        self.prompt_builds += 1
        return f"SYSTEM PROMPT ({system_message})"

    def _invalidate_system_prompt(self):
        self._cached_system_prompt = None


def usage(prompt: int) -> dict:
    """A provider's usage block for a response to a ``prompt``-token request."""
    return {"prompt_tokens": prompt, "completion_tokens": 800, "total_tokens": prompt + 800}


def host_compaction(engine, name: str, prompt: int = 85_000):
    """What the host does at ``prompt`` tokens of a 100k window: the real compress_context() on 81
    messages, after the response that reported ``prompt``. 85 % (the default) is past the built-in's
    threshold (75 %) and below NearWindow's 90 %. Returns (messages, what compress_context gave)."""
    from agent.conversation_compression import compress_context

    agent = StandInAgent(engine, session_id=f"sess-{name}")
    engine.update_model(model="gpt-4o", context_length=100_000)
    engine.on_session_start(f"sess-{name}", model="gpt-4o")
    engine.update_from_response(usage(prompt))
    assert engine.should_compress(prompt)
    messages = agent_transcript(80, 1500, seed=name)
    out, _ = compress_context(agent, messages, "system message", approx_tokens=prompt)
    return messages, out

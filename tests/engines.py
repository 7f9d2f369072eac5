"""Test engines shaped like the engines in the wild (host contract, section 5),
plus the pieces of a 0.19.0 host the differential tests drive them with.

Every engine keeps what happened to it in its own instance state (``calls``,
``seen``, ``last_result`` ...), so comparing ``vars()`` of a bare engine and its
observed twin also compares what the engines were asked to do. Engines stash
the objects they return or raise, so the tests can check identity.
"""

from __future__ import annotations

import inspect
import json
import sqlite3
import sys
from collections import Counter
from typing import Any, Dict, List, Optional

from agent.context_engine import ContextEngine

CANARY = "CANARY-7f3a9c-secret-text"

TOOL_SCHEMA = {
    "name": "ctx_grep",
    "description": "Search the compacted history.",
    "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
}


class EngineError(RuntimeError):
    """Raised by the test engines; carries the text it was built from."""


# --------------------------------------------------------------------------- transcripts

def transcript(n: int = 60, size: int = 600, *, text: str = "", seed: str = "t") -> List[Dict[str, Any]]:
    """A system prompt and ``n`` alternating user/assistant messages with some tool calls."""
    filler = " ".join(f"w{seed}{i}" for i in range(size // 6))
    messages: List[Dict[str, Any]] = [{"role": "system", "content": f"You are a test agent. {text}"}]
    for i in range(n):
        if i % 7 == 5:
            call_id = f"call_{seed}_{i}"
            messages.append({
                "role": "assistant", "content": "",
                "tool_calls": [{"id": call_id, "type": "function",
                                "function": {"name": "read_file", "arguments": json.dumps({"path": f"/src/f{i}.py"})}}],
            })
            messages.append({"role": "tool", "tool_call_id": call_id, "content": f"file {i}: {filler} {text}"})
            continue
        role = "user" if i % 2 == 0 else "assistant"
        messages.append({"role": role, "content": f"message {i} ({role}) {filler} {text}"})
    if messages[-1]["role"] != "user":
        messages.append({"role": "user", "content": f"continue please {text}"})
    return messages


def shrink(messages: List[Dict[str, Any]], keep_tail: int = 4) -> List[Dict[str, Any]]:
    """A deterministic compaction: first message, one summary, the last ``keep_tail``.

    Short transcripts come back as the very same list object (a no-op)."""
    if len(messages) <= keep_tail + 2:
        return messages
    dropped = len(messages) - 1 - keep_tail
    summary = {"role": "user", "content": f"[summary of {dropped} messages]"}
    return [messages[0], summary, *messages[-keep_tail:]]


# --------------------------------------------------------------------------- engines

class _Recording:
    """Mixin: counts hook calls in instance state."""

    def _note(self, hook: str, **seen: Any) -> None:
        calls = self.__dict__.setdefault("calls", {})
        calls[hook] = calls.get(hook, 0) + 1
        if seen:
            self.__dict__.setdefault("seen", []).append((hook, seen))

    def _returning(self, value):
        """Stash what the engine returns (tests check the host gets this very object)."""
        self.__dict__.setdefault("returned", []).append(value)
        self.last_result = value
        return value

    def _raising(self, error: BaseException):
        """Stash what the engine raises (tests check the host sees this very object)."""
        self.__dict__.setdefault("raised", []).append(error)
        raise error


class _BaseEngine(_Recording, ContextEngine):
    """Common token bookkeeping (the ABC's six counters live on the instance)."""

    def __init__(self) -> None:
        self.calls: Dict[str, int] = {}
        self.seen: List[Any] = []
        self.last_result: Any = None
        self.threshold_percent = 0.5

    def update_from_response(self, usage: Dict[str, Any]) -> None:
        self._note("update_from_response", keys=sorted(usage))
        self.last_prompt_tokens = usage.get("prompt_tokens", 0)
        self.last_completion_tokens = usage.get("completion_tokens", 0)
        self.last_total_tokens = usage.get("total_tokens", self.last_prompt_tokens + self.last_completion_tokens)

    def should_compress(self, prompt_tokens: int = None) -> bool:
        self._note("should_compress")
        tokens = self.last_prompt_tokens if prompt_tokens is None else prompt_tokens
        return bool(self.threshold_tokens) and tokens >= self.threshold_tokens

    def on_session_start(self, session_id: str, **kwargs) -> None:
        self._note("on_session_start", session_id=session_id, kwargs=sorted(kwargs))
        self.session_id = session_id

    def on_session_end(self, session_id: str, messages: List[Dict[str, Any]]) -> None:
        self._note("on_session_end", session_id=session_id, n=len(messages))

    def get_status(self) -> Dict[str, Any]:
        self._note("get_status")
        status = super().get_status()
        status["engine_calls"] = sum(self.calls.values())
        return self._returning(status)


class NarrowEngine(_BaseEngine):
    """``name`` as a plain class attribute; compress without ``force``/``memory_context``."""

    name = "narrow"

    def compress(self, messages, current_tokens=None, focus_topic=None):
        self._note("compress", current_tokens=current_tokens, focus_topic=focus_topic)
        result = shrink(messages)
        if result is not messages:
            self.compression_count += 1
        return self._returning(result)


class KwargsEngine(_BaseEngine):
    """``name`` as a property; compress takes ``**kwargs``; offers engine tools."""

    def __init__(self) -> None:
        super().__init__()
        self.schemas = [dict(TOOL_SCHEMA)]

    @property
    def name(self) -> str:
        return "kwargs-engine"

    def compress(self, messages, **kwargs):
        self._note("compress", kwargs=sorted(kwargs.items()))
        result = shrink(messages, keep_tail=2)
        self.compression_count += 1
        return self._returning(result)

    def get_tool_schemas(self):
        self._note("get_tool_schemas")
        return self._returning(self.schemas)

    def handle_tool_call(self, name, args, **kwargs):
        self._note("handle_tool_call", name=name, kw=sorted(kwargs))
        if name == "explode":
            self._raising(EngineError(f"tool exploded on {args!r}"))
        return self._returning(
            json.dumps({"tool": name, "hits": [args.get("query", "")], "n": len(kwargs.get("messages") or [])}))


class RaisingEngine(_BaseEngine):
    """compress() raises (an engine written for another host); so do some other hooks."""

    name = "raising"

    def compress(self, messages, current_tokens=None, focus_topic=None, force=False, memory_context=""):
        self._note("compress", focus_topic=focus_topic)
        self._raising(EngineError(f"compress failed on {len(messages)} messages, focus {focus_topic!r}"))

    def update_from_response(self, usage):
        super().update_from_response(usage)
        if "boom" in usage:
            self._raising(KeyError(usage["boom"]))

    def on_session_end(self, session_id, messages):
        super().on_session_end(session_id, messages)
        self._raising(OSError(5, f"flush failed for {session_id}"))


class SelectingEngine(_BaseEngine):
    """Defines head's select_context / on_turn_complete, driven by a script.

    Script items: ``"none"`` -> None, ``"same"`` -> the request list itself,
    ``"drop:N"`` -> a new list without the first N non-system messages,
    ``"keep"`` -> the list object it returned last time, ``"copy"`` -> an equal
    copy of the last selection, ``"raise"``, ``"empty"`` -> [], ``"tuple"``,
    ``"nondict"`` -> a list with a string in it.
    """

    name = "selecting"

    def __init__(self, script=()) -> None:
        super().__init__()
        self.script = list(script)
        self.step = 0
        self.last_selection = None
        self.turns: List[Any] = []

    def compress(self, messages, current_tokens=None, focus_topic=None, force=False, memory_context=""):
        self._note("compress")
        return self._returning(shrink(messages))

    def select_context(self, request_messages, *, conversation_messages=None, incoming_message=None,
                       budget_tokens=0):
        self._note("select_context", n=len(request_messages), budget=budget_tokens)
        action = self.script[self.step % len(self.script)] if self.script else "none"
        self.step += 1
        return self._perform(action, request_messages)

    def _perform(self, action, request):
        if action == "none":
            result = None
        elif action == "same":
            result = request
        elif action.startswith("drop:"):
            n = int(action.split(":", 1)[1])
            result = [request[0], *request[1 + n:]]
        elif action == "keep":
            result = self.last_selection
        elif action == "copy":
            result = list(self.last_selection)
        elif action == "raise":
            self._raising(EngineError(f"select_context failed ({len(request)} messages)"))
        elif action == "empty":
            result = []
        elif action == "tuple":
            result = tuple(request)
        elif action == "nondict":
            result = [request[0], "not a message"]
        else:  # pragma: no cover - a typo in a test script
            raise AssertionError(action)
        if isinstance(result, list) and result and result is not request:
            self.last_selection = result
        return self._returning(result)

    def on_turn_complete(self, messages, usage=None, **kwargs):
        self._note("on_turn_complete", n=len(messages), kw=sorted(kwargs))
        self.turns.append((len(messages), usage))
        if kwargs.get("failed"):
            self._raising(EngineError("on_turn_complete failed"))


class SqliteEngine(_BaseEngine):
    """Opens a SQLite connection in on_session_start: deep copies fail from then on."""

    name = "sqlite"

    def __init__(self) -> None:
        super().__init__()
        self.conn = None

    def on_session_start(self, session_id, **kwargs):
        super().on_session_start(session_id, **kwargs)
        self.conn = sqlite3.connect(":memory:", check_same_thread=False)
        self.conn.execute("CREATE TABLE IF NOT EXISTS compactions (n INTEGER)")

    def compress(self, messages, current_tokens=None, focus_topic=None, force=False, memory_context=""):
        self._note("compress")
        result = shrink(messages)
        if self.conn is not None:
            self.conn.execute("INSERT INTO compactions VALUES (?)", (len(messages),))
        return self._returning(result)


class CloneableEngine(NarrowEngine):
    """Offers clone_for_agent(); the clone is a fresh, separately built engine."""

    name = "cloneable"

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        self.seed = seed

    def clone_for_agent(self):
        self._note("clone_for_agent")
        return self._returning(CloneableEngine(self.seed + 1))


class DuckEngine:
    """A wrapper engine that does not subclass ContextEngine.

    Reads and writes of any attribute it does not hold itself go to the
    delegate -- ``__setattr__`` forwards *every* name, ``__class__`` included.
    """

    def __init__(self, delegate) -> None:
        object.__setattr__(self, "_delegate", delegate)

    def __getattr__(self, name):
        try:
            delegate = self.__dict__["_delegate"]
        except KeyError:
            raise AttributeError(name) from None
        return getattr(delegate, name)

    def __setattr__(self, name, value):
        setattr(self.__dict__["_delegate"], name, value)

    def __delattr__(self, name):
        delattr(self.__dict__["_delegate"], name)


# --------------------------------------------------------------------------- head's ABC, emulated

class HeadContextEngine(ContextEngine):
    """Mimics head's ABC: default no-op select_context / on_turn_complete.

    Tests install it as ``agent.context_engine.ContextEngine`` (monkeypatch) so the
    host harness and the wrapper both see head's ABC."""

    def select_context(self, request_messages, *, conversation_messages=None, incoming_message=None,
                       budget_tokens=0):
        return None

    def on_turn_complete(self, messages, usage=None, **kwargs):
        return None


class HeadPlainEngine(_BaseEngine, HeadContextEngine):
    """Inherits head's defaults: the host must skip both hooks."""

    name = "head-plain"

    def compress(self, messages, current_tokens=None, focus_topic=None, force=False, memory_context=""):
        self._note("compress")
        return shrink(messages)


class HeadSelectingEngine(SelectingEngine, HeadContextEngine):
    """Overrides head's hooks (they come from SelectingEngine, before the ABC in the MRO)."""

    name = "head-selecting"


# --------------------------------------------------------------------------- counting inner calls

class InnerCallCounter:
    """Counts calls of the functions defined by the given classes (whole MRO but
    ``object``), on this thread, with ``sys.setprofile``: the wrapper's own
    functions are not counted, the inner's methods -- hooks, helpers, property
    getters, ``__getattr__`` -- are."""

    def __init__(self, *classes: type) -> None:
        self.codes: Dict[Any, str] = {}
        for cls in classes:
            for klass in cls.__mro__:
                if klass is object:
                    continue
                for attr, value in vars(klass).items():
                    for fn in _functions_of(value):
                        self.codes.setdefault(fn.__code__, f"{klass.__qualname__}.{attr}")
        self.counts: Counter = Counter()
        self._previous = None

    def _profile(self, frame, event, arg):
        if event == "call":
            name = self.codes.get(frame.f_code)
            if name is not None:
                self.counts[name] += 1

    def __enter__(self):
        self._previous = sys.getprofile()
        sys.setprofile(self._profile)
        return self

    def __exit__(self, *exc):
        sys.setprofile(self._previous)
        return False


def _functions_of(value):
    if isinstance(value, (staticmethod, classmethod)):
        value = value.__func__
    if isinstance(value, property):
        return [f for f in (value.fget, value.fset, value.fdel) if f is not None]
    if inspect.isfunction(value):
        return [value]
    return []


# --------------------------------------------------------------------------- a 0.19.0-shaped host, step by step

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
    messages = transcript(40) if messages is None else messages
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
            # what the 0.19.0 host writes after a compaction
            engine.last_prompt_tokens = -1
            engine.last_completion_tokens = 0
            engine.last_compression_rough_tokens = 4242
            engine.awaiting_real_usage_after_compression = True
            engine._verify_compaction_cleared_threshold = True
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


# --------------------------------------------------------------------------- the 0.19.0 host's agent, stood in

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


def deep_state(value, _depth: int = 0):
    """A comparable rendering of engine state: plain data as is, exceptions by
    type and args, engines and other objects by their exact type and (for objects
    with a ``__dict__``) their own state. Exact types catch a wrapper that
    re-classed the wrong object."""
    if _depth > 6:
        return ("deep", type(value))
    if value is None or isinstance(value, (str, int, float, bool, bytes)):
        return value
    if isinstance(value, dict):
        return {k: deep_state(v, _depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return (type(value), [deep_state(v, _depth + 1) for v in value])
    if isinstance(value, (set, frozenset)):
        return (type(value), sorted(map(repr, value)))
    if isinstance(value, BaseException):
        return ("exception", type(value), value.args)
    if isinstance(value, sqlite3.Connection):
        return ("sqlite3.Connection",)
    state = getattr(value, "__dict__", None)
    if isinstance(state, dict) and (isinstance(value, ContextEngine) or type(value).__module__ == __name__):
        return ("object", type(value), deep_state(dict(state), _depth + 1))
    return ("object", type(value))

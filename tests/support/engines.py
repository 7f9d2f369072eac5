"""The test engines, every family in one place.

* ``ScriptedEngine`` / ``SelectingEngine``: hooks that record their calls and do what a
  ``behaviour`` dict (or, for select_context, a ``script``) says; ``blocking_compress``.
* Engines shaped like the engines in the wild (host contract, section 5): ``NarrowEngine``,
  ``KwargsEngine``, ``RaisingEngine``, ``SqliteEngine``, ``CloneableEngine``, the non-ContextEngine
  wrapper ``DuckEngine``, and head's ABC emulated (``HeadContextEngine``, ``HeadPlainEngine``,
  ``HeadSelectingEngine``). Each keeps what happened to it in its own instance state (``calls``,
  ``seen``, ``last_result`` ...), so comparing ``vars()`` of a bare engine and its observed twin
  also compares what the engines were asked to do; they stash the objects they return or raise,
  so the tests can check identity.
* ``LedgerEngine`` and its kin (``SelectorEngine``, ``TouchyEngine``, ``ToolEngine``,
  ``forwarding_ledger``; ``ENGINE_FACTORIES``) for the reliability suite: plain engines that keep
  what they were given and return stored objects.
* Transcripts (``transcript``, ``agent_transcript``, ``conversation``), ``shrink``, and ``CANARY``:
  the secret text that must not leave the process unless content capture is on.

The built-in ContextCompressor, offline: support/builtin.py; a 0.19.0 host driving engines:
support/host.py; bare-vs-observed comparison: support/twins.py.
"""

from __future__ import annotations

import copy
import json
import sqlite3
import threading
from typing import Any, Callable, Dict, List, Optional, Sequence

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

def transcript(n: int, words: int = 30, prefix: str = "message") -> List[Dict[str, Any]]:
    """A system prompt and ``n`` alternating user/assistant messages of ``words`` numbered words."""
    msgs: List[Dict[str, Any]] = [{"role": "system", "content": "You are a helpful assistant."}]
    for i in range(n):
        role = "user" if i % 2 == 0 else "assistant"
        msgs.append({"role": role, "content": " ".join(f"{prefix}-{i}-word{j}" for j in range(words))})
    return msgs


def agent_transcript(n: int = 60, size: int = 600, *, text: str = "", seed: str = "t") -> List[Dict[str, Any]]:
    """A system prompt and ``n`` alternating user/assistant messages of about ``size`` characters, every
    seventh a tool call with its result; ends with a user message."""
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


def tool_exchange(i: int, text: str = "") -> List[Dict[str, Any]]:
    call_id = f"call_{i}"
    return [
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": call_id, "type": "function",
                         "function": {"name": "search", "arguments": json.dumps({"q": f"query {i} {text}"})}}]},
        {"role": "tool", "tool_call_id": call_id, "content": f"result {i}: {text}"},
    ]


def conversation(n: int, text: str = "", words: int = 20) -> List[Dict[str, Any]]:
    """System prompt, then ``n`` turns mixing text, tool calls and multimodal parts."""
    out: List[Dict[str, Any]] = [{"role": "system", "content": f"You are a test agent. {text}"}]
    for i in range(n):
        body = " ".join(f"w{i}-{j}" for j in range(words))
        if i % 5 == 3:
            out.extend(tool_exchange(i, text))
        elif i % 5 == 4:
            out.append({"role": "user", "content": [
                {"type": "text", "text": f"look at this {text} {body}"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
            ]})
        else:
            out.append({"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i} {text} {body}"})
    if out[-1]["role"] != "user":
        out.append({"role": "user", "content": f"go on {text}"})
    return out


def shrink(messages: List[Dict[str, Any]], keep_tail: int = 4) -> List[Dict[str, Any]]:
    """A deterministic compaction: first message, one summary, the last ``keep_tail``.

    Short transcripts come back as the very same list object (a no-op)."""
    if len(messages) <= keep_tail + 2:
        return messages
    dropped = len(messages) - 1 - keep_tail
    summary = {"role": "user", "content": f"[summary of {dropped} messages]"}
    return [messages[0], summary, *messages[-keep_tail:]]


# --------------------------------------------------------------------------- scripted engines

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
    """A ScriptedEngine that also overrides head's select_context / on_turn_complete (the host calls
    them only when overridden).

    select_context does what ``behaviour["select_context"]`` says, else the next item of ``script``
    (cycled; no script: ``"none"``): ``"none"`` -> None, ``"same"`` -> the request list itself,
    ``"drop:N"`` -> a new list without the first N non-system messages, ``"keep"`` -> the list object
    it returned last time, ``"copy"`` -> an equal copy of the last selection, ``"raise"`` -> an
    EngineError, ``"empty"`` -> [], ``"tuple"``, ``"nondict"`` -> a list with a string in it.
    on_turn_complete notes ``(len(messages), usage)`` in ``turns`` and raises for a failed turn.

    What select_context, compress and the tool hooks return is stashed in ``returned``, what the
    engine raises itself in ``raised`` (tests check the host gets these very objects).
    """

    STASHED = ("select_context", "compress", "get_tool_schemas", "handle_tool_call")

    def __init__(self, name: str = "selecting", behaviour: Optional[Dict[str, Callable]] = None, *,
                 script: Sequence[str] = (), **kwargs) -> None:
        super().__init__(name, behaviour, **kwargs)
        self.script = list(script)
        self.step = 0
        self.last_selection: Any = None
        self.turns: List[Any] = []
        self.returned: List[Any] = []
        self.raised: List[BaseException] = []

    def _do(self, hook: str, default: Callable[[], Any], *args, **kwargs):
        result = super()._do(hook, default, *args, **kwargs)
        return self._returning(result) if hook in self.STASHED else result

    def _note(self, hook: str, **seen: Any) -> None:
        """Record a call the way ``_do`` does (for subclasses with their own hooks)."""
        with self._calls_lock:
            self.calls.append((hook, (), seen))

    def _returning(self, value):
        self.returned.append(value)
        return value

    def _raising(self, error: BaseException):
        self.raised.append(error)
        raise error

    def select_context(self, request_messages, *, conversation_messages=None, incoming_message=None,
                       budget_tokens=None):
        def default():
            action = self.script[self.step % len(self.script)] if self.script else "none"
            self.step += 1
            return self._perform(action, request_messages)
        return self._do("select_context", default, request_messages,
                        conversation_messages=conversation_messages, incoming_message=incoming_message,
                        budget_tokens=budget_tokens)

    def _perform(self, action: str, request):
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
        return result

    def on_turn_complete(self, messages, usage=None, **kwargs):
        def default():
            self.turns.append((len(messages), usage))
            if kwargs.get("failed"):
                self._raising(EngineError("on_turn_complete failed"))
        return self._do("on_turn_complete", default, messages, usage=usage, **kwargs)


def blocking_compress(release: threading.Event, started: Optional[threading.Event] = None,
                      timeout: Optional[float] = None):
    """A compress behaviour that blocks until ``release`` is set (or ``timeout``), then shrinks."""
    def compress(messages, current_tokens=None):
        if started is not None:
            started.set()
        release.wait(timeout)
        return messages[:1] + messages[-1:]
    return compress


# --------------------------------------------------------------------------- engines shaped like the engines in the wild

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


# --------------------------------------------------------------------------- the reliability suite's engines


class LedgerEngine(ContextEngine):
    """A plain engine that keeps what it was given and returns stored objects.

    ``update_from_response`` keeps the usage object itself; ``compress`` returns
    either the input list (short transcripts) or a list it also stores; status
    dicts are stored too -- so identity of results is observable.
    """

    name = "ledger"

    def __init__(self) -> None:
        self.log: List[Any] = []
        self.last_usage: Any = None
        self.last_output: Any = None
        self.last_status: Any = None
        self.threshold_tokens = 1000
        self.context_length = 4000

    def update_model(self, model, context_length, base_url="", api_key="", provider="", api_mode=""):
        self.log.append(("update_model", model, context_length))
        self.model = model
        self.context_length = context_length
        self.threshold_tokens = int(context_length * 0.5)

    def update_from_response(self, usage):
        self.log.append(("usage", usage))
        self.last_usage = usage
        if isinstance(usage, dict):
            value = usage.get("prompt_tokens")
            if isinstance(value, int):
                self.last_prompt_tokens = value

    def should_compress(self, prompt_tokens=None):
        self.log.append(("should_compress", prompt_tokens))
        tokens = self.last_prompt_tokens if prompt_tokens is None else prompt_tokens
        try:
            return tokens >= self.threshold_tokens
        except TypeError:
            return False

    def compress(self, messages, current_tokens=None, focus_topic=None, force=False, memory_context=""):
        self.log.append(("compress", len(messages) if isinstance(messages, list) else type(messages).__name__,
                         current_tokens, focus_topic, force))
        if not isinstance(messages, list) or len(messages) < 6:
            return messages
        self.compression_count += 1
        self.last_output = [messages[0], {"role": "user", "content": f"[{len(messages) - 3} folded]"},
                            *messages[-2:]]
        return self.last_output

    def on_session_start(self, session_id, **kwargs):
        self.log.append(("start", session_id, sorted(kwargs)))
        self.session = session_id

    def on_session_end(self, session_id, messages):
        self.log.append(("end", session_id, len(messages) if isinstance(messages, list) else None))

    def on_session_reset(self):
        self.log.append(("reset",))
        super().on_session_reset()

    def get_status(self):
        self.last_status = dict(super().get_status(), log_length=len(self.log))
        return self.last_status


class SelectorEngine(LedgerEngine):
    """Defines head's ``select_context`` / ``on_turn_complete``; the answer depends on the request.

    By ``len(request) % 7``: None; the request itself; a new sub-list; the stored
    last selection; an empty list; a tuple; a list with a non-dict.
    """

    name = "selector"

    def __init__(self) -> None:
        super().__init__()
        self.selection: Any = None
        self.turns: List[Any] = []

    def select_context(self, request_messages, *, conversation_messages=None, incoming_message=None,
                       budget_tokens=0):
        n = len(request_messages) if isinstance(request_messages, list) else -1
        self.log.append(("select", n, budget_tokens))
        mode = n % 7 if n >= 0 else 0
        if mode == 0:
            return None
        if mode == 1:
            return request_messages
        if mode == 2:
            self.selection = [request_messages[0], *request_messages[-1:]]
            return self.selection
        if mode == 3:
            return self.selection if self.selection is not None else request_messages
        if mode == 4:
            return []
        if mode == 5:
            return tuple(request_messages)
        return [request_messages[0], "not a message"]

    def on_turn_complete(self, messages, usage=None, **kwargs):
        self.turns.append((len(messages) if isinstance(messages, list) else None, usage, sorted(kwargs)))


class TouchyError(ValueError):
    """Raised by TouchyEngine; its message quotes the input (as real engines' errors do)."""


class TouchyEngine(LedgerEngine):
    """Raises on some inputs -- after changing some state, as real engines do."""

    name = "touchy"

    def update_from_response(self, usage):
        super().update_from_response(usage)
        if not isinstance(usage, dict):
            raise TypeError(f"usage must be a dict, not {type(usage).__name__}")
        for key, value in usage.items():
            if isinstance(value, str):
                raise TouchyError(f"usage[{key!r}] is a string: {value!r}")

    def should_compress(self, prompt_tokens=None):
        if isinstance(prompt_tokens, bool) or (prompt_tokens is not None and not isinstance(prompt_tokens, int)):
            raise TypeError(f"prompt_tokens must be an int, got {prompt_tokens!r}")
        return super().should_compress(prompt_tokens)

    def compress(self, messages, current_tokens=None, focus_topic=None, force=False, memory_context=""):
        self.log.append(("compress-check", focus_topic))
        for m in messages:
            content = m.get("content") if isinstance(m, dict) else None
            if isinstance(content, list):
                raise TouchyError(f"multimodal content not supported (focus {focus_topic!r})")
            if isinstance(content, str) and len(content) > 50_000:
                raise MemoryError("message too large")
        return super().compress(messages, current_tokens, focus_topic, force, memory_context)

    def on_session_end(self, session_id, messages):
        super().on_session_end(session_id, messages)
        raise OSError(28, f"no space left writing {session_id}")


class ToolEngine(LedgerEngine):
    """Offers an engine tool; ``compress`` takes ``**kwargs``; raises with the input in the message."""

    name = "tooly"

    def get_tool_schemas(self):
        return [{"name": "ctx_recall", "description": "Recall old context.",
                 "parameters": {"type": "object", "properties": {"query": {"type": "string"}}}}]

    def handle_tool_call(self, name, args, **kwargs):
        self.log.append(("tool", name, args))
        if name != "ctx_recall":
            raise KeyError(f"unknown tool {name}: {args!r}")
        return json.dumps({"recalled": args.get("query"), "n": len(kwargs.get("messages") or [])})

    def compress(self, messages, **kwargs):
        focus = kwargs.get("focus_topic")
        if kwargs.get("force"):
            raise TouchyError(f"forced compression refused (focus {focus!r}, memory {kwargs.get('memory_context')!r})")
        return super().compress(messages, kwargs.get("current_tokens"), focus)


def forwarding_ledger():
    """A wrapper engine in the wild: not a ContextEngine, forwards every attribute to a delegate."""
    return DuckEngine(LedgerEngine())


forwarding_ledger.name = "ledger"

ENGINE_FACTORIES: Dict[str, Callable[[], Any]] = {
    "ledger": LedgerEngine,
    "selector": SelectorEngine,
    "touchy": TouchyEngine,
    "tooly": ToolEngine,
    "forwarding": forwarding_ledger,
}


class NewHooksEngine(ScriptedEngine):
    """A ScriptedEngine with the hooks of Hermes 0.20+/0.22 (the 0.19.0 ABC has none of them)."""

    def prune_tool_results_only(self, messages, current_tokens=None):
        return self._do("prune_tool_results_only", lambda: (messages, 0), messages, current_tokens=current_tokens)

    def on_turn_complete(self, messages, usage=None, **kwargs):
        return self._do("on_turn_complete", lambda: None, messages, usage=usage, **kwargs)

    def should_compress_info(self, prompt_tokens=None):
        return self._do("should_compress_info", lambda: (bool(prompt_tokens and prompt_tokens >= self.threshold_tokens),
                                                         None), prompt_tokens)

    def clone_for_agent(self):
        return self._do("clone_for_agent", self._copy)

    def _copy(self):
        # the ABC's default is copy.deepcopy(self); ScriptedEngine holds a lock, which does not copy
        lock, self._calls_lock = self._calls_lock, None
        try:
            clone = copy.deepcopy(self)
        finally:
            self._calls_lock = lock
        clone._calls_lock = threading.Lock()
        return clone


def prune_big_results(messages, current_tokens=None):
    """What the built-in's prune does: a new list, the old tool results replaced by a one-liner."""
    out = [dict(m, content="[tool output pruned]") if m.get("role") == "tool" else dict(m)
           for m in messages[:-4]] + [dict(m) for m in messages[-4:]]
    return out, sum(1 for m in messages[:-4] if m.get("role") == "tool")

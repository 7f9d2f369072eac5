"""Helpers for the reliability suite (differential, fault injection, load, bad input, security).

Everything here is deterministic and offline: every pipeline is built from SDK
providers the tests can read exactly.
"""

from __future__ import annotations

import copy
import inspect
import json
import logging
import sqlite3
import threading
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from agent.context_engine import ContextEngine

CANARY = "CANARY-rel-5d1e0b-do-not-leak"

# --------------------------------------------------------------------------- small engines of our own


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
    from engines import DuckEngine

    return DuckEngine(LedgerEngine())


forwarding_ledger.name = "ledger"

ENGINE_FACTORIES: Dict[str, Callable[[], Any]] = {
    "ledger": LedgerEngine,
    "selector": SelectorEngine,
    "touchy": TouchyEngine,
    "tooly": ToolEngine,
    "forwarding": forwarding_ledger,
}


# --------------------------------------------------------------------------- comparing twins


def render(value: Any, _depth: int = 0, _seen: Optional[set] = None) -> Any:
    """A structure that compares equal iff two values are the same data.

    Exact types are kept (a list is not a tuple, True is not 1); exceptions by type
    and args; objects by their exact class and their own ``__dict__``.
    """
    if _depth > 12:
        return ("too-deep", type(value).__qualname__)
    if value is None or type(value) in (str, int, float, bool, bytes):
        if type(value) is float and value != value:
            return ("nan",)
        return (type(value).__name__, value)
    if isinstance(value, dict):
        return ("dict", type(value).__qualname__,
                tuple((render(k, _depth + 1), render(v, _depth + 1)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return (type(value).__qualname__, tuple(render(v, _depth + 1) for v in value))
    if isinstance(value, (set, frozenset)):
        return (type(value).__qualname__, tuple(sorted(repr(v) for v in value)))
    if isinstance(value, BaseException):
        return ("exception", type(value), render(value.args, _depth + 1))
    if isinstance(value, sqlite3.Connection):
        return ("sqlite3.Connection",)
    if isinstance(value, (threading.Thread, type(threading.Lock()), type(threading.RLock()))):
        return ("sync", type(value).__qualname__)
    state = getattr(value, "__dict__", None)
    cls = _unobserved_class(value)
    if isinstance(state, dict):
        return ("object", cls, render(dict(state), _depth + 1))
    return ("object", cls, repr(value) if type(value).__repr__ is not object.__repr__ else None)


def _unobserved_class(value) -> type:
    from observed_engine.capture import observed_meta

    meta = observed_meta(value)
    return meta.inner_class if meta is not None else type(value)


def state_of(engine) -> Any:
    return render(dict(vars(engine)))


def locate(result: Any, engine: Any, inputs: Sequence[Any]) -> Optional[str]:
    """Where ``result`` comes from, by identity: one of the inputs, or an attribute of the engine."""
    if result is None or type(result) in (bool, int, float, str):
        return None
    for i, item in enumerate(inputs):
        if result is item:
            return f"input[{i}]"
    for name, value in vars(engine).items():
        if result is value:
            return f"attr:{name}"
    return "new"


class Outcome:
    """What one hook call gave the host: a value or an exception."""

    __slots__ = ("value", "exc", "where")

    def __init__(self, value=None, exc=None, where=None) -> None:
        self.value, self.exc, self.where = value, exc, where

    def describe(self) -> Any:
        if self.exc is not None:
            return ("raise", type(self.exc), str(self.exc), render(self.exc.args))
        return ("ok", render(self.value), self.where)


def run_hook(engine, hook: str, args: tuple, kwargs: dict) -> Outcome:
    inputs = list(args) + list(kwargs.values())
    try:
        value = getattr(engine, hook)(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - the host sees every exception
        return Outcome(exc=exc)
    return Outcome(value=value, where=locate(value, engine, inputs))


# --------------------------------------------------------------------------- the host's side of a scripted session


def compress_kwargs(engine, candidates):
    """The host filters compress() keywords by the engine's signature."""
    params = inspect.signature(engine.compress).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return dict(candidates)
    return {k: v for k, v in candidates.items() if k in params}


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
        return (messages,), compress_kwargs(engine, candidates)
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


def host_writes(engine):
    """What the 0.19.0 host writes on the engine after a compaction."""
    engine.last_prompt_tokens = -1
    engine.last_completion_tokens = 0
    engine.last_compression_rough_tokens = 4242
    engine.awaiting_real_usage_after_compression = True
    engine._verify_compaction_cleared_threshold = True


def run_script(bare, observed, script, calls):
    """Drive both twins through ``script``; assert they agree after every step. Returns the twins."""
    from observed_engine import is_observed

    assert is_observed(observed) and not is_observed(bare)
    for number, (hook, payload) in enumerate(script):
        where = f"step {number} ({hook})"
        if hook == "host_writes":
            host_writes(bare)
            host_writes(observed)
        elif hook == "deepcopy":
            # the host copies plugin engines per agent; engines that cannot be copied fail alike
            outcomes = []
            for engine in (bare, observed):
                try:
                    outcomes.append((copy.deepcopy(engine), None))
                except Exception as exc:  # noqa: BLE001
                    outcomes.append((None, (type(exc), str(exc))))
            assert outcomes[0][1] == outcomes[1][1], where
            if outcomes[0][0] is not None:
                bare, observed = outcomes[0][0], outcomes[1][0]
                assert is_observed(observed), f"{where}: the deep copy lost its observation"
        else:
            call_bare = host_call(bare, hook, copy.deepcopy(payload))
            call_obs = host_call(observed, hook, copy.deepcopy(payload))
            assert (call_bare is None) == (call_obs is None), f"{where}: the host would call only one twin"
            if call_bare is None:
                continue
            assert render(call_bare) == render(call_obs), f"{where}: the host would call them differently"
            args_b, kwargs_b = call_bare
            args_o, kwargs_o = call_obs
            got_b = run_hook(bare, hook, args_b, kwargs_b)
            got_o = run_hook(observed, hook, args_o, kwargs_o)
            calls[hook] = calls.get(hook, 0) + 1
            assert got_o.describe() == got_b.describe(), f"{where}: different result"
            assert render((args_o, kwargs_o)) == render((args_b, kwargs_b)), f"{where}: arguments changed differently"
            if hook == "compress" and got_b.exc is None and got_b.value is not args_b[0]:
                if isinstance(got_b.value, list) and len(got_b.value) != len(args_b[0]):
                    calls["compress:changed"] = calls.get("compress:changed", 0) + 1
                host_writes(bare)
                host_writes(observed)
        assert state_of(observed) == state_of(bare), f"{where}: vars() differ"
        assert bool(observed) == bool(bare)
    return bare, observed


# --------------------------------------------------------------------------- messages


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


# --------------------------------------------------------------------------- reading what was recorded


def store_rows(path) -> List[tuple]:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return conn.execute("SELECT * FROM events ORDER BY id").fetchall()
    finally:
        conn.close()


def store_count(path, where: str = "1=1", params: tuple = ()) -> int:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return conn.execute(f"SELECT COUNT(*) FROM events WHERE {where}", params).fetchone()[0]
    finally:
        conn.close()


def our_records(caplog, level: int = logging.DEBUG) -> list:
    return [r for r in caplog.records if r.name.startswith("observed_engine") and r.levelno >= level]


def record_text(record) -> str:
    text = record.getMessage()
    if record.exc_info:
        text += "\n" + logging.Formatter().formatException(record.exc_info)
    if record.exc_text:
        text += "\n" + record.exc_text
    if getattr(record, "stack_info", None):
        text += "\n" + record.stack_info
    return text


def matching(records, needle: str) -> list:
    return [r for r in records if needle in record_text(r)]


def twins(factory: Callable[[], Any], pipeline) -> Tuple[Any, Any]:
    """A bare engine and an observed engine built the same way."""
    bare = factory()
    observed = pipeline.observe(factory())
    return bare, observed


def deep(value):
    return copy.deepcopy(value)


# --------------------------------------------------------------------------- a standard session


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


def run_sessions(pipeline_or_observe, factory: Callable[[], Any], sessions: int, text: str = "") -> Dict[str, int]:
    """``sessions`` standard sessions through fresh bare/observed twins; returns hook call counts."""
    observe = getattr(pipeline_or_observe, "observe", pipeline_or_observe)
    calls: Dict[str, int] = {}
    for i in range(sessions):
        run_script(factory(), observe(factory()), standard_script(i, text), calls)
    return host_calls(calls)


def host_calls(calls: Dict[str, int]) -> Dict[str, int]:
    """The hook counts of a ``run_script`` tally (without its ``hook:detail`` notes)."""
    return {k: v for k, v in calls.items() if ":" not in k}

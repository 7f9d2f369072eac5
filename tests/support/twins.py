"""Bare engine vs observed twin: the two ways the tests compare them, and the drivers.

* ``deep_state`` (exact types of nested objects) and ``InnerCallCounter`` (how often the inner's
  own functions ran), for the transparency tests;
* ``render`` / ``state_of`` (exact data, observed objects by their inner class), ``run_hook`` /
  ``Outcome`` (a result with its identity, or an exception) and ``run_script`` / ``run_sessions``
  (both twins through one host script, compared after every step), for the reliability suite.
"""

from __future__ import annotations

import copy
import inspect
import sqlite3
import sys
import threading
from collections import Counter
from typing import Any, Callable, Dict, Optional, Sequence

from agent.context_engine import ContextEngine
from support.host import host_call, host_writes, standard_script

# --------------------------------------------------------------------------- transparency

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


def deep_state(value, _depth: int = 0):
    """A comparable rendering of engine state: plain data as is, exceptions by
    type and args, engines and other objects by their exact type and (for engines
    and the tests' own objects with a ``__dict__``) their own state. Exact types
    catch a wrapper that re-classed the wrong object."""
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
    if isinstance(state, dict) and (isinstance(value, ContextEngine) or type(value).__module__.startswith("support.")):
        return ("object", type(value), deep_state(dict(state), _depth + 1))
    return ("object", type(value))


# --------------------------------------------------------------------------- the reliability suite

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

"""The three numbers of an engine's state the usage chart needs, read without running engine code.

``last_prompt_tokens``, ``threshold_tokens`` and ``context_length`` are read on the hook
path right after ``update_from_response``/``update_model``/``on_session_reset``/``compress``
return, because the host may change them a moment later. The hook path only copies them
out of the instance ``__dict__`` (three dict reads, a few hundred nanoseconds); the worker
fills in a value the instance does not hold from a plain class attribute and checks types.
A property or a forwarding ``__getattr__`` is never called: it may have side effects and
the host did not ask for it. The row then simply lacks the numbers.
"""

from __future__ import annotations

from typing import Any, Optional, Tuple

STATE_FIELDS: Tuple[str, str, str] = ("last_prompt_tokens", "threshold_tokens", "context_length")

MISSING = object()   # the instance does not hold the value; the worker looks at the class

_instance_attribute = object.__getattribute__


def read_raw(engine: Any) -> Optional[tuple]:
    """Hook path: the three values as the instance holds them (``MISSING`` where it does not)."""
    try:
        state = _instance_attribute(engine, "__dict__")
        return (state.get("last_prompt_tokens", MISSING), state.get("threshold_tokens", MISSING),
                state.get("context_length", MISSING))
    except Exception:   # no __dict__ (slots), or an odd mapping
        return (MISSING, MISSING, MISSING)


def held_by_instance(engine: Any) -> bool:
    """Does the instance dict hold all three (the hook path then reads them in one call)?"""
    try:
        state = _instance_attribute(engine, "__dict__")
        return all(name in state for name in STATE_FIELDS)
    except Exception:
        return False


def resolve(engine_class: type, raw: Optional[tuple]) -> Optional[Tuple[float, float, float]]:
    """Worker: the numbers, with class defaults filled in, or None if any is not a plain number."""
    if raw is None:
        return None
    try:
        values = []
        for name, value in zip(STATE_FIELDS, raw):
            if value is MISSING:
                value = _static_class_value(engine_class, name)
            if type(value) is not int and type(value) is not float:
                return None
            values.append(value)
        return tuple(values)   # type: ignore[return-value]
    except Exception:
        return None


def _static_class_value(cls, name):
    for klass in cls.__mro__:
        value = klass.__dict__.get(name, MISSING)
        if value is not MISSING:
            return value
    return MISSING

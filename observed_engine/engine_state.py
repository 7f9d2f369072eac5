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


# What an engine reports about its last compress() call's summary, read the same way
# (instance dict only, no engine code). These are the fields the built-in compressor
# resets at the start of each compress() and that its host callers inspect afterwards:
# ``_last_summary_fallback_used``/``_last_compress_aborted`` per call, and the sticky
# ``_last_summary_auth_failure``/``_last_summary_network_failure`` for the cause.
SUMMARY_FIELDS: Tuple[str, str, str, str] = (
    "_last_summary_fallback_used", "_last_compress_aborted",
    "_last_summary_auth_failure", "_last_summary_network_failure",
)


def read_summary_raw(engine: Any) -> Optional[tuple]:
    """Hook path, right after compress() returned: the four fields, or None without a __dict__."""
    try:
        state = _instance_attribute(engine, "__dict__")
        return tuple(state.get(name) for name in SUMMARY_FIELDS)
    except Exception:
        return None


def summary_failure(raw: Optional[tuple]) -> Optional[Tuple[str, str]]:
    """Worker: (kind, cause) when the engine reports a failed summary for this call, else None."""
    if not raw:
        return None
    fallback, aborted, auth, network = raw
    if aborted is True:
        kind = "aborted"
    elif fallback is True:
        kind = "fallback_summary"
    else:
        return None
    cause = "auth" if auth is True else "network" if network is True else "other"
    return kind, cause

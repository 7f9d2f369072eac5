"""Engine state copied on the hook path, without running engine code.

``last_prompt_tokens``, ``threshold_tokens`` and ``context_length`` are read right after
the hooks that change them return, because the host may change them a moment later;
after ``compress()`` also the fields in which the built-in reports a failed summary.
Only the instance ``__dict__`` is read (a few dict lookups): the worker fills in a value
the instance does not hold from a plain class attribute and checks types. A property or
a forwarding ``__getattr__`` is never called: it may have side effects and the host did
not ask for it.
"""

from __future__ import annotations

from typing import Any, Optional

from ..contract.events import MISSING, STATE_FIELDS, SUMMARY_FIELDS

_instance_attribute = object.__getattribute__


def read_state(engine: Any) -> tuple:
    """The three STATE_FIELDS as the instance holds them (``MISSING`` where it does not)."""
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
    except Exception:  # no __dict__ (slots), or an odd mapping: False, the hooks read each field with a default
        return False


def read_summary(engine: Any) -> Optional[tuple]:
    """Right after compress() returned: the SUMMARY_FIELDS, or None without a __dict__."""
    try:
        state = _instance_attribute(engine, "__dict__")
        return tuple(state.get(name) for name in SUMMARY_FIELDS)
    except Exception:  # hot path: no __dict__ (slots), or an odd mapping: None, no summary fields read
        return None

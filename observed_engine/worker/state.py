"""The engine state the hook path copied, interpreted on the worker."""

from __future__ import annotations

from typing import Optional, Tuple

from ..contract import vocabulary as v
from ..contract.events import MISSING, STATE_FIELDS


def resolve(engine_class: type, raw: Optional[tuple]) -> Optional[Tuple[float, float, float]]:
    """The STATE_FIELDS numbers, with class defaults filled in; None if any is not a plain number."""
    if raw is None:
        return None
    try:
        values = []
        for name, value in zip(STATE_FIELDS, raw):
            if value is MISSING:
                value = static_class_value(engine_class, name)
            if type(value) is not int and type(value) is not float:
                return None
            values.append(value)
        return tuple(values)   # type: ignore[return-value]
    except Exception:
        return None


def static_class_value(cls, name):
    """``name`` from the class dicts along the MRO (no descriptor is called); MISSING if none."""
    for klass in cls.__mro__:
        value = klass.__dict__.get(name, MISSING)
        if value is not MISSING:
            return value
    return MISSING


def summary_failure(raw: Optional[tuple]) -> Optional[Tuple[str, str]]:
    """(kind, cause) when the engine reports a failed summary for this call (SUMMARY_FIELDS), else None."""
    if not raw:
        return None
    fallback, aborted, auth, network = raw
    if aborted is True:
        kind = v.ABORTED
    elif fallback is True:
        kind = v.FALLBACK_SUMMARY
    else:
        return None
    cause = v.CAUSE_AUTH if auth is True else v.CAUSE_NETWORK if network is True else v.CAUSE_OTHER
    return kind, cause

"""The engine state the hook path copied, interpreted on the worker."""

from __future__ import annotations

from typing import Optional, Tuple

from ..contract import vocabulary as v
from ..contract.events import MISSING, STATE_BACKING_FIELDS, STATE_FIELDS


def resolve(engine_class: type, raw: Optional[tuple], engine=None) -> Optional[Tuple[float, float, float]]:
    """The STATE_FIELDS numbers, with class defaults filled in (a property's backing field read from
    ``engine``'s instance dict now, STATE_BACKING_FIELDS); None if any is not a plain number."""
    if raw is None:
        return None
    if len(raw) == 3 and type(raw[0]) is int and type(raw[1]) is int and type(raw[2]) is int:
        return raw    # the usual case: the instance holds three ints
    try:
        values = []
        for name, value in zip(STATE_FIELDS, raw):
            if value is MISSING:
                value = static_class_value(engine_class, name)
                if isinstance(value, property) and engine is not None:
                    value = backing_value(engine, name)
            if type(value) is not int and type(value) is not float:
                return None
            values.append(value)
        return tuple(values)   # type: ignore[return-value]
    except Exception:  # hot path: a class or value that cannot be read: None, as for a non-number
        return None


def backing_value(engine, name: str):
    """The instance field behind the property ``name`` (STATE_BACKING_FIELDS), MISSING if none."""
    field = STATE_BACKING_FIELDS.get(name)
    if field is None:
        return MISSING
    try:
        return object.__getattribute__(engine, "__dict__").get(field, MISSING)
    except Exception:  # hot path: no instance __dict__ (slots): MISSING, as for no backing field
        return MISSING


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
    fallback, aborted, auth, network = raw[:4]
    if aborted is True:
        kind = v.ABORTED
    elif fallback is True:
        kind = v.FALLBACK_SUMMARY
    else:
        return None
    cause = v.CAUSE_AUTH if auth is True else v.CAUSE_NETWORK if network is True else v.CAUSE_OTHER
    return kind, cause


# -- automatic compression blocked ---------------------------------------------------------
#
# Read from the engine's instance dict (no property, no __getattr__, no engine method), on the
# worker or the exporter's thread. Hermes 0.19.0's ContextCompressor blocks automatic compaction
# (_automatic_compression_blocked_locally) while
#   _summary_failure_cooldown_until > time.monotonic()   (after a failed summary: 30 s to 15 min)
#   _ineffective_compression_count >= 2                  (compactions that left the prompt over the threshold)
#   _fallback_compression_streak >= 2                    (repeated placeholder-summary compactions)
# Its breaker limits are constants in its code, not attributes: mirrored here. Any engine may
# also say so itself in an instance attribute ``compression_blocked_reason`` (a str, or None/""
# when not blocked): a known reason is used as it is, another one counts as 'other'.
BREAKER_LIMIT = 2
BLOCK_FIELDS: Tuple[str, ...] = (
    "_summary_failure_cooldown_until", "_ineffective_compression_count", "_fallback_compression_streak",
    "compression_blocked_reason",
)


_NOT_BLOCKED: frozenset = frozenset()


def _number(value) -> bool:
    return (type(value) is int or type(value) is float) and value == value   # not NaN


def blocked_reasons(engine, now_monotonic: float) -> Tuple[frozenset, Optional[float]]:
    """(the BLOCKED_REASONS active now, the monotonic time the cooldown ends or None).
    Never raises; an engine whose state cannot be read is not blocked."""
    try:
        get = object.__getattribute__(engine, "__dict__").get
        until, ineffective, streak, own = (get(BLOCK_FIELDS[0]), get(BLOCK_FIELDS[1]), get(BLOCK_FIELDS[2]),
                                           get(BLOCK_FIELDS[3]))
    except Exception:  # hot path: no instance __dict__ (slots): not blocked (see docstring)
        return _NOT_BLOCKED, None
    if not (ineffective or streak or own) and not (_number(until) and until > now_monotonic):
        return _NOT_BLOCKED, None     # the usual case, on every decision and response
    reasons = set()
    cooldown_end = None
    if _number(until) and until > now_monotonic:
        reasons.add(v.BLOCKED_SUMMARY_COOLDOWN)
        cooldown_end = float(until)
    if _number(ineffective) and ineffective >= BREAKER_LIMIT:
        reasons.add(v.BLOCKED_INEFFECTIVE)
    if _number(streak) and streak >= BREAKER_LIMIT:
        reasons.add(v.BLOCKED_FALLBACK_STREAK)
    if type(own) is str and own:
        reasons.add(own if own in v.BLOCKED_REASONS else v.BLOCKED_OTHER)
    return frozenset(reasons), cooldown_end


def cooldown_ended_at(engine, now_monotonic: float) -> Optional[float]:
    """The monotonic time a summary cooldown ended at (the engine's deadline, already past), or None."""
    try:
        until = object.__getattribute__(engine, "__dict__").get(BLOCK_FIELDS[0])
    except Exception:  # hot path: no instance __dict__ (slots): no deadline, the row takes the event's time
        return None
    return float(until) if _number(until) and 0 < until <= now_monotonic else None


def live_numbers(engine) -> Tuple[object, object]:
    """``threshold_tokens`` and ``context_length`` as the instance dict holds them now (MISSING where
    it does not; the caller checks types). No engine code."""
    try:
        get = object.__getattribute__(engine, "__dict__").get
        return get("threshold_tokens", MISSING), get("context_length", MISSING)
    except Exception:  # hot path: no instance __dict__ (slots): MISSING, as for fields it does not hold
        return MISSING, MISSING


def live_state(engine, engine_class: type) -> Optional[Tuple[float, float, float]]:
    """The STATE_FIELDS numbers as the engine holds them now (instance dict, then plain class
    attributes; no engine code), or None."""
    try:
        state = object.__getattribute__(engine, "__dict__")
        return resolve(engine_class, tuple(state.get(name, MISSING) for name in STATE_FIELDS), engine)
    except Exception:  # hot path: no instance __dict__ (slots), or a class unreadable: None, no live numbers
        return None

"""The records the hook path hands to the worker, and the fields the hook path snapshots.

The hook path appends one plain tuple per hook call, in :class:`HookEvent`'s field
order (building a NamedTuple there costs more than the rest of the hook path); the
worker reads it back as a ``HookEvent``. tests/contract/test_vocabulary.py ties the two together:
every tuple the capture side builds has exactly these fields in this order.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Optional, Tuple


class HookEvent(NamedTuple):
    """One hook call, as the capture side recorded it."""

    hook: int                 # index into contract.hooks.HOOK_SPECS
    engine: Any               # the observed engine instance
    t0: int                   # perf_counter_ns() before the inner's method ran ...
    t1: int                   # ... and after it returned or raised
    exc: Optional[BaseException]   # what the inner raised (re-raised to the host unchanged)
    args: tuple               # the host's positional arguments (without self)
    kwargs: Any               # the host's keyword arguments (a mapping)
    result: Any               # what the inner returned (None when it raised)
    # Spans: for hooks whose span the worker builds afterwards, the OpenTelemetry context that
    # was current when the host called (the span's parent); for hooks that open a live span on
    # the hook path (compress, engine tools: hooks.LIVE_SPAN_KINDS), that span, still open.
    # None when traces are off.
    span_or_parent: Any
    # What the hook path copied for the worker, by hook kind: engine state (STATE_FIELDS, for
    # hooks.HookSpec.reads_state; see event_state), the selected items (select_context), a
    # CompressCapture (compress), a PruneCapture (prune_tool_results_only), else None.
    extra: Any
    # An exact leaf hook that reads state (capture/exact_leaf.py) appends its three STATE_FIELDS
    # after these ten fields instead of as a tuple in ``extra``, which is then None: one tuple
    # fewer per call on the host's thread. ``event_state`` reads either.


class CompressCapture(NamedTuple):
    """What the compress hook copies around the inner's call (``HookEvent.extra``)."""

    before: Optional[list]     # message snapshot of the input (snapshots.snapshot format)
    after: Optional[list]      # message snapshot of the result (None when it raised)
    late: bool                 # the call had passed its deadline when it returned
    state: Optional[tuple]     # engine state (STATE_FIELDS) after the call
    summary: Optional[tuple]   # summary outcome fields (SUMMARY_FIELDS) after the call


class PruneCapture(NamedTuple):
    """What the prune_tool_results_only hook copies around the inner's call (``HookEvent.extra``):
    the host appends the next tool iteration to whichever list it goes on with."""

    before: Optional[list]     # message snapshot of the input
    after: Optional[list]      # message snapshot of the returned list when it is another list, else None


class DeadlineExceeded(NamedTuple):
    """The watchdog: a compress() still running past its deadline."""

    kind: str                  # DEADLINE_EXCEEDED (a str where HookEvent has its int index)
    engine: Any
    t: int                     # perf_counter_ns() when it was seen
    age: float                 # seconds since the call started


DEADLINE_EXCEEDED = "deadline_exceeded"

# The class attribute of a generated (observed) class holding its capture.EngineMeta: the
# worker reads ``meta.inner_name`` through it without importing the capture side.
ENGINE_META_ATTRIBUTE = "__observed_engine__"
# "Publish the errors and drops counted off the worker thread": a wake-up without a payload.
PUBLISH_ERRORS: Tuple[str] = ("publish_errors",)


# -- engine state the hook path copies (instance dict only; no engine code runs) --------

# The three numbers of the usage chart, read right after the hooks that change them.
STATE_FIELDS: Tuple[str, str, str] = ("last_prompt_tokens", "threshold_tokens", "context_length")
# Hermes 0.20+'s built-in holds two of them behind properties computed lazily from these instance
# fields (no engine code runs to read them): where the instance dict lacks a STATE_FIELDS name and
# the class has a property of that name, the worker reads the backing field (None: not computed yet).
STATE_BACKING_FIELDS = {"threshold_tokens": "_threshold_tokens", "context_length": "_resolved_context_length"}
# The per-call outcome fields the built-in compressor resets at the start of each compress()
# and its host inspects afterwards (the last two are sticky causes).
# Then the summary model: the built-in's summary_model ("" = its main model, also after it fell
# back from a failing summary_model), its main model and provider.
SUMMARY_FIELDS: Tuple[str, ...] = (
    "_last_summary_fallback_used", "_last_compress_aborted",
    "_last_summary_auth_failure", "_last_summary_network_failure",
    "summary_model", "model", "provider",
)


def event_state(event: tuple) -> Any:
    """The STATE_FIELDS a ``reads_state`` event carries: the three items after HookEvent's ten
    fields (the exact leaf form), else its ``extra`` (a tuple, or None)."""
    return event[_FIELDS:] if len(event) > _FIELDS else event[_EXTRA]


_FIELDS = len(HookEvent._fields)
_EXTRA = HookEvent._fields.index("extra")


class _Missing:
    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"


MISSING = _Missing()   # a state field the instance does not hold; the worker looks at the class


# -- message snapshots ----------------------------------------------------------------------
#
# compress() may edit its input in place and the host may edit a returned list later, so the
# hook path copies role, content and tool calls per message into a tagged tuple. The tag keeps a
# snapshot apart from a malformed message that happens to be a 4-tuple itself.

SNAPSHOT_TAG = object()


def snapshot_messages(messages: Any) -> Optional[list]:
    """Per message ``(SNAPSHOT_TAG, role, content, tool_calls)``; non-dict items as they are.
    None for anything but a list."""
    if type(messages) is not list:
        return None
    try:
        return [
            (SNAPSHOT_TAG, m.get("role"), m.get("content"), m.get("tool_calls")) if type(m) is dict else m
            for m in messages
        ]
    except Exception:  # hot path: e.g. a dict key whose __eq__ raises; None, as for a non-list
        return None


def snapshot_fields(item: Any):
    """(role, content, tool_calls) of a snapshot entry or a message dict; None for anything else."""
    if type(item) is tuple and len(item) == 4 and item[0] is SNAPSHOT_TAG:
        return item[1], item[2], item[3]
    if isinstance(item, dict):
        return item.get("role"), item.get("content"), item.get("tool_calls")
    return None


def as_messages(snapshot) -> list:
    """Message dicts (for the token counter) from a snapshot or a plain list."""
    out = []
    for item in snapshot:
        if type(item) is tuple and len(item) == 4 and item[0] is SNAPSHOT_TAG:
            msg = {"role": item[1], "content": item[2]}
            if item[3]:
                msg["tool_calls"] = item[3]
            out.append(msg)
        else:
            out.append(item)
    return out

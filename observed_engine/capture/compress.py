"""The compress() form: a live span, message snapshots and the deadline watchdog.

The span is opened on the hook path, so the inner engine's own spans (its summariser's LLM call)
nest under it and the watchdog can add an event to a call that is still running. compress() is
rare and slow, so the ~40 µs of a live span do not matter there.
"""

from __future__ import annotations

from ..contract.events import CompressCapture, snapshot_messages
from ..contract.spans import hook_span_name
from .guarded import make_guarded_hook
from .state_reads import read_state, read_summary

_COMPRESS_SPAN = hook_span_name("compress")


def make_compress_hook(idx, original, pipeline, meta, stale=None):
    watchdog = pipeline.watchdog

    def start(self, args, kwargs):
        messages = args[0] if args else kwargs.get("messages")
        before = snapshot_messages(messages)
        span, token = pipeline.start_live_span(_COMPRESS_SPAN, meta.inner_name, "compress")
        try:
            watch = watchdog.start(self, meta.inner_name, span)
        except Exception:      # never worth failing the host's compress() for
            watch = None
            pipeline.count_error("watchdog")
        return span, token, (before, watch)

    def finish(self, started, result, exc):
        before, watch = started
        late = watchdog.finish(watch) if watch is not None else False
        if exc is not None:
            return CompressCapture(before, None, late, None, None)
        return CompressCapture(before, snapshot_messages(result), late, read_state(self), read_summary(self))

    return make_guarded_hook(idx, original, pipeline, start, finish, stale)


def rejected_calls_untraced(hook, original, signature, stale=None):
    """A call the inner's signature rejects is not a compress: Hermes <= 0.18.2 calls
    ``compress(..., force=)`` and retries without it on TypeError, so for an engine without
    ``force`` every compaction recorded an error although the engine never ran. Such a call
    goes straight to the inner (the same TypeError, from the same place) and is not recorded."""
    if signature is None:
        return hook
    bind = signature.bind
    watched, inner_cls = (stale is not None), getattr(stale, "inner_cls", None)

    def compress(self, *args, **kwargs):
        if watched and getattr(inner_cls, "compress", None) is not original:   # patched: its own signature
            return stale.current_hook(self)(self, *args, **kwargs)
        try:
            bind(self, *args, **kwargs)
        except TypeError:
            return original(self, *args, **kwargs)
        return hook(self, *args, **kwargs)
    return compress

"""The generic hook form: the inner's arguments passed through as ``*args, **kwargs``.

Leaf hooks whose inner method is variadic, decorated or not a plain function get it (they check
the self-call guard, never set it); every other hook without a form of its own (HookSpec.kind)
gets it on the guarded form.
"""

from __future__ import annotations

from time import perf_counter_ns

from ..contract.hooks import SELECT
from .guard import guarded_running, inside
from .guarded import make_guarded_hook
from .parent_context import get_current_context
from .state_reads import read_state


def make_plain_hook(spec, idx, original, pipeline, stale=None, leaf=None):
    """Any plain hook, with the inner's arguments passed through as ``*args, **kwargs``.
    ``leaf``: take the leaf form (default: ``spec.leaf``)."""
    recorder = pipeline.recorder
    queue = recorder.queue
    append = queue.append
    cap = recorder.capacity
    dropped = recorder.note_dropped
    wants_context = pipeline.settings.traces
    get_context = get_current_context
    running = guarded_running

    if spec.reads_state:
        def after(self, _result):
            return read_state(self)
    elif spec.kind == SELECT:
        def after(_self, result):   # the selected items, before the engine can edit its list
            return tuple(result) if type(result) is list else None
    else:
        after = None

    if spec.leaf if leaf is None else leaf:   # variadic or otherwise not generated exactly: checks the guard, never sets it
        def record(self, t0, t1, exc, args, kwargs, result, ctx):
            if len(queue) < cap:
                append((idx, self, t0, t1, exc, args, kwargs, result, ctx,
                        None if after is None or exc is not None else after(self, result)))
            else:
                dropped()

        watched, inner_cls, name = (stale is not None), getattr(stale, "inner_cls", None), spec.name

        def hook(self, *args, **kwargs):
            if watched and getattr(inner_cls, name, None) is not original:   # the class was patched
                return stale.current_hook(self)(self, *args, **kwargs)
            if running and inside.engine is self:   # the engine calling its own hook: untraced
                return original(self, *args, **kwargs)
            ctx = get_context() if wants_context else None
            t0 = perf_counter_ns()
            try:
                result = original(self, *args, **kwargs)
            except BaseException as exc:
                record(self, t0, perf_counter_ns(), exc, args, kwargs, None, ctx)
                raise
            record(self, t0, perf_counter_ns(), None, args, kwargs, result, ctx)
            return result
        return hook

    def start(_self, _args, _kwargs):   # the span's parent, captured now; no live span, no token
        return (get_context() if wants_context else None), None, None

    def finish(self, _started, result, exc):
        return None if after is None or exc is not None else after(self, result)

    return make_guarded_hook(idx, original, pipeline, start, finish, stale)

"""The guarded hooks: every hook but the leaf ones sets the self-call guard while the inner runs.

The compress, engine-tool and clone forms, and the generic form of any other non-leaf hook, are
built on :func:`make_guarded_hook`, which takes what is particular to each as its ``start`` and
``finish``.
"""

from __future__ import annotations

from time import perf_counter_ns

from .guard import guarded_running, inside
from .parent_context import detach


def make_guarded_hook(idx, original, pipeline, start, finish, stale=None):
    """Every hook but the leaf ones: sets the self-call guard while the inner's method runs.

    ``start(self, args, kwargs) -> (span or parent context, context token or None, started)``
    runs before the inner's method: compress() and tool calls open a live span there (the
    engine's own spans nest under it), the others only capture the parent context.
    ``finish(self, started, result, exc) -> extra`` runs right after it, before a live
    span's context is detached. Spans are finished by the worker.

    Neither may reach the host: a ``start`` that raises (it reads the host's arguments)
    leaves the call untraced, a ``finish`` that raises leaves the event without its extra;
    both are counted (component ``hook``). The inner's result or exception is the host's.
    """
    recorder = pipeline.recorder
    running = guarded_running
    count_error = pipeline.count_error
    watched, inner_cls, name = (stale is not None), getattr(stale, "inner_cls", None), getattr(stale, "name", None)

    def hook(self, *args, **kwargs):
        if watched and getattr(inner_cls, name, None) is not original:   # the class was patched
            return stale.current_hook(self)(self, *args, **kwargs)
        outer = inside.engine
        if outer is self:   # the engine calling its own hook: not a host call, not traced
            return original(self, *args, **kwargs)
        try:
            span, token, started = start(self, args, kwargs)
        except Exception:
            count_error("hook")
            return original(self, *args, **kwargs)
        inside.engine = self
        running.append(None)
        result = exc = None
        t0 = perf_counter_ns()
        try:
            result = original(self, *args, **kwargs)
            return result
        except BaseException as raised:   # re-raised unchanged; recorded below
            exc = raised
            raise
        finally:
            t1 = perf_counter_ns()
            inside.engine = outer
            running.pop()
            try:
                extra = finish(self, started, result, exc)
            except Exception:
                extra = None
                count_error("hook")
            detach(token)
            recorder.push((idx, self, t0, t1, exc, args, kwargs, result, span, extra))

    return hook

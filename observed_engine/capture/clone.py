"""The clone_for_agent() form: the clone comes back observed, by the same pipeline."""

from __future__ import annotations

from time import perf_counter_ns

from .parent_context import get_current_context


def make_clone_hook(idx, original, pipeline, observe_copy, stale=None):
    recorder = pipeline.recorder
    wants_context = pipeline.settings.traces
    watched, inner_cls = (stale is not None), getattr(stale, "inner_cls", None)

    def clone_for_agent(self, *args, **kwargs):
        if watched and getattr(inner_cls, "clone_for_agent", None) is not original:   # the class was patched
            return stale.current_hook(self)(self, *args, **kwargs)
        # the span's parent: whatever is current in the host (agent construction)
        ctx = get_current_context() if wants_context else None
        t0 = perf_counter_ns()
        try:
            result = original(self, *args, **kwargs)
        except BaseException as exc:
            recorder.push((idx, self, t0, perf_counter_ns(), exc, args, kwargs, None, ctx, None))
            raise
        if result is not None and result is not self:
            observe_copy(result)
        # the clone as the result: the worker tells a copy on this pipeline from the engine itself
        recorder.push((idx, self, t0, perf_counter_ns(), None, args, kwargs, result, ctx, None))
        return result

    return clone_for_agent

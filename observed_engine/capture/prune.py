"""The prune_tool_results_only() form (Hermes 0.20+): the input and a returned new list copied.

As for compress: the host appends the next tool iteration to whichever list it goes on with
before the worker counts them, so the hook path copies role, content and tool calls of each
(message snapshots). No live span (there is no LLM call inside): the worker builds it.
"""

from __future__ import annotations

from ..contract.events import PruneCapture, snapshot_messages
from .guarded import make_guarded_hook
from .parent_context import get_current_context


def make_prune_hook(idx, original, pipeline, stale=None):
    wants_context = pipeline.settings.traces

    def start(_self, args, kwargs):
        messages = args[0] if args else kwargs.get("messages")
        return (get_current_context() if wants_context else None), None, (messages, snapshot_messages(messages))

    def finish(_self, started, result, exc):
        messages, before = started
        after = None
        if exc is None and type(result) in (tuple, list) and len(result) == 2 and (
                result[0] is not messages or (type(result[1]) is int and result[1])):
            after = snapshot_messages(result[0])   # (a count with the input itself: edited in place?)
        return PruneCapture(before, after)

    return make_guarded_hook(idx, original, pipeline, start, finish, stale)

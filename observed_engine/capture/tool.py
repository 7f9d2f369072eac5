"""The engine-tool form: a live span per tool call, so the tool's own spans nest under it."""

from __future__ import annotations

from .guarded import make_guarded_hook


def make_tool_hook(idx, original, pipeline, meta, stale=None):
    def start(_self, args, kwargs):
        tool_name = args[0] if args else kwargs.get("name")
        span, token = pipeline.start_live_span(None, meta.inner_name, "handle_tool_call", tool=tool_name)
        return span, token, None

    def finish(_self, _started, _result, _exc):
        return None

    return make_guarded_hook(idx, original, pipeline, start, finish, stale)

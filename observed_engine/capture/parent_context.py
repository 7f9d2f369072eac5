"""The span's parent: the OpenTelemetry context current when the host calls a hook.

The worker builds the span afterwards with this context as its parent, so the hook path only
reads it (one ``ContextVar.get`` when the default runtime context is in use).
"""

from __future__ import annotations

from typing import Any, Callable

from opentelemetry import context as otel_context


def _context_getter() -> Callable[[], Any]:
    """``opentelemetry.context.get_current``, or the same ContextVar's ``get`` without the two
    Python calls around it when the default runtime context is in use (checked, not assumed)."""
    try:
        from contextvars import ContextVar

        from opentelemetry.context.contextvars_context import ContextVarsRuntimeContext

        runtime = otel_context._RUNTIME_CONTEXT
        if type(runtime) is ContextVarsRuntimeContext and type(runtime._current_context) is ContextVar:
            return runtime._current_context.get
    except Exception:  # hot path setup: no fast getter, the generic one is used
        pass
    return otel_context.get_current


get_current_context = _context_getter()


def detach(token) -> None:
    """Detach a live span's context token (compress, engine tools); never raises."""
    if token is not None:
        try:
            otel_context.detach(token)
        except Exception:  # hot path: a token of another context; nothing to undo
            pass

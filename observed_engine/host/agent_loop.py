"""The host's agent loop, for the demo and the replays: ``AIAgent``, its minimum window, its
``pre_api_request`` hook."""

from __future__ import annotations

import inspect
import logging
from typing import Any, Dict, Optional

logger = logging.getLogger(__name__)


def ai_agent_class() -> type:
    """``run_agent.AIAgent``, the host's agent loop (raises ImportError without Hermes)."""
    from run_agent import AIAgent

    return AIAgent


def tool_delay_kwargs(delay: float) -> Dict[str, Any]:
    """The ``AIAgent`` keyword that sets its pause between the tool calls of one reply, as a dict:
    ``{"tool_delay": delay}`` where the host sleeps there (up to 0.19, default 1 s), ``{}`` where
    it no longer does (0.20 on: the argument defaults to None, is ignored and, when given, only
    draws a DeprecationWarning) or has no such argument."""
    try:
        param = inspect.signature(ai_agent_class().__init__).parameters.get("tool_delay")
    except Exception:   # no Hermes, or an __init__ without a signature: pass nothing
        return {}
    if param is None or param.default is None:
        return {}
    return {"tool_delay": delay}


def minimum_context_length() -> Optional[int]:
    """The smallest model window Hermes accepts (``agent.model_metadata.MINIMUM_CONTEXT_LENGTH``:
    an agent on a smaller one raises at init); None without Hermes."""
    try:
        from agent.model_metadata import MINIMUM_CONTEXT_LENGTH
    except Exception:  # no Hermes, or one without the constant: None, no known minimum
        return None
    return int(MINIMUM_CONTEXT_LENGTH)


def add_request_observer(callback) -> bool:
    """Call ``callback(**kwargs)`` on Hermes' ``pre_api_request`` plugin hook (before every
    provider request, with ``session_id`` and ``request_messages``), as a plugin's
    ``ctx.register_hook`` would. Observation only: 0.19.0 ignores the hook's return value.
    False without Hermes or a plugin manager."""
    try:
        from hermes_cli.plugins import get_plugin_manager

        manager = get_plugin_manager()
        manager._hooks.setdefault("pre_api_request", []).append(callback)
    except Exception:  # no Hermes/plugin manager, or _hooks of another shape: False, not observed
        return False
    return True

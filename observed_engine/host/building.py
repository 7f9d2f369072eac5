"""The ``AIAgent`` the host is building when it loads its context engine, and what the host
hands its own built-in compressor from it."""

from __future__ import annotations

import inspect
import logging
import sys
from typing import Any, Dict, Optional

logger = logging.getLogger(__name__)


def building_agent() -> Optional[object]:
    """The ``run_agent.AIAgent`` whose constructor is on this thread's stack, or None when no
    agent is being built (a plugin scan at start-up, ``observed-engine doctor``). The host loads
    its context engine while it builds the agent; by then the agent holds what the host hands its
    own built-in (model, route, ``max_tokens``, the configured window, ``custom_providers``).
    The caller reads it there and then and keeps no reference."""
    try:
        frame = sys._getframe(1)
    except Exception:  # an interpreter without sys._getframe: no stack to search, so no agent
        return None
    for _depth in range(80):
        if frame is None:
            break
        try:
            # Only AIAgent's own constructor frame is looked into: reading f_locals snapshots a
            # frame's locals into a dict the frame keeps until it returns, which would keep the
            # caller's objects (an agent the gateway already dropped, its engine) alive.
            code = frame.f_code
            if code.co_name != "__init__" or not code.co_filename.endswith("run_agent.py"):
                frame = frame.f_back
                continue
            local_vars = frame.f_locals
            for name in ("agent", "self"):
                candidate = local_vars.get(name)
                if candidate is not None and _is_aiagent(candidate):
                    return candidate
        except Exception:  # a frame that cannot be read is not the agent's
            pass
        frame = frame.f_back
    return None


def building_agent_quiet_mode() -> Optional[bool]:
    """``quiet_mode`` of the ``run_agent.AIAgent`` being constructed on this thread's stack
    (the host builds its own compressor with ``quiet_mode=agent.quiet_mode``), or None when no
    agent is being built or it has none."""
    quiet = getattr(building_agent(), "quiet_mode", None)
    return quiet if isinstance(quiet, bool) else None


def _is_aiagent(obj: object) -> bool:
    return any(cls.__name__ == "AIAgent" and cls.__module__ == "run_agent" for cls in type(obj).__mro__)


def agent_compressor_inputs(building: object) -> Dict[str, Any]:
    """What the host hands its own ``ContextCompressor`` from the agent it is building, read off
    that agent: ``model``, ``provider``, ``base_url``, ``api_key``, ``api_mode``, ``quiet_mode``;
    and, once the agent is at engine selection (it holds ``_config_context_length``, set just
    before on every line), ``max_tokens`` (0.22: ``agent_init._compressor_max_tokens``, the
    native-Gemini output default when unset), ``config_context_length`` (0.20+ through
    ``_effective_lmstudio_context_length``, whose LM Studio runtime answer is not known here),
    ``custom_providers`` and ``minimum_context_length`` (0.22's tool-context floor). Earlier in
    its init (0.20 scans plugins before it reads config.yaml) only a ``max_tokens`` the caller gave
    is taken: the host fills an unset one from config.yaml later. Only what the agent holds."""
    out: Dict[str, Any] = {}
    for name in ("model", "provider", "base_url", "api_key", "api_mode"):
        if hasattr(building, name):
            out[name] = getattr(building, name)
    quiet = getattr(building, "quiet_mode", None)
    if isinstance(quiet, bool):
        out["quiet_mode"] = quiet
    at_selection = hasattr(building, "_config_context_length")
    if at_selection and hasattr(building, "max_tokens"):
        try:
            from agent.agent_init import _compressor_max_tokens
        except ImportError:
            out["max_tokens"] = building.max_tokens
        else:
            try:
                out["max_tokens"] = _compressor_max_tokens(building)
            except Exception:  # the host's helper raised on this agent: its own max_tokens, as before 0.22
                out["max_tokens"] = building.max_tokens
    elif getattr(building, "max_tokens", None) is not None:
        out["max_tokens"] = building.max_tokens
    if at_selection:
        window = building._config_context_length
        effective = getattr(type(building), "_effective_lmstudio_context_length", None)
        if callable(effective):
            try:
                window = effective(window, None)
            except Exception:  # the LM Studio lookup raised: the configured window stands
                pass
        out["config_context_length"] = window
        if hasattr(building, "_custom_providers"):
            out["custom_providers"] = building._custom_providers
        out["minimum_context_length"] = getattr(building, "_minimum_tool_context_length", None)
    return out


_READS_MODEL_MAX_TOKENS: Dict[str, bool] = {}


def agent_init_reads_model_max_tokens() -> bool:
    """Whether this Hermes' agent init fills an unset ``max_tokens`` from config.yaml's
    ``model.max_tokens`` (0.16-0.20 do; 0.22 reads no such key): its ``agent/agent_init.py``
    source names the key, as :func:`_honours_safe_mode` reads its plugin module. True where
    there is no such module or no source to read (the older behaviour)."""
    try:
        import agent.agent_init as agent_init
    except Exception:  # no agent.agent_init to read: the older behaviour (True)
        return True
    key = getattr(agent_init, "__file__", None) or ""
    if key not in _READS_MODEL_MAX_TOKENS:
        import re

        try:
            source = inspect.getsource(agent_init)
        except Exception:  # no source to read (bytecode-only install): the older behaviour is assumed
            _READS_MODEL_MAX_TOKENS[key] = True
        else:
            _READS_MODEL_MAX_TOKENS[key] = re.search(r"""\.get\(\s*["']max_tokens["']\s*\)""", source) is not None
    return _READS_MODEL_MAX_TOKENS[key]

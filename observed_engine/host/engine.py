"""The host's engine interface: its ``ContextEngine`` ABC, the head host's "does the engine
override this hook" test, and the built-in ``ContextCompressor`` class and constructor."""

from __future__ import annotations

import inspect
import logging
from typing import Any, Dict, Mapping, Optional

from ..contract.hooks import overrides_default

logger = logging.getLogger(__name__)


def context_engine_abc() -> Optional[type]:
    """``agent.context_engine.ContextEngine``, or None when Hermes is not importable."""
    try:
        from agent.context_engine import ContextEngine
    except Exception:  # Hermes not importable: None; hermes_import_problem() says why
        return None
    return ContextEngine


def overrides_abc_default(engine: object, name: str) -> bool:
    """The head host's test with the installed ABC: is ``engine.<name>`` not the ABC's default?"""
    return overrides_default(engine, name, context_engine_abc())


def compressor_module():
    """The module ``agent.context_compressor`` (raises ImportError without Hermes). Its
    ``call_llm`` is the built-in compressor's only LLM call: the demo answers it offline."""
    import agent.context_compressor as module

    return module


def context_compressor_class() -> type:
    """``agent.context_compressor.ContextCompressor`` (raises ImportError without Hermes)."""
    return compressor_module().ContextCompressor


def compressor_arguments(cls: type, arguments: Mapping[str, Any]) -> Dict[str, Any]:
    """``arguments`` restricted to the keywords ``cls.__init__`` accepts: each Hermes release
    takes its own set (``abort_on_summary_failure`` since 0.15.0, ``max_tokens`` since 0.18.0),
    and an older constructor given a newer keyword raises TypeError, which would cost the
    agent its engine. All of them when the signature cannot be read or takes ``**kwargs``."""
    try:
        params = inspect.signature(cls).parameters
    except (TypeError, ValueError):
        return dict(arguments)
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return dict(arguments)
    accepted = {name for name, p in params.items()
                if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)}
    dropped = sorted(set(arguments) - accepted)
    if dropped:
        logger.debug("observed: this Hermes' %s takes no %s; not passed", cls.__name__, ", ".join(dropped))
    return {name: value for name, value in arguments.items() if name in accepted}


def compressor_defaults(cls: type) -> Dict[str, Any]:
    """The keyword defaults of ``cls.__init__`` (``tail_mode`` is ``"legacy"`` on 0.20, ``"lean"``
    on 0.22); {} when the signature cannot be read."""
    try:
        params = inspect.signature(cls).parameters
    except (TypeError, ValueError):
        return {}
    return {name: p.default for name, p in params.items() if p.default is not inspect.Parameter.empty}


def compressor_resolves_window_lazily(cls: type) -> bool:
    """Whether ``cls`` resolves its window on first read (0.20+: ``context_length`` is a
    property over ``_resolved_context_length``) rather than in its constructor (0.16-0.19, which
    look the model up over the network when given no window)."""
    return isinstance(inspect.getattr_static(cls, "context_length", None), property)

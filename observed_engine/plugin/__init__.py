"""The Hermes plugin side: ``context.engine: observed`` wraps the operator's engine.

Hermes finds this module through the bundled plugin directory or the ``hermes_agent.plugins``
entry point; :func:`register` reads ``observed:``, builds the inner engine and registers
``observe(inner, ...)``. When editing: it never leaves the agent without an engine (bad section:
defaults; unbuildable inner: the built-in; each failure logged), and a pip plugin's engine is
built only where Hermes' own plugin gates would load it. Beside it: ``section``, ``inner``,
``builtin``, ``state``, ``introspection``.

The full account: docs/design/internals.md, *observed_engine/plugin/__init__.py*.
"""

from __future__ import annotations

import logging
from typing import Any, Mapping, Optional

from .. import host
from ..contract.vocabulary import PLUGIN_NAME
from .builtin import PLACEHOLDER_CONTEXT_LENGTH, build_compressor  # noqa: F401  (re-exported)
from .inner import (  # noqa: F401  (re-exported)
    InnerEngineError,
    PluginGatedError,
    _engine_name,
    build_inner,
    build_inner_or_fallback,
)
from .introspection import overridden_hooks, tool_names, tool_report  # noqa: F401  (re-exported)
from .section import DEFAULT_INNER, load_hermes_config, observed_section, validate_section  # noqa: F401
from .state import _building, _state, dry_run  # noqa: F401  (re-exported)

logger = logging.getLogger(__name__)

ENTRY_POINTS_GROUP = host.ENTRY_POINTS_GROUP

def register(ctx) -> None:
    """Hermes plugin entry: register the observed engine with *ctx*.

    Never raises: Hermes' directory loader hides exceptions from ``register``
    at debug level, so every failure is logged here instead.
    """
    if getattr(_state, "depth", 0):
        # Loading the inner engine through Hermes' plugin system re-entered us
        # (our own entry point is enabled too). The outer call registers.
        logger.debug("observed: nested register() call ignored")
        return
    try:
        with _building():
            engine = build_engine()
    except Exception as exc:  # pragma: no cover - build_engine already falls back
        logger.error("observed: could not build the observed engine: %s", exc, exc_info=True)
        return
    try:
        ctx.register_context_engine(engine)
    except Exception as exc:
        logger.error(
            "observed: Hermes refused the observed engine (%s: %s); it runs its built-in compressor. "
            "Check the install with `observed-engine doctor`.", type(exc).__name__, exc)
        return
    try:
        manager = getattr(ctx, "_manager", None)
        if manager is not None and getattr(manager, "_context_engine", engine) is not engine:
            other = getattr(manager, "_context_engine", None)
            logger.warning(
                "observed: Hermes kept the context engine %r that another plugin registered first and "
                "rejected observed's (it keeps one context engine plugin, in scan order): with "
                "context.engine: observed it falls back to its built-in compressor. Fix: "
                "`observed-engine install --route bundled` (Hermes' directory loader comes before its "
                "plugin system, and observed then wraps %r if observed.inner names it); "
                "`observed-engine doctor` shows what Hermes selects",
                getattr(other, "name", other), getattr(other, "name", "<name>"),
            )
    except Exception:  # the warning is advice; the registration already happened
        pass


def build_engine(config: Optional[Mapping[str, Any]] = None, *,
                 tracer_provider=None, meter_provider=None):
    """Build ``observe(inner, settings=...)`` from the Hermes config.

    *config* is the whole Hermes config mapping (default: ``load_config()``).
    """
    if config is None:
        config = load_hermes_config()
    section = observed_section(config)
    inner_name = section.get("inner", DEFAULT_INNER)
    inner = build_inner_or_fallback(inner_name, config)
    settings = {**section, "name": PLUGIN_NAME}
    if getattr(_state, "dry_run", False):
        settings["enabled"] = False       # a selection check: no exporter, store or thread
    try:
        from ..api import observe
    except ImportError as exc:
        logger.error("observed: the observed_engine package is incomplete (%s); "
                     "Hermes gets the bare %r engine", exc, _engine_name(inner))
        return inner
    try:
        return observe(inner, tracer_provider=tracer_provider,
                       meter_provider=meter_provider, settings=settings)
    except Exception as exc:
        logger.error(
            "observed: telemetry setup failed (%s: %s); retrying with the default "
            "`observed:` settings", type(exc).__name__, exc,
        )
    defaults = {"name": PLUGIN_NAME}
    if getattr(_state, "dry_run", False):
        defaults["enabled"] = False
    if "inner" in section:
        defaults["inner"] = section["inner"]
    try:
        return observe(inner, tracer_provider=tracer_provider,
                       meter_provider=meter_provider, settings=defaults)
    except Exception as exc:
        logger.error(
            "observed: cannot observe the %r engine (%s: %s); Hermes gets the bare "
            "engine, without telemetry", _engine_name(inner), type(exc).__name__, exc,
            exc_info=True,
        )
    return inner

"""The Hermes plugin module: what Hermes loads, by either route.

The ``hermes_agent.plugins`` entry point names this module, and the plugin directory
that ``observed-engine install`` writes into Hermes (``plugins/context_engine/observed/``)
imports ``register`` from here; copies written by earlier versions do too. The code
lives in :mod:`observed_engine.plugin`.
"""

from .plugin import (  # noqa: F401  (the plugin's public names, importable from here)
    DEFAULT_INNER,
    PLUGIN_NAME,
    InnerEngineError,
    _building,  # noqa: F401  (tests re-enter register() through it)
    build_compressor,
    build_engine,
    build_inner,
    build_inner_or_fallback,
    load_hermes_config,
    observed_section,
    overridden_hooks,
    register,
    tool_names,
    validate_section,
)

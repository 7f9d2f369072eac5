"""Observed context engine for Hermes Agent.

Wraps the context engine named by ``observed.inner`` in config.yaml (default:
the built-in compressor) and records every ContextEngine hook call as
OpenTelemetry spans, Prometheus metrics and rows of an embedded SQLite store.

Select it with ``context.engine: observed``. This directory is what
``observed-engine install`` copies into Hermes' ``plugins/context_engine/``
(and, for newer Hermes, ``$HERMES_HOME/plugins/observed/``); the code lives in
the ``observed-engine`` Python package, which must be installed in the same
Python environment as Hermes. ``register(ctx)`` ends in
``ctx.register_context_engine(engine)`` with an ``agent.context_engine.ContextEngine``.
"""

import logging

_logger = logging.getLogger("observed_engine.hermes_plugin")


def register(ctx):
    try:
        from observed_engine.hermes_plugin import register as _register
    except Exception as exc:  # Hermes would hide this at debug level
        _logger.error(
            "observed: the observed-engine package is not importable from this Hermes "
            "(%s: %s). Install it into Hermes' Python environment "
            "(from a checkout: `pip install /path/to/observed-engine`), or set `context.engine` back to your "
            "previous engine. Hermes falls back to its built-in compressor.",
            type(exc).__name__, exc,
        )
        return
    _register(ctx)

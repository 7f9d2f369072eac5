"""What the plugin is doing on this thread: building an engine (a ``register()`` re-entered
through Hermes' plugin discovery does nothing), or a dry run for ``doctor``/``install``."""

from __future__ import annotations

import threading

_state = threading.local()


class _building:
    """Marks this thread as building an engine: a register() call re-entered
    through Hermes' plugin discovery (our own entry point being enabled too)
    does nothing instead of building a second engine."""

    def __enter__(self):
        _state.depth = getattr(_state, "depth", 0) + 1
        return self

    def __exit__(self, *exc):
        _state.depth -= 1
        return False


class dry_run:
    """On this thread, engines the plugin builds are observed with ``enabled: false`` (named
    ``observed``, no exporter, store or thread): for ``observed-engine doctor`` and ``install``
    running the host's own selection to see what it would pick."""

    def __enter__(self):
        self._before = getattr(_state, "dry_run", False)
        _state.dry_run = True
        return self

    def __exit__(self, *exc):
        _state.dry_run = self._before
        return False

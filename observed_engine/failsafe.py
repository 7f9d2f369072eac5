"""Telemetry never raises into the host: the one guard for that rule.

``with swallowed("component", count):`` runs a block of the wrapper's own work (an export, a
store statement, a teardown step) and swallows what it raises: counted with ``count(component)``
(a pipeline's ``count_error``: ``hermes_context_engine_telemetry_errors_total{component}``) and
logged once per (component, exception type), as sentry-python's ``capture_internal_exceptions``
does. :func:`note` is the same accounting for a handler that must go on with a fallback value.
``KeyboardInterrupt`` and ``SystemExit`` pass through.

Not for the hook path (``capture/``) or the worker's per-event loop: a context manager costs a
call there; those keep a plain ``try``/``except`` with a "hot path:" comment. Stdlib only, in
the bottom layer, so the store and the worker can use it: the counter is passed in, never
imported (docs/design/architecture.md).
"""

from __future__ import annotations

import logging
import threading
from typing import Callable, Optional

logger = logging.getLogger(__name__)

Count = Optional[Callable[[str], object]]

_MAX_KINDS = 1024     # a bound on what is remembered; past it every failure is logged at debug only
_logged: set = set()
_lock = threading.Lock()


def note(component: str, exc: BaseException, count: Count = None) -> None:
    """Account for ``exc``, swallowed by ``component``: count it, log the first of its kind.
    Never raises."""
    try:
        if count is not None:
            count(component)
    except Exception:       # the counter is the last resort: nothing is left to tell
        pass
    try:
        kind = (component, type(exc).__name__)
        with _lock:
            first = kind not in _logged and len(_logged) < _MAX_KINDS
            if first:
                _logged.add(kind)
        if first:
            logger.warning("observed-engine %s: %s: %s (swallowed; later ones of this kind are counted, "
                           "not logged)", component, type(exc).__name__, exc, exc_info=exc)
        else:
            logger.debug("observed-engine %s: %s: %s (swallowed)", component, type(exc).__name__, exc)
    except Exception:       # logging itself failed (a broken handler, a __str__ that raises)
        pass


class swallowed:
    """A block whose ``Exception`` is swallowed and accounted for (:func:`note`)."""

    __slots__ = ("component", "count")

    def __init__(self, component: str, count: Count = None) -> None:
        self.component = component
        self.count = count

    def __enter__(self) -> swallowed:
        return self

    def __exit__(self, etype, exc, tb) -> bool:
        if etype is None or not issubclass(etype, Exception):
            return False
        note(self.component, exc, self.count)
        return True


def forget_logged() -> None:
    """Log the next failure of every kind again (tests; a long-lived process after a fix)."""
    with _lock:
        _logged.clear()

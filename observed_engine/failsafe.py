"""Telemetry never raises into the host: the one guard for that rule.

``with swallowed("component", count):`` and :func:`note` swallow an ``Exception``, count it with
the pipeline's ``count_error`` and log the first of each kind. When editing: not for the hook
path or the worker's per-event loop (a plain ``try``/``except`` with a "hot path:" comment
there); stdlib only in the bottom layer, the counter passed in, never imported.

The full account: docs/design/internals.md, *observed_engine/failsafe.py*.
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

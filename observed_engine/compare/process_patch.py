"""A replacement for one attribute of a module, kept in place while a replay process uses it.

The sweep's replayer puts two of these in place for its life (``request_memo``: the OpenAI SDK's
request transform; ``config_copy``: the ``copy`` that Hermes' config module sees). Each
``install`` is counted and undone by one ``uninstall``. The last ``uninstall`` puts the original
back, but only if the attribute still holds the replacement.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Dict, Optional


class CountedPatch:
    """``module()`` gives the module (None: not here); ``make(original)`` gives the replacement
    for its attribute ``name`` (None: it does not apply to that original); ``stats(replacement)``
    gives its figures, which ``uninstall`` returns when it takes the replacement away."""

    def __init__(self, module: Callable[[], Any], name: str, make: Callable[[Any], Any],
                 stats: Callable[[Any], Dict[str, Any]]) -> None:
        self._module, self._name, self._make, self._stats = module, name, make, stats
        self._lock = threading.Lock()
        self._installed: Any = None
        self._original: Any = None
        self._users = 0

    def install(self) -> Any:
        with self._lock:
            if self._installed is not None:
                self._users += 1
                return self._installed
            module = self._module()
            if module is None:
                return None
            original = getattr(module, self._name, None)
            replacement = self._make(original)
            if replacement is None:
                return None
            setattr(module, self._name, replacement)
            self._installed, self._original, self._users = replacement, original, 1
            return replacement

    def uninstall(self) -> Optional[Dict[str, Any]]:
        with self._lock:
            if self._installed is None:
                return None
            self._users -= 1
            if self._users > 0:
                return None
            module = self._module()
            if module is not None and getattr(module, self._name, None) is self._installed:
                setattr(module, self._name, self._original)
            stats = self._stats(self._installed)
            self._installed = self._original = None
            return stats

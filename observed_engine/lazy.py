"""Packages whose public names are imported on first use (PEP 562): the project's root and
``compare``'s, so that importing a light part of either does not import the heavy side."""

from __future__ import annotations

import importlib
import sys
from typing import Any, Callable, List, Mapping, Sequence, Tuple


def exports(package: str, table: Mapping[str, str],
            public: Sequence[str]) -> Tuple[Callable[[str], Any], Callable[[], List[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package``: ``table`` maps each lazy name to the
    (relative) module that defines it; ``public`` is the package's ``__all__``."""
    namespace = sys.modules[package].__dict__

    def __getattr__(name: str) -> Any:
        module = table.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package), name)
        namespace[name] = value          # later lookups are plain module attributes
        return value

    def __dir__() -> List[str]:
        return sorted(set(namespace) | set(public))

    return __getattr__, __dir__

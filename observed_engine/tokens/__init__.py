"""Token counting for observed-engine, offline and cheap to repeat.

tiktoken when its encoding loads without the network, else a labelled estimate; one module
per concern (``provisioning``, ``counter``, ``text``, ``helper``). When editing: the former
single module's private names (``_LOADED``, ``_warned``, ...) stay attributes of this package,
and setting one here sets it where it is used, so ``monkeypatch.setattr`` on the package works.

The full account: docs/design/internals.md, *observed_engine/tokens/__init__.py*.
"""

from __future__ import annotations

import sys
import types

from . import counter, provisioning, text
from .counter import TokenCounter, choose_encoding, counter_for, estimate_tokens, resolve_encoding_name
from .provisioning import DEFAULT_ENCODINGS, EncodingUnavailable, ensure_offline_encodings

__all__ = [
    "DEFAULT_ENCODINGS",
    "EncodingUnavailable",
    "TokenCounter",
    "choose_encoding",
    "counter_for",
    "ensure_offline_encodings",
    "estimate_tokens",
    "resolve_encoding_name",
]


def _private_names(*modules: types.ModuleType) -> dict[str, types.ModuleType]:
    """``{"_name": the module defining it}`` for the single-underscore names of ``modules``."""
    homes: dict[str, types.ModuleType] = {}
    for module in modules:
        for name, value in vars(module).items():
            if name.startswith("_") and not name.startswith("__") and not isinstance(value, types.ModuleType):
                if name in homes:  # pragma: no cover - a guard for whoever adds a private name
                    raise ImportError(f"observed_engine.tokens: {name} is defined in two modules")
                homes[name] = module
    return homes


def _forwarded(name: str, home: types.ModuleType) -> property:
    """``name`` read from, set in and deleted from ``home``.

    A property (a data descriptor) rather than ``__getattr__``/``__setattr__``: monkeypatch then
    records the live value in ``home`` and restores it through here, on every pytest version.
    """
    return property(
        lambda _package: getattr(home, name),
        lambda _package, value: setattr(home, name, value),
        lambda _package: delattr(home, name),
        doc=f"{home.__name__}.{name}",
    )


sys.modules[__name__].__class__ = type(
    "_Package",
    (types.ModuleType,),
    {name: _forwarded(name, home) for name, home in _private_names(provisioning, counter, text).items()},
)

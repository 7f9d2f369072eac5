"""observed-engine: observability for Hermes Agent context engines.

    from observed_engine import observe
    engine = observe(inner)        # the same engine, now traced and measured

The root is lazy (PEP 562): importing ``observed_engine.contract``, the store or the dashboard's
readers does not import the engine side (the API, the pipeline, OpenTelemetry). The names below are
imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .lazy import exports
from .version import __version__

# public name -> the module that defines it
_LAZY = {
    "observe": ".api",
    "unobserve": ".api",
    "flush": ".api",
    "shutdown": ".api",
    "is_observed": ".capture",
    "Registry": ".pipeline",
    "REGISTRY": ".pipeline",
}

__all__ = ["observe", "unobserve", "is_observed", "flush", "shutdown", "Registry", "REGISTRY", "__version__"]

if TYPE_CHECKING:   # for type checkers and IDEs: the names as if imported eagerly
    from .api import flush, observe, shutdown, unobserve
    from .capture import is_observed
    from .pipeline import REGISTRY, Registry


__getattr__, __dir__ = exports(__name__, _LAZY, __all__)

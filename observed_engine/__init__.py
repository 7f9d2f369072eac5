"""observed-engine: observability for Hermes Agent context engines.

    from observed_engine import observe
    engine = observe(inner)        # the same engine, now traced and measured
"""

from .version import __version__
from .api import flush, observe, shutdown, unobserve
from .capture import is_observed
from .pipeline import REGISTRY, Registry

__all__ = ["observe", "unobserve", "is_observed", "flush", "shutdown", "Registry", "REGISTRY", "__version__"]

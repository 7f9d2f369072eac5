"""The embedded telemetry store: one SQLite file, no server.

``writer`` is the thread; what it uses is one concept per module: ``files``, ``connection``,
``values``, ``statements``, ``retention``.
"""

from .connection import ForeignStoreError, connect, readonly_uri
from .writer import StoreWriter

__all__ = ["ForeignStoreError", "StoreWriter", "connect", "readonly_uri"]

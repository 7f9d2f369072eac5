"""The embedded telemetry store: one SQLite file, no server."""

from .writer import ForeignStoreError, StoreWriter, connect, readonly_uri

__all__ = ["ForeignStoreError", "StoreWriter", "connect", "readonly_uri"]

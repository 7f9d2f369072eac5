"""The embedded telemetry store: one SQLite file, no server."""

from .writer import StoreWriter, connect, readonly_uri

__all__ = ["StoreWriter", "connect", "readonly_uri"]

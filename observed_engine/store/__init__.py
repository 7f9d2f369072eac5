"""The embedded telemetry store: one SQLite file, no server."""

from .writer import StoreWriter, connect

__all__ = ["StoreWriter", "connect"]

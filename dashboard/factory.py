"""Builds the source the sidebar asked for (the one module that imports both implementations)."""

from __future__ import annotations

from .options import PROMETHEUS
from .prometheus_source import PrometheusSource
from .sources import Source
from .sqlite_source import SQLiteSource


def open_source(kind: str, target: str, *, probe: bool = True) -> Source:
    """``kind`` "prometheus": ``target`` is its URL; else ``target`` is a store path.
    ``probe=False`` for a path typed into the page: the store source then never tells a missing
    file from an unreadable one."""
    if kind == PROMETHEUS:
        return PrometheusSource(target)
    return SQLiteSource(target, probe=probe)


def alert_source(url: str) -> PrometheusSource:
    """Prometheus next to the store, asked only for its rule alerts (short timeout)."""
    return PrometheusSource(url, timeout=1.5)

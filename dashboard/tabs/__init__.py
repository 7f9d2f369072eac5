"""One module per tab, each with ``TITLE`` and ``render(ctx)``; ``TABS`` in page order."""

from __future__ import annotations

from . import alerts, compare, compressions, latency, selection, session, usage

TABS = {m.TITLE: m.render for m in (usage, session, compressions, selection, alerts, latency, compare)}

"""The choices a comparison or a sweep is run with (the CLI offers them; ``run`` and ``tune`` check them)."""

from __future__ import annotations

SUMMARY_MODES = ("offline", "configured")     # offline: the replay's own summariser; configured: the user's model

"""The one exception the commands raise for the operator."""

from __future__ import annotations


class CliError(Exception):
    """A problem the operator must fix; printed without a traceback (exit code 2)."""

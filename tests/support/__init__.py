"""Helpers for the exporter / store / watchdog / alerting tests (not generic fixtures: see conftest.py)."""

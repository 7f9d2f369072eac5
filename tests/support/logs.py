"""observed-engine's log records, as the tests read them (caplog)."""

from __future__ import annotations

import logging


def our_records(caplog, level: int = logging.DEBUG) -> list:
    return [r for r in caplog.records if r.name.startswith("observed_engine") and r.levelno >= level]


def record_text(record) -> str:
    text = record.getMessage()
    if record.exc_info:
        text += "\n" + logging.Formatter().formatException(record.exc_info)
    if record.exc_text:
        text += "\n" + record.exc_text
    if getattr(record, "stack_info", None):
        text += "\n" + record.stack_info
    return text


def matching(records, needle: str) -> list:
    return [r for r in records if needle in record_text(r)]

"""Capture: what runs on the host's thread (re-classing, hook forms, hook-time snapshots).

Meets the worker only through ``observed_engine.contract`` (the HookEvent field order,
the snapshot formats); gets its pipeline passed in and never imports it.
"""

from .reclass import (
    EngineMeta,
    engine_name,
    instrument_engine,
    is_observed,
    observed_meta,
    uninstrument_engine,
)

__all__ = ["EngineMeta", "engine_name", "instrument_engine", "is_observed", "observed_meta",
           "uninstrument_engine"]

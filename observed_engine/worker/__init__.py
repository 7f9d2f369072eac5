"""The worker: what runs on the background thread (the processor, one handler per hook,
the worker's memory of each engine). Meets the capture side only through
``observed_engine.contract``; gets its pipeline passed in and never imports it."""

from .processor import EventProcessor

__all__ = ["EventProcessor"]

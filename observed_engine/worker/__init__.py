"""The worker: what runs on the background thread (the processor, one handler per hook,
the worker's memory of each engine). Meets the capture side only through
``observed_engine.contract``; gets its pipeline passed in (``pipeline_side.WorkerPipeline``
names what it uses of it) and never imports it."""

from .pipeline_side import RowSink, WorkerPipeline
from .processor import EventProcessor

__all__ = ["EventProcessor", "RowSink", "WorkerPipeline"]

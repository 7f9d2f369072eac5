"""The pipeline: recorder (the hook path's deque and the worker thread), watchdog,
instruments, exporters and store writer of one process configuration, kept in a
:class:`Registry` (default :data:`REGISTRY`)."""

from .pipeline import Pipeline
from .registry import REGISTRY, Registry, process_settings

__all__ = ["Pipeline", "Registry", "REGISTRY", "process_settings"]

"""Where pipelines live: one per process configuration, in a registry.

Like ``prometheus_client.REGISTRY``, a default :data:`REGISTRY` serves callers that
pass none; tests and embedders may make their own. A pipeline is keyed by what is
process-wide about it: the providers passed in, the ``observed:`` settings without
the per-engine keys (``inner``, ``name``), the store path and the compress deadline.
Two engines that differ only in name share one pipeline (one store writer thread
per file, one Prometheus server). The first pipeline made registers one atexit
handler that flushes and stops every registry's pipelines.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
import weakref
from dataclasses import replace
from typing import Dict, List

from ..settings import Settings
from .pipeline import Pipeline

logger = logging.getLogger("observed_engine")

_DEFAULTS = Settings()


def process_settings(settings: Settings) -> Settings:
    """``settings`` without the per-engine keys: what makes two engines need two pipelines."""
    return replace(settings, inner=_DEFAULTS.inner, name=None)


class Registry:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pipelines: Dict[tuple, Pipeline] = {}

    def get(self, settings: Settings, tracer_provider=None, meter_provider=None, *,
            store_path=None, compress_timeout: float = 120.0) -> Pipeline:
        """The pipeline for this configuration, made on first use."""
        shared = process_settings(settings)
        key = (id(tracer_provider), id(meter_provider), shared,
               str(store_path) if store_path is not None else None, float(compress_timeout))
        with self._lock:
            pipeline = self._pipelines.get(key)
            # the ids in the key may be reused after a provider is collected: same objects only
            if (pipeline is not None and pipeline.given_providers[0] is tracer_provider
                    and pipeline.given_providers[1] is meter_provider):
                return pipeline
            pipeline = Pipeline(shared, tracer_provider, meter_provider, store_path=store_path,
                                compress_timeout=compress_timeout, registry=self)
            self._pipelines[key] = pipeline
        _note_in_use(self)
        return pipeline

    def pipelines(self) -> List[Pipeline]:
        with self._lock:
            return list(self._pipelines.values())

    def remove(self, pipeline: Pipeline) -> None:
        with self._lock:
            for key, entry in list(self._pipelines.items()):
                if entry is pipeline:
                    del self._pipelines[key]

    def flush(self, timeout: float = 5.0) -> bool:
        """Deliver what every pipeline holds (events, store rows, exporters)."""
        ok = True
        for pipeline in self.pipelines():
            ok = pipeline.flush(timeout) and ok
        return ok

    def shutdown(self, timeout: float = 5.0) -> None:
        """Stop every pipeline (worker threads, servers, exporters)."""
        with self._lock:
            entries = list(self._pipelines.values())
            self._pipelines.clear()
        for pipeline in entries:
            try:
                pipeline.shutdown(timeout)
            except Exception:
                pass


REGISTRY = Registry()

_in_use: "weakref.WeakSet[Registry]" = weakref.WeakSet()
_atexit_lock = threading.Lock()
_atexit_registered = False


def _note_in_use(registry: Registry) -> None:
    global _atexit_registered
    with _atexit_lock:
        _in_use.add(registry)
        if not _atexit_registered:
            atexit.register(_at_exit)
            _atexit_registered = True


EXIT_BUDGET_SECONDS = 8.0   # for every pipeline of the process together (a dead collector, a locked store)


def _at_exit() -> None:
    """Deliver what is pending, then stop the pipelines (and the providers built from settings,
    which do not register their own atexit shutdown: see exporters.build_providers), all within
    EXIT_BUDGET_SECONDS; what does not make it is said (Pipeline.shutdown)."""
    deadline = time.monotonic() + EXIT_BUDGET_SECONDS
    pipelines = [p for registry in list(_in_use) for p in registry.pipelines()]
    for i, pipeline in enumerate(pipelines):       # half the budget to deliver, shared out
        share = max(0.0, (deadline - EXIT_BUDGET_SECONDS / 2 - time.monotonic())) / (len(pipelines) - i)
        try:
            pipeline.deliver(share)
        except Exception:
            pass
    for i, pipeline in enumerate(pipelines):       # the rest to stop them
        share = max(0.1, (deadline - time.monotonic()) / (len(pipelines) - i))
        try:
            pipeline.shutdown(share)
        except Exception:
            pass


def _after_fork_in_child() -> None:
    for registry in list(_in_use):
        registry._lock = threading.Lock()
        for pipeline in registry.pipelines():
            try:
                pipeline.after_fork_in_child()
            except Exception:
                logger.warning("observed-engine: could not restart telemetry in a forked child; "
                               "this process's telemetry is lost", exc_info=True)


os.register_at_fork(after_in_child=_after_fork_in_child)

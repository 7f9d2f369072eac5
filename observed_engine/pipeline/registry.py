"""Where pipelines live: one per process configuration, in a registry.

Like ``prometheus_client.REGISTRY``, a default :data:`REGISTRY`; tests and embedders may make
their own. When editing: the key is what is process-wide (providers, settings without ``inner``
and ``name``, store path, compress deadline), so engines differing only in name share a pipeline;
a pipeline left with no live engines that is not the latest asked for is retired (shut down on
a thread of its own). One atexit handler stops every registry's pipelines.

The full account: docs/design/internals.md, *observed_engine/pipeline/registry.py*.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
import weakref
from typing import Dict, List, Optional

from ..contract.records import replace
from ..failsafe import swallowed
from ..settings import DEFAULT_COMPRESS_TIMEOUT, Settings
from . import prometheus
from .pipeline import Pipeline

logger = logging.getLogger(__name__)

_DEFAULTS = Settings()


def process_settings(settings: Settings) -> Settings:
    """``settings`` without the per-engine keys: what makes two engines need two pipelines."""
    return replace(settings, inner=_DEFAULTS.inner, name=None)


RETIRE_BUDGET_SECONDS = 5.0     # a retired pipeline's shutdown (deliver, stop), on its own thread


class Registry:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pipelines: Dict[tuple, Pipeline] = {}
        self._latest: Optional[Pipeline] = None       # the pipeline most recently asked for
        self.retired = 0                               # pipelines retired so far
        self._retiring: List[threading.Thread] = []
        self._sweep_pending = False

    def get(self, settings: Settings, tracer_provider=None, meter_provider=None, *,
            store_path=None, compress_timeout: float = DEFAULT_COMPRESS_TIMEOUT) -> Pipeline:
        """The pipeline for this configuration, made on first use."""
        shared = process_settings(settings)
        key = (id(tracer_provider), id(meter_provider), shared,
               str(store_path) if store_path is not None else None, float(compress_timeout))
        with self._lock:
            pipeline = self._pipelines.get(key)
            # the ids in the key may be reused after a provider is collected: same objects only
            if not (pipeline is not None and pipeline.given_providers[0] is tracer_provider
                    and pipeline.given_providers[1] is meter_provider):
                pipeline = Pipeline(shared, tracer_provider, meter_provider, store_path=store_path,
                                    compress_timeout=compress_timeout, registry=self)
                self._pipelines[key] = pipeline
            superseded = self._latest is not None and self._latest is not pipeline
            self._latest = pipeline
            retire = self._take_unused() if superseded or self._sweep_pending else []
            self._sweep_pending = False
        _note_in_use(self)
        self._retire(retire)
        return pipeline

    # -- retirement -------------------------------------------------------------------

    def _take_unused(self) -> List[Pipeline]:
        """(lock held) Remove and return the pipelines to retire: had engines, none alive,
        not the latest."""
        out = []
        for key, pipeline in list(self._pipelines.items()):
            if pipeline is not self._latest and pipeline.engines_seen and not pipeline.live_engines():
                del self._pipelines[key]
                out.append(pipeline)
        return out

    def engine_gone(self, pipeline: Pipeline) -> None:
        """A pipeline's last live engine went (Pipeline._forget): retire it if it is superseded.
        May run in a weakref callback (the garbage collector, any thread): nothing here waits."""
        # The collector may run this while this very thread holds the lock (an allocation inside
        # get()): never wait for it; the next get() sweeps instead.
        if not self._lock.acquire(blocking=False):
            self._sweep_pending = True
            return
        try:
            if pipeline is self._latest or pipeline.live_engines():
                return
            retire = [p for p in self._take_unused() if p is pipeline]
        finally:
            self._lock.release()
        self._retire(retire)

    def _retire(self, pipelines: List[Pipeline]) -> None:
        for pipeline in pipelines:
            self.retired += 1
            thread = threading.Thread(target=_shut_down_quietly, args=(pipeline, RETIRE_BUDGET_SECONDS),
                                      name="observed-engine-retire", daemon=True)
            try:
                thread.start()
            except Exception:       # no thread to be had now: stopped at exit (still in _retiring)
                self._retiring_later(pipeline)
                continue
            with self._lock:
                self._retiring = [t for t in self._retiring if t.is_alive()] + [thread]

    def _retiring_later(self, pipeline: Pipeline) -> None:
        with self._lock:
            self._pipelines[("retiring", id(pipeline))] = pipeline

    def wait_retired(self, timeout: float = 10.0) -> bool:
        """Wait for the retirements under way (tests, exit)."""
        deadline = time.monotonic() + timeout
        with self._lock:
            threads = list(self._retiring)
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        return not any(t.is_alive() for t in threads)

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
            self._latest = None
        for pipeline in entries:
            with swallowed("shutdown"):
                pipeline.shutdown(timeout)


def _shut_down_quietly(pipeline: Pipeline, budget: float) -> None:
    try:
        pipeline.shutdown(budget)
    except Exception:
        logger.warning("observed-engine: could not stop a retired pipeline", exc_info=True)


REGISTRY = Registry()

_in_use: weakref.WeakSet[Registry] = weakref.WeakSet()
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
    for registry in list(_in_use):                 # retirements under way finish first (bounded)
        registry.wait_retired(max(0.0, min(2.0, deadline - time.monotonic())))
    pipelines = [p for registry in list(_in_use) for p in registry.pipelines()]
    for i, pipeline in enumerate(pipelines):       # half the budget to deliver, shared out
        share = max(0.0, (deadline - EXIT_BUDGET_SECONDS / 2 - time.monotonic())) / (len(pipelines) - i)
        with swallowed("exit_delivery"):
            pipeline.deliver(share)
    for i, pipeline in enumerate(pipelines):       # the rest to stop them
        share = max(0.1, (deadline - time.monotonic()) / (len(pipelines) - i))
        with swallowed("exit_shutdown"):
            pipeline.shutdown(share)


def _after_fork_in_child() -> None:
    prometheus.after_fork_in_child()
    for registry in list(_in_use):
        registry._lock = threading.Lock()
        registry._retiring = []
        for pipeline in registry.pipelines():
            try:
                pipeline.after_fork_in_child()
            except Exception:
                logger.warning("observed-engine: could not restart telemetry in a forked child; "
                               "this process's telemetry is lost", exc_info=True)


os.register_at_fork(after_in_child=_after_fork_in_child)

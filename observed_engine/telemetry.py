"""One telemetry pipeline: providers, instruments, worker, watchdog, store.

``get_telemetry()`` returns the pipeline for a (providers, settings) pair; the
plugin and every engine copy in a process share one. Nothing here runs on the
hook path except ``start_live_span`` (compress and engine tools only).
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
import weakref
from typing import Any, Dict, Iterable, List, Optional, Tuple

from opentelemetry import context as otel_context
from opentelemetry import metrics as otel_metrics
from opentelemetry import trace

from . import __version__
from .exporters import BuiltProviders, build_providers
from .instruments import Instruments
from .processing import EventProcessor
from .recorder import Recorder
from .settings import Settings
from .store import StoreWriter
from .watchdog import CompressionWatchdog

logger = logging.getLogger("observed_engine")

INSTRUMENTATION_NAME = "observed_engine"


class Telemetry:
    def __init__(self, settings: Settings, tracer_provider=None, meter_provider=None) -> None:
        self.settings = settings
        self._error_lock = threading.Lock()
        self._pending_errors: Dict[str, int] = {}
        self._pending_drops: Dict[str, int] = {}
        self._publish_pending = False
        self._flush_threads: Dict[int, threading.Thread] = {}
        self.built: BuiltProviders = BuiltProviders()
        if tracer_provider is None and meter_provider is None and settings.enabled:
            self.built = build_providers(settings, self.count_error, self.count_drop)
            tracer_provider = self.built.tracer_provider
            meter_provider = self.built.meter_provider
        self.tracer_provider = tracer_provider
        self.meter_provider = meter_provider
        tp = tracer_provider or trace.get_tracer_provider()
        mp = meter_provider or otel_metrics.get_meter_provider()
        self.tracer = tp.get_tracer(INSTRUMENTATION_NAME, __version__)
        self.meter = mp.get_meter(INSTRUMENTATION_NAME, __version__)

        # Live engines, for the gauges that follow the engine's real state.
        self._engines_lock = threading.Lock()
        self._engines: Dict[int, Any] = {}

        self.compress_timeout = _resolve_compress_timeout(settings)
        self.watchdog = CompressionWatchdog(self.compress_timeout, self._on_deadline)
        self.store: Optional[StoreWriter] = None
        if settings.enabled and settings.store.enabled:
            self.store = StoreWriter(
                settings.store_path(), retention_days=settings.store.retention_days,
                max_queue=settings.queue_size, on_error=lambda c, e: self.count_error(c),
                on_drop=lambda n: self.count_drop("store_row", n),
            )
        self.instruments = Instruments(self.meter, {
            "prompt_tokens": lambda: self._engine_gauge(0),
            "threshold_tokens": lambda: self._engine_gauge(1),
            "window_tokens": lambda: self._engine_gauge(2),
            "usage_ratio": lambda: self._engine_gauge(3),
            "compression_in_flight": self._in_flight_gauge,
            "compression_oldest_age": self._oldest_age_gauge,
            "compression_deadline": self._deadline_gauge,
        })
        self.processor = EventProcessor(self)
        self.recorder = Recorder(
            self.processor.process_batch, capacity=settings.queue_size, enabled=settings.enabled,
            on_drop=lambda n: self.count_drop("event", n),
        )

    # -- accounting of our own failures (any thread) ------------------------------

    def count_error(self, component: str, n: int = 1) -> None:
        with self._error_lock:
            self._pending_errors[component] = self._pending_errors.get(component, 0) + n
            wake = not self._publish_pending
            self._publish_pending = True
        if wake:
            self._wake_worker()

    def count_drop(self, signal: str, n: int = 1) -> None:
        with self._error_lock:
            self._pending_drops[signal] = self._pending_drops.get(signal, 0) + n
            wake = not self._publish_pending
            self._publish_pending = True
        if wake:
            self._wake_worker()

    def _wake_worker(self) -> None:
        """Have the worker publish pending errors/drops even when no hook runs.

        Errors of the exporter and store threads often come when the engine is
        idle (an export after the last hook); without an event in the queue the
        worker would hold them until the next hook call. One no-op event per
        publication round (the flag); if the queue is full the drop is counted
        without recursing here, and the full queue wakes the worker anyway.
        """
        recorder = getattr(self, "recorder", None)     # None while building providers
        if recorder is not None and recorder.enabled:
            recorder.push(("publish_errors",))

    def take_pending_errors(self) -> Tuple[Dict[str, int], Dict[str, int]]:
        with self._error_lock:
            errors, drops = self._pending_errors, self._pending_drops
            self._pending_errors, self._pending_drops = {}, {}
            self._publish_pending = False
        return errors, drops

    # -- engines ------------------------------------------------------------------

    def register_engine(self, engine) -> None:
        key = id(engine)
        with self._engines_lock:
            if key in self._engines:
                return
            try:
                ref = weakref.ref(engine, lambda _r, k=key: self._forget(k))
            except TypeError:       # no __weakref__ slot: keep it (rare, bounded by engines created)
                ref = (lambda e=engine: e)
            self._engines[key] = ref

    def _forget(self, key: int) -> None:
        with self._engines_lock:
            self._engines.pop(key, None)
        self.processor.forget(key)

    def live_engines(self) -> List[Any]:
        with self._engines_lock:
            refs = list(self._engines.values())
        return [e for e in (r() for r in refs) if e is not None]

    def _engine_gauge(self, which: int) -> Iterable[tuple]:
        """Per engine name, the instance closest to its window (max usage ratio)."""
        from .wrapper import observed_meta

        best: Dict[str, tuple] = {}
        for engine in self.live_engines():
            try:
                meta = observed_meta(engine)
                name = self.processor.engine_label(meta.inner_name if meta else type(engine).__name__)
                prompt = _as_int(getattr(engine, "last_prompt_tokens", 0))
                prompt = prompt if prompt > 0 else 0
                threshold = _as_int(getattr(engine, "threshold_tokens", 0))
                window = _as_int(getattr(engine, "context_length", 0))
                ratio = (prompt / window) if window > 0 else 0.0
                values = (prompt, threshold, window, ratio)
                if name not in best or ratio > best[name][3]:
                    best[name] = values
            except Exception:
                self.count_error("gauge")
        return [(values[which], {"engine": name}) for name, values in best.items()]

    def _in_flight_gauge(self):
        counts: Dict[str, int] = {}
        for name, _age in self.watchdog.snapshot():
            counts[name] = counts.get(name, 0) + 1
        for name in self.processor.known_engine_names():
            counts.setdefault(name, 0)
        return [(n, {"engine": self.processor.engine_label(e)}) for e, n in counts.items()]

    def _oldest_age_gauge(self):
        ages: Dict[str, float] = {}
        for name, age in self.watchdog.snapshot():
            ages[name] = max(ages.get(name, 0.0), age)
        for name in self.processor.known_engine_names():
            ages.setdefault(name, 0.0)
        return [(a, {"engine": self.processor.engine_label(e)}) for e, a in ages.items()]

    def _deadline_gauge(self):
        return [(self.compress_timeout, {"engine": self.processor.engine_label(e)})
                for e in self.processor.known_engine_names()]

    # -- live spans (compress, engine tools) ---------------------------------------

    def start_live_span(self, name: str, engine, hook: str, tool: Optional[str] = None):
        if not self.settings.traces:
            return None, None
        try:
            from .wrapper import observed_meta

            meta = observed_meta(engine)
            attrs = {
                "hermes.context_engine.name": meta.inner_name if meta else type(engine).__name__,
                "hermes.context_engine.hook": hook,
            }
            if tool is not None:
                attrs["gen_ai.operation.name"] = "execute_tool"
                attrs["gen_ai.tool.name"] = str(tool)
            span = self.tracer.start_span(name, attributes=attrs)
            token = otel_context.attach(trace.set_span_in_context(span))
            return span, token
        except Exception:
            self.count_error("tracing")
            return None, None

    # -- the watchdog's report (watchdog thread) -------------------------------------

    def _on_deadline(self, call, age: float) -> None:
        try:
            if call.span is not None:
                call.span.add_event("hermes.context.compress.deadline_exceeded", {
                    "hermes.context.compress.deadline_seconds": self.compress_timeout,
                    "hermes.context.compress.elapsed_seconds": round(age, 3),
                })
        except Exception:
            self.count_error("tracing")
        self.recorder.push(("deadline_exceeded", call.engine, time.perf_counter_ns(), age))

    # -- control --------------------------------------------------------------------

    def flush(self, timeout: float = 5.0) -> bool:
        deadline = time.monotonic() + timeout
        ok = self.recorder.flush(timeout)
        ok = self.recorder.flush(max(0.1, deadline - time.monotonic())) and ok  # errors counted by the first pass
        if self.store is not None:
            ok = self.store.flush(max(0.1, deadline - time.monotonic())) and ok
        for provider in (self.built.tracer_provider, self.built.meter_provider):
            if provider is not None:
                ok = self._bounded_force_flush(provider, max(0.1, deadline - time.monotonic())) and ok
        return ok

    def _bounded_force_flush(self, provider, timeout: float) -> bool:
        """``provider.force_flush`` that returns within ``timeout``.

        The SDK's BatchSpanProcessor.force_flush ignores its timeout and exports every
        queued batch, each waiting the exporter's full timeout: with a black-holed OTLP
        endpoint that is queue/batch x timeout (40 s with the defaults), at every flush
        and at exit. It runs on a helper thread (one per provider at a time) instead.
        """
        with self._error_lock:
            thread = self._flush_threads.get(id(provider))
            if thread is None or not thread.is_alive():
                def run(p=provider, ms=int(timeout * 1000)):
                    try:
                        p.force_flush(ms)
                    except Exception:
                        pass
                thread = threading.Thread(target=run, name="observed-engine-flush", daemon=True)
                self._flush_threads[id(provider)] = thread
                thread.start()
        thread.join(timeout)
        return not thread.is_alive()

    def shutdown(self, timeout: float = 5.0) -> None:
        """Stop this pipeline: worker, watchdog, store writer, exporters (bounded by ``timeout``)."""
        with _LOCK:
            for key, entry in list(_PIPELINES.items()):
                if entry[0] is self:
                    del _PIPELINES[key]
        self.recorder.stop(timeout)
        self.watchdog.stop()
        if self.store is not None:
            self.store.close(timeout)
        # The SDK providers' shutdown makes a last export; with a dead or black-holed endpoint
        # that waits for the exporter's timeout and retries. Bounded here (exit must not hang).
        closer = threading.Thread(target=self.built.shutdown, name="observed-engine-shutdown", daemon=True)
        closer.start()
        closer.join(timeout)


def _as_int(value) -> int:
    try:
        return int(value)
    except Exception:
        return 0


def _resolve_compress_timeout(settings: Settings) -> float:
    if settings.compress_timeout_seconds:
        return float(settings.compress_timeout_seconds)
    hermes_config = None
    try:
        from hermes_cli.config import load_config

        hermes_config = load_config()
    except Exception:
        pass
    return settings.resolved_compress_timeout(hermes_config)


# -- the process-wide registry ----------------------------------------------------------

_LOCK = threading.Lock()
_PIPELINES: Dict[tuple, Tuple[Telemetry, Any, Any]] = {}


def get_telemetry(tracer_provider=None, meter_provider=None, settings=None) -> Telemetry:
    parsed = Settings.from_mapping(settings)
    # The resolved store path is part of the key: two Hermes homes in one process get two stores.
    key = (id(tracer_provider), id(meter_provider), parsed, str(parsed.store_path()))
    with _LOCK:
        entry = _PIPELINES.get(key)
        if entry is not None and entry[1] is tracer_provider and entry[2] is meter_provider:
            return entry[0]
        telemetry = Telemetry(parsed, tracer_provider, meter_provider)
        _PIPELINES[key] = (telemetry, tracer_provider, meter_provider)
        return telemetry


def all_telemetry() -> List[Telemetry]:
    with _LOCK:
        return [entry[0] for entry in _PIPELINES.values()]


def flush(timeout: float = 5.0) -> bool:
    """Flush every pipeline in the process (events, store rows, exporters)."""
    ok = True
    for telemetry in all_telemetry():
        ok = telemetry.flush(timeout) and ok
    return ok


def shutdown_all(timeout: float = 5.0) -> None:
    with _LOCK:
        entries = list(_PIPELINES.values())
        _PIPELINES.clear()
    for telemetry, _tp, _mp in entries:
        try:
            telemetry.shutdown(timeout)
        except Exception:
            pass


@atexit.register
def _flush_at_exit() -> None:
    """Deliver what is pending, then stop the pipelines (and the providers built from settings,
    which do not register their own atexit shutdown: see exporters.build_providers)."""
    try:
        flush(2.0)
    except Exception:
        pass
    try:
        shutdown_all(2.0)
    except Exception:
        pass

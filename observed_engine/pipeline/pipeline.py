"""One telemetry pipeline: providers, instruments, recorder + worker, watchdog, store.

A pipeline serves every engine of one process configuration (providers, the
process-wide ``observed:`` settings, the store path, the compress deadline): the
plugin's engine, its copies and clones share one. ``Registry.get()`` returns it
(``registry.py``). Nothing here runs on the hook path except ``start_live_span``
(compress and engine tools only). The generated engine classes live with their
pipeline (``generated_classes``), which capture fills in.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from typing import Any, Dict, Iterable, List, Optional, Tuple

from opentelemetry import context as otel_context
from opentelemetry import metrics as otel_metrics
from opentelemetry import trace

from ..capture.state_reads import read_state
from ..contract import spans as a
from ..contract.events import DEADLINE_EXCEEDED, ENGINE_META_ATTRIBUTE, MISSING, PUBLISH_ERRORS, STATE_FIELDS
from ..contract.identifiers import identifier
from ..contract.vocabulary import BLOCKED_REASONS, DROP_EVENT, DROP_SPAN, DROP_STORE_ROW
from ..failsafe import swallowed
from ..settings import DEFAULT_COMPRESS_TIMEOUT, Settings
from ..tokens import helper as token_helper
from ..version import __version__
from ..worker import EventProcessor
from ..worker.state import backing_value, blocked_reasons, static_class_value
from . import stores
from .exporters import build_providers
from .instruments import Instruments
from .providers import BuiltProviders
from .recorder import Recorder
from .stores import StoreClient
from .watchdog import CompressionWatchdog

logger = logging.getLogger(__name__)

INSTRUMENTATION_NAME = "observed_engine"


class Pipeline:
    def __init__(self, settings: Settings, tracer_provider=None, meter_provider=None, *,
                 store_path=None, compress_timeout: float = DEFAULT_COMPRESS_TIMEOUT, registry=None) -> None:
        self.settings = settings
        self.registry = registry
        self.given_providers = (tracer_provider, meter_provider)   # as passed (None: built or global)
        # capture's generated classes for this pipeline's engines (capture/reclass.py)
        self.generated_classes: Dict[tuple, type] = {}
        self._error_lock = threading.Lock()
        self._pending_errors: Dict[str, int] = {}
        self._pending_drops: Dict[str, int] = {}
        self._publish_pending = False
        self._flush_threads: Dict[int, threading.Thread] = {}
        self._store_stalled_at: Optional[int] = None     # rows_written when a deliver() last timed out on the store
        self.built: BuiltProviders = BuiltProviders()
        if settings.enabled and (tracer_provider is None or meter_provider is None):
            # Each signal falls back on its own: a caller's tracer provider does not switch off
            # the built-in Prometheus/OTLP metrics, nor a meter provider the OTLP spans.
            self.built = build_providers(settings, self.count_error, self.count_drop,
                                         traces=tracer_provider is None, metrics=meter_provider is None)
            if tracer_provider is None:
                tracer_provider = self.built.tracer_provider
            if meter_provider is None:
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
        self.engines_seen = 0          # engines ever registered (a pipeline that never had one is not retired)

        self.compress_timeout = float(compress_timeout)
        self.watchdog = CompressionWatchdog(self.compress_timeout, self._on_deadline, self.count_error)
        self.store_path = store_path
        self.store: Optional[StoreClient] = None
        if settings.enabled and settings.store.enabled and store_path is not None:
            self.store = self._new_store()
        self.instruments = Instruments(self.meter, {
            "prompt_tokens": lambda: self._engine_gauge(0),
            "threshold_tokens": lambda: self._engine_gauge(1),
            "window_tokens": lambda: self._engine_gauge(2),
            "usage_ratio": lambda: self._engine_gauge(3),
            "compression_in_flight": self._in_flight_gauge,
            "compression_oldest_age": self._oldest_age_gauge,
            "compression_deadline": self._deadline_gauge,
            "compression_blocked": self._blocked_gauge,
        })
        self.processor = EventProcessor(self)
        # enabled: false starts nothing: no hook is overridden, so no event ever comes
        # pipelines that write one store file share its writer (stores.py) and one worker thread
        self.recorder = Recorder(
            self.processor.process_batch, capacity=settings.queue_size, enabled=settings.enabled,
            on_drop=lambda n: self.count_drop("event", n),
            share_key=self.store.writer.path if self.store is not None else None,
        )

    def _new_store(self) -> StoreClient:
        """This pipeline attached to the process's one writer of its store file (``stores.py``)."""
        return stores.attach(
            self.store_path, retention_days=self.settings.store.retention_days,
            max_queue=self.settings.queue_size, on_error=lambda c, _e: self.count_error(c),
            on_drop=lambda n: self.count_drop("store_row", n),
        )

    def after_fork_in_child(self) -> None:
        """A forked child (gunicorn --preload, multiprocessing "fork") inherits this pipeline without
        its threads: fresh locks, an emptied queue with a worker of its own, a watchdog, a store
        writer with its own connection, and the child's pid on its rows. The SDK's batch span
        processor and periodic metric reader re-initialise themselves after a fork; the parent
        keeps serving /metrics on its port."""
        self._error_lock = threading.Lock()
        self._engines_lock = threading.Lock()
        self._pending_errors, self._pending_drops, self._publish_pending = {}, {}, False
        self._flush_threads = {}
        self._store_stalled_at = None
        self.processor.pid = os.getpid()
        self.processor.rows_submitted = 0
        self.watchdog.after_fork_in_child()
        if self.store is not None:
            self.store = self._new_store()      # the parent's SQLite connection must not be used here
        self.recorder.after_fork_in_child()

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
        publication round (the flag); with the queue full none is queued (and
        none counted as a lost event): the full queue wakes the worker anyway.
        """
        recorder = getattr(self, "recorder", None)     # None while building providers
        if recorder is not None and recorder.enabled:
            recorder.push_wake_up(PUBLISH_ERRORS)

    def take_pending_errors(self) -> Tuple[Dict[str, int], Dict[str, int]]:
        with self._error_lock:
            errors, drops = self._pending_errors, self._pending_drops
            self._pending_errors, self._pending_drops = {}, {}
            self._publish_pending = False
        return errors, drops

    # -- engines ------------------------------------------------------------------

    def register_engine(self, engine) -> None:
        key = id(engine)
        if key in self._engines:
            return
        # made outside the lock: an allocation may run the collector, whose callbacks take it
        try:
            ref = weakref.ref(engine, lambda _r, k=key: self._forget(k))
        except TypeError:       # no __weakref__ slot: keep it (rare, bounded by engines created)
            ref = (lambda e=engine: e)
        with self._engines_lock:
            if key in self._engines:
                return
            self._engines[key] = ref
            self.engines_seen += 1

    def forget_engine(self, engine) -> None:
        """``unobserve()``: stop following this engine (its gauges, the worker's memory of it)."""
        self._forget(id(engine))

    def _forget(self, key: int) -> None:
        with self._engines_lock:
            self._engines.pop(key, None)
            last = not self._engines
        self.processor.forget(key)
        if last and self.registry is not None:
            with swallowed("pipeline", self.count_error):
                self.registry.engine_gone(self)

    def live_engines(self) -> List[Any]:
        with self._engines_lock:
            refs = list(self._engines.values())
        return [e for e in (r() for r in refs) if e is not None]

    def _engine_gauge(self, which: int) -> Iterable[tuple]:
        """Per engine name, the instance closest to its window (max usage ratio). Runs on the
        exporter's thread (a scrape): no engine code."""
        best: Dict[str, tuple] = {}
        for engine in self.live_engines():
            try:
                meta = getattr(type(engine), ENGINE_META_ATTRIBUTE, None)
                name = self.processor.engine_label(meta.inner_name if meta else type(engine).__name__)
                # Read as the hook path does (instance dict, then plain class attributes): a
                # property or __getattr__ is engine code, which may block on the lock its
                # compress() holds, exactly when the stuck-compression series are needed.
                state = static_state(engine)
                if not all(value is MISSING or type(value) in (int, float) for value in state):
                    continue      # a property or an odd value: not readable without running engine code
                prompt, threshold, window = (_as_int(value) for value in state)
                prompt = prompt if prompt > 0 else 0
                ratio = (prompt / window) if window > 0 else 0.0
                values = (prompt, threshold, window, ratio)
                if name not in best or ratio > best[name][3]:
                    best[name] = values
            except Exception:
                self.count_error("gauge")
        return [(values[which], {"engine": name}) for name, values in best.items()]

    def _blocked_gauge(self):
        """Per engine name and BLOCKED_REASONS: 1 while any live instance is blocked for that reason
        (worker.state.blocked_reasons: the engine's instance dict, no engine code), else 0."""
        now = time.monotonic()
        blocked: Dict[str, set] = {name: set() for name in self.processor.known_engine_names()}
        for engine in self.live_engines():
            try:
                meta = getattr(type(engine), ENGINE_META_ATTRIBUTE, None)
                name = meta.inner_name if meta else type(engine).__name__
                blocked.setdefault(name, set()).update(blocked_reasons(engine, now)[0])
            except Exception:
                self.count_error("gauge")
        out: Dict[tuple, int] = {}
        for name, reasons in blocked.items():
            label = self.processor.engine_label(name)
            for reason in BLOCKED_REASONS:
                key = (label, reason)
                out[key] = max(out.get(key, 0), 1 if reason in reasons else 0)
        return [(n, {"engine": label, "reason": reason}) for (label, reason), n in out.items()]

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

    def start_live_span(self, name: Optional[str], engine_name: str, hook: str, tool: Any = None):
        """Open a span on the hook path (compress; engine tools with ``name`` None and ``tool``)
        and make it current, so the engine's own spans nest under it. (span, token) or (None, None)."""
        if not self.settings.traces:
            return None, None
        try:
            attrs = {a.ENGINE_NAME: engine_name, a.HOOK: hook}
            if name is None:
                tool = identifier(tool)      # the host's argument: its __str__ may raise
                name = a.tool_span_name(tool)
                attrs[a.OPERATION_NAME] = a.OPERATION_EXECUTE_TOOL
                attrs[a.TOOL_NAME] = tool
            span = self.tracer.start_span(name, attributes=attrs)
            token = otel_context.attach(trace.set_span_in_context(span))
            return span, token
        except Exception:
            self.count_error("tracing")
            return None, None

    # -- the watchdog's report (watchdog thread) -------------------------------------

    def _on_deadline(self, call, age: float) -> None:
        with swallowed("tracing", self.count_error):
            if call.span is not None:
                call.span.add_event(a.DEADLINE_EVENT, {
                    a.DEADLINE_SECONDS: self.compress_timeout,
                    a.ELAPSED_SECONDS: round(age, 3),
                })
        self.recorder.push((DEADLINE_EXCEEDED, call.engine, time.perf_counter_ns(), age))

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

    def deliver(self, budget: float = 1.0) -> bool:
        """What is queued now, delivered within ``budget`` seconds in all (events -> spans,
        metrics, store rows -> the file, the built exporters' queues -> their endpoints).

        Called on the host's thread at natural boundaries (HookSpec.delivers: on_session_end),
        because the host may end the process right after them: ``hermes -z`` ends with
        ``os._exit()``, which runs no atexit handler. False when the budget ran out."""
        deadline = time.monotonic() + budget

        def left() -> float:
            return max(0.0, deadline - time.monotonic())

        # The worker gives up waiting for the token-counting helper half-way through the budget (that
        # call's counts are then estimated and labelled so), leaving the rest for the store and exporters:
        # on a busy machine the helper, at the lowest CPU priority, may get no CPU for seconds.
        with token_helper.hurry(time.monotonic() + budget / 2):
            ok = self.recorder.flush(left())
        # What is known not to be deliverable now is not waited for: a store whose last batch failed
        # (locked, read-only, full: the rows are held and retried by the writer), one that did not
        # finish within an earlier budget and has written nothing since, an exporter whose last export
        # failed or whose earlier flush is still under way (a black-holed endpoint). Otherwise every
        # on_session_end would wait its whole budget while the fault lasts.
        store = self.store
        if store is not None:
            if store.failing or self._store_stalled_at == store.rows_written:
                ok = False
            elif store.flush(left()):
                self._store_stalled_at = None
            else:
                self._store_stalled_at = store.rows_written
                ok = False
        for provider, failing in ((self.built.tracer_provider, self.built.traces_failing()),
                                  (self.built.meter_provider, self.built.metrics_failing())):
            if provider is None:
                continue
            if failing:
                ok = False
                continue
            ok = self._bounded_force_flush(provider, left(), join_running=False) and ok
        return ok

    def undelivered(self) -> Dict[str, int]:
        """What is still queued, per signal (vocabulary.DROP_SIGNALS): events, store rows, spans."""
        events = sum(1 for item in list(self.recorder.queue) if type(item) is tuple and item
                     and type(item[0]) is int)
        rows = 0
        if self.store is not None:     # handed to the writer, neither written nor already counted as dropped
            rows = self.store.undelivered()
        spans = 0
        for processor in self.built.span_processors:
            spans += len(getattr(processor, "_bsp_queue", None) or ())
        return {DROP_EVENT: events, DROP_STORE_ROW: rows, DROP_SPAN: spans}

    def _bounded_force_flush(self, provider, timeout: float, join_running: bool = True) -> bool:
        """``provider.force_flush`` that returns within ``timeout``.

        The SDK's BatchSpanProcessor.force_flush ignores its timeout and exports every
        queued batch, each waiting the exporter's full timeout: with a black-holed OTLP
        endpoint that is queue/batch x timeout (40 s with the defaults), at every flush
        and at exit. It runs on a helper thread (one per provider at a time) instead.
        With ``join_running`` False a flush still under way from an earlier call is not waited
        for again (False at once).
        """
        with self._error_lock:
            thread = self._flush_threads.get(id(provider))
            if thread is not None and thread.is_alive() and not join_running:
                return False
            if thread is None or not thread.is_alive():
                def run(p=provider, ms=int(timeout * 1000)):
                    with swallowed("flush", self.count_error):
                        p.force_flush(ms)
                thread = threading.Thread(target=run, name="observed-engine-flush", daemon=True)
                self._flush_threads[id(provider)] = thread
                thread.start()
        thread.join(timeout)
        return not thread.is_alive()

    def shutdown(self, timeout: float = 5.0) -> None:
        """Stop this pipeline: worker, watchdog, store writer, exporters, all within ``timeout``."""
        deadline = time.monotonic() + timeout

        def left() -> float:
            return max(0.05, deadline - time.monotonic())

        if self.registry is not None:
            self.registry.remove(self)
        self.recorder.stop(left())
        self.watchdog.stop(min(1.0, left()))
        if self.store is not None:
            self.store.close(left())
        # The SDK providers' shutdown makes a last export; with a dead or black-holed endpoint
        # that waits for the exporter's timeout and retries. Bounded here (exit must not hang).
        lost = self.undelivered()      # before the providers' shutdown drops their queues
        closer = threading.Thread(target=self.built.shutdown, name="observed-engine-shutdown", daemon=True)
        closer.start()
        closer.join(left())
        if closer.is_alive():
            # the budget is spent: an exporter still retrying would go on (and log) for its own
            # timeout after this returns; it stops now, and what it held is lost and said below
            self.built.abandon_exports()
        if any(lost.values()):
            # Whatever did not make it out is said, once: the process is ending, so the log is the
            # only place left (the counters are updated too, for a pipeline shut down early).
            for signal, n in lost.items():
                if n:
                    self.count_drop(signal, n)
            logger.warning(
                "observed-engine: stopped with telemetry not delivered within the %.1f s budget: %d events, "
                "%d store rows, %d spans lost (queued when the pipeline stopped)",
                timeout, lost[DROP_EVENT], lost[DROP_STORE_ROW], lost[DROP_SPAN])


def static_state(engine) -> tuple:
    """The STATE_FIELDS of ``engine`` without running engine code (MISSING ones from plain
    class attributes; a property, or nothing at all, reads as the descriptor / MISSING)."""
    raw = read_state(engine)
    return tuple(_class_or_backing(engine, name) if value is MISSING else value
                 for name, value in zip(STATE_FIELDS, raw))


def _class_or_backing(engine, name: str):
    """A plain class attribute, or the instance field behind a property (Hermes 0.20+'s built-in);
    a property with no known backing field stays the descriptor (unreadable: the engine is left
    out of the gauges, not shown as 0)."""
    value = static_class_value(type(engine), name)
    if isinstance(value, property):
        backing = backing_value(engine, name)
        return value if backing is MISSING else backing
    return value


def _as_int(value) -> int:
    if type(value) is not int and type(value) is not float:
        return 0
    try:
        return int(value)
    except Exception:  # inf or NaN (OverflowError/ValueError): 0, as for a value that is not a number
        return 0

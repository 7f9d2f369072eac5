"""``observe()``: make an engine observable without changing what it does.

The host reads and writes engine attributes directly, looks some of them up
on ``type(engine)``, calls ``vars(engine)``, checks ``isinstance`` and compares
returned lists by identity (shared/design/hermes-host-contract.md). A proxy
object cannot honour all of that, so ``observe()`` re-classes the inner
instance to a generated subclass of its own class. The subclass overrides only
the traced hooks; each override calls the original method and records a
compact event. Everything else -- state, class-level guards, signatures,
identity of results, exceptions -- is the inner engine's own.

The hook path takes two timestamps and appends one tuple to a bounded deque.
Spans, metrics, token counts and store rows are built by a background worker
(``recorder.py``). Only ``compress()`` and engine tool calls open a live span on
the hook path, so work the inner engine does inside them nests under it.
"""

from __future__ import annotations

import functools
import inspect
import logging
import threading
import types
from time import perf_counter_ns
from typing import Any, Callable, Dict, Optional

from opentelemetry import context as otel_context

from . import hooks as hookspec
from .messages import snapshot_messages
from .hooks import BY_NAME, CLONE, COMPRESS, HOOK_INDEX, SELECT, TOOL

logger = logging.getLogger("observed_engine")

MARKER = "__observed_engine__"
_get_current_context = otel_context.get_current


class _EngineMeta:
    """Per generated class: the telemetry pipeline and the inner's identity."""

    __slots__ = ("telemetry", "inner_name", "inner_class", "exposed_name", "hooks")

    def __init__(self, telemetry, inner_name, inner_class, exposed_name, hooks):
        self.telemetry = telemetry
        self.inner_name = inner_name
        self.inner_class = inner_class
        self.exposed_name = exposed_name
        self.hooks = hooks


def is_observed(engine: Any) -> bool:
    return getattr(type(engine), MARKER, None) is not None


def observed_meta(engine: Any) -> Optional[_EngineMeta]:
    return getattr(type(engine), MARKER, None)


def observe(inner: Any, tracer_provider=None, meter_provider=None, settings=None):
    """Return ``inner`` made observable (the same object, re-classed).

    Calling it again on an observed engine returns the engine unchanged. If the
    engine's class cannot be extended (a builtin or a class whose layout forbids
    ``__class__`` assignment), the engine is returned unobserved and a warning
    is logged: observation is never worth breaking the engine for.
    """
    if is_observed(inner):
        return inner
    from .telemetry import get_telemetry

    telemetry = get_telemetry(tracer_provider=tracer_provider, meter_provider=meter_provider, settings=settings)
    return instrument_engine(inner, telemetry)


def instrument_engine(inner: Any, telemetry) -> Any:
    if is_observed(inner):
        return inner
    inner_cls = type(inner)
    try:
        inner_name = _engine_name(inner)
        # With telemetry disabled nothing is overridden: the hooks cost exactly what the bare ones do.
        available = tuple(
            spec.name
            for spec in hookspec.HOOK_SPECS
            if telemetry.settings.enabled and _has_hook(inner, spec)
        )
        signatures = {name: _signature_of(inner, name) for name in available}
        exposed = telemetry.settings.name
        cls = _generated_class(inner_cls, telemetry, inner_name, exposed, available, signatures)
        object.__setattr__(inner, "__class__", cls)
    except Exception as exc:
        logger.warning(
            "observed-engine: cannot observe %s.%s (%s: %s); using it unobserved",
            inner_cls.__module__, inner_cls.__qualname__, type(exc).__name__, exc,
        )
        telemetry.count_error("wrapper")
        return inner
    telemetry.register_engine(inner)
    return inner


# -- class generation ------------------------------------------------------------

_CLASS_CACHE: Dict[tuple, type] = {}


def _generated_class(inner_cls, telemetry, inner_name, exposed, available, signatures):
    sig_key = tuple((n, str(signatures.get(n))) for n in available)
    key = (inner_cls, id(telemetry), inner_name, exposed, sig_key)
    cached = _CLASS_CACHE.get(key)
    if cached is not None and getattr(cached, MARKER).telemetry is telemetry:
        return cached

    meta = _EngineMeta(telemetry, inner_name, inner_cls, exposed, available)
    namespace: Dict[str, Any] = {
        "__slots__": (),
        "__module__": inner_cls.__module__,
        "__qualname__": inner_cls.__qualname__,
        "__doc__": inner_cls.__doc__,
        MARKER: meta,
    }
    # The class is needed by the hook closures (super()), so fill them in after creation.
    metaclass = type(inner_cls)
    cls = metaclass(inner_cls.__name__, (inner_cls,), namespace)

    for name in available:
        original = _original_caller(cls, inner_cls, name)
        fn = _make_hook(cls, BY_NAME[name], original, telemetry, meta)
        _copy_identity(fn, inner_cls, name, signatures.get(name))
        setattr(cls, name, fn)

    if exposed is not None:
        setattr(cls, "name", property(lambda self, _n=exposed: _n, doc="Engine name the host selects by."))

    try:
        from agent.context_engine import ContextEngine

        if not issubclass(cls, ContextEngine):
            # Duck-typed engine: a virtual subclass passes the plugin manager's isinstance
            # check without mixing the ABC's class attributes into the lookup chain.
            ContextEngine.register(cls)
    except Exception:
        pass
    _CLASS_CACHE[key] = cls
    return cls


def _engine_name(inner) -> str:
    try:
        name = inner.name
        if isinstance(name, str) and name:
            return name
    except Exception:
        pass
    return type(inner).__name__


def _has_hook(inner, spec) -> bool:
    if spec.only_if_overridden:
        return hookspec.overrides_abc_default(inner, spec.name)
    try:
        return callable(getattr(inner, spec.name, None))
    except Exception:
        return False


def _signature_of(inner, name) -> Optional[inspect.Signature]:
    """The signature the host sees on the bare engine, with ``self`` put back in front."""
    try:
        sig = inspect.signature(getattr(inner, name))
    except (TypeError, ValueError):
        return None
    params = list(sig.parameters.values())
    self_param = inspect.Parameter("self", inspect.Parameter.POSITIONAL_ONLY)
    try:
        return sig.replace(parameters=[self_param] + params)
    except ValueError:
        return None


def _original_caller(cls, inner_cls, name) -> Callable:
    """A function ``(self, *args, **kwargs)`` calling the method the bare engine would call."""
    try:
        raw = inspect.getattr_static(inner_cls, name)
    except AttributeError:
        raw = None
    if isinstance(raw, types.FunctionType):
        return raw  # the common case: a plain method, called directly
    if raw is not None:
        def via_super(self, *args, __name=name, **kwargs):
            return getattr(super(cls, self), __name)(*args, **kwargs)
        return via_super
    # Provided by the class's __getattr__ (a forwarding wrapper engine).
    getattr_hook = getattr(inner_cls, "__getattr__")

    def via_getattr(self, *args, __name=name, **kwargs):
        return getattr_hook(self, __name)(*args, **kwargs)
    return via_getattr


def _copy_identity(fn, inner_cls, name, signature) -> None:
    try:
        original = inspect.getattr_static(inner_cls, name)
    except AttributeError:
        original = None
    if isinstance(original, types.FunctionType):
        functools.update_wrapper(fn, original)
    else:
        fn.__name__ = name
        fn.__qualname__ = f"{inner_cls.__qualname__}.{name}"
    if signature is not None:
        fn.__signature__ = signature
    fn.__observed_hook__ = name


# -- the hook path ----------------------------------------------------------------

# Per thread: the engine whose traced hook is running. A hook the engine calls on
# itself from inside another (ContextCompressor.on_session_start calls
# self.bind_session_state) is the engine's own business, not a host call: it runs
# untraced, so spans and hook_calls count what the host did.
class _Inside(threading.local):
    engine = None      # class default: plain attribute reads, no AttributeError path per thread


_inside = _Inside()

def _make_hook(cls, spec, original, telemetry, meta):
    idx = HOOK_INDEX[spec.name]
    if spec.kind == COMPRESS:
        return _make_compress_hook(idx, original, telemetry, meta)
    if spec.kind == TOOL:
        return _make_tool_hook(idx, original, telemetry, meta)
    if spec.kind == CLONE:
        return _make_clone_hook(idx, original, telemetry, meta)
    recorder = telemetry.recorder
    queue = recorder.queue
    append = queue.append
    cap = recorder.capacity
    dropped = recorder.note_dropped
    settings = telemetry.settings
    wants_context = settings.traces
    reads_state = spec.name in ("update_from_response", "update_model", "on_session_reset")
    copies_result = spec.kind == SELECT

    if reads_state:
        def after(self, result):
            return _read_state(self)
    elif copies_result:
        def after(self, result):
            return tuple(result) if type(result) is list else None
    else:
        after = None
    # With telemetry disabled no hook is generated at all (instrument_engine), so no hook checks it.

    def hook(self, *args, **kwargs):
        outer = _inside.engine
        if outer is self:   # the engine calling its own hook: not a host call, not traced
            return original(self, *args, **kwargs)
        ctx = _get_current_context() if wants_context else None
        _inside.engine = self
        t0 = perf_counter_ns()
        try:
            result = original(self, *args, **kwargs)
        except BaseException as exc:
            t1 = perf_counter_ns()
            _inside.engine = outer
            if len(queue) < cap:
                append((idx, self, t0, t1, exc, args, kwargs, None, ctx, None))
            else:
                dropped()
            raise
        t1 = perf_counter_ns()
        _inside.engine = outer
        if len(queue) < cap:
            append((idx, self, t0, t1, None, args, kwargs, result, ctx,
                    None if after is None else after(self, result)))
        else:
            dropped()
        return result

    return hook


_STATE_FIELDS = ("last_prompt_tokens", "threshold_tokens", "context_length")


def _read_state(engine):
    """The three numbers the usage chart needs, read right after the hook.

    Read without running any of the engine's code: the instance ``__dict__``, else a
    plain class attribute. A property or a forwarding ``__getattr__`` is not called
    (it may have side effects, and the host did not ask for it); the row then simply
    lacks the numbers.
    """
    try:
        state = object.__getattribute__(engine, "__dict__")
    except AttributeError:
        state = {}
    try:
        values = []
        for name in _STATE_FIELDS:
            value = state.get(name, _MISSING)
            if value is _MISSING:
                value = _static_class_value(type(engine), name)
            if type(value) is not int and type(value) is not float:
                return None
            values.append(value)
        return tuple(values)
    except Exception:
        return None


_MISSING = object()


def _static_class_value(cls, name):
    for klass in cls.__mro__:
        value = klass.__dict__.get(name, _MISSING)
        if value is not _MISSING:
            return value
    return _MISSING


_snapshot_messages = snapshot_messages   # (local name on the hook path)


def _make_compress_hook(idx, original, telemetry, meta):
    recorder = telemetry.recorder
    watchdog = telemetry.watchdog

    def compress(self, *args, **kwargs):
        outer = _inside.engine
        if outer is self:   # the engine calling its own hook: not a host call, not traced
            return original(self, *args, **kwargs)
        messages = args[0] if args else kwargs.get("messages")
        before = _snapshot_messages(messages)
        span, token = telemetry.start_live_span("context_engine.compress", self, "compress")
        watch = watchdog.start(self, meta.inner_name, span)
        _inside.engine = self
        t0 = perf_counter_ns()
        try:
            result = original(self, *args, **kwargs)
        except BaseException as exc:
            t1 = perf_counter_ns()
            _inside.engine = outer
            late = watchdog.finish(watch)
            _detach(token)
            recorder.push((idx, self, t0, t1, exc, args, kwargs, None, span, (before, None, late, None)))
            raise
        t1 = perf_counter_ns()
        _inside.engine = outer
        late = watchdog.finish(watch)
        _detach(token)
        recorder.push((idx, self, t0, t1, None, args, kwargs, result, span,
                       (before, _snapshot_messages(result), late, _read_state(self))))
        return result

    return compress


def _make_tool_hook(idx, original, telemetry, meta):
    recorder = telemetry.recorder

    def handle_tool_call(self, *args, **kwargs):
        outer = _inside.engine
        if outer is self:   # the engine calling its own hook: not a host call, not traced
            return original(self, *args, **kwargs)
        tool_name = args[0] if args else kwargs.get("name")
        span, token = telemetry.start_live_span(f"execute_tool {tool_name}", self, "handle_tool_call", tool=tool_name)
        _inside.engine = self
        t0 = perf_counter_ns()
        try:
            result = original(self, *args, **kwargs)
        except BaseException as exc:
            t1 = perf_counter_ns()
            _inside.engine = outer
            _detach(token)
            recorder.push((idx, self, t0, t1, exc, args, kwargs, None, span, None))
            raise
        t1 = perf_counter_ns()
        _inside.engine = outer
        _detach(token)
        recorder.push((idx, self, t0, t1, None, args, kwargs, result, span, None))
        return result

    return handle_tool_call


def _make_clone_hook(idx, original, telemetry, meta):
    recorder = telemetry.recorder

    wants_context = telemetry.settings.traces

    def clone_for_agent(self, *args, **kwargs):
        # the span's parent: whatever is current in the host (agent construction)
        ctx = _get_current_context() if wants_context else None
        t0 = perf_counter_ns()
        try:
            result = original(self, *args, **kwargs)
        except BaseException as exc:
            recorder.push((idx, self, t0, perf_counter_ns(), exc, args, kwargs, None, ctx, None))
            raise
        if result is not None and result is not self and not is_observed(result):
            instrument_engine(result, telemetry)
        recorder.push((idx, self, t0, perf_counter_ns(), None, args, kwargs, None, ctx, None))
        return result

    return clone_for_agent


def _detach(token) -> None:
    if token is not None:
        try:
            otel_context.detach(token)
        except Exception:
            pass


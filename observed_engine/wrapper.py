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
import itertools
import linecache
import logging
import operator
import threading
import types
from time import perf_counter_ns
from typing import Any, Callable, Dict, Optional

from opentelemetry import context as otel_context

from . import engine_state
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
        cls = _generated_class(inner_cls, telemetry, inner_name, exposed, available, signatures,
                               engine_state.held_by_instance(inner))
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


def _generated_class(inner_cls, telemetry, inner_name, exposed, available, signatures, state_in_instance):
    sig_key = tuple((n, str(signatures.get(n))) for n in available)
    key = (inner_cls, id(telemetry), inner_name, exposed, sig_key, state_in_instance)
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
        fn = _make_hook(cls, BY_NAME[name], original, telemetry, meta, state_in_instance)
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
#
# Per thread: the engine whose traced hook is running. A hook the engine calls on
# itself from inside another (ContextCompressor.on_session_start calls
# self.bind_session_state) is the engine's own business, not a host call: it runs
# untraced, so spans and hook_calls count what the host did.
#
# Leaf hooks (hooks.HookSpec.leaf: the per-request ones that call no other hook) only
# check the guard, and only while some guarded hook is running in any thread
# (``_guarded_running`` non-empty), so on the request path the check is one global read.
class _Inside(threading.local):
    engine = None      # class default: plain attribute reads, no AttributeError path per thread


_inside = _Inside()
_guarded_running: list = []   # one entry per guarded hook running now, in any thread


def _context_getter() -> Callable[[], Any]:
    """``opentelemetry.context.get_current``, or the same ContextVar's ``get`` without the two
    Python calls around it when the default runtime context is in use (checked, not assumed)."""
    try:
        from contextvars import ContextVar

        from opentelemetry.context.contextvars_context import ContextVarsRuntimeContext

        runtime = otel_context._RUNTIME_CONTEXT
        if type(runtime) is ContextVarsRuntimeContext and type(runtime._current_context) is ContextVar:
            return runtime._current_context.get
    except Exception:
        pass
    return otel_context.get_current


_get_current_context = _context_getter()


def _make_hook(cls, spec, original, telemetry, meta, state_in_instance=False):
    idx = HOOK_INDEX[spec.name]
    if spec.kind == COMPRESS:
        return _make_compress_hook(idx, original, telemetry, meta)
    if spec.kind == TOOL:
        return _make_tool_hook(idx, original, telemetry, meta)
    if spec.kind == CLONE:
        return _make_clone_hook(idx, original, telemetry, meta)
    if spec.leaf:
        hook = _make_exact_leaf_hook(spec, idx, original, telemetry, cls, state_in_instance)
        if hook is not None:
            return hook
    return _make_plain_hook(spec, idx, original, telemetry)


def _reads_state(spec) -> bool:
    return spec.name in ("update_from_response", "update_model", "on_session_reset")


def _make_plain_hook(spec, idx, original, telemetry):
    """Any plain hook, with the inner's arguments passed through as ``*args, **kwargs``."""
    recorder = telemetry.recorder
    queue = recorder.queue
    append = queue.append
    cap = recorder.capacity
    dropped = recorder.note_dropped
    wants_context = telemetry.settings.traces
    get_context = _get_current_context
    running = _guarded_running
    read_state = engine_state.read_raw

    if _reads_state(spec):
        def after(self, result):
            return read_state(self)
    elif spec.kind == SELECT:
        def after(self, result):   # the selected items, before the engine can edit its list
            return tuple(result) if type(result) is list else None
    else:
        after = None

    if spec.leaf:   # variadic or otherwise not generated exactly: checks the guard, never sets it
        def record(self, t0, t1, exc, args, kwargs, result, ctx):
            if len(queue) < cap:
                append((idx, self, t0, t1, exc, args, kwargs, result, ctx,
                        None if after is None or exc is not None else after(self, result)))
            else:
                dropped()

        def hook(self, *args, **kwargs):
            if running and _inside.engine is self:   # the engine calling its own hook: untraced
                return original(self, *args, **kwargs)
            ctx = get_context() if wants_context else None
            t0 = perf_counter_ns()
            try:
                result = original(self, *args, **kwargs)
            except BaseException as exc:
                record(self, t0, perf_counter_ns(), exc, args, kwargs, None, ctx)
                raise
            record(self, t0, perf_counter_ns(), None, args, kwargs, result, ctx)
            return result
        return hook

    def start(self, args, kwargs):   # the span's parent, captured now; no live span, no token
        return (get_context() if wants_context else None), None, None

    def finish(self, started, result, exc):
        return None if after is None or exc is not None else after(self, result)

    return _make_guarded_hook(idx, original, telemetry, start, finish)


# The leaf hooks run on every provider request. Forwarding ``*args, **kwargs`` costs
# about 0.4 µs here, more than the rest of the hook path, so when the inner's method is
# a plain function with named parameters the hook is generated with exactly its
# parameters (same names, kinds and default objects) and calls it with them. The event
# then carries the positional values in order and the keyword-only ones by name.
_EXACT_LEAF_SOURCE = '''\
def {name}({params}):
    if _oe_running and _oe_inside.engine is {self}:
        return _oe_original({call})
    _oe_ctx = {get_context}
    _oe_t0 = _oe_clock()
    try:
        _oe_result = _oe_original({call})
    except _oe_any_exception as _oe_exc:
        _oe_t1 = _oe_clock()
        if _oe_len(_oe_queue) < _oe_cap:
            _oe_append(({idx}, {self}, _oe_t0, _oe_t1, _oe_exc, {positional}, {keywords}, None, _oe_ctx, None))
        else:
            _oe_dropped()
        raise
    _oe_t1 = _oe_clock()
    if _oe_len(_oe_queue) < _oe_cap:{read_state}
        _oe_append(({idx}, {self}, _oe_t0, _oe_t1, None, {positional}, {keywords}, _oe_result, _oe_ctx, {state}))
    else:
        _oe_dropped()
    return _oe_result
'''

# engine_state.read_raw, inlined (a call would cost a third of what it reads). When the
# engine the class was generated for holds all three numbers in its instance dict (the
# built-in does), one itemgetter call reads them; an instance that lacks one falls back.
# ``self.__dict__`` is read directly only when no class in the MRO overrides
# __getattribute__ (that would be engine code the host did not call).
_INLINE_READ_STATE = """
        try:
            _oe_state = {read}
        except _oe_exception:
            _oe_state = _oe_read_state({self})"""
_READ_BY_ITEMGETTER = "_oe_get_state({dict})"
_READ_BY_GETS = ('(_oe_d := {dict}).get("last_prompt_tokens", _oe_missing), '
                 '_oe_d.get("threshold_tokens", _oe_missing), _oe_d.get("context_length", _oe_missing)')

_NO_KEYWORDS = types.MappingProxyType({})


def _make_exact_leaf_hook(spec, idx, original, telemetry, cls, state_in_instance):
    if not isinstance(original, types.FunctionType) or "__signature__" in vars(original):
        return None   # a declared __signature__ may not be what Python binds: keep the generic form
    try:
        sig = inspect.signature(original, follow_wrapped=False)
    except (TypeError, ValueError):
        return None
    params = list(sig.parameters.values())
    P = inspect.Parameter
    if not params or params[0].kind not in (P.POSITIONAL_ONLY, P.POSITIONAL_OR_KEYWORD):
        return None
    if any(p.kind in (P.VAR_POSITIONAL, P.VAR_KEYWORD) or p.name.startswith("_oe_")
           or not p.name.isidentifier() for p in params):
        return None

    namespace: Dict[str, Any] = {}
    rendered, call, positional, keywords = [], [], [], []
    seen_keyword_only = False
    for i, p in enumerate(params):
        if p.kind is P.KEYWORD_ONLY and not seen_keyword_only:
            rendered.append("*")
            seen_keyword_only = True
        text = p.name
        if p.default is not P.empty:
            namespace[f"_oe_default_{i}"] = p.default
            text += f"=_oe_default_{i}"
        rendered.append(text)
        if i + 1 < len(params) and p.kind is P.POSITIONAL_ONLY and params[i + 1].kind is not P.POSITIONAL_ONLY:
            rendered.append("/")
        if p.kind is P.KEYWORD_ONLY:
            call.append(f"{p.name}={p.name}")
            if i:
                keywords.append(f"{p.name!r}: {p.name}")
        else:
            call.append(p.name)
            if i:
                positional.append(p.name)
    if len(params) == 1 and params[0].kind is P.POSITIONAL_ONLY:
        rendered.append("/")
    self_name = params[0].name
    recorder = telemetry.recorder
    namespace.update(
        _oe_running=_guarded_running, _oe_inside=_inside, _oe_original=original, _oe_clock=perf_counter_ns,
        _oe_queue=recorder.queue, _oe_append=recorder.queue.append, _oe_cap=recorder.capacity,
        _oe_dropped=recorder.note_dropped, _oe_get_context=_get_current_context, _oe_no_keywords=_NO_KEYWORDS,
        _oe_dict_of=object.__getattribute__, _oe_missing=engine_state.MISSING,
        _oe_read_state=engine_state.read_raw, _oe_get_state=operator.itemgetter(*engine_state.STATE_FIELDS),
        # builtins under reserved names: a parameter may be called `len` or `Exception`
        _oe_len=len, _oe_any_exception=BaseException, _oe_exception=Exception,
    )
    source = _EXACT_LEAF_SOURCE.format(
        name=spec.name, params=", ".join(rendered), self=self_name, call=", ".join(call), idx=idx,
        get_context="_oe_get_context()" if telemetry.settings.traces else "None",
        positional="(" + "".join(f"{n}, " for n in positional) + ")",
        keywords="{" + ", ".join(keywords) + "}" if keywords else "_oe_no_keywords",
        read_state=_inline_read_state(cls, self_name, state_in_instance) if _reads_state(spec) else "",
        state="_oe_state" if _reads_state(spec) else "None",
    )
    filename = f"<observed-engine {cls.__qualname__}.{spec.name} #{next(_generated_count)}>"
    try:
        code = compile(source, filename, "exec")
        exec(code, namespace)
    except SyntaxError:
        return None
    # so tracebacks through the hook show its lines (linecache keeps entries without an mtime)
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    return namespace[spec.name]


_generated_count = itertools.count(1)


def _inline_read_state(cls, self_name, state_in_instance) -> str:
    if cls.__getattribute__ is object.__getattribute__:
        instance_dict = f"{self_name}.__dict__"
    else:
        instance_dict = f'_oe_dict_of({self_name}, "__dict__")'
    read = (_READ_BY_ITEMGETTER if state_in_instance else _READ_BY_GETS).format(dict=instance_dict)
    return _INLINE_READ_STATE.format(read=read, self=self_name)


def _make_compress_hook(idx, original, telemetry, meta):
    watchdog = telemetry.watchdog

    def start(self, args, kwargs):
        messages = args[0] if args else kwargs.get("messages")
        before = _snapshot_messages(messages)
        span, token = telemetry.start_live_span("context_engine.compress", self, "compress")
        return span, token, (before, watchdog.start(self, meta.inner_name, span))

    def finish(self, started, result, exc):
        before, watch = started
        late = watchdog.finish(watch)
        if exc is not None:
            return before, None, late, None, None
        return (before, _snapshot_messages(result), late, engine_state.read_raw(self),
                engine_state.read_summary_raw(self))

    return _make_guarded_hook(idx, original, telemetry, start, finish)


def _make_tool_hook(idx, original, telemetry, meta):
    def start(self, args, kwargs):
        tool_name = args[0] if args else kwargs.get("name")
        span, token = telemetry.start_live_span(f"execute_tool {tool_name}", self, "handle_tool_call",
                                                tool=tool_name)
        return span, token, None

    def finish(self, started, result, exc):
        return None

    return _make_guarded_hook(idx, original, telemetry, start, finish)


def _make_guarded_hook(idx, original, telemetry, start, finish):
    """Every hook but the leaf ones: sets the self-call guard while the inner's method runs.

    ``start(self, args, kwargs) -> (span or parent context, context token or None, started)``
    runs before the inner's method: compress() and tool calls open a live span there (the
    engine's own spans nest under it), the others only capture the parent context.
    ``finish(self, started, result, exc) -> extra`` runs right after it, before a live
    span's context is detached. Spans are finished by the worker.
    """
    recorder = telemetry.recorder
    running = _guarded_running

    def hook(self, *args, **kwargs):
        outer = _inside.engine
        if outer is self:   # the engine calling its own hook: not a host call, not traced
            return original(self, *args, **kwargs)
        span, token, started = start(self, args, kwargs)
        _inside.engine = self
        running.append(None)
        result = exc = None
        t0 = perf_counter_ns()
        try:
            result = original(self, *args, **kwargs)
            return result
        except BaseException as raised:   # re-raised unchanged; recorded below
            exc = raised
            raise
        finally:
            t1 = perf_counter_ns()
            _inside.engine = outer
            running.pop()
            extra = finish(self, started, result, exc)
            _detach(token)
            recorder.push((idx, self, t0, t1, exc, args, kwargs, result, span, extra))

    return hook


_snapshot_messages = snapshot_messages   # (local name on the hook path)


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


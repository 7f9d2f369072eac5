"""The hook forms: what runs on the host's thread when it calls an observed hook.

The hook path takes two timestamps and appends one tuple (in the field order of
``contract.events.HookEvent``) to the pipeline's bounded deque. Spans, metrics, token
counts and store rows are built later by the worker (``observed_engine.worker``). Only
``compress()`` and engine tool calls open a live span here, so work the inner engine
does inside them nests under it.

Forms, chosen per hook from ``contract.hooks.HOOK_SPECS``:

* exact leaf hooks (``HookSpec.leaf``): generated from source with exactly the inner
  method's parameters, so no ``*args, **kwargs`` forwarding is paid;
* plain hooks with ``*args, **kwargs`` (leaf hooks whose inner method is variadic,
  decorated or not a plain function);
* guarded hooks (every other one): set the self-call guard while the inner runs;
  compress adds a live span, message snapshots and the deadline watchdog, engine tools
  a live span, clone_for_agent observes the clone.
"""

from __future__ import annotations

import inspect
import itertools
import linecache
import operator
import threading
import types
from time import perf_counter_ns
from typing import Any, Callable, Dict

from opentelemetry import context as otel_context

from ..contract.events import MISSING, STATE_FIELDS, CompressCapture, snapshot_messages
from ..contract.hooks import CLONE, COMPRESS, DELIVERY_BUDGET_SECONDS, HOOK_INDEX, SELECT, TOOL
from ..contract.spans import hook_span_name
from .state_reads import read_state, read_summary

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


def make_hook(cls, spec, original, pipeline, meta, state_in_instance: bool, observe_copy: Callable[[Any], Any],
              signature=None, refresh=None):
    """The override of hook ``spec`` for the generated class ``cls``, calling ``original``.
    ``signature``: the bare engine's (with ``self``), or None when it has none.

    ``refresh``: None when ``original`` resolves what to call by itself at every call, else
    ``original`` is the plain function ``meta.inner_class.<name>`` is now, and
    ``refresh(self) -> hook`` makes and installs the hook again for what it is then. Every call
    first checks that the inner's class still answers ``original`` (one attribute read on the
    class, which Python's type cache answers without walking the MRO): a class-level patch
    made after the class was generated (a plugin wrapping the built-in's method when it
    registers) is what the bare engine calls, so the observed engine calls it too."""
    idx = HOOK_INDEX[spec.name]
    stale = _StaleCheck(meta.inner_class, spec.name, original, refresh) if refresh is not None else None
    if spec.kind == COMPRESS:
        return _rejected_calls_untraced(_make_compress_hook(idx, original, pipeline, meta, stale), original,
                                        signature, stale)
    if spec.kind == TOOL:
        return _make_tool_hook(idx, original, pipeline, meta, stale)
    if spec.kind == CLONE:
        return _make_clone_hook(idx, original, pipeline, observe_copy, stale)
    if spec.leaf:
        hook = _make_exact_leaf_hook(spec, idx, original, pipeline, cls, state_in_instance, stale)
        if hook is not None:
            return hook
    hook = _make_plain_hook(spec, idx, original, pipeline, stale)
    return _delivering(hook, pipeline) if spec.delivers else hook


class _StaleCheck:
    """For a hook made for ``original``: ``inner_cls.<name>`` (read at call time) and ``refresh``."""

    __slots__ = ("inner_cls", "name", "original", "refresh")

    def __init__(self, inner_cls, name, original, refresh):
        self.inner_cls, self.name, self.original, self.refresh = inner_cls, name, original, refresh

    def is_stale(self) -> bool:
        try:
            return getattr(self.inner_cls, self.name) is not self.original
        except AttributeError:
            return True

    def current_hook(self, engine):
        """The hook made for what the bare engine calls now (installed on the class)."""
        return self.refresh(engine)


def _delivering(hook, pipeline):
    """``hook``, then what is queued delivered within the budget (HookSpec.delivers), unless the
    engine called its own hook (it is still inside another one)."""
    deliver = pipeline.deliver

    def delivering_hook(self, *args, **kwargs):
        own_call = _inside.engine is self
        try:
            return hook(self, *args, **kwargs)
        finally:
            if not own_call:
                try:
                    deliver(DELIVERY_BUDGET_SECONDS)
                except Exception:
                    pipeline.count_error("hook")
    return delivering_hook


def _make_plain_hook(spec, idx, original, pipeline, stale=None):
    """Any plain hook, with the inner's arguments passed through as ``*args, **kwargs``."""
    recorder = pipeline.recorder
    queue = recorder.queue
    append = queue.append
    cap = recorder.capacity
    dropped = recorder.note_dropped
    wants_context = pipeline.settings.traces
    get_context = _get_current_context
    running = _guarded_running

    if spec.reads_state:
        def after(self, _result):
            return read_state(self)
    elif spec.kind == SELECT:
        def after(_self, result):   # the selected items, before the engine can edit its list
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

        watched, inner_cls, name = (stale is not None), getattr(stale, "inner_cls", None), spec.name

        def hook(self, *args, **kwargs):
            if watched and getattr(inner_cls, name, None) is not original:   # the class was patched
                return stale.current_hook(self)(self, *args, **kwargs)
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

    def start(_self, _args, _kwargs):   # the span's parent, captured now; no live span, no token
        return (get_context() if wants_context else None), None, None

    def finish(self, _started, result, exc):
        return None if after is None or exc is not None else after(self, result)

    return _make_guarded_hook(idx, original, pipeline, start, finish, stale)


# The leaf hooks run on every provider request. Forwarding ``*args, **kwargs`` costs
# about 0.4 µs here, more than the rest of the hook path, so when the inner's method is
# a plain function with named parameters the hook is generated with exactly its
# parameters (same names, kinds and default objects) and calls it with them. The event
# then carries the positional values in order and the keyword-only ones by name.
_EXACT_LEAF_SOURCE = '''\
def {name}({params}):{check}
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

# state_reads.read_state, inlined (a call would cost a third of what it reads). When the
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

# The class-level patch check (make_hook's ``refresh``): the inner's class read as the bare engine's
# attribute lookup reads it; on a change the call goes, as the host made it, to the hook made anew.
_STALE_CHECK = """
    if _oe_inner.{name} is not _oe_original:
        return _oe_changed({self}, {positional}, {keywords})"""

_NO_KEYWORDS = types.MappingProxyType({})


def _make_exact_leaf_hook(spec, idx, original, pipeline, cls, state_in_instance, stale=None):
    if not isinstance(original, types.FunctionType) or "__signature__" in vars(original):
        return None   # a declared __signature__ may not be what Python binds: keep the generic form
    if stale is not None and stale.is_stale():
        return None   # the class does not answer this function (a metaclass attribute): the generic form
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
    recorder = pipeline.recorder
    if stale is not None:
        namespace.update(_oe_inner=stale.inner_cls, _oe_changed=_as_called_by_host(params, stale))
    namespace.update(
        _oe_running=_guarded_running, _oe_inside=_inside, _oe_original=original, _oe_clock=perf_counter_ns,
        _oe_queue=recorder.queue, _oe_append=recorder.queue.append, _oe_cap=recorder.capacity,
        _oe_dropped=recorder.note_dropped, _oe_get_context=_get_current_context, _oe_no_keywords=_NO_KEYWORDS,
        _oe_dict_of=object.__getattribute__, _oe_missing=MISSING,
        _oe_read_state=read_state, _oe_get_state=operator.itemgetter(*STATE_FIELDS),
        # builtins under reserved names: a parameter may be called `len` or `Exception`
        _oe_len=len, _oe_any_exception=BaseException, _oe_exception=Exception,
    )
    positional_text = "(" + "".join(f"{n}, " for n in positional) + ")"
    keywords_text = "{" + ", ".join(keywords) + "}" if keywords else "_oe_no_keywords"
    source = _EXACT_LEAF_SOURCE.format(
        name=spec.name, params=", ".join(rendered), self=self_name, call=", ".join(call), idx=idx,
        check="" if stale is None else _STALE_CHECK.format(
            name=spec.name, self=self_name, positional=positional_text, keywords=keywords_text),
        get_context="_oe_get_context()" if pipeline.settings.traces else "None",
        positional=positional_text, keywords=keywords_text,
        read_state=_inline_read_state(cls, self_name, state_in_instance) if spec.reads_state else "",
        state="_oe_state" if spec.reads_state else "None",
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


def _as_called_by_host(params, stale):
    """For the exact form made for ``params``: ``changed(self, positional, keywords)`` passes a call
    to the hook made for what the class holds now, with the arguments the host gave. The exact form
    bound them to the old parameters, defaults filled in: a value that is its parameter's very
    default object is left out again (the new function applies its own default)."""
    P = inspect.Parameter
    positional_defaults = [p.default for p in params[1:] if p.kind is not P.KEYWORD_ONLY]
    keyword_defaults = {p.name: p.default for p in params if p.kind is P.KEYWORD_ONLY}
    empty = P.empty

    def changed(self, positional, keywords):
        given = len(positional)
        while given and positional_defaults[given - 1] is not empty \
                and positional[given - 1] is positional_defaults[given - 1]:
            given -= 1
        kwargs = {k: v for k, v in keywords.items() if v is not keyword_defaults.get(k, empty)}
        return stale.current_hook(self)(self, *positional[:given], **kwargs)
    return changed


def _inline_read_state(cls, self_name, state_in_instance) -> str:
    if cls.__getattribute__ is object.__getattribute__:
        instance_dict = f"{self_name}.__dict__"
    else:
        instance_dict = f'_oe_dict_of({self_name}, "__dict__")'
    read = (_READ_BY_ITEMGETTER if state_in_instance else _READ_BY_GETS).format(dict=instance_dict)
    return _INLINE_READ_STATE.format(read=read, self=self_name)


def _make_compress_hook(idx, original, pipeline, meta, stale=None):
    watchdog = pipeline.watchdog

    def start(self, args, kwargs):
        messages = args[0] if args else kwargs.get("messages")
        before = _snapshot_messages(messages)
        span, token = pipeline.start_live_span(_COMPRESS_SPAN, meta.inner_name, "compress")
        try:
            watch = watchdog.start(self, meta.inner_name, span)
        except Exception:      # never worth failing the host's compress() for
            watch = None
            pipeline.count_error("watchdog")
        return span, token, (before, watch)

    def finish(self, started, result, exc):
        before, watch = started
        late = watchdog.finish(watch) if watch is not None else False
        if exc is not None:
            return CompressCapture(before, None, late, None, None)
        return CompressCapture(before, _snapshot_messages(result), late, read_state(self), read_summary(self))

    return _make_guarded_hook(idx, original, pipeline, start, finish, stale)


def _rejected_calls_untraced(hook, original, signature, stale=None):
    """A call the inner's signature rejects is not a compress: Hermes <= 0.18.2 calls
    ``compress(..., force=)`` and retries without it on TypeError, so for an engine without
    ``force`` every compaction recorded an error although the engine never ran. Such a call
    goes straight to the inner (the same TypeError, from the same place) and is not recorded."""
    if signature is None:
        return hook
    bind = signature.bind
    watched, inner_cls = (stale is not None), getattr(stale, "inner_cls", None)

    def compress(self, *args, **kwargs):
        if watched and getattr(inner_cls, "compress", None) is not original:   # patched: its own signature
            return stale.current_hook(self)(self, *args, **kwargs)
        try:
            bind(self, *args, **kwargs)
        except TypeError:
            return original(self, *args, **kwargs)
        return hook(self, *args, **kwargs)
    return compress


def _make_tool_hook(idx, original, pipeline, meta, stale=None):
    def start(_self, args, kwargs):
        tool_name = args[0] if args else kwargs.get("name")
        span, token = pipeline.start_live_span(None, meta.inner_name, "handle_tool_call", tool=tool_name)
        return span, token, None

    def finish(_self, _started, _result, _exc):
        return None

    return _make_guarded_hook(idx, original, pipeline, start, finish, stale)


def _make_guarded_hook(idx, original, pipeline, start, finish, stale=None):
    """Every hook but the leaf ones: sets the self-call guard while the inner's method runs.

    ``start(self, args, kwargs) -> (span or parent context, context token or None, started)``
    runs before the inner's method: compress() and tool calls open a live span there (the
    engine's own spans nest under it), the others only capture the parent context.
    ``finish(self, started, result, exc) -> extra`` runs right after it, before a live
    span's context is detached. Spans are finished by the worker.

    Neither may reach the host: a ``start`` that raises (it reads the host's arguments)
    leaves the call untraced, a ``finish`` that raises leaves the event without its extra;
    both are counted (component ``hook``). The inner's result or exception is the host's.
    """
    recorder = pipeline.recorder
    running = _guarded_running
    count_error = pipeline.count_error
    watched, inner_cls, name = (stale is not None), getattr(stale, "inner_cls", None), getattr(stale, "name", None)

    def hook(self, *args, **kwargs):
        if watched and getattr(inner_cls, name, None) is not original:   # the class was patched
            return stale.current_hook(self)(self, *args, **kwargs)
        outer = _inside.engine
        if outer is self:   # the engine calling its own hook: not a host call, not traced
            return original(self, *args, **kwargs)
        try:
            span, token, started = start(self, args, kwargs)
        except Exception:
            count_error("hook")
            return original(self, *args, **kwargs)
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
            try:
                extra = finish(self, started, result, exc)
            except Exception:
                extra = None
                count_error("hook")
            _detach(token)
            recorder.push((idx, self, t0, t1, exc, args, kwargs, result, span, extra))

    return hook


_snapshot_messages = snapshot_messages   # (local name on the hook path)
_COMPRESS_SPAN = hook_span_name("compress")


def _make_clone_hook(idx, original, pipeline, observe_copy, stale=None):
    recorder = pipeline.recorder
    wants_context = pipeline.settings.traces
    watched, inner_cls = (stale is not None), getattr(stale, "inner_cls", None)

    def clone_for_agent(self, *args, **kwargs):
        if watched and getattr(inner_cls, "clone_for_agent", None) is not original:   # the class was patched
            return stale.current_hook(self)(self, *args, **kwargs)
        # the span's parent: whatever is current in the host (agent construction)
        ctx = _get_current_context() if wants_context else None
        t0 = perf_counter_ns()
        try:
            result = original(self, *args, **kwargs)
        except BaseException as exc:
            recorder.push((idx, self, t0, perf_counter_ns(), exc, args, kwargs, None, ctx, None))
            raise
        if result is not None and result is not self:
            observe_copy(result)
        recorder.push((idx, self, t0, perf_counter_ns(), None, args, kwargs, None, ctx, None))
        return result

    return clone_for_agent


def _detach(token) -> None:
    if token is not None:
        try:
            otel_context.detach(token)
        except Exception:
            pass


"""The exact leaf hooks: generated from source with exactly the inner method's parameters.

The leaf hooks (``HookSpec.leaf``: ``update_from_response``, ``should_compress*``, ...) run on
every provider request. Forwarding ``*args, **kwargs`` costs about 0.4 µs there, more than the
rest of the hook path, so when the inner's method is a plain function with named parameters the
hook is generated with exactly its parameters (same names, kinds and default objects) and calls
it with them. The event then carries the positional values in order and the keyword-only ones by
name. Any other leaf hook gets the generic form (``plain.make_plain_hook``).
"""

from __future__ import annotations

import inspect
import itertools
import linecache
import types
from time import perf_counter_ns
from typing import Any, Dict

from ..contract.events import MISSING, STATE_FIELDS
from .class_patch import as_called_by_host
from .guard import guarded_running, inside
from .parent_context import get_current_context
from .state_reads import read_state

_EXACT_LEAF_SOURCE = '''\
def {name}({params}):{check}
    if _oe_running and _oe_inside.engine is {self}:
        return _oe_original({call})
    if _oe_len(_oe_queue) >= {cap}:
        _oe_dropped()
        return _oe_original({call})
    _oe_ctx = {get_context}
    _oe_t0 = _oe_clock()
    try:
        _oe_result = _oe_original({call})
    except _oe_any_exception as _oe_exc:
        _oe_append(({idx}, {self}, _oe_t0, _oe_clock(), _oe_exc, {positional}, {keywords}, None, _oe_ctx, None))
        raise
{hand_off}
    return _oe_result
'''
# What each step costs, and why it is written this way (benchmarks/hook_instructions.py --steps;
# docs/performance.md, *Hook path*): the queue bound is checked before the call (a full queue:
# the loss is counted and the call goes straight to the inner), so after it only the event is
# appended; ``t1`` is read inside the event's tuple (no local), and the bound is a constant of
# the generated code. A deque with ``maxlen`` and ``insert`` (which raises when full) would fold
# the bound into the hand-off, but in Python 3.11 ``deque.insert`` parses its arguments with
# PyArg_ParseTuple and costs more than the ``len`` it saves.
_HAND_OFF = '''\
    _oe_append(({idx}, {self}, _oe_t0, _oe_clock(), None, {positional}, {keywords}, _oe_result, _oe_ctx, None))'''

# state_reads.read_state, inlined (a call would cost a third of what it reads). The three numbers
# follow the event's ten fields (contract.events.event_state): one tuple fewer per call on the
# host's thread than a state tuple in ``extra``. They are read after ``t1``. When the engine the
# class was generated for holds all three numbers in its instance dict (the built-in does), they
# are read as the instance's attributes, three specialised attribute reads (about 640 instructions
# fewer than fetching ``self.__dict__`` and looking the names up in it;
# benchmarks/hook_instructions.py), but only where that reads exactly what the instance dict
# holds: the class (the whole MRO) overrides neither __getattribute__ nor __getattr__ and holds
# no descriptor of those names (``_reads_state_as_attributes``), so an attribute read finds the
# instance dict's value, or else the class's plain value, which is what the worker fills in for a
# value the instance lacks (worker/state.py). Otherwise the dict is read: three subscripts, or
# ``get`` with MISSING when the instance did not hold all three. An instance that lacks one raises
# (AttributeError, KeyError) and falls back to read_state.
# ``self.__dict__`` is read directly only when no class in the MRO overrides
# __getattribute__ (that would be engine code the host did not call).
_HAND_OFF_WITH_STATE = '''\
    try:
        _oe_append(({idx}, {self}, _oe_t0, _oe_clock(), None, {positional}, {keywords}, _oe_result, _oe_ctx, None,
                    {read}))
    except _oe_exception:
        _oe_append(({idx}, {self}, _oe_t0, _oe_clock(), None, {positional}, {keywords}, _oe_result, _oe_ctx, None,
                    *_oe_read_state({self})))'''
_READ_BY_ATTRIBUTES = ", ".join("{self}." + f for f in STATE_FIELDS)
_READ_BY_SUBSCRIPTS = "(_oe_d := {dict})[" + "], _oe_d[".join(repr(f) for f in STATE_FIELDS) + "]"
_READ_BY_GETS = ('(_oe_d := {dict}).get("last_prompt_tokens", _oe_missing), '
                 '_oe_d.get("threshold_tokens", _oe_missing), _oe_d.get("context_length", _oe_missing)')

# The class-level patch check (class_patch): the inner's class read as the bare engine's attribute
# lookup reads it; on a change the call goes, as the host made it, to the hook made anew.
_STALE_CHECK = """
    if _oe_inner.{name} is not _oe_original:
        return _oe_changed({self}, {positional}, {keywords})"""

_NO_KEYWORDS = types.MappingProxyType({})


def make_exact_leaf_hook(spec, idx, original, pipeline, cls, state_in_instance, stale=None):
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
        namespace.update(_oe_inner=stale.inner_cls, _oe_changed=as_called_by_host(params, stale))
    namespace.update(
        _oe_running=guarded_running, _oe_inside=inside, _oe_original=original, _oe_clock=perf_counter_ns,
        _oe_queue=recorder.queue, _oe_append=recorder.queue.append,
        _oe_dropped=recorder.note_dropped, _oe_get_context=get_current_context, _oe_no_keywords=_NO_KEYWORDS,
        _oe_dict_of=object.__getattribute__, _oe_missing=MISSING,
        _oe_read_state=read_state,
        # builtins under reserved names: a parameter may be called `len` or `Exception`
        _oe_len=len, _oe_any_exception=BaseException, _oe_exception=Exception,
    )
    positional_text = "(" + "".join(f"{n}, " for n in positional) + ")"
    keywords_text = "{" + ", ".join(keywords) + "}" if keywords else "_oe_no_keywords"
    fields = dict(self=self_name, idx=idx, positional=positional_text, keywords=keywords_text)
    if spec.reads_state:
        hand_off = _HAND_OFF_WITH_STATE.format(read=_state_read(cls, self_name, state_in_instance), **fields)
    else:
        hand_off = _HAND_OFF.format(**fields)
    source = _EXACT_LEAF_SOURCE.format(
        name=spec.name, params=", ".join(rendered), call=", ".join(call), cap=int(recorder.capacity),
        check="" if stale is None else _STALE_CHECK.format(name=spec.name, **fields),
        get_context="_oe_get_context()" if pipeline.settings.traces else "None",
        hand_off=hand_off, **fields,
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


def _state_read(cls, self_name, state_in_instance) -> str:
    """The expression that reads the three STATE_FIELDS (three tuple items) on the hook path."""
    if state_in_instance and _reads_state_as_attributes(cls):
        return _READ_BY_ATTRIBUTES.format(self=self_name)
    if cls.__getattribute__ is object.__getattribute__:
        instance_dict = f"{self_name}.__dict__"
    else:
        instance_dict = f'_oe_dict_of({self_name}, "__dict__")'
    return (_READ_BY_SUBSCRIPTS if state_in_instance else _READ_BY_GETS).format(dict=instance_dict)


_ABSENT = object()


def _reads_state_as_attributes(cls) -> bool:
    """Does ``engine.<field>`` read what ``engine.__dict__[field]`` holds, for each STATE_FIELDS
    name, running no engine code: no __getattribute__ or __getattr__ of the engine's own, and no
    descriptor of that name anywhere in the MRO (a plain class value is shadowed by the instance's)."""
    try:
        if cls.__getattribute__ is not object.__getattribute__:
            return False
        if inspect.getattr_static(cls, "__getattr__", _ABSENT) is not _ABSENT:
            return False
        for name in STATE_FIELDS:
            value = inspect.getattr_static(cls, name, _ABSENT)
            if value is not _ABSENT and hasattr(type(value), "__get__"):
                return False
    except Exception:  # generation time: an MRO getattr_static cannot walk; False picks the dict-read form
        return False
    return True

"""Make an engine observable without changing what it does: re-class it.

The host relies on ``type(engine)``, ``vars()``, ``isinstance`` and identity, which no proxy
honours, so the inner instance is re-classed to a generated subclass that overrides only the
traced hooks. When editing: everything else stays the inner's own; hooks look up the inner's
class at call time (later class patches reach them); generated classes live with their pipeline.

The full account: docs/design/internals.md, *observed_engine/capture/reclass.py*.
"""

from __future__ import annotations

import copyreg
import functools
import inspect
import logging
import operator
import sys
import types
from typing import Any, Dict, Optional

from ..contract.events import ENGINE_META_ATTRIBUTE
from ..contract.hooks import BY_NAME, HOOK_SPECS, is_wrapped
from ..contract.identifiers import identifier
from .hook_forms import make_hook
from .state_reads import held_by_instance

logger = logging.getLogger(__name__)

MARKER = ENGINE_META_ATTRIBUTE


class EngineMeta:
    """Per generated class: its pipeline, the inner's identity and the host's ABC."""

    __slots__ = ("pipeline", "inner_name", "inner_class", "exposed_name", "hooks", "engine_abc")

    def __init__(self, pipeline, inner_name, inner_class, exposed_name, hooks, engine_abc):
        self.pipeline = pipeline
        self.inner_name = inner_name
        self.inner_class = inner_class
        self.exposed_name = exposed_name
        self.hooks = hooks
        self.engine_abc = engine_abc


def is_observed(engine: Any) -> bool:
    return getattr(type(engine), MARKER, None) is not None


def observed_meta(engine: Any) -> Optional[EngineMeta]:
    return getattr(type(engine), MARKER, None)


def instrument_engine(inner: Any, pipeline, *, exposed_name: Optional[str] = None,
                      engine_abc: Optional[type] = None) -> Any:
    """Re-class ``inner`` so that ``pipeline`` observes it; returns ``inner``.

    ``exposed_name``: the name the host selects the engine by (``observed`` for the
    plugin), None for the inner's own. ``engine_abc``: the host's ``ContextEngine``
    (the default-method check of the only-if-overridden hooks, and the virtual
    subclass registration of duck-typed engines), None when no host is installed.
    If the class cannot be extended, the engine is returned unobserved with a warning.
    """
    if is_observed(inner):
        return inner
    inner_cls = type(inner)
    try:
        inner_name = engine_name(inner)
        # With telemetry disabled nothing is overridden: the hooks cost exactly what the bare ones do.
        available = tuple(
            spec.name for spec in HOOK_SPECS
            if pipeline.settings.enabled and is_wrapped(inner, spec, engine_abc)
        )
        signatures = {name: _signature_of(inner, name) for name in available}
        cls = _generated_class(inner_cls, pipeline, inner_name, exposed_name, available, signatures,
                               held_by_instance(inner), engine_abc)
        object.__setattr__(inner, "__class__", cls)
    except Exception as exc:
        logger.warning(
            "observed-engine: cannot observe %s.%s (%s: %s); using it unobserved",
            inner_cls.__module__, inner_cls.__qualname__, type(exc).__name__, exc,
        )
        pipeline.count_error("wrapper")
        return inner
    pipeline.register_engine(inner)
    return inner


def uninstrument_engine(engine: Any) -> Any:
    """The inverse of :func:`instrument_engine`: ``engine`` back in its own class (copies made
    while it was observed stay observed). Returns the engine; a no-op for an unobserved one."""
    meta = observed_meta(engine)
    if meta is None:
        return engine
    object.__setattr__(engine, "__class__", meta.inner_class)
    meta.pipeline.forget_engine(engine)
    return engine


def engine_name(inner) -> str:
    """The engine's own name (its ``name`` attribute), else its class name; as a safe identifier."""
    try:
        name = inner.name
        if isinstance(name, str) and name:
            return identifier(name)
    except Exception:  # hot path: a name that raises falls back to the class's
        pass
    return identifier(type(inner).__name__)


# -- class generation ------------------------------------------------------------

def _generated_class(inner_cls, pipeline, inner_name, exposed, available, signatures, state_in_instance,
                     engine_abc):
    sig_key = tuple((n, str(signatures.get(n))) for n in available)
    key = (inner_cls, inner_name, exposed, sig_key, state_in_instance, engine_abc)
    classes: Dict[tuple, type] = pipeline.generated_classes
    cached = classes.get(key)
    if cached is not None:
        return cached

    meta = EngineMeta(pipeline, inner_name, inner_cls, exposed, available, engine_abc)
    namespace: Dict[str, Any] = {
        "__slots__": (),
        "__module__": inner_cls.__module__,
        "__qualname__": inner_cls.__qualname__,
        "__doc__": inner_cls.__doc__,
        MARKER: meta,
    }
    # The class is needed by the hook closures (super()), so fill them in after creation.
    cls = _observed_metaclass(type(inner_cls))(inner_cls.__name__, (inner_cls,), namespace)

    def observe_copy(copy):   # clone_for_agent(): the clone comes back observed too
        return instrument_engine(copy, pipeline, exposed_name=exposed, engine_abc=engine_abc)

    for name in available:
        _install_hook(cls, inner_cls, name, pipeline, meta, state_in_instance, observe_copy, signatures.get(name))

    if exposed is not None:
        setattr(cls, "name", _exposed_name_property(cls, inner_cls, exposed, engine_abc))

    if engine_abc is not None:
        try:
            if not issubclass(cls, engine_abc):
                # Duck-typed engine: a virtual subclass passes the plugin manager's isinstance
                # check without mixing the ABC's class attributes into the lookup chain.
                engine_abc.register(cls)
        except Exception:  # an ABC that refuses registration: the engine stays duck-typed
            pass
    classes[key] = cls
    return cls


# -- the generated classes' metaclass ----------------------------------------------
#
# A generated class is made by a subclass of the inner's own metaclass that changes two things:
#
# * ``type(engine).__dict__`` (and ``vars(type(engine))``, ``dir()``) is the inner class's dict.
#   Engine code asks it membership questions: a forwarding wrapper's ``__setattr__`` keeps a
#   write local when the name is in its class dict and forwards it otherwise, so it must get
#   the answers it gets bare, not the generated class's (the hooks, ``__slots__``, the marker).
#   Python's own attribute lookup reads the real dict, so the hooks still run.
# * pickling: the generated class cannot be found by its module and qualname (they are the
#   inner's, so the engine's repr and tracebacks read as bare), so it pickles as the inner
#   class: the unpickled engine is the bare engine, with its state (observation belongs to a
#   pipeline of this process; observe() it again). copy.copy / copy.deepcopy never pickle
#   classes, so copies stay observed.

_real_class_dict = type.__dict__["__dict__"].__get__
_observed_metaclasses: Dict[type, type] = {}


def _class_dict(cls):
    own = _real_class_dict(cls)
    meta = own.get(MARKER)
    if isinstance(meta, EngineMeta):
        return meta.inner_class.__dict__
    return own


def _reduce_generated_class(cls):
    """pickle: the generated class as the inner class, rebuilt from the standard library only
    (``itemgetter(0)((inner,))``), so unpickling does not need observed-engine."""
    meta = _real_class_dict(cls).get(MARKER)
    if not isinstance(meta, EngineMeta):
        return cls.__qualname__    # a class of its own (a subclass of a generated one): by reference
    return operator.itemgetter(0), ((meta.inner_class,),)


def _observed_metaclass(metaclass: type) -> type:
    """The subclass of ``metaclass`` generated classes are made with (``metaclass`` itself if it
    cannot be extended: the engine is then observed without these two)."""
    derived = _observed_metaclasses.get(metaclass)
    if derived is not None:
        return derived
    try:
        derived = type(metaclass)(f"Observed{metaclass.__name__}", (metaclass,), {
            "__module__": __name__,
            "__qualname__": f"Observed{metaclass.__qualname__}",
            "__dict__": property(_class_dict, doc="The inner class's dict (the engine's own view)."),
        })
        copyreg.pickle(derived, _reduce_generated_class)
    except Exception:  # a metaclass that cannot be subclassed or registered: used as it is (see docstring)
        derived = metaclass
    _observed_metaclasses[metaclass] = derived
    return derived


def _exposed_name_property(cls, inner_cls, exposed: str, engine_abc):
    """``name``: ``exposed`` for the host (it selects the engine by it), the engine's own name for
    the engine's own code. An engine that reads ``self.name`` in its get_status() or a tool result
    (which the model reads) must not see "observed". Its code is told apart by the caller's code
    object: one of the functions its classes define (the ABC's and ours excluded; a function a
    class-level patch puts there counts from the first call of the patched hook on)."""
    own_codes = _own_codes(inner_cls, engine_abc)
    getframe = sys._getframe

    def name(self):
        if getframe(1).f_code in own_codes:
            try:
                state = object.__getattribute__(self, "__dict__")
            except Exception:  # hot path: no instance __dict__ (slots): the name comes from the class below
                state = {}
            if "name" in state:
                return state["name"]
            return getattr(super(cls, self), "name")
        return exposed

    def set_name(self, value):       # an engine that writes self.name keeps its own name
        object.__getattribute__(self, "__dict__")["name"] = value

    name.own_codes = own_codes       # (refreshed by _install_hook when the class was patched)
    return property(name, set_name, doc="Engine name the host selects by (the engine's own code sees its own).")


def _own_codes(inner_cls, engine_abc) -> set:
    codes = set()
    for klass in inner_cls.__mro__:
        if klass is object or klass is engine_abc:
            continue
        for value in vars(klass).values():
            for fn in _functions_in(value):
                code = getattr(fn, "__code__", None)
                if code is not None:
                    codes.add(code)
    return codes


def _refresh_own_codes(cls, inner_cls, engine_abc) -> None:
    prop = _real_class_dict(cls).get("name")
    codes = getattr(getattr(prop, "fget", None), "own_codes", None)
    if isinstance(codes, set):
        codes.update(_own_codes(inner_cls, engine_abc))


def _functions_in(value):
    if isinstance(value, (staticmethod, classmethod)):
        value = value.__func__
    if isinstance(value, property):
        return [f for f in (value.fget, value.fset, value.fdel) if f is not None]
    if isinstance(value, types.FunctionType):
        return [value]
    return []


def _signature_of(inner, name) -> Optional[inspect.Signature]:
    """The signature the host sees on the bare engine, with ``self`` put back in front."""
    try:
        sig = inspect.signature(getattr(inner, name))
    except (TypeError, ValueError):
        return None
    return _with_self(sig)


def _with_self(sig: inspect.Signature) -> Optional[inspect.Signature]:
    params = list(sig.parameters.values())
    self_param = inspect.Parameter("self", inspect.Parameter.POSITIONAL_ONLY)
    try:
        return sig.replace(parameters=[self_param] + params)
    except ValueError:
        return None


def _install_hook(cls, inner_cls, name, pipeline, meta, state_in_instance, observe_copy, signature):
    """Make the hook ``name`` of ``cls`` for what the bare engine calls now, and set it on ``cls``.

    What the bare engine calls is read from its class at every call (hook_forms.make_hook's
    ``refresh``): when a plugin patches the inner's class (or a base) after the hook was made, the
    first call after the patch makes the hook again, for the new function, and goes to it."""
    original, checkable = _original_caller(cls, inner_cls, name)

    def refresh(engine):
        _refresh_own_codes(cls, inner_cls, meta.engine_abc)
        return _install_hook(cls, inner_cls, name, pipeline, meta, state_in_instance, observe_copy,
                             _current_signature(cls, engine, name))

    fn = make_hook(cls, BY_NAME[name], original, pipeline, meta, state_in_instance, observe_copy, signature,
                   refresh=refresh if checkable else None)
    _copy_identity(fn, inner_cls, name, signature)
    setattr(cls, name, fn)
    return fn


def _original_caller(cls, inner_cls, name):
    """``(caller, checkable)``: a function ``(self, *args, **kwargs)`` calling the method the bare
    engine would call. ``checkable``: the caller is the plain function the class holds now
    (``inner_cls.<name>`` is it, so a hook can tell a later patch by one read); otherwise the
    caller looks the method up itself at every call."""
    try:
        raw = inspect.getattr_static(inner_cls, name)
    except AttributeError:
        raw = None
    if isinstance(raw, types.FunctionType):
        try:
            if getattr(inner_cls, name) is raw:
                return raw, True   # the common case: a plain method, called directly
        except Exception:  # a descriptor that raises: the generic lookup below decides
            pass

    def via_lookup(self, *args, __name=name, **kwargs):
        # What the bare engine's attribute lookup finds past the generated class, now: a
        # descriptor along the MRO, else (AttributeError) the class's __getattr__ (a
        # forwarding wrapper engine).
        try:
            bound = getattr(super(cls, self), __name)
        except AttributeError:
            getattr_hook = getattr(inner_cls, "__getattr__", None)
            if getattr_hook is None:
                raise
            bound = getattr_hook(self, __name)
        return bound(*args, **kwargs)
    return via_lookup, False


def _current_signature(cls, engine, name) -> Optional[inspect.Signature]:
    """:func:`_signature_of`, for what the bare engine's lookup of ``name`` finds now."""
    try:
        return _with_self(inspect.signature(getattr(super(cls, engine), name)))
    except Exception:  # hot path (refresh): a lookup/signature that raises; None: no __signature__ set
        return None


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

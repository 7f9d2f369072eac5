"""Record classes (named fields, defaults, equality, repr, optionally frozen) made without
``dataclasses``' class-creation cost.

``@dataclass`` ``exec``s generated methods, 0.6-0.8 ms of CPU per class at every Hermes import;
:func:`record` gives a class the same behaviour with shared, generic methods, and :func:`fields`
/ :func:`replace` stand in for the ``dataclasses`` ones. When editing: keep the behaviour a
dataclass's (equality, hashing, frozen errors); instances cost a little more to create.

The full account: docs/design/internals.md, *observed_engine/contract/records.py*.
"""

from __future__ import annotations

from dataclasses import MISSING, FrozenInstanceError
from typing import Any, Callable, Dict, Tuple

__all__ = ["MISSING", "Field", "field", "fields", "record", "replace"]

_SETATTR = object.__setattr__


class Field:
    """One field of a record: ``name``, ``type`` (the annotation as written), ``default`` and
    ``default_factory`` (``MISSING`` when absent)."""

    __slots__ = ("name", "type", "default", "default_factory")

    def __init__(self, default: Any = MISSING, default_factory: Any = MISSING) -> None:
        if default is not MISSING and default_factory is not MISSING:
            raise ValueError("cannot specify both default and default_factory")
        self.name = ""
        self.type: Any = None
        self.default = default
        self.default_factory = default_factory

    def __repr__(self) -> str:
        return f"Field(name={self.name!r}, type={self.type!r}, default={self.default!r})"


def field(*, default: Any = MISSING, default_factory: Any = MISSING) -> Any:
    """A field with a default value or a default factory (``dataclasses.field``'s two uses here)."""
    return Field(default, default_factory)


def fields(record_or_class) -> Tuple[Field, ...]:
    """The record's fields, in declaration order."""
    cls = record_or_class if isinstance(record_or_class, type) else type(record_or_class)
    try:
        return cls.__record_fields__
    except AttributeError:
        raise TypeError(f"{cls.__qualname__} is not a record") from None


def replace(obj, **changes):
    """A new record like ``obj`` with ``changes``."""
    values = {f.name: getattr(obj, f.name) for f in fields(obj)}
    values.update(changes)
    return type(obj)(**values)


def _values(self) -> tuple:
    return tuple(getattr(self, name) for name in type(self).__match_args__)


def _eq(self, other):
    if other.__class__ is not self.__class__:
        return NotImplemented
    return _values(self) == _values(other)


def _hash(self) -> int:
    return hash(_values(self))


def _repr(self) -> str:
    cls = type(self)
    inner = ", ".join(f"{name}={getattr(self, name)!r}" for name in cls.__match_args__)
    return f"{cls.__qualname__}({inner})"


def _frozen_setattr(_self, name, _value):
    raise FrozenInstanceError(f"cannot assign to field {name!r}")


def _frozen_delattr(_self, name):
    raise FrozenInstanceError(f"cannot delete field {name!r}")


def _make_init(specs: Tuple[Field, ...], qualname: str) -> Callable[..., None]:
    names = tuple(f.name for f in specs)
    known = frozenset(names)
    count = len(names)

    def __init__(self, *args, **kwargs) -> None:
        if len(args) > count:
            raise TypeError(f"{qualname}.__init__() takes {count + 1} positional arguments "
                            f"but {len(args) + 1} were given")
        given: Dict[str, Any] = dict(zip(names, args))
        for key, value in kwargs.items():
            if key not in known:
                raise TypeError(f"{qualname}.__init__() got an unexpected keyword argument {key!r}")
            if key in given:
                raise TypeError(f"{qualname}.__init__() got multiple values for argument {key!r}")
            given[key] = value
        for spec in specs:
            name = spec.name
            if name in given:
                value = given[name]
            elif spec.default is not MISSING:
                value = spec.default
            elif spec.default_factory is not MISSING:
                value = spec.default_factory()
            else:
                raise TypeError(f"{qualname}.__init__() missing 1 required argument: {name!r}")
            _SETATTR(self, name, value)

    __init__.__qualname__ = f"{qualname}.__init__"
    return __init__


def record(cls=None, *, frozen: bool = True):
    """Make ``cls`` a record of its annotated class attributes (see the module docstring).
    ``@record`` is frozen; ``@record(frozen=False)`` is not."""

    def make(cls):
        specs = []
        seen_default = False
        for name, annotation in cls.__dict__.get("__annotations__", {}).items():
            value = cls.__dict__.get(name, MISSING)
            spec = value if isinstance(value, Field) else Field(default=value)
            spec.name, spec.type = name, annotation
            if spec.default is MISSING and spec.default_factory is MISSING:
                if seen_default:
                    raise TypeError(f"non-default argument {name!r} follows default argument")
            else:
                seen_default = True
            if isinstance(value, Field):          # as dataclasses: the default stays a class attribute
                if spec.default is MISSING:
                    delattr(cls, name)
                else:
                    setattr(cls, name, spec.default)
            specs.append(spec)
        specs_tuple = tuple(specs)
        cls.__record_fields__ = specs_tuple
        cls.__match_args__ = tuple(f.name for f in specs_tuple)
        cls.__init__ = _make_init(specs_tuple, cls.__qualname__)
        cls.__repr__ = _repr
        cls.__eq__ = _eq
        if frozen:
            cls.__hash__ = _hash
            cls.__setattr__ = _frozen_setattr
            cls.__delattr__ = _frozen_delattr
        else:
            cls.__hash__ = None     # mutable and compared by value: unhashable, as a dataclass is
        return cls

    return make if cls is None else make(cls)

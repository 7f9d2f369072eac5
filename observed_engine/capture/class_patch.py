"""Class-level patches made after observe(): the observed engine calls what the bare one would.

A plugin may wrap the inner class's method after its observed class was generated (the
built-in's method, when the plugin registers). Every hook made for a plain function first checks
that the inner's class still answers it (one attribute read on the class, answered by Python's
type cache; ~20 ns); on a change the call goes, as the host made it, to the hook made anew for
what the class holds now (``reclass._install_hook``'s ``refresh``).
"""

from __future__ import annotations

import inspect


class StaleCheck:
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


def as_called_by_host(params, stale):
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

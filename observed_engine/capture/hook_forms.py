"""The hook forms: what runs on the host's thread when it calls an observed hook.

The hook path takes two timestamps and appends one tuple (in the field order of
``contract.events.HookEvent``) to the pipeline's bounded deque. Spans, metrics, token
counts and store rows are built later by the worker (``observed_engine.worker``). Only
``compress()`` and engine tool calls open a live span here, so work the inner engine
does inside them nests under it.

:func:`make_hook` chooses the form per hook from ``contract.hooks.HOOK_SPECS``; each form
is a module of its own:

* ``exact_leaf``: leaf hooks (``HookSpec.leaf``) generated from source with exactly the
  inner method's parameters, so no ``*args, **kwargs`` forwarding is paid;
* ``plain``: ``*args, **kwargs`` (leaf hooks whose inner method is variadic, decorated or
  not a plain function, and any other hook without a form of its own);
* ``guarded``: every non-leaf hook sets the self-call guard (``guard``) while the inner
  runs; ``compress`` adds a live span, message snapshots and the deadline watchdog,
  ``tool`` a live span, ``clone`` observes the clone; ``delivery`` delivers what is queued
  at natural boundaries;
* ``class_patch``: every form made for a plain function follows a later class-level patch.

The span's parent is read by ``parent_context``.
"""

from __future__ import annotations

from typing import Any, Callable

from ..contract.hooks import CLONE, COMPRESS, HOOK_INDEX, TOOL
from .class_patch import StaleCheck
from .clone import make_clone_hook
from .compress import make_compress_hook, rejected_calls_untraced
from .delivery import delivering
from .exact_leaf import make_exact_leaf_hook
from .plain import make_plain_hook
from .tool import make_tool_hook


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
    stale = StaleCheck(meta.inner_class, spec.name, original, refresh) if refresh is not None else None
    if spec.kind == COMPRESS:
        return rejected_calls_untraced(make_compress_hook(idx, original, pipeline, meta, stale), original,
                                        signature, stale)
    if spec.kind == TOOL:
        return make_tool_hook(idx, original, pipeline, meta, stale)
    if spec.kind == CLONE:
        return make_clone_hook(idx, original, pipeline, observe_copy, stale)
    if spec.leaf:
        hook = make_exact_leaf_hook(spec, idx, original, pipeline, cls, state_in_instance, stale)
        if hook is not None:
            return hook
    hook = make_plain_hook(spec, idx, original, pipeline, stale)
    return delivering(hook, pipeline) if spec.delivers else hook

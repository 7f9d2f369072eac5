"""The hook forms: what runs on the host's thread when it calls an observed hook.

The hook path takes two timestamps and appends one tuple in ``contract.events.HookEvent``'s
field order; the worker builds everything else later. Only ``compress()`` and engine tool calls
open a live span here. :func:`make_hook` chooses the form per hook from ``HOOK_SPECS``; each
form is a module of its own. When editing: a leaf hook whose inner calls another observed hook
(:func:`calls_other_hooks`) takes the guarded form.

The full account: docs/design/internals.md, *observed_engine/capture/hook_forms.py*.
"""

from __future__ import annotations

import types
from typing import Any, Callable

from ..contract.hooks import CLONE, COMPRESS, HOOK_INDEX, PRUNE, TOOL
from .class_patch import StaleCheck
from .clone import make_clone_hook
from .compress import make_compress_hook, rejected_calls_untraced
from .delivery import delivering
from .exact_leaf import make_exact_leaf_hook
from .plain import make_plain_hook
from .prune import make_prune_hook
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
    if spec.kind == PRUNE:
        return make_prune_hook(idx, original, pipeline, stale)
    leaf = spec.leaf and not calls_other_hooks(original, spec.name, meta.hooks)
    if leaf:
        hook = make_exact_leaf_hook(spec, idx, original, pipeline, cls, state_in_instance, stale)
        if hook is not None:
            return hook
    hook = make_plain_hook(spec, idx, original, pipeline, stale, leaf)
    return delivering(hook, pipeline) if spec.delivers else hook


def calls_other_hooks(original, name: str, hooks) -> bool:
    """Does the inner's function ``name`` name another observed hook (``self.should_compress_info``
    inside the built-in's ``should_compress`` from Hermes 0.20 on)? Such a leaf hook takes the
    guarded form, so the call it makes on its own engine stays the engine's business, untraced,
    as inside every other guarded hook: otherwise each host call would also count as a call of the
    hook it delegates to. Read from the code objects' names (nested functions included) when the
    class is generated; a delegation through a helper method is not seen (it is then traced as a
    call of its own)."""
    code = getattr(original, "__code__", None)
    if code is None:
        return False
    others = set(hooks) - {name}
    stack = [code]
    while stack:
        c = stack.pop()
        if others.intersection(c.co_names):
            return True
        stack.extend(k for k in c.co_consts if isinstance(k, types.CodeType))
    return False

"""Hermes' config copies, made by a deep copy for plain data, in replay processes only.

Hermes' ``load_config()`` returns a ``copy.deepcopy`` of its cached config on every call (about
eight calls per replayed turn; a config of ~700 values), and ``copy.deepcopy`` pays for its
generality on every value: a memo entry, a keep-alive list, a dispatch per atom. Here the
``copy`` that ``hermes_cli.config`` sees is this module's namespace, whose ``deepcopy`` copies
``dict`` and ``list`` (exact types) itself, returns ``str``/``int``/``float``/``bool``/``None``/
``bytes`` as they are (as ``copy.deepcopy`` does) and hands everything else to ``copy.deepcopy``
with the same memo. The result is what ``copy.deepcopy`` makes: new containers, the same key
order, shared containers still shared (the memo is kept by ``id`` for containers, as
``copy.deepcopy`` keeps it). When editing: the first ``CHECK_FIRST`` copies are also made by
``copy.deepcopy`` and compared (values, types, the sharing of containers); any difference turns
the fast copy off with one warning.

The full account: docs/design/internals.md, *observed_engine/compare/config_copy.py*.
"""

from __future__ import annotations

import copy as _copy
import logging
import threading
from typing import Any, Dict, Optional

from .. import host
from .process_patch import CountedPatch

logger = logging.getLogger(__name__)

CHECK_FIRST = 8          # copies also made by copy.deepcopy and compared
_ATOMIC = frozenset({str, int, float, bool, type(None), bytes})


def tree_copy(x: Any, memo: Optional[Dict[int, Any]] = None) -> Any:
    """``copy.deepcopy(x, memo)``, faster for trees of dicts, lists and atoms."""
    t = type(x)
    if t in _ATOMIC:
        return x
    if memo is None:
        memo = {}
    found = memo.get(id(x), memo)
    if found is not memo:
        return found
    if t is dict:
        y: Any = {}
        memo[id(x)] = y
        for k, v in x.items():
            y[k if type(k) in _ATOMIC else tree_copy(k, memo)] = v if type(v) in _ATOMIC else tree_copy(v, memo)
        return y
    if t is list:
        y = []
        memo[id(x)] = y
        append = y.append
        for v in x:
            append(v if type(v) in _ATOMIC else tree_copy(v, memo))
        return y
    return _copy.deepcopy(x, memo)


def same_copy(a: Any, b: Any) -> bool:
    """``a`` and ``b`` are equal copies: the same values of the same types, and containers shared
    at the same places."""
    seen_a: Dict[int, int] = {}
    seen_b: Dict[int, int] = {}

    def walk(x: Any, y: Any) -> bool:
        if type(x) is not type(y):
            return False
        if type(x) in _ATOMIC:
            return x == y or (x != x and y != y)      # NaN is the same NaN copied
        met = id(x) in seen_a
        if seen_a.setdefault(id(x), len(seen_a)) != seen_b.setdefault(id(y), len(seen_b)):
            return False
        if met:
            return True                                 # a container met before, at the same place
        if type(x) is dict:
            return list(x) == list(y) and all(walk(x[k], y[k]) for k in x)
        if type(x) is list:
            return len(x) == len(y) and all(walk(u, v) for u, v in zip(x, y))
        return x == y

    try:
        return walk(a, b)
    except Exception:  # a value that cannot be compared: not known to be the same
        return False


class ConfigCopy:
    """What ``hermes_cli.config`` finds under the name ``copy``: the ``copy`` module, with
    :func:`tree_copy` as its ``deepcopy`` (checked against the module's own, first)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.copies = 0
        self.disabled: Optional[str] = None      # why the fast copy turned itself off

    def __getattr__(self, name: str) -> Any:     # copy.copy, copy.Error, ...: the module's own
        return getattr(_copy, name)

    def deepcopy(self, x: Any, memo: Optional[Dict[int, Any]] = None, _nil: Any = None) -> Any:
        if self.disabled is not None or memo is not None:
            return _copy.deepcopy(x, memo)
        with self._lock:
            self.copies += 1
            check = self.copies <= CHECK_FIRST
        try:
            fast = tree_copy(x)
        except Exception as exc:  # copy.deepcopy answers, and says the same error if it has one
            self._disable(f"the plain-data copy raised {type(exc).__name__}: {exc}")
            return _copy.deepcopy(x)
        if check:
            slow = _copy.deepcopy(x)
            if not same_copy(fast, slow):
                self._disable("the plain-data copy differed from copy.deepcopy's")
                return slow
        return fast

    def _disable(self, why: str) -> None:
        if self.disabled is None:
            self.disabled = why
            logger.warning("replay: Hermes' config is copied by copy.deepcopy again in this process (%s)", why)


_patch = CountedPatch(host.config_module, "copy", lambda original: ConfigCopy() if original is _copy else None,
                      lambda copier: {"copies": copier.copies, "disabled": copier.disabled})
last_stats: Optional[Dict[str, Any]] = None    # the last uninstalled copier's figures (tests, benchmarks)


def install() -> Optional[ConfigCopy]:
    """Give ``hermes_cli.config`` the fast copy in this process (counted: one uninstall per
    install). None when that module does not use the ``copy`` module under that name."""
    return _patch.install()


def uninstall() -> None:
    global last_stats
    stats = _patch.uninstall()
    if stats is not None:
        last_stats = stats

"""The inner engine named by ``observed.inner``: the built-in (plugin/builtin.py), Hermes'
directory loader, its plugin system's engine, or an entry point where Hermes' own plugin gates
would load it; with a fallback to the built-in that never leaves the agent without an engine."""

from __future__ import annotations

import copy
import logging
from typing import Any, Mapping, Optional, Tuple

from .. import host
from ..contract.vocabulary import PLUGIN_NAME
from .builtin import build_compressor
from .section import DEFAULT_INNER
from .state import _building

logger = logging.getLogger(__name__)


class InnerEngineError(RuntimeError):
    """The engine named by ``observed.inner`` could not be built."""


def build_inner(name: str, config: Mapping[str, Any]) -> Tuple[Any, str]:
    """Build the engine *name*; returns ``(engine, route)`` or raises InnerEngineError.

    route: ``"builtin"``, ``"bundled"`` (``plugins/context_engine/<name>/``),
    ``"plugin"`` (the general plugin system's registered engine, deep-copied as
    the host does) or ``"entrypoint"`` (a ``hermes_agent.plugins`` entry point
    loaded directly).
    """
    name = (name or DEFAULT_INNER).strip()
    if name == PLUGIN_NAME:
        raise InnerEngineError(
            f"observed.inner: {name!r} would wrap the observed engine in itself")
    if name == DEFAULT_INNER:
        return build_compressor(config), "builtin"
    with _building():
        return _build_plugin_inner(name)


def _build_plugin_inner(name: str) -> Tuple[Any, str]:

    errors = []
    # 1. Hermes' directory loader (bundled dir; head: also $HERMES_HOME/plugins/<name>/)
    try:
        engine = host.load_directory_engine(name)
        if engine is not None:
            return engine, "bundled"
        errors.append(f"no plugins/context_engine/{name}/ engine")
    except Exception as exc:
        errors.append(f"directory loader: {type(exc).__name__}: {exc}")

    # 2. The engine another plugin registered with the general plugin system.
    try:
        candidate = host.plugin_system_engine()
    except Exception as exc:
        candidate = None
        errors.append(f"plugin system: {type(exc).__name__}: {exc}")
    if candidate is not None and _engine_name(candidate) == name:
        try:
            return copy.deepcopy(candidate), "plugin"
        except Exception as exc:
            raise InnerEngineError(
                f"the {name!r} engine registered by a plugin cannot be copied for this agent "
                f"({type(exc).__name__}: {exc}); Hermes would fall back to the built-in "
                f"compressor for it too") from exc
    if candidate is not None:
        errors.append(f"the plugin system's engine is {_engine_name(candidate)!r}")
    else:
        errors.append("no plugin registered a context engine")

    # 3. A pip plugin exposing the entry point but not (yet) loaded by Hermes: only where
    #    Hermes' own gates would load it (plugins.enabled, plugins.disabled, HERMES_SAFE_MODE).
    try:
        engine = _load_entry_point_engine(name)
        if engine is not None:
            return engine, "entrypoint"
    except PluginGatedError:
        raise
    except Exception as exc:
        errors.append(f"entry point {name!r}: {type(exc).__name__}: {exc}")

    raise InnerEngineError(f"context engine {name!r} not found ({'; '.join(errors)})")


class PluginGatedError(InnerEngineError):
    """Hermes' plugin gates keep the entry-point engine *name* from running (bare Hermes
    falls back to its built-in compressor); ``reason`` says which gate, ``fix`` what lifts it."""

    def __init__(self, name: str, reason: str):
        self.name, self.reason = name, reason
        if reason.startswith(host.SAFE_MODE_ENV):
            self.fix = f"unset {host.SAFE_MODE_ENV} (bare Hermes does not run {name!r} either while it is set)"
        elif "plugins.disabled" in reason:
            self.fix = f"remove {name!r} from plugins.disabled (`hermes plugins enable {name}`)"
        else:
            self.fix = f"`hermes plugins enable {name}` (adds it to plugins.enabled)"
        super().__init__(
            f"Hermes would not run the context engine {name!r}: {reason}; bare Hermes runs its "
            f"built-in compressor instead, and so does observed")


_gate_notices: set = set()   # (name, reason) already logged by this process


def build_inner_or_fallback(name: str, config: Mapping[str, Any]):
    try:
        engine, route = build_inner(name, config)
        logger.debug("observed: inner engine %r built via %s", name, route)
        return engine
    except PluginGatedError as exc:
        if (exc.name, exc.reason) not in _gate_notices:
            _gate_notices.add((exc.name, exc.reason))
            logger.warning("observed: %s (fix: %s)", exc, exc.fix)
    except Exception as exc:
        logger.warning(
            "observed: cannot build the inner context engine %r: %s. Falling back to "
            "the built-in compressor (check `observed.inner` and run `observed-engine doctor`).",
            name, exc,
        )
    return build_compressor(config)


class _Collector:
    """A minimal plugin context: keeps the engine, ignores other registrations."""

    def __init__(self) -> None:
        self.engine = None

    def register_context_engine(self, engine) -> None:
        self.engine = engine

    def __getattr__(self, attr):
        if attr.startswith("register_"):
            return lambda *_a, **_k: None
        raise AttributeError(attr)


def _load_entry_point_engine(name: str):
    """The engine of the ``hermes_agent.plugins`` entry point *name*, loaded the way the host's
    plugin system loads it (``register(ctx)``, or a class); None without such an entry point.
    Raises PluginGatedError where the host's gates would not load that plugin."""
    eps = [ep for ep in host.entry_points()
           if ep.name == name and ep.value.split(":")[0] not in ("observed_engine.plugin", "observed_engine.hermes_plugin")]
    reason = host.plugin_gate(name) if eps else None
    if reason is not None:
        raise PluginGatedError(name, reason)
    for ep in eps:
        target = ep.load()
        register_fn = getattr(target, "register", None)
        if callable(register_fn):
            collector = _Collector()
            register_fn(collector)
            if collector.engine is not None:
                return collector.engine
        elif isinstance(target, type):
            return target()
    return None


def _engine_name(engine) -> Optional[str]:
    try:
        return engine.name
    except Exception:  # an engine whose name property raises: None, which matches no requested name
        return None

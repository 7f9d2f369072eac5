"""The Hermes plugin side: ``context.engine: observed`` wraps the operator's engine.

Hermes finds this module by either route:

* the bundled directory ``plugins/context_engine/observed/`` (copied there by
  ``observed-engine install``), whose ``register(ctx)`` delegates here; Hermes
  calls it once per agent;
* the general plugin system: the ``hermes_agent.plugins`` entry point
  ``observed = "observed_engine.hermes_plugin"`` (that module re-exports this one), which
  ``observed-engine install --route entrypoint`` writes (the package itself declares none,
  so installing it changes nothing in Hermes), plus ``plugins.enabled: [observed]``; Hermes
  calls :func:`register` once per process and deep-copies the engine for every agent.

An inner engine from a pip plugin is built only where Hermes' own plugin gates would load
that plugin (``plugins.enabled``, ``plugins.disabled``, ``HERMES_SAFE_MODE``); otherwise the
built-in is observed, as bare Hermes would run it.

:func:`register` reads the ``observed:`` section of Hermes' ``config.yaml``,
builds the inner engine named by ``observed.inner`` (default: the built-in
``compressor``, constructed from ``compression.*`` / ``model.*`` the way the host
would) and registers ``observe(inner, settings={..., "name": "observed"})``.

It never leaves the agent without an engine: a broken ``observed:`` section
falls back to the defaults, an inner engine that cannot be built falls back to
the built-in compressor, and every failure is logged with the key or engine
name and the reason.
"""

from __future__ import annotations

import copy
import logging
import threading
from typing import Any, Dict, Mapping, Optional, Tuple

from .. import host
from ..contract.hooks import OPTIONAL_HOOKS
from ..contract.vocabulary import PLUGIN_NAME
from .builtin import PLACEHOLDER_CONTEXT_LENGTH, build_compressor  # noqa: F401  (re-exported)

logger = logging.getLogger(__name__)

DEFAULT_INNER = "compressor"
ENTRY_POINTS_GROUP = host.ENTRY_POINTS_GROUP

_state = threading.local()


class InnerEngineError(RuntimeError):
    """The engine named by ``observed.inner`` could not be built."""


class _building:
    """Marks this thread as building an engine: a register() call re-entered
    through Hermes' plugin discovery (our own entry point being enabled too)
    does nothing instead of building a second engine."""

    def __enter__(self):
        _state.depth = getattr(_state, "depth", 0) + 1
        return self

    def __exit__(self, *exc):
        _state.depth -= 1
        return False


class dry_run:
    """On this thread, engines the plugin builds are observed with ``enabled: false`` (named
    ``observed``, no exporter, store or thread): for ``observed-engine doctor`` and ``install``
    running the host's own selection to see what it would pick."""

    def __enter__(self):
        self._before = getattr(_state, "dry_run", False)
        _state.dry_run = True
        return self

    def __exit__(self, *exc):
        _state.dry_run = self._before
        return False


# ---------------------------------------------------------------------------
# Entry point
# ---------------------------------------------------------------------------

def register(ctx) -> None:
    """Hermes plugin entry: register the observed engine with *ctx*.

    Never raises: Hermes' directory loader hides exceptions from ``register``
    at debug level, so every failure is logged here instead.
    """
    if getattr(_state, "depth", 0):
        # Loading the inner engine through Hermes' plugin system re-entered us
        # (our own entry point is enabled too). The outer call registers.
        logger.debug("observed: nested register() call ignored")
        return
    try:
        with _building():
            engine = build_engine()
    except Exception as exc:  # pragma: no cover - build_engine already falls back
        logger.error("observed: could not build the observed engine: %s", exc, exc_info=True)
        return
    try:
        ctx.register_context_engine(engine)
    except Exception as exc:
        logger.error(
            "observed: Hermes refused the observed engine (%s: %s); it runs its built-in compressor. "
            "Check the install with `observed-engine doctor`.", type(exc).__name__, exc)
        return
    try:
        manager = getattr(ctx, "_manager", None)
        if manager is not None and getattr(manager, "_context_engine", engine) is not engine:
            other = getattr(manager, "_context_engine", None)
            logger.warning(
                "observed: Hermes kept the context engine %r that another plugin registered first and "
                "rejected observed's (it keeps one context engine plugin, in scan order): with "
                "context.engine: observed it falls back to its built-in compressor. Fix: "
                "`observed-engine install --route bundled` (Hermes' directory loader comes before its "
                "plugin system, and observed then wraps %r if observed.inner names it); "
                "`observed-engine doctor` shows what Hermes selects",
                getattr(other, "name", other), getattr(other, "name", "<name>"),
            )
    except Exception:  # the warning is advice; the registration already happened
        pass


def build_engine(config: Optional[Mapping[str, Any]] = None, *,
                 tracer_provider=None, meter_provider=None):
    """Build ``observe(inner, settings=...)`` from the Hermes config.

    *config* is the whole Hermes config mapping (default: ``load_config()``).
    """
    if config is None:
        config = load_hermes_config()
    section = observed_section(config)
    inner_name = section.get("inner", DEFAULT_INNER)
    inner = build_inner_or_fallback(inner_name, config)
    settings = {**section, "name": PLUGIN_NAME}
    if getattr(_state, "dry_run", False):
        settings["enabled"] = False       # a selection check: no exporter, store or thread
    try:
        from ..api import observe
    except ImportError as exc:
        logger.error("observed: the observed_engine package is incomplete (%s); "
                     "Hermes gets the bare %r engine", exc, _engine_name(inner))
        return inner
    try:
        return observe(inner, tracer_provider=tracer_provider,
                       meter_provider=meter_provider, settings=settings)
    except Exception as exc:
        logger.error(
            "observed: telemetry setup failed (%s: %s); retrying with the default "
            "`observed:` settings", type(exc).__name__, exc,
        )
    defaults = {"name": PLUGIN_NAME}
    if getattr(_state, "dry_run", False):
        defaults["enabled"] = False
    if "inner" in section:
        defaults["inner"] = section["inner"]
    try:
        return observe(inner, tracer_provider=tracer_provider,
                       meter_provider=meter_provider, settings=defaults)
    except Exception as exc:
        logger.error(
            "observed: cannot observe the %r engine (%s: %s); Hermes gets the bare "
            "engine, without telemetry", _engine_name(inner), type(exc).__name__, exc,
            exc_info=True,
        )
    return inner


# ---------------------------------------------------------------------------
# Config
# ---------------------------------------------------------------------------

def load_hermes_config() -> Dict[str, Any]:
    """Hermes' merged config for the current ``HERMES_HOME``; ``{}`` if unreadable."""
    return host.load_config()


def observed_section(config: Mapping[str, Any]) -> Dict[str, Any]:
    """The validated ``observed:`` section; the defaults (keeping a valid
    ``inner``) with an error log naming the bad key if it does not validate."""
    raw = config.get(PLUGIN_NAME) if isinstance(config, Mapping) else None
    if raw is None:
        return {}
    error = validate_section(raw)
    if error is None:
        return dict(raw)
    fallback: Dict[str, Any] = {}
    inner = raw.get("inner") if isinstance(raw, Mapping) else None
    if isinstance(inner, str) and inner.strip():
        fallback["inner"] = inner.strip()
    logger.error(
        "observed: invalid config.yaml section: %s. Using the default `observed:` "
        "settings%s until it is fixed (check with `observed-engine doctor`).",
        error, f" (inner engine still {fallback['inner']!r})" if fallback else "",
    )
    return fallback


def validate_section(raw: Any) -> Optional[str]:
    """None if the ``observed:`` mapping is valid, else the error message (naming the key)."""
    from ..settings import Settings, SettingsError
    try:
        settings = Settings.from_mapping(raw)
    except SettingsError as exc:
        return str(exc)
    except Exception as exc:  # a bug in parsing must not cost the agent its engine
        return f"observed: {type(exc).__name__}: {exc}"
    if settings.inner.strip() == PLUGIN_NAME:
        return (f"observed.inner: {settings.inner!r} would wrap the observed engine in itself; "
                f"name the engine to observe (default {DEFAULT_INNER!r})")
    return None


# ---------------------------------------------------------------------------
# Inner engines (the built-in: plugin/builtin.py)
# ---------------------------------------------------------------------------

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
           if ep.name == name and ep.value.split(":")[0] not in (__name__, "observed_engine.hermes_plugin")]
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
    except Exception:
        return None


# ---------------------------------------------------------------------------
# Introspection (used by `observed-engine doctor`)
# ---------------------------------------------------------------------------

def overridden_hooks(engine) -> Dict[str, bool]:
    """Which optional hooks *engine* overrides relative to Hermes' ABC: the head host's own
    test (``contract.hooks.overrides_default``), the one the wrapper uses too."""
    return {hook: host.overrides_abc_default(engine, hook) for hook in OPTIONAL_HOOKS}


def tool_names(engine) -> list:
    try:
        schemas = engine.get_tool_schemas() or []
    except Exception:
        return []
    names = []
    for schema in schemas:
        if isinstance(schema, Mapping):
            names.append(schema.get("name") or (schema.get("function") or {}).get("name") or "?")
    return names

"""The gates of Hermes' general plugin system and a dry run of its engine selection, for
``install`` and ``doctor`` to say what Hermes picks and why."""

from __future__ import annotations

import logging
import os
from typing import Any, Dict, Mapping, Optional

from ..contract.vocabulary import BUILTIN_ENGINE
from .home import load_config, truthy

logger = logging.getLogger(__name__)


SAFE_MODE_ENV = "HERMES_SAFE_MODE"


def plugin_gates() -> Dict[str, Any]:
    """The gates of Hermes' general plugin system, read as Hermes reads them (its own
    functions where this Hermes has them): ``safe_mode`` (``HERMES_SAFE_MODE``: no plugin
    discovery at all), ``enabled`` (``plugins.enabled`` as a set; None when the key is missing
    or not a list: nothing is enabled) and ``disabled`` (``plugins.disabled``, which wins)."""
    safe_mode = False
    if _honours_safe_mode():
        try:
            from utils import env_var_enabled

            safe_mode = bool(env_var_enabled(SAFE_MODE_ENV))
        except Exception:  # no utils.env_var_enabled (older Hermes): HERMES_SAFE_MODE read with truthy()
            safe_mode = truthy(os.environ.get(SAFE_MODE_ENV), False)
    try:
        from hermes_cli.plugins import _get_disabled_plugins, _get_enabled_plugins

        enabled = _get_enabled_plugins()
        disabled = _get_disabled_plugins()
    except Exception:  # an older Hermes without these helpers: plugins.* read from config.yaml
        plugins_cfg = load_config(log_errors=False).get("plugins")
        plugins_cfg = plugins_cfg if isinstance(plugins_cfg, Mapping) else {}
        raw_enabled, raw_disabled = plugins_cfg.get("enabled"), plugins_cfg.get("disabled")
        enabled = set(raw_enabled) if isinstance(raw_enabled, list) else None
        disabled = set(raw_disabled) if isinstance(raw_disabled, list) else set()
    return {"safe_mode": safe_mode, "enabled": None if enabled is None else set(enabled),
            "disabled": set(disabled or ())}


_SAFE_MODE_SUPPORT: Dict[str, bool] = {}


def _honours_safe_mode() -> bool:
    """Whether this Hermes' plugin discovery checks HERMES_SAFE_MODE (0.17.0 and later; 0.16.0
    loads plugins whatever it says): its plugin module's source names the variable."""
    try:
        import hermes_cli.plugins as hp
    except Exception:  # no plugin module to read: a current Hermes is assumed, as below
        return True
    key = getattr(hp, "__file__", None) or ""
    if key not in _SAFE_MODE_SUPPORT:
        try:
            import inspect

            _SAFE_MODE_SUPPORT[key] = SAFE_MODE_ENV in inspect.getsource(hp)
        except Exception:
            _SAFE_MODE_SUPPORT[key] = True      # no source to read: assume a current Hermes
    return _SAFE_MODE_SUPPORT[key]


def plugin_gate(name: str) -> Optional[str]:
    """None when Hermes' general plugin system would load the plugin *name* (an entry point or
    a ``$HERMES_HOME/plugins/`` plugin), else why not, in the operator's terms."""
    gates = plugin_gates()
    if gates["safe_mode"]:
        return f"{SAFE_MODE_ENV}=1 is set (Hermes loads no plugin)"
    if name in gates["disabled"]:
        return f"{name!r} is in plugins.disabled"
    if gates["enabled"] is None or name not in gates["enabled"]:
        return f"{name!r} is not in plugins.enabled"
    return None


def simulate_selection(engine_name: str, *, directory: bool = True) -> Dict[str, Any]:
    """What this Hermes would select for ``context.engine: <engine_name>`` with the current
    config and environment: its own loaders in its own order (the directory loader, then
    the general plugin system's engine if its name matches, deep-copied), run on a fresh
    plugin manager that replaces the process's one for the call. Returns ``engine`` (None:
    the host falls back to its built-in compressor), ``route`` ("directory", "plugin",
    "builtin"), ``plugin_engine`` (the name of the engine the plugin system holds, or None),
    ``registrations`` (every ``register_context_engine`` call of the scan, in order:
    ``{"plugin", "engine", "accepted"}``), ``safe_mode`` and ``error``. Raises ImportError
    without Hermes. Runs the plugins' ``register()`` as Hermes would. ``directory=False``:
    the plugin system only (what an entry-point route would meet)."""
    import copy

    import hermes_cli.plugins as hp

    from plugins.context_engine import load_context_engine

    out: Dict[str, Any] = {"engine": None, "route": "builtin", "plugin_engine": None,
                           "registrations": [], "safe_mode": plugin_gates()["safe_mode"], "error": None}
    saved_manager, saved_context = hp._plugin_manager, hp.PluginContext
    records = out["registrations"]

    class RecordingContext(saved_context):
        def register_context_engine(self, engine) -> None:
            super().register_context_engine(engine)
            try:
                engine_label = engine.name
            except Exception:  # an engine whose name raises: recorded without a name (None)
                engine_label = None
            records.append({"plugin": self.manifest.name, "engine": engine_label,
                            "accepted": self._manager._context_engine is engine})

    hp._plugin_manager = hp.PluginManager()
    hp.PluginContext = RecordingContext
    try:
        if engine_name and engine_name != BUILTIN_ENGINE:
            try:
                out["engine"] = load_context_engine(engine_name) if directory else None
            except Exception as exc:
                out["error"] = f"directory loader: {type(exc).__name__}: {exc}"
            if out["engine"] is not None:
                out["route"] = "directory"
            else:
                candidate = hp.get_plugin_context_engine()
                try:
                    out["plugin_engine"] = None if candidate is None else candidate.name
                except Exception:  # the plugin engine's name raised: "?", which matches no requested name
                    out["plugin_engine"] = "?"
                if candidate is not None and out["plugin_engine"] == engine_name:
                    try:
                        out["engine"], out["route"] = copy.deepcopy(candidate), "plugin"
                    except Exception as exc:
                        out["error"] = f"the plugin engine cannot be copied: {type(exc).__name__}: {exc}"
    finally:
        hp._plugin_manager, hp.PluginContext = saved_manager, saved_context
    return out

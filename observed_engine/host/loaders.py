"""Where the host finds context engines (its bundled and user directories, entry points, a
plugin's ``plugin.yaml``) and its own loaders."""

from __future__ import annotations

import importlib.metadata as md
import logging
from pathlib import Path
from typing import Any, Dict, List, Optional

logger = logging.getLogger(__name__)


ENTRY_POINTS_GROUP = "hermes_agent.plugins"


def bundled_engines_dir() -> Optional[Path]:
    """``plugins/context_engine/`` inside the installed Hermes, or None."""
    try:
        import plugins.context_engine as pce
    except Exception:  # no Hermes (no plugins.context_engine): no bundled directory
        return None
    return Path(pce.__file__).resolve().parent


def supports_user_engines() -> bool:
    """Head Hermes also loads engines from ``$HERMES_HOME/plugins/<name>/``."""
    try:
        import plugins.context_engine as pce
    except Exception:  # no Hermes' engine loader: no user engine directories either
        return False
    return hasattr(pce, "find_engine_dir") or hasattr(pce, "_iter_engine_dirs")


def directory_engine_names() -> list:
    """The engines Hermes' directory loader can find by name, without importing any: the
    ``plugins/context_engine/<name>/`` directories with an ``__init__.py`` (and, where this
    Hermes has them, its user-installed engine directories). Empty without Hermes."""
    try:
        import plugins.context_engine as pce
    except Exception:  # no Hermes' engine loader: no directory engine names
        return []
    names = set()
    iterate = getattr(pce, "_iter_engine_dirs", None)
    if callable(iterate):
        try:
            names.update(name for name, path in iterate() if (Path(path) / "__init__.py").is_file())
        except Exception:  # an older loader's iterator: the bundled directory is read below
            pass
    base = getattr(pce, "_CONTEXT_ENGINE_PLUGINS_DIR", None)
    try:
        for child in Path(base).iterdir() if base is not None else ():
            if not child.name.startswith(("_", ".")) and (child / "__init__.py").is_file():
                names.add(child.name)
    except (OSError, TypeError):
        pass
    return sorted(names)


def entry_points():
    """The ``hermes_agent.plugins`` entry points installed in this environment."""
    try:
        return list(md.entry_points(group=ENTRY_POINTS_GROUP))
    except Exception:  # broken distribution metadata: no entry points known
        return []


def load_directory_engine(name: str):
    """Hermes' directory loader (``plugins/context_engine/<name>/``; head: also the user
    directory): the engine, or None. Raises what the loader raises."""
    from plugins.context_engine import load_context_engine

    return load_context_engine(name)


def plugin_system_engine():
    """The context engine a plugin registered with Hermes' general plugin system, or None.
    Raises what the plugin manager raises."""
    from hermes_cli.plugins import get_plugin_context_engine

    return get_plugin_context_engine()


def reset_plugin_discovery() -> None:
    """Forget Hermes' plugin manager, so the next agent discovers plugins (and reads the
    ``observed:`` section) afresh for the current HERMES_HOME. No-op without Hermes."""
    try:
        import hermes_cli.plugins as hp
    except Exception:  # no Hermes: no plugin manager to forget (a no-op, as documented)
        return
    hp._plugin_manager = None


def engine_manifest(name: str, problems: Optional[List[str]] = None) -> Optional[Dict[str, Any]]:
    """The ``plugin.yaml`` an engine ships (a bundled directory engine's, or a pip plugin's next
    to the module its entry point names), parsed; None when there is none. A ``plugin.yaml`` that
    cannot be read or parsed is skipped and, given ``problems``, named there (path: error)."""
    import importlib.util

    import yaml

    candidates: List[Path] = []
    bundled = bundled_engines_dir()
    if bundled is not None:
        candidates.append(bundled / name / "plugin.yaml")
    for ep in entry_points():
        if ep.name != name and ep.name.replace("_", "-") != name:
            continue
        try:
            spec = importlib.util.find_spec(ep.module.split(":")[0])
        except Exception:  # the entry point's package fails to import or is malformed: no manifest there
            spec = None
        if spec is not None and spec.origin:
            candidates.append(Path(spec.origin).parent / "plugin.yaml")
    for path in candidates:
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8")) if path.is_file() else None
        except Exception as exc:  # unreadable or invalid plugin.yaml: the next candidate, else None
            if problems is not None:
                problems.append(f"{path}: {' '.join(str(exc).split())}")
            continue
        if isinstance(data, dict):
            return data
    return None

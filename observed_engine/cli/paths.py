"""Where the CLI reads and writes: config.yaml, its own state file, the plugin
directory, and the plugin files it ships."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List, Optional

from .. import host
from ..contract.vocabulary import PLUGIN_NAME
from .errors import CliError

STATE_FILE = "install.json"          # under $HERMES_HOME/observed/
MARKER_FILE = ".installed-by-observed-engine"
BACKUP_PREFIX = "config.yaml.observed-backup-"

# The Hermes directory plugin's files ship inside this package, in
# observed_engine/hermes_plugin_dir/ (the one copy to edit; pyproject.toml's
# package-data carries plugin.yaml into the wheel). The repository's
# plugins/context_engine/observed/ holds relative symlinks to it.
PLUGIN_FILES_DIR = "hermes_plugin_dir"
PLUGIN_FILE_NAMES = ("__init__.py", "plugin.yaml")


def config_path(home: Path) -> Path:
    return home / "config.yaml"


def state_path(home: Path) -> Path:
    return home / "observed" / STATE_FILE


def user_plugin_dir(home: Path) -> Path:
    return home / "plugins" / PLUGIN_NAME


def entry_point_installed() -> bool:
    """This environment has the ``observed`` entry point of group ``hermes_agent.plugins``."""
    return any(ep.name == PLUGIN_NAME for ep in host.entry_points())


def plugin_source_files() -> Dict[str, str]:
    """The plugin directory's files, as ``install`` writes them: read from the
    installed package (``observed_engine/hermes_plugin_dir/``) through
    importlib.resources, so a wheel install needs no source checkout."""
    from importlib.resources import files

    base = files("observed_engine").joinpath(PLUGIN_FILES_DIR)
    try:
        return {name: base.joinpath(name).read_text(encoding="utf-8") for name in PLUGIN_FILE_NAMES}
    except OSError as exc:
        raise CliError(f"this observed-engine installation lacks its plugin files ({exc}); "
                       f"fix: reinstall observed-engine") from exc


def read_state(home: Path) -> Dict[str, Any]:
    """What ``install`` remembered (the previous engine, routes, plugin dirs, backups); {} if
    nothing. A record that cannot be read, or is not what install writes, is a CliError:
    acting without it could restore the wrong engine."""
    path = state_path(home)
    try:
        text = path.read_text(encoding="utf-8")
    except (FileNotFoundError, NotADirectoryError):
        if path.parent.exists() and not path.parent.is_dir():
            raise CliError(f"{path.parent} is a file, where observed-engine keeps its state and store; "
                           f"fix: move that file away") from None
        return {}
    except (OSError, UnicodeDecodeError) as exc:
        raise CliError(f"cannot read {path} (observed-engine's record of this install): "
                       f"{getattr(exc, 'strerror', None) or exc}; fix: move it away") from None
    try:
        state = json.loads(text)
    except ValueError:
        state = None
    problem = state_problem(state)
    if problem:
        raise CliError(f"{path} (observed-engine's record of this install) is damaged: {problem}; fix: move "
                       f"it away (install then records the current context.engine afresh)")
    return state


def state_problem(state: Any) -> Optional[str]:
    if not isinstance(state, dict):
        return "not a JSON object"
    for key in ("previous_engine",):
        if state.get(key) is not None and not isinstance(state[key], str):
            return f"{key} is not a name"
    for key in ("routes", "plugin_dirs", "backups"):
        value = state.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            return f"{key} is not a list of names"
    return None


def write_state(home: Path, state: Dict[str, Any]) -> None:
    path = state_path(home)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(state, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def home_uses(home: str, route: str) -> bool:
    """Whether the Hermes home *home* still uses what *route* installed: its record of the
    install (``observed/install.json``) is there and names the route. A home that was
    uninstalled, or deleted, does not."""
    try:
        state = json.loads(state_path(Path(home)).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(state, dict) and isinstance(state.get("routes"), list) and route in state["routes"]


# -- the marker in a plugin directory install wrote: which Hermes homes use it -------------------

def marker_homes(plugin_dir: Path) -> Optional[List[str]]:
    """The Hermes homes that installed the plugin directory *plugin_dir* (None: it holds no
    marker of ours). The bundled directory is one per Hermes installation, shared by every
    home on it; a marker of an older observed-engine names one home (``hermes_home``)."""
    marker = plugin_dir / MARKER_FILE
    if not marker.is_file():
        return None
    try:
        data = json.loads(marker.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    if not isinstance(data, dict):
        return []
    homes = data.get("homes")
    if isinstance(homes, list):
        return [h for h in homes if isinstance(h, str)]
    legacy = data.get("hermes_home")
    return [legacy] if isinstance(legacy, str) else []


def write_marker(plugin_dir: Path, homes: List[str]) -> None:
    (plugin_dir / MARKER_FILE).write_text(
        json.dumps({"package": "observed-engine", "homes": sorted(set(homes))}, indent=2) + "\n",
        encoding="utf-8")

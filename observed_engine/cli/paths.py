"""Where the CLI reads and writes: config.yaml, its own state file, the plugin
directory, and the plugin files it ships."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict

from .. import host
from .errors import CliError

PLUGIN_NAME = "observed"
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
    """What ``install`` remembered (the previous engine, routes, plugin dirs, backups); {} if nothing."""
    try:
        return json.loads(state_path(home).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def write_state(home: Path, state: Dict[str, Any]) -> None:
    path = state_path(home)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(state, indent=2, sort_keys=True) + "\n", encoding="utf-8")

"""``observed-engine uninstall``: restore the previous context engine and remove the
plugin copies ``install`` wrote (the ``observed:`` section, the store and the
config backups stay)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import List

from .. import host
from . import entry_point
from .paths import MARKER_FILE, PLUGIN_NAME, config_path, read_state, state_path, user_plugin_dir
from .yaml_edit import ConfigDoc


def _restore_config(doc: ConfigDoc, state: dict, out: List[str]) -> None:
    current = doc.get("context", "engine")
    if current == PLUGIN_NAME:
        previous = state.get("previous_engine")
        if previous is None and not state:
            inner = doc.get(PLUGIN_NAME, "inner")
            previous = inner if isinstance(inner, str) and inner not in ("compressor", PLUGIN_NAME) else None
        if previous and state.get("previous_engine_set", True):
            doc.set(("context", "engine"), previous)
            out.append(f"config: context.engine restored to {previous!r}")
        else:
            doc.delete(("context", "engine"))
            ctx_section = doc.get("context")
            if isinstance(ctx_section, dict) and not ctx_section:
                doc.delete(("context",))
            out.append("config: context.engine removed (Hermes uses its built-in compressor)")
    elif current is not None:
        out.append(f"config: context.engine is {current!r}; left as is")
    enabled = doc.get("plugins", "enabled")
    if isinstance(enabled, list) and PLUGIN_NAME in enabled and (
            state.get("added_to_plugins_enabled") or not state):
        enabled.remove(PLUGIN_NAME)
        if state.get("added_plugins_enabled_key") and not enabled:
            doc.delete(("plugins", "enabled"))
            if not doc.get("plugins"):
                doc.delete(("plugins",))
        out.append("config: observed removed from plugins.enabled")
    if state.get("removed_from_plugins_disabled"):
        disabled = doc.get("plugins", "disabled")
        if isinstance(disabled, list) and PLUGIN_NAME not in disabled:
            disabled.append(PLUGIN_NAME)
            out.append("config: observed back in plugins.disabled")


def cmd_uninstall(args) -> int:
    home = host.hermes_home(args.hermes_home)
    state = read_state(home)
    out: List[str] = []
    cfg_file = config_path(home)
    if cfg_file.exists():
        doc = ConfigDoc(cfg_file)
        _restore_config(doc, state, out)
        if doc.changed():
            backup = doc.save()
            if backup:
                out.append(f"config: backup of the installed config: {backup.name}")
        out.append("config: the `observed:` section is kept (inert without context.engine: observed)")

    dirs = set(state.get("plugin_dirs", []))
    dirs.add(str(user_plugin_dir(home)))
    bundled = host.bundled_engines_dir()
    if bundled is not None:
        dirs.add(str(bundled / PLUGIN_NAME))
    for d in sorted(dirs):
        path = Path(d)
        if path.is_dir() and (path / MARKER_FILE).exists():
            try:
                shutil.rmtree(path)
                out.append(f"plugin: removed {path}")
            except OSError as exc:
                out.append(f"plugin: could not remove {path}: {exc}")

    out.extend(entry_point.remove(home))

    if state:
        try:
            state_path(home).unlink()
        except OSError:
            pass
    out.append(f"kept: the telemetry store under {home / 'observed'} and the config backups")
    print("\n".join(out))
    return 0


def add_parser(sub, home_help: str) -> None:
    p = sub.add_parser("uninstall", help="restore the previous context engine and remove the plugin copy")
    p.add_argument("--hermes-home", metavar="DIR", help=home_help)
    p.set_defaults(func=cmd_uninstall)

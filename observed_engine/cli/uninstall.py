"""``observed-engine uninstall``: restore the previous context engine and remove the
plugin copies ``install`` wrote (the ``observed:`` section, the store and the
config backups stay).

What several Hermes homes share (the bundled plugin directory is one per Hermes
installation, the entry point one per Python environment) goes only with the last home
that installed it and still uses it; a home that does not exist, or where observed-engine
was never installed, is an error that changes nothing."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import List, Tuple

from .. import host
from ..contract.vocabulary import BUILTIN_ENGINE
from . import entry_point, inputs, paths
from .errors import CliError
from .paths import PLUGIN_NAME, config_path, read_state, state_path, user_plugin_dir
from .yaml_edit import ConfigDoc


def _restore_config(doc: ConfigDoc, state: dict, out: List[str]) -> None:
    current = doc.get("context", "engine")
    if current == PLUGIN_NAME:
        previous = state.get("previous_engine")
        if previous is None and not state:
            inner = doc.get(PLUGIN_NAME, "inner")
            previous = inner if isinstance(inner, str) and inner not in (BUILTIN_ENGINE, PLUGIN_NAME) else None
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
    home = inputs.home_dir(args.hermes_home, write=True)
    # read and checked before anything imports Hermes (see install.cmd_install)
    state = read_state(home)
    cfg_file = config_path(home)
    doc = ConfigDoc(cfg_file)
    inputs.check_shape(doc.data, cfg_file)
    with host.untouched_home(home):
        return _uninstall(home, state, doc)


def _plugin_dirs(home: Path, state: dict) -> List[Tuple[Path, str]]:
    """The plugin directories this home's install may have written, with their route."""
    dirs = {Path(d): "bundled" for d in state.get("plugin_dirs", [])}
    bundled = host.bundled_engines_dir()
    if bundled is not None:
        dirs.setdefault(bundled / PLUGIN_NAME, "bundled")
    dirs[user_plugin_dir(home)] = "user"
    return sorted(dirs.items())


def _plan_plugin_dirs(home: Path, state: dict) -> List[Tuple[Path, List[str]]]:
    """``(directory, homes that keep using it)`` for each plugin directory this home installed:
    an empty list means it goes. A directory shared by several homes (the bundled one is one
    per Hermes installation) stays while another home that installed it still uses it; one
    this home is not recorded in is another home's, and is left alone."""
    plan = []
    for path, route in _plugin_dirs(home, state):
        homes = paths.marker_homes(path) if path.is_dir() else None
        if homes is None:
            continue
        if route == "user" and path == user_plugin_dir(home):
            plan.append((path, []))
            continue
        if str(home) not in homes:
            continue
        plan.append((path, [h for h in homes if h != str(home) and paths.home_uses(h, route)]))
    return plan


def _installed_here(home: Path, state: dict, doc: ConfigDoc, plan) -> bool:
    """Whether observed-engine was ever installed in *home* (what is left after an uninstall,
    the inert ``observed:`` section, counts: a second uninstall is not an error)."""
    enabled = doc.get("plugins", "enabled")
    return bool(state or plan or entry_point.used_by(home)
                or doc.get("context", "engine") == PLUGIN_NAME or PLUGIN_NAME in doc.data
                or (isinstance(enabled, list) and PLUGIN_NAME in enabled))


def _uninstall(home: Path, state: dict, doc: ConfigDoc) -> int:
    out: List[str] = []
    cfg_file = config_path(home)
    plan = _plan_plugin_dirs(home, state)
    if not _installed_here(home, state, doc, plan):
        engine = doc.get("context", "engine")
        raise CliError(f"observed-engine is not installed in the Hermes home {home} (no {state_path(home)}, "
                       f"context.engine is {engine or 'not set'}, no plugin copy of its), so nothing was changed; "
                       f"fix: pass the --hermes-home that `observed-engine install` was run for")

    # -- checked before the first write ----------------------------------------------------------
    has_config = bool(doc.original) or cfg_file.exists()
    if has_config:
        _restore_config(doc, state, out)
        if doc.changed():
            inputs.writable_file(cfg_file, "Hermes' config file")
    for path, keep in plan:
        inputs.writable_dir(path if keep else path.parent, "the plugin directory")
    if state:
        inputs.writable_dir(state_path(home).parent, "observed-engine's directory in the Hermes home")

    if has_config:
        if doc.changed():
            backup = doc.save()
            if backup:
                out.append(f"config: backup of the installed config: {backup.name}")
        out.append("config: the `observed:` section is kept (inert without context.engine: observed)")

    for path, keep in plan:
        try:
            if keep:
                paths.write_marker(path, keep)
                out.append(f"plugin: {path} kept (still used by {', '.join(keep)})")
            else:
                shutil.rmtree(path)
                out.append(f"plugin: removed {path}")
                if path == user_plugin_dir(home) and state.get("created_user_plugins_dir"):
                    try:
                        path.parent.rmdir()          # the plugins/ install made, unless something else is in it
                        out.append(f"removed: {path.parent} (empty)")
                    except OSError:
                        pass
        except OSError as exc:
            out.append(f"plugin: could not update {path}: {exc}")

    recorded = state.get("entry_point_dir")
    out.extend(entry_point.remove(home, also_in=Path(recorded) if isinstance(recorded, str) else None))

    if state:
        try:
            state_path(home).unlink()
        except OSError:
            pass
    ours = state_path(home).parent
    try:
        ours.rmdir()                      # only when empty: no store, no demo store, no report
        out.append(f"removed: {ours} (empty)")
    except OSError:
        if ours.is_dir():
            out.append(f"kept: the telemetry store under {ours}")
    out.append("kept: the config backups (config.yaml.observed-backup-*)")
    print("\n".join(out))
    return 0


def add_parser(sub, home_help: str) -> None:
    p = sub.add_parser("uninstall", help="restore the previous context engine and remove the plugin copy")
    p.add_argument("--hermes-home", metavar="DIR", help=home_help)
    p.set_defaults(func=cmd_uninstall)

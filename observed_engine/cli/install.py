"""``observed-engine install``: put the plugin where the installed Hermes finds it and
set ``context.engine: observed``, remembering the previous engine (it becomes
``observed.inner`` and is what ``uninstall`` restores)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional

from .. import host
from . import paths
from .errors import CliError
from .paths import MARKER_FILE, PLUGIN_NAME, config_path, read_state, user_plugin_dir, write_state
from .yaml_edit import ConfigDoc

ROUTES = ("auto", "bundled", "user", "entrypoint")

DEFAULT_SECTION_COMMENT = (
    "observed-engine: telemetry for the context engine (spans, metrics, store).\n"
    "Every key is optional; see `observed-engine doctor`."
)


def default_section() -> Dict[str, Any]:
    return {
        "inner": "compressor",
        "store": {"retention_days": 14},
        "prometheus": {"enabled": False, "host": "127.0.0.1", "port": 9464},
        "capture_content": False,
    }


def resolve_route(route: str) -> str:
    if route != "auto":
        return route
    if host.supports_user_engines():
        return "user"
    bundled = host.bundled_engines_dir()
    if bundled is not None and os.access(bundled, os.W_OK):
        return "bundled"
    if paths.entry_point_installed():
        return "entrypoint"
    raise CliError(
        "no discovery route is usable: Hermes' plugins/context_engine/ is not writable "
        "and the observed-engine package is not pip-installed (no `hermes_agent.plugins` "
        "entry point). Fix: run with write access, or `pip install observed-engine` into "
        "Hermes' Python environment and use --route entrypoint"
    )


def place_plugin_dir(dest: Path, home: Path) -> bool:
    """Write the plugin directory at *dest*; returns True if anything changed."""
    files = paths.plugin_source_files()
    if dest.exists() and not (dest / MARKER_FILE).exists():
        existing = (dest / "__init__.py").read_text(encoding="utf-8") if (dest / "__init__.py").exists() else None
        if existing != files["__init__.py"]:
            raise CliError(f"{dest} exists and was not installed by observed-engine; "
                           f"move it away first")
    changed = False
    dest.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        target = dest / name
        if not target.exists() or target.read_text(encoding="utf-8") != text:
            target.write_text(text, encoding="utf-8")
            changed = True
    marker = dest / MARKER_FILE
    if not marker.exists():
        marker.write_text(json.dumps({"package": "observed-engine", "hermes_home": str(home)}) + "\n",
                          encoding="utf-8")
        changed = True
    return changed


def cmd_install(args) -> int:
    home = host.hermes_home(args.hermes_home)
    if args.inner is not None and args.inner.strip() == PLUGIN_NAME:
        raise CliError("--inner observed would wrap the observed engine in itself; "
                       "name the engine to observe (default: compressor)")
    route = resolve_route(args.route)
    out: List[str] = []

    # 1. the plugin where Hermes finds it
    plugin_dir: Optional[Path] = None
    if route == "bundled":
        base = host.bundled_engines_dir()
        if base is None:
            raise CliError("Hermes is not importable from this Python "
                           f"({sys.executable}); install observed-engine into Hermes' environment")
        plugin_dir = base / PLUGIN_NAME
    elif route == "user":
        plugin_dir = user_plugin_dir(home)
    elif route == "entrypoint" and not paths.entry_point_installed():
        raise CliError("the `observed` entry point of group hermes_agent.plugins is not "
                       "installed in this Python; fix: `pip install observed-engine` "
                       "into Hermes' environment")
    if plugin_dir is not None:
        try:
            changed = place_plugin_dir(plugin_dir, home)
        except PermissionError as exc:
            raise CliError(f"cannot write {plugin_dir}: {exc}; fix: rerun with write access "
                           f"or use --route entrypoint") from exc
        out.append(f"plugin: {plugin_dir} ({'written' if changed else 'already in place'})")

    # 2. config.yaml
    cfg_file = config_path(home)
    doc = ConfigDoc(cfg_file)
    state = read_state(home)
    current = doc.get("context", "engine")
    if "previous_engine" not in state:
        # first install (or config edited by hand): remember what to restore
        previous = current if current != PLUGIN_NAME else None
        state["previous_engine"] = previous
        state["previous_engine_set"] = current is not None and current != PLUGIN_NAME
    previous = state.get("previous_engine")

    doc.set(("context", "engine"), PLUGIN_NAME)
    section = doc.get(PLUGIN_NAME)
    if not isinstance(section, dict):
        doc.add_section(PLUGIN_NAME, default_section(), DEFAULT_SECTION_COMMENT)
        section = doc.get(PLUGIN_NAME)
    if args.inner:
        doc.set((PLUGIN_NAME, "inner"), args.inner.strip())
    elif previous and previous not in ("compressor", PLUGIN_NAME):
        current_inner = section.get("inner")
        if current_inner in (None, "compressor"):
            doc.set((PLUGIN_NAME, "inner"), previous)
        elif current_inner != previous:
            out.append(f"note: keeping observed.inner={current_inner!r} "
                       f"(the previous context.engine was {previous!r})")
    if route == "entrypoint":
        enabled = doc.get("plugins", "enabled")
        if not isinstance(enabled, list):
            doc.set(("plugins", "enabled"), [PLUGIN_NAME])
            state["added_plugins_enabled_key"] = True
            state["added_to_plugins_enabled"] = True
        elif PLUGIN_NAME not in enabled:
            enabled.append(PLUGIN_NAME)
            state["added_to_plugins_enabled"] = True

    if doc.changed():
        backup = doc.save()
        if backup:
            state.setdefault("backups", []).append(str(backup))
            out.append(f"config: {cfg_file} updated (backup {backup.name})")
        else:
            out.append(f"config: {cfg_file} created")
    else:
        out.append(f"config: {cfg_file} already set (context.engine: observed)")

    routes = set(state.get("routes", []))
    routes.add(route)
    state["routes"] = sorted(routes)
    if plugin_dir is not None:
        dirs = set(state.get("plugin_dirs", []))
        dirs.add(str(plugin_dir))
        state["plugin_dirs"] = sorted(dirs)
    state["hermes_version"] = host.hermes_version()
    write_state(home, state)

    inner = doc.get(PLUGIN_NAME, "inner", default="compressor")
    out.append(f"route: {route}; observing inner engine {inner!r}")
    if not doc.round_trip:
        out.append("note: ruamel.yaml is missing, config.yaml was rewritten with PyYAML "
                   "(comments dropped; the backup has them)")
    out.append("next: start Hermes as usual, then run `observed-engine doctor`")
    print("\n".join(out))
    return 0


def add_parser(sub, home_help: str) -> None:
    p = sub.add_parser("install", help="make Hermes use the observed engine (context.engine: observed)")
    p.add_argument("--hermes-home", metavar="DIR", help=home_help)
    p.add_argument("--inner", metavar="NAME",
                   help="engine to observe (default: the previous context.engine, else compressor)")
    p.add_argument("--route", choices=ROUTES, default="auto",
                   help="how Hermes finds the plugin: bundled (copy into Hermes' plugins/context_engine/), "
                        "user ($HERMES_HOME/plugins/observed/, newer Hermes), entrypoint "
                        "(plugins.enabled: [observed]); auto picks the first that works")
    p.set_defaults(func=cmd_install)

"""``observed-engine install``: put the plugin where the installed Hermes finds it and
set ``context.engine: observed``, remembering the previous engine (it becomes
``observed.inner`` and is what ``uninstall`` restores)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional

from .. import host, plugin
from . import entry_point, paths
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


def bundled_writable() -> bool:
    bundled = host.bundled_engines_dir()
    return bundled is not None and os.access(bundled, os.W_OK)


def directory_route() -> Optional[str]:
    """A directory route this Hermes loads context engines from, before its plugin system."""
    if host.supports_user_engines():
        return "user"
    if bundled_writable():
        return "bundled"
    return None


def resolve_route(route: str) -> str:
    if route != "auto":
        return route
    found = directory_route()
    if found is not None:
        return found
    site = entry_point.site_dir()
    if os.access(site, os.W_OK):
        return "entrypoint"
    raise CliError(
        f"no discovery route is usable: Hermes' plugins/context_engine/ ({host.bundled_engines_dir()}) "
        f"and this Python's {site} (for the entry point) are not writable. Fix: rerun with write "
        "access to Hermes' installation (--route bundled) or to its Python environment (--route entrypoint)"
    )


def directory_fix() -> str:
    """The install command that puts observed on a directory route, or what makes one possible."""
    found = directory_route()
    if found is not None:
        return f"`observed-engine install --route {found}`"
    return (f"make {host.bundled_engines_dir() or 'Hermes plugins/context_engine/'} writable, then "
            "`observed-engine install --route bundled`")


def entry_point_conflicts() -> List[Dict[str, Any]]:
    """The context-engine registrations other plugins make in Hermes' plugin system with the
    current config (its real scan, observed's own engine built dry). Hermes keeps one
    context engine plugin, the first its scan registers; scan order is not the order of
    plugins.enabled. Empty without Hermes."""
    try:
        with plugin.dry_run():
            found = host.simulate_selection(PLUGIN_NAME, directory=False)
    except ImportError:
        return []
    return [r for r in found["registrations"] if r["plugin"] != PLUGIN_NAME]


def check_entry_point_route(inner: Optional[str]) -> None:
    """Refuse the entry-point route where Hermes would not select observed through it."""
    if host.plugin_gates()["safe_mode"]:
        raise CliError(f"{host.SAFE_MODE_ENV}=1 is set: Hermes loads no plugin, so the entry-point route "
                       f"would not run observed. Fix: {directory_fix()} (Hermes' directory loader runs "
                       f"in safe mode too), or unset {host.SAFE_MODE_ENV}")
    others = entry_point_conflicts()
    if others:
        names = ", ".join(sorted({f"{r['plugin']!r} (engine {r['engine']!r})" for r in others}))
        lost = f" and {inner!r} with it" if inner and any(r["engine"] == inner for r in others) else ""
        raise CliError(
            f"the entry-point route cannot work here: the enabled plugin {names} registers a context "
            f"engine with Hermes' plugin system, which keeps only the first engine its scan registers "
            f"(scan order, not plugins.enabled order); when observed's is rejected Hermes finds no "
            f"'observed' and falls back to its built-in compressor, losing the observation{lost}. "
            f"Fix: {directory_fix()} (Hermes' directory loader comes before its plugin system; "
            f"observed then wraps the plugin's engine)")


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


def _hermes_described() -> str:
    hermes = host.hermes_installation()
    return hermes.describe() if hermes is not None else "this Python's Hermes"


def cmd_install(args) -> int:
    home = host.hermes_home(args.hermes_home)
    if args.inner is not None and args.inner.strip() == PLUGIN_NAME:
        raise CliError("--inner observed would wrap the observed engine in itself; "
                       "name the engine to observe (default: compressor)")
    route = resolve_route(args.route)
    out: List[str] = []
    if route == "user" and not host.supports_user_engines():
        raise CliError(
            f"{_hermes_described()} does not load context engines from $HERMES_HOME/plugins/: "
            f"{user_plugin_dir(home)} would not run, and `hermes plugins list` would show it as a plugin "
            f"that is not enabled. Fix: --route bundled (or entrypoint)")

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
    if route == "entrypoint":
        check_entry_point_route(args.inner or doc.get(PLUGIN_NAME, "inner") or previous)

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
        disabled = doc.get("plugins", "disabled")
        if isinstance(disabled, list) and PLUGIN_NAME in disabled:
            # plugins.disabled wins over plugins.enabled: the gate would keep observed off
            while PLUGIN_NAME in disabled:
                disabled.remove(PLUGIN_NAME)
            state["removed_from_plugins_disabled"] = True
            out.append("config: observed removed from plugins.disabled (it would keep the entry point off)")
        info = entry_point.write(home)
        out.append(f"entry point: {info} (hermes_agent.plugins: observed = {entry_point.MODULE})")
    else:
        # another route now: the entry point this command enabled would list (and load) a second observed
        enabled = doc.get("plugins", "enabled")
        if state.get("added_to_plugins_enabled") and isinstance(enabled, list) and PLUGIN_NAME in enabled:
            enabled.remove(PLUGIN_NAME)
            if state.get("added_plugins_enabled_key") and not enabled:
                doc.delete(("plugins", "enabled"))
                if not doc.get("plugins"):
                    doc.delete(("plugins",))
            out.append("config: observed removed from plugins.enabled (the entry-point route is replaced)")
        state.pop("added_to_plugins_enabled", None)
        state.pop("added_plugins_enabled_key", None)
        out.extend(entry_point.remove(home))
    inner_now = doc.get(PLUGIN_NAME, "inner", default="compressor")
    if isinstance(inner_now, str) and inner_now not in ("compressor", PLUGIN_NAME) \
            and any(ep.name == inner_now for ep in host.entry_points()):
        reason = host.plugin_gate(inner_now)
        if reason is not None:
            out.append(f"note: {reason}, so Hermes does not run the {inner_now!r} plugin, and observed "
                       f"observes the built-in compressor in its place, as bare Hermes runs it; to run "
                       f"{inner_now!r}: `hermes plugins enable {inner_now}`")

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
    hermes = host.hermes_installation()
    state["hermes_version"] = hermes.version if hermes is not None else None
    state["hermes_distribution"] = hermes.distribution if hermes is not None else None
    write_state(home, state)

    inner = doc.get(PLUGIN_NAME, "inner", default="compressor")
    out.append(f"route: {route}; observing inner engine {inner!r}")
    if not doc.round_trip:
        out.append("note: ruamel.yaml is missing, config.yaml was rewritten with PyYAML "
                   "(comments dropped; the backup has them)")
    # what Hermes' own loader selects now (doctor's check): a route that does not work is said here
    from .doctor import Context, check_selection
    checked = Context(home=home, report={}, cfg=host.load_config(log_errors=False),
                      section=dict(doc.get(PLUGIN_NAME) or {}))
    checked.report["context_engine"] = PLUGIN_NAME
    failed = False
    for item in check_selection(checked):
        label = {"ok": "selection", "warn": "warning", "fail": "FAIL"}[item["status"]]
        out.append(f"{label}: {item['detail']}" + (f"\n       fix: {item['fix']}" if item.get("fix") else ""))
        failed = failed or item["status"] == "fail"
    out.append("next: start Hermes as usual, then run `observed-engine doctor`")
    print("\n".join(out))
    return 1 if failed else 0


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

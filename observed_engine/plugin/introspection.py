"""What ``observed-engine doctor`` reports of an engine: the hooks it overrides, its tools."""

from __future__ import annotations

from typing import Dict, Mapping, Optional, Tuple

from .. import host
from ..contract.hooks import OPTIONAL_HOOKS


def overridden_hooks(engine) -> Dict[str, bool]:
    """Which optional hooks *engine* overrides relative to Hermes' ABC: the head host's own
    test (``contract.hooks.overrides_default``), the one the wrapper uses too."""
    return {hook: host.overrides_abc_default(engine, hook) for hook in OPTIONAL_HOOKS}


def tool_report(engine) -> Tuple[list, Optional[str]]:
    """``(names, problem)``: the names of the tools *engine* offers, and what its
    ``get_tool_schemas()`` raised, if it raised (then no names)."""
    try:
        schemas = engine.get_tool_schemas() or []
    except Exception as exc:
        return [], f"{type(exc).__name__}: {exc}"
    names = []
    for schema in schemas:
        if isinstance(schema, Mapping):
            names.append(schema.get("name") or (schema.get("function") or {}).get("name") or "?")
    return names, None


def tool_names(engine) -> list:
    """The names of the tools *engine* offers; none when its ``get_tool_schemas()`` raises."""
    return tool_report(engine)[0]

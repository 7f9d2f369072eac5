"""Engine variants: ``engine@key=value,key=value`` in ``--engines`` and in ``tune``'s grid.

A variant is an engine with some settings changed for the replay only, validated against the
keys that engine's own configuration accepts, typed by its defaults. When editing: each engine
kind has its own source of keys and way of applying them (``compression:`` for the built-in,
``LCM_*`` variables for lossless-hermes, a plugin's ``config.yaml`` section); a bad key or
value raises :class:`VariantError` with one line saying which and why.

The full account: docs/design/internals.md, *observed_engine/compare/variants.py*.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from .. import host
from ..contract.vocabulary import BUILTIN_ENGINE, PLUGIN_NAME

BUILTIN = BUILTIN_ENGINE      # Hermes' own ContextCompressor, configured by compression.*
OBSERVED = PLUGIN_NAME
AUX_PREFIX = "auxiliary.compression."

# Engines that read their settings from the environment instead of config.yaml.
ENV_ROUTES = {"lossless-hermes": "LCM_"}

TRUE = ("true", "yes", "on", "1")
FALSE = ("false", "no", "off", "0")


class VariantError(ValueError):
    """A variant that cannot be replayed as written (one line, for the CLI's exit 2)."""


def _unit_open(v: float) -> Optional[str]:
    return None if 0 < v <= 1 else "must be in (0, 1]"


def _ratio(v: float) -> Optional[str]:
    return None if 0.10 <= v <= 0.80 else "must be within 0.10-0.80 (the built-in clamps it there)"


def _non_negative(v: int) -> Optional[str]:
    return None if v >= 0 else "must be >= 0"


def _positive(v: float) -> Optional[str]:
    return None if v > 0 else "must be > 0"


# The built-in's ranges (agent/context_compressor.py and agent/agent_init.py of 0.19.0).
BUILTIN_CHECKS = {
    "threshold": _unit_open,
    "target_ratio": _ratio,
    "protect_last_n": _non_negative,
    "protect_first_n": _non_negative,
    "hygiene_hard_message_limit": _positive,
    "codex_app_server_auto": lambda v: None if v in ("native", "hermes", "off") else "must be native, hermes or off",
    AUX_PREFIX + "timeout": _positive,
}


@dataclass(frozen=True)
class Schema:
    """What one engine accepts: ``keys`` (dotted for nested sections) and their defaults."""

    engine: str
    keys: Mapping[str, Any]
    route: str                       # "compression", "section" (config.yaml <engine>:) or "env"
    source: str                      # where the keys come from, for messages
    checks: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Variant:
    label: str
    engine: str
    settings: Tuple[Tuple[str, Any], ...] = ()
    route: str = "compression"

    @property
    def current(self) -> bool:
        """No setting changed: the operator's current settings."""
        return not self.settings

    def as_dict(self) -> Dict[str, Any]:
        return dict(self.settings)

    def apply(self, cfg: Dict[str, Any]) -> Dict[str, str]:
        """Write the settings into the replay's ``config.yaml`` mapping ``cfg`` (in place);
        the environment variables the replay sets while it runs (the env route)."""
        env: Dict[str, str] = {}
        for key, value in self.settings:
            if self.route == "env":
                env[ENV_ROUTES[self.engine] + key.upper()] = _env_text(value)
                continue
            if key.startswith(AUX_PREFIX):
                path = ["auxiliary", "compression"] + key[len(AUX_PREFIX):].split(".")
            elif self.route == "compression":
                path = ["compression"] + key.split(".")
            else:
                path = [self.engine] + key.split(".")
            node = cfg
            for part in path[:-1]:
                if not isinstance(node.get(part), dict):
                    node[part] = {}
                node = node[part]
            node[path[-1]] = copy.deepcopy(value)
        return env

    def config_yaml(self) -> str:
        """The settings as a ``config.yaml`` fragment to paste (the env route: the variables)."""
        if self.route == "env":
            return "\n".join(f"{ENV_ROUTES[self.engine]}{k.upper()}={_env_text(v)}" for k, v in self.settings)
        cfg: Dict[str, Any] = {}
        self.apply(cfg)
        import yaml

        return yaml.safe_dump(cfg, sort_keys=False).rstrip("\n")


def _env_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)


def _flatten(mapping: Mapping[str, Any], prefix: str = "") -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for key, value in mapping.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(_flatten(value, name + "."))
        else:
            out[name] = value
    return out


def schema_for(engine: str, user_config: Optional[Mapping[str, Any]] = None) -> Schema:
    """The settings ``engine`` accepts (see the module docstring); raises VariantError when they
    cannot be known (a plugin that declares none)."""
    if engine == BUILTIN:
        keys = host.config_defaults("compression")
        if not keys:
            raise VariantError("the installed Hermes has no compression defaults to validate the built-in's "
                               "settings against; fix: install a supported hermes-agent")
        keys.update({AUX_PREFIX + k: v for k, v in host.config_defaults("auxiliary", "compression").items()
                     if not isinstance(v, dict)})
        return Schema(engine, keys, "compression", "Hermes' compression: section", BUILTIN_CHECKS)
    problems: list = []
    manifest = host.engine_manifest(engine, problems) or {}
    declared = manifest.get("config") if isinstance(manifest.get("config"), dict) else None
    if engine in ENV_ROUTES and declared:
        flat = {k: v for k, v in declared.items() if not isinstance(v, dict)}
        return Schema(engine, flat, "env", f"{engine}'s plugin.yaml (set as {ENV_ROUTES[engine]}* variables)")
    if declared:
        return Schema(engine, _flatten(declared), "section", f"{engine}'s plugin.yaml")
    section = (user_config or {}).get(engine)
    if isinstance(section, dict) and section:
        return Schema(engine, _flatten(section), "section", f"the {engine}: section of config.yaml")
    if problems:
        raise VariantError(f"cannot validate settings for engine {engine!r}: its plugin.yaml cannot be read: "
                           f"{problems[0]}; fix: correct the file, or reinstall the engine")
    raise VariantError(f"cannot validate settings for engine {engine!r}: it ships no plugin.yaml with a config: "
                       f"section and config.yaml has no {engine}: section; fix: install it, or give its settings in "
                       f"config.yaml's {engine}: section")


def _typed(key: str, text: str, default: Any, route: str) -> Any:
    """``text`` as the type of ``default``; raises VariantError."""
    t = text.strip()
    if isinstance(default, bool):
        if t.lower() in TRUE:
            return True
        if t.lower() in FALSE:
            return False
        raise VariantError(f"{key}={text}: must be true or false; fix: {key}=true")
    if isinstance(default, int):
        try:
            return int(t)
        except ValueError:
            raise VariantError(f"{key}={text}: must be an integer; fix: {key}={default}") from None
    if isinstance(default, float):
        try:
            value = float(t)
        except ValueError:
            raise VariantError(f"{key}={text}: must be a number; fix: {key}={default}") from None
        if not math.isfinite(value):
            raise VariantError(f"{key}={text}: must be a finite number; fix: {key}={default}")
        return value
    if default is None:
        if t.lower() in ("null", "none", "~"):
            return None
        for kind in (int, float):
            try:
                value = kind(t)
            except ValueError:
                continue
            if kind is float and not math.isfinite(value):
                raise VariantError(f"{key}={text}: must be a finite number; fix: a finite number")
            return value
        return t
    if isinstance(default, (list, dict)):
        raise VariantError(f"{key}: a {type(default).__name__} setting cannot be given as key=value; fix: "
                           f"set it in config.yaml")
    return t if route != "env" else t


def validate(schema: Schema, key: str, text: str) -> Any:
    key = key.strip()
    if key not in schema.keys:
        raise VariantError(f"{schema.engine}: unknown setting {key!r}; fix: one of {schema.source}'s "
                           f"{', '.join(sorted(schema.keys))}")
    value = _typed(key, text, schema.keys[key], schema.route)
    check = schema.checks.get(key)
    problem = check(value) if check and value is not None else None
    if problem is None and schema.route == "env" and (value == 0 or value == "") and not isinstance(value, bool):
        problem = f"{schema.engine} reads {value!r} as unset and would use its default"
    if problem:
        raise VariantError(f"{schema.engine}: {key}={text.strip()}: {problem}; fix: another {key}")
    return value


def make(engine: str, settings: Sequence[Tuple[str, str]], user_config: Optional[Mapping[str, Any]] = None,
         label: Optional[str] = None) -> Variant:
    """One variant of ``engine`` from ``(key, text)`` pairs (validated)."""
    engine = engine.strip()
    if not engine:
        raise VariantError("a variant without an engine name; fix: engine@key=value")
    if engine == OBSERVED:
        raise VariantError("'observed' is this tool's own wrapper; fix: name the engines it would wrap "
                           "(compressor, or a plugin's engine name)")
    if not settings:
        return Variant(label or engine, engine, (), "compression" if engine == BUILTIN else "section")
    schema = schema_for(engine, user_config)
    typed: Dict[str, Any] = {}
    for key, text in settings:
        if key.strip() in typed:
            raise VariantError(f"{engine}: {key.strip()} given twice in one variant; fix: give it once")
        typed[key.strip()] = validate(schema, key, text)
    text_label = label or f"{engine}@" + ",".join(f"{k.strip()}={t.strip()}" for k, t in settings)
    return Variant(text_label, engine, tuple(typed.items()), schema.route)


def parse_variants(value: str | Sequence[str], user_config: Optional[Mapping[str, Any]] = None) -> List[Variant]:
    """``--engines``: variants separated by commas, each ``engine`` or ``engine@key=value``; a
    ``key=value`` after a variant adds to it (``compressor@threshold=0.8,protect_last_n=10,
    lossless-hermes``). Duplicates (the same engine and settings) are kept once."""
    items = [value] if isinstance(value, str) else list(value)
    tokens = [t.strip() for item in items for t in str(item).split(",")]
    groups: List[Tuple[str, List[str]]] = []
    for token in tokens:
        if not token:
            continue
        if "@" in token:
            engine, _, first = token.partition("@")
            groups.append((engine, [first] if first.strip() else []))
        elif "=" in token:
            if not groups:
                raise VariantError(f"{token!r}: a setting before any engine; fix: engine@{token}")
            groups[-1][1].append(token)
        else:
            groups.append((token, []))
    out: List[Variant] = []
    seen = set()
    for engine, raw in groups:
        pairs = []
        for item in raw:
            key, eq, text = item.partition("=")
            if not eq or not key.strip():
                raise VariantError(f"{engine}@{item}: settings are key=value; fix: {engine}@key=value")
            pairs.append((key, text))
        variant = make(engine, pairs, user_config)
        identity = (variant.engine, variant.settings)
        if identity not in seen:
            seen.add(identity)
            out.append(variant)
    if not out:
        raise VariantError("no engine named; fix: --engines compressor,<name>...")
    return out


def as_variant(engine: str | Variant) -> Variant:
    """A plain engine name as the variant of its current settings."""
    if isinstance(engine, Variant):
        return engine
    return Variant(engine, engine, (), "compression" if engine == BUILTIN else "section")

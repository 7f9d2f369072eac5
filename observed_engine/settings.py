"""The ``observed:`` config section, parsed and validated.

Every key is optional. A bad value raises :class:`SettingsError` naming the
key, what was found and the default, so an operator can fix ``config.yaml``.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, Mapping, Optional

from .contract.records import field, fields, record, replace
from .contract.store_schema import default_store_path
from .contract.vocabulary import BUILTIN_ENGINE

DEFAULT_COMPRESS_TIMEOUT = 120.0   # the host's default compression.context_timeout_seconds


class SettingsError(ValueError):
    """A key of the ``observed:`` section has a value we cannot use."""


@record
class StoreSettings:
    enabled: bool = True
    path: Optional[str] = None          # None: HERMES_HOME/observed/telemetry.sqlite
    retention_days: float = 14.0


@record
class PrometheusSettings:
    enabled: bool = False
    host: str = "127.0.0.1"
    port: int = 9464


@record
class OtlpSettings:
    enabled: bool = False
    protocol: Optional[str] = None      # "grpc" | "http/protobuf"; None: OTEL_EXPORTER_OTLP_PROTOCOL or grpc
    endpoint: Optional[str] = None      # None: OTEL_EXPORTER_OTLP_* env vars
    export_interval_seconds: float = 10.0
    timeout_seconds: float = 5.0


@record
class Settings:
    inner: str = BUILTIN_ENGINE
    name: Optional[str] = None          # the engine name the host sees; None: the inner's name
    enabled: bool = True                # False: hooks pass straight through, no telemetry at all
    traces: bool = True
    metrics: bool = True
    capture_content: bool = False
    compress_timeout_seconds: Optional[float] = None
    tokenizer: str = "auto"
    queue_size: int = 100_000
    max_label_values: int = 64
    store: StoreSettings = field(default_factory=StoreSettings)
    prometheus: PrometheusSettings = field(default_factory=PrometheusSettings)
    otlp: OtlpSettings = field(default_factory=OtlpSettings)

    # -- parsing -------------------------------------------------------------

    @classmethod
    def from_mapping(
        cls,
        mapping: Optional[Mapping[str, Any]] = None,
        *,
        env: Optional[Mapping[str, str]] = None,
    ) -> Settings:
        env = os.environ if env is None else env
        if mapping is None:
            mapping = {}
        if isinstance(mapping, Settings):
            return mapping
        if not isinstance(mapping, Mapping):
            raise SettingsError(f"observed: expected a mapping of keys, got {type(mapping).__name__} {mapping!r}")
        values = _parse_section(cls, mapping, "observed")
        otlp = values.get("otlp", OtlpSettings())
        if not isinstance(mapping.get("otlp"), Mapping) or "enabled" not in mapping.get("otlp", {}):  # noqa: SIM102
            # The standard env var turns OTLP on unless the config says otherwise.
            if env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") \
                    or env.get("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"):
                otlp = replace(otlp, enabled=True)
        values["otlp"] = otlp
        return cls(**values)

    def store_path(self, hermes_home: os.PathLike | str) -> Path:
        """observed.store.path, else HERMES_HOME/observed/telemetry.sqlite. A relative
        store.path is relative to HERMES_HOME (where config.yaml is), not to the current
        directory of whichever process (gateway, cron, one-shot CLI) happens to run."""
        if self.store.path:
            path = Path(os.path.expanduser(self.store.path))
            if not path.is_absolute():
                path = Path(os.path.expanduser(os.fspath(hermes_home))) / path
            return path
        return default_store_path(hermes_home)

    def resolved_compress_timeout(self, host_timeout: Optional[float] = None) -> float:
        """observed.compress_timeout_seconds, else the host's (compression.context_timeout_seconds),
        else 120 s."""
        if self.compress_timeout_seconds:
            return float(self.compress_timeout_seconds)
        if host_timeout:
            return float(host_timeout)
        return DEFAULT_COMPRESS_TIMEOUT


_SECTIONS = {"store": StoreSettings, "prometheus": PrometheusSettings, "otlp": OtlpSettings}

# Upper bounds of the numeric keys (beyond them a value is a typo, and an unbounded wait
# would overflow the watchdog's and the exporters' timers). Every number must also be finite.
_MAXIMUM = {
    "observed.compress_timeout_seconds": 7 * 86400.0,
    "observed.queue_size": 10_000_000,
    "observed.max_label_values": 100_000,
    "observed.store.retention_days": 36_500.0,
    "observed.prometheus.port": 65_535,
    "observed.otlp.export_interval_seconds": 86_400.0,
    "observed.otlp.timeout_seconds": 3_600.0,
}


def _parse_section(dc, mapping: Mapping[str, Any], prefix: str) -> dict:
    known = {f.name: f for f in fields(dc)}
    out: dict = {}
    for key, raw in mapping.items():
        path = f"{prefix}.{key}"
        if key not in known:
            raise SettingsError(
                f"{path}: unknown key. Known keys of {prefix}: {', '.join(sorted(known))}"
            )
        default = known[key].default
        if key in _SECTIONS and prefix == "observed":
            sub = _SECTIONS[key]
            if raw is None:
                out[key] = sub()
                continue
            if isinstance(raw, bool):   # `store: false` is a common shorthand
                out[key] = sub(enabled=raw)
                continue
            if not isinstance(raw, Mapping):
                raise SettingsError(f"{path}: expected a mapping, got {raw!r}; default {sub()}")
            out[key] = sub(**_parse_section(sub, raw, path))
            continue
        out[key] = _coerce(path, raw, default, known[key].type)
    return out


def _coerce(path: str, raw: Any, default: Any, type_name: Any) -> Any:
    t = str(type_name)
    if raw is None:
        if "Optional" in t:
            return None
        return default
    if t == "bool":
        if isinstance(raw, bool):
            return raw
        if isinstance(raw, str) and raw.strip().lower() in ("true", "yes", "on", "1", "false", "no", "off", "0"):
            return raw.strip().lower() in ("true", "yes", "on", "1")
        raise SettingsError(f"{path}: expected true or false, got {raw!r}; default {default!r}")
    if t == "int":
        if isinstance(raw, bool) or not isinstance(raw, (int, str)):
            raise SettingsError(f"{path}: expected a whole number, got {raw!r}; default {default!r}")
        try:
            value = int(raw)
        except ValueError:
            raise SettingsError(f"{path}: expected a whole number, got {raw!r}; default {default!r}") from None
        if value <= 0 or value > _MAXIMUM.get(path, value):
            raise SettingsError(f"{path}: {value} is out of range (1 to {_MAXIMUM.get(path, 'any')}); "
                                f"default {default!r}")
        return value
    if "float" in t:
        if isinstance(raw, bool):
            raise SettingsError(f"{path}: expected a number of seconds/days, got {raw!r}; default {default!r}")
        try:
            value = float(raw)
        except (TypeError, ValueError):
            raise SettingsError(f"{path}: expected a number, got {raw!r}; default {default!r}") from None
        if not math.isfinite(value) or value <= 0:
            raise SettingsError(f"{path}: must be a positive, finite number, got {raw!r}; default {default!r}")
        if value > _MAXIMUM.get(path, value):
            raise SettingsError(f"{path}: {raw!r} is out of range (at most {_MAXIMUM[path]:g}); "
                                f"default {default!r}")
        return value
    if "str" in t:
        if not isinstance(raw, str) or not raw.strip():
            raise SettingsError(f"{path}: expected a non-empty string, got {raw!r}; default {default!r}")
        value = raw.strip()
        if path.endswith("otlp.protocol") and value not in ("grpc", "http/protobuf", "http"):
            raise SettingsError(f"{path}: expected 'grpc' or 'http/protobuf', got {raw!r}")
        return value
    return raw

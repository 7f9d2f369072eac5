"""The ``observed:`` section of Hermes' config.yaml: read, validated, and its safe fallback."""

from __future__ import annotations

import logging
from typing import Any, Dict, Mapping, Optional

from .. import host
from ..contract.vocabulary import BUILTIN_ENGINE, PLUGIN_NAME

logger = logging.getLogger(__name__)

DEFAULT_INNER = BUILTIN_ENGINE     # observed.inner when unset


def load_hermes_config() -> Dict[str, Any]:
    """Hermes' merged config for the current ``HERMES_HOME``; ``{}`` if unreadable."""
    return host.load_config()


def observed_section(config: Mapping[str, Any]) -> Dict[str, Any]:
    """The validated ``observed:`` section; the defaults (keeping a valid
    ``inner``) with an error log naming the bad key if it does not validate."""
    raw = config.get(PLUGIN_NAME) if isinstance(config, Mapping) else None
    if raw is None:
        return {}
    error = validate_section(raw)
    if error is None:
        return dict(raw)
    fallback: Dict[str, Any] = {}
    inner = raw.get("inner") if isinstance(raw, Mapping) else None
    if isinstance(inner, str) and inner.strip():
        fallback["inner"] = inner.strip()
    logger.error(
        "observed: invalid config.yaml section: %s. Using the default `observed:` "
        "settings%s until it is fixed (check with `observed-engine doctor`).",
        error, f" (inner engine still {fallback['inner']!r})" if fallback else "",
    )
    return fallback


def validate_section(raw: Any) -> Optional[str]:
    """None if the ``observed:`` mapping is valid, else the error message (naming the key)."""
    from ..settings import Settings, SettingsError
    try:
        settings = Settings.from_mapping(raw)
    except SettingsError as exc:
        return str(exc)
    except Exception as exc:  # a bug in parsing must not cost the agent its engine
        return f"observed: {type(exc).__name__}: {exc}"
    if settings.inner.strip() == PLUGIN_NAME:
        return (f"observed.inner: {settings.inner!r} would wrap the observed engine in itself; "
                f"name the engine to observe (default {DEFAULT_INNER!r})")
    return None

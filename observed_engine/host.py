"""The installed Hermes, looked up in one place.

Every fact observed-engine takes from the host lives here: its ``ContextEngine`` ABC,
the head host's "does the engine override this hook" test, HERMES_HOME, config.yaml,
the host's compress timeout, its plugin directories and loaders, and the built-in
``ContextCompressor``. Nothing else in the package imports Hermes (an import-linter
contract checks it), so the core runs, and is tested, without it; and what the host
does is written down once (docs/design/host-contract.md).

Every function here tolerates a missing or older Hermes: it returns None / {} / a
default and never raises, unless its docstring says otherwise.
"""

from __future__ import annotations

import importlib.metadata as md
import logging
import os
from pathlib import Path
from typing import Any, Dict, Mapping, Optional

from .contract.hooks import overrides_default
from .contract.store_schema import default_store_path as _store_under

logger = logging.getLogger("observed_engine.host")

DISTRIBUTIONS = ("hermes-agent", "hermes_agent")
ENTRY_POINTS_GROUP = "hermes_agent.plugins"
DEFAULT_COMPRESS_TIMEOUT = 120.0
MAX_COMPRESS_TIMEOUT = 7 * 86400.0   # beyond: not a deadline (inf, 1e308), the default applies


# -- the engine interface -------------------------------------------------------------

def context_engine_abc() -> Optional[type]:
    """``agent.context_engine.ContextEngine``, or None when Hermes is not importable."""
    try:
        from agent.context_engine import ContextEngine
    except Exception:
        return None
    return ContextEngine


def overrides_abc_default(engine: object, name: str) -> bool:
    """The head host's test with the installed ABC: is ``engine.<name>`` not the ABC's default?"""
    return overrides_default(engine, name, context_engine_abc())


def compressor_module():
    """The module ``agent.context_compressor`` (raises ImportError without Hermes). Its
    ``call_llm`` is the built-in compressor's only LLM call: the demo answers it offline."""
    import agent.context_compressor as module

    return module


def context_compressor_class() -> type:
    """``agent.context_compressor.ContextCompressor`` (raises ImportError without Hermes)."""
    return compressor_module().ContextCompressor


def compression_threshold(threshold: float, model: str, provider: str, compression: Mapping[str, Any]) -> float:
    """The threshold with the host's per-model raise applied (Codex gpt-5.x ...), as the host
    applies it when it builds its own compressor; ``threshold`` unchanged where this Hermes
    has no such rule."""
    try:
        from agent.agent_init import _resolve_compression_threshold
        from agent.auxiliary_client import (
            _compression_threshold_for_model, _is_codex_gpt54_or_gpt55, _is_codex_spark,
        )
        raised, _notice = _resolve_compression_threshold(
            threshold,
            _compression_threshold_for_model(
                model, provider,
                allow_codex_gpt55_autoraise=truthy(compression.get("codex_gpt55_autoraise"), True),
            ),
            model=model,
            is_codex_autoraise=(_is_codex_gpt54_or_gpt55(model, provider) or _is_codex_spark(model, provider)),
        )
        return raised
    except Exception as exc:
        logger.debug("observed: per-model compression threshold not applied: %s", exc)
        return threshold


def truthy(value: Any, default: bool = False) -> bool:
    if value is None:
        return default
    return str(value).strip().lower() in {"true", "1", "yes", "on"}


# -- home and config --------------------------------------------------------------------

def hermes_home(arg: Optional[str] = None) -> Path:
    """The Hermes home in effect, resolved as Hermes does (its context-local override,
    HERMES_HOME, ~/.hermes). ``arg`` (a ``--hermes-home`` flag) also sets ``HERMES_HOME``
    for this process, so Hermes' own functions agree."""
    if arg:
        path = Path(arg).expanduser().resolve()
        os.environ["HERMES_HOME"] = str(path)
        return path
    try:
        from hermes_constants import get_hermes_home

        return Path(get_hermes_home())
    except Exception:
        env = os.environ.get("HERMES_HOME")
        return Path(env) if env else Path.home() / ".hermes"


def default_store_path(home: Optional[os.PathLike | str] = None) -> Path:
    """HERMES_HOME/observed/telemetry.sqlite."""
    return _store_under(home if home is not None else hermes_home())


def load_config(*, log_errors: bool = True) -> Dict[str, Any]:
    """Hermes' merged config for the current HERMES_HOME (``hermes_cli.config.load_config``);
    {} when Hermes is missing or the file is unreadable (logged when ``log_errors``)."""
    try:
        from hermes_cli.config import load_config as _load

        cfg = _load()
        return cfg if isinstance(cfg, dict) else {}
    except Exception as exc:
        if log_errors:
            logger.error("observed: could not read the Hermes config.yaml (%s); using defaults", exc)
        return {}


def host_compress_timeout(config: Optional[Mapping[str, Any]]) -> Optional[float]:
    """``compression.context_timeout_seconds`` when it is a positive number, else None."""
    try:
        value = ((config or {}).get("compression") or {}).get("context_timeout_seconds")
        if value is not None and 0 < float(value) <= MAX_COMPRESS_TIMEOUT:   # NaN compares False
            return float(value)
    except (TypeError, ValueError, AttributeError):
        pass
    return None


# -- the installation ---------------------------------------------------------------------

def hermes_version() -> Optional[str]:
    for dist in DISTRIBUTIONS:
        try:
            return md.version(dist)
        except md.PackageNotFoundError:
            continue
    return None


def bundled_engines_dir() -> Optional[Path]:
    """``plugins/context_engine/`` inside the installed Hermes, or None."""
    try:
        import plugins.context_engine as pce
    except Exception:
        return None
    return Path(pce.__file__).resolve().parent


def supports_user_engines() -> bool:
    """Head Hermes also loads engines from ``$HERMES_HOME/plugins/<name>/``."""
    try:
        import plugins.context_engine as pce
    except Exception:
        return False
    return hasattr(pce, "find_engine_dir") or hasattr(pce, "_iter_engine_dirs")


def entry_points():
    """The ``hermes_agent.plugins`` entry points installed in this environment."""
    try:
        return list(md.entry_points(group=ENTRY_POINTS_GROUP))
    except Exception:
        return []


# -- the host's engine loaders ---------------------------------------------------------------

def load_directory_engine(name: str):
    """Hermes' directory loader (``plugins/context_engine/<name>/``; head: also the user
    directory): the engine, or None. Raises what the loader raises."""
    from plugins.context_engine import load_context_engine

    return load_context_engine(name)


def plugin_system_engine():
    """The context engine a plugin registered with Hermes' general plugin system, or None.
    Raises what the plugin manager raises."""
    from hermes_cli.plugins import get_plugin_context_engine

    return get_plugin_context_engine()


def read_config() -> Dict[str, Any]:
    """Hermes' merged config for the current HERMES_HOME, as :func:`load_config` reads it,
    but raising what Hermes raises (ImportError without Hermes, its error for a broken
    config.yaml), for ``observed-engine doctor`` to report; {} for an empty config."""
    from hermes_cli.config import load_config as _load

    return _load() or {}

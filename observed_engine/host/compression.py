"""``compression.*`` read the host's way without an agent: the per-model threshold, the output
reservation, custom providers, the tool-context floor, the compress timeout."""

from __future__ import annotations

import inspect
import logging
from typing import Any, Dict, Mapping, Optional

logger = logging.getLogger(__name__)


MAX_COMPRESS_TIMEOUT = 7 * 86400.0   # beyond: not a deadline (inf, 1e308), the default applies


def compression_threshold(threshold: float, model: str, provider: str, compression: Mapping[str, Any]) -> float:
    """The threshold with the host's per-model override applied (Arcee Trinity, the Codex
    gpt-5.x raises), as the host applies it when it builds its own compressor: through
    ``agent_init._resolve_compression_threshold`` where this Hermes has it (0.18+: a Codex raise
    never lowers a higher threshold), else the override replaces the threshold whenever
    ``_compression_threshold_for_model`` gives one (0.16, 0.17). ``threshold`` unchanged where
    this Hermes has no such rule."""
    try:
        from agent.auxiliary_client import _compression_threshold_for_model
    except Exception as exc:
        logger.debug("observed: per-model compression threshold not applied: %s", exc)
        return threshold
    try:
        keywords = inspect.signature(_compression_threshold_for_model).parameters
        args: list = [model]
        kwargs: Dict[str, Any] = {}
        if "provider" in keywords:
            args.append(provider)
        if "allow_codex_gpt55_autoraise" in keywords:
            kwargs["allow_codex_gpt55_autoraise"] = legacy_flag(compression, "codex_gpt55_autoraise", True)
        override = _compression_threshold_for_model(*args, **kwargs)
        try:
            from agent.agent_init import _resolve_compression_threshold
        except ImportError:
            return threshold if override is None else override
        from agent.auxiliary_client import _is_codex_gpt54_or_gpt55, _is_codex_spark

        raised, _notice = _resolve_compression_threshold(
            threshold, override, model=model,
            is_codex_autoraise=(_is_codex_gpt54_or_gpt55(model, provider) or _is_codex_spark(model, provider)),
        )
        return raised
    except Exception as exc:
        logger.debug("observed: per-model compression threshold not applied: %s", exc)
        return threshold


def legacy_flag(section: Mapping[str, Any], key: str, default: bool) -> bool:
    """A ``compression.*`` flag read the host's way: ``str(value).lower()`` in true/1/yes (an
    explicit null, "on", " yes" are false), the default when the key is missing."""
    return str(section.get(key, default)).lower() in {"true", "1", "yes"}


def host_compression_settings(config: Mapping[str, Any], *, model: str, provider: str,
                              api_mode: str) -> Optional[Dict[str, Any]]:
    """The host's own reading of ``compression.*`` as ``ContextCompressor`` keywords, where this
    Hermes has one that needs no agent (0.22: ``agent_init._parse_compression_config``, given a
    stand-in carrying the runtime it reads: ``model``, ``provider``, ``api_mode``), mapped as its
    ``_build_context_engine`` maps them; None where it has none, or it raised (logged at debug).
    The threshold comes with the host's per-model raise applied."""
    try:
        from agent.agent_init import _parse_compression_config
    except Exception:  # before 0.22 there is no such parser: None, the caller's own reading stands
        return None
    from types import SimpleNamespace

    stand_in = SimpleNamespace(model=model, provider=provider, api_mode=api_mode)
    try:
        settings = _parse_compression_config(stand_in, dict(config))
    except Exception as exc:
        logger.debug("observed: the host's compression settings could not be read: %s", exc)
        return None
    return {keyword: getattr(settings, field) for field, keyword in _SETTINGS_KEYWORDS.items()
            if hasattr(settings, field)}


# CompressionSettings field -> ContextCompressor keyword (0.22 agent_init._build_context_engine)
_SETTINGS_KEYWORDS = {
    "threshold": "threshold_percent", "protect_first": "protect_first_n", "protect_last": "protect_last_n",
    "target_ratio": "summary_target_ratio", "abort_on_summary_failure": "abort_on_summary_failure",
    "model_thresholds": "model_thresholds", "threshold_tokens": "threshold_tokens_cap",
    "proactive_prune_tokens": "proactive_prune_tokens",
    "proactive_prune_min_chars": "proactive_prune_min_result_chars",
    "proactive_prune_min_reclaim": "proactive_prune_min_reclaim_tokens",
    "min_tail_users": "min_tail_user_messages", "tail_mode": "tail_mode",
}


def compressor_max_tokens(max_tokens: Optional[int], provider: str, base_url: str) -> Optional[int]:
    """Without an agent: the output reservation the host would give its built-in for these,
    ``agent_init._compressor_max_tokens`` where this Hermes has it (0.22), else ``max_tokens``."""
    try:
        from agent.agent_init import _compressor_max_tokens
    except ImportError:
        return max_tokens
    from types import SimpleNamespace

    try:
        return _compressor_max_tokens(SimpleNamespace(max_tokens=max_tokens, provider=provider, base_url=base_url))
    except Exception:  # the host's helper raised on these inputs: max_tokens as given, as before 0.22
        return max_tokens


def custom_providers(config: Mapping[str, Any]) -> list:
    """``custom_providers`` as the host resolves them (``hermes_cli.config.get_compatible_custom_providers``),
    else the config's own list; [] without any."""
    try:
        from hermes_cli.config import get_compatible_custom_providers

        resolved = get_compatible_custom_providers(dict(config))
        return resolved if isinstance(resolved, list) else []
    except Exception:  # no such resolver (older Hermes) or it raised: the config's own list
        raw = config.get("custom_providers") if isinstance(config, Mapping) else None
        return raw if isinstance(raw, list) else []


def custom_provider_context_length(model: str, base_url: str, providers: list) -> Optional[int]:
    """The per-model ``context_length`` of the custom provider serving ``base_url``, as the host
    reads it (``hermes_cli.config.get_custom_provider_context_length``); None without one."""
    if not providers:
        return None
    try:
        from hermes_cli.config import get_custom_provider_context_length

        value = get_custom_provider_context_length(model=model, base_url=base_url, custom_providers=providers)
        return int(value) if value else None
    except Exception:  # no such helper (older Hermes), it raised, or no number: no per-model window
        return None


def minimum_tool_context_length(config: Mapping[str, Any]) -> Optional[int]:
    """Without an agent: the tool-context floor the host gives an agent built from ``config``
    (``agent.minimum_tool_context_length`` through ``model_metadata.get_minimum_tool_context_length``,
    0.22); None where this Hermes has none."""
    try:
        from agent.model_metadata import get_minimum_tool_context_length
    except Exception:  # no Hermes, or one before 0.22: no tool-context floor (None)
        return None
    from types import SimpleNamespace

    section = config.get("agent") if isinstance(config, Mapping) else None
    value = section.get("minimum_tool_context_length") if isinstance(section, Mapping) else None
    try:
        return get_minimum_tool_context_length(SimpleNamespace(_minimum_tool_context_length=value))
    except Exception:  # the host's helper raised on this setting: no floor known here (None)
        return None


def host_compress_timeout(config: Optional[Mapping[str, Any]]) -> Optional[float]:
    """``compression.context_timeout_seconds`` when it is a positive number, else None."""
    try:
        value = ((config or {}).get("compression") or {}).get("context_timeout_seconds")
        if value is not None and 0 < float(value) <= MAX_COMPRESS_TIMEOUT:   # NaN compares False
            return float(value)
    except (TypeError, ValueError, AttributeError):
        pass
    return None

"""The built-in ``ContextCompressor`` for ``observed.inner: compressor``, built as the host builds it.

With a plugin engine selected the host does not build its compressor, so the plugin does, and it
must equal the bare host's (the parity tests compare the whole instance state on every Hermes
line). When editing: inputs come from the agent being built, else config.yaml read as that
line's agent init reads it, and ``compression.*`` by the host's own reading where it has one;
every keyword goes through ``host.compressor_arguments``.

The full account: docs/design/internals.md, *observed_engine/plugin/builtin.py*.
"""

from __future__ import annotations

import logging
from typing import Any, Dict, Mapping, Optional

from .. import host

logger = logging.getLogger(__name__)

# A positive window so a constructor that resolves its window eagerly (0.16-0.19) does no network
# lookup; the host's update_model() sets the real one right after.
PLACEHOLDER_CONTEXT_LENGTH = 128_000


def build_compressor(config: Mapping[str, Any], *, quiet_mode: Optional[bool] = None):
    """The built-in ``ContextCompressor`` the host would build for ``config`` (and, when one is
    being built, for the agent on this thread's stack). ``quiet_mode`` None: the agent's own,
    else quiet (every Hermes surface but a verbose CLI builds its agents quiet)."""
    cls = host.context_compressor_class()
    config = config if isinstance(config, Mapping) else {}
    building = host.building_agent()
    found = host.agent_compressor_inputs(building) if building is not None else {}
    del building                                   # no reference to the host's agent is kept
    runtime = config_runtime(config, found)
    runtime.update(found)
    if quiet_mode is None:
        quiet_mode = runtime.get("quiet_mode")
        if not isinstance(quiet_mode, bool):
            quiet_mode = True

    compression = config.get("compression")
    compression = compression if isinstance(compression, Mapping) else {}
    model, provider = str(runtime.get("model") or ""), str(runtime.get("provider") or "")
    keywords = compression_keywords(compression, cls, model=model, provider=provider)
    settings = host.host_compression_settings(config, model=model, provider=provider,
                                              api_mode=str(runtime.get("api_mode") or ""))
    if settings is not None:
        keywords.update(settings)

    window = runtime.get("config_context_length")
    if not host.compressor_resolves_window_lazily(cls):
        window = _positive_int(window) or PLACEHOLDER_CONTEXT_LENGTH
    return cls(**host.compressor_arguments(cls, dict(
        model=runtime.get("model", ""),
        summary_model_override=None,
        quiet_mode=quiet_mode,
        base_url=runtime.get("base_url", ""),
        api_key=runtime.get("api_key", ""),
        config_context_length=window,
        provider=runtime.get("provider", ""),
        api_mode=runtime.get("api_mode", ""),
        max_tokens=runtime.get("max_tokens"),
        custom_providers=runtime.get("custom_providers"),
        minimum_context_length=runtime.get("minimum_context_length"),
        **keywords,
    )))


def config_runtime(config: Mapping[str, Any], agent_side: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
    """What an agent built from ``config`` would hand the built-in, for what the agent being
    built does not hold yet (``agent_side``: what it does hold; nothing when no agent is being
    built, as when Hermes 0.22 runs a plugin's ``register()`` on its loader thread): ``model.*``;
    ``model.max_tokens`` where the line's agent init reads it; the window from
    ``model.context_length``, else the custom provider serving the agent's ``base_url``;
    ``custom_providers``; ``agent.minimum_tool_context_length``."""
    agent_side = agent_side or {}
    model_cfg = _model_section(config)
    model = str(agent_side.get("model") or model_cfg.get("default") or model_cfg.get("model") or "")
    provider = str(agent_side.get("provider") or model_cfg.get("provider") or "")
    base_url = str(agent_side.get("base_url") or model_cfg.get("base_url") or "")
    providers = host.custom_providers(config)
    window = _host_int(model_cfg.get("context_length"))
    if window is None:
        window = host.custom_provider_context_length(model, base_url, providers)
    max_tokens = agent_side.get("max_tokens")
    if max_tokens is None and host.agent_init_reads_model_max_tokens():
        max_tokens = _positive_int(model_cfg.get("max_tokens"))
    return {
        "model": model, "provider": provider, "base_url": base_url, "api_key": "",
        "api_mode": str(model_cfg.get("api_mode") or ""),
        "max_tokens": host.compressor_max_tokens(max_tokens, provider, base_url),
        "config_context_length": _positive_int(window),
        "custom_providers": providers,
        "minimum_context_length": host.minimum_tool_context_length(config),
    }


def compression_keywords(compression: Mapping[str, Any], cls: type, *, model: str, provider: str) -> Dict[str, Any]:
    """``compression.*`` as ``ContextCompressor`` keywords, each read by the rule the host's
    agent init reads it with (0.16-0.20, which have no reader of their own to call). A key's
    default is the host's, and for ``tail_mode`` the installed constructor's (``legacy`` on 0.20)."""

    def _float(key: str, default: float) -> float:
        try:
            return float(compression.get(key, default))
        except (TypeError, ValueError):
            logger.warning("observed: compression.%s=%r is not a number; using %s",
                           key, compression.get(key), default)
            return default

    def _int(key: str, default: int) -> int:
        try:
            return int(compression.get(key, default))
        except (TypeError, ValueError):
            logger.warning("observed: compression.%s=%r is not a whole number; using %s",
                           key, compression.get(key), default)
            return default

    # Per-model raise (Arcee Trinity, Codex gpt-5.x, ...) exactly as the host applies it.
    threshold = host.compression_threshold(_float("threshold", 0.50), model, provider, compression)
    tail_default = host.compressor_defaults(cls).get("tail_mode", "legacy")
    return dict(
        threshold_percent=threshold,
        protect_first_n=max(0, _int("protect_first_n", 3)),
        protect_last_n=_int("protect_last_n", 20),
        summary_target_ratio=_float("target_ratio", 0.20),
        abort_on_summary_failure=host.legacy_flag(compression, "abort_on_summary_failure", False),
        # 0.20+: per-model thresholds, the absolute cap, the tail's shape
        model_thresholds=_model_thresholds(compression.get("model_thresholds", {})),
        threshold_tokens_cap=_threshold_tokens(compression.get("threshold_tokens")),
        min_tail_user_messages=max(1, _config_int(compression.get("min_tail_user_messages", 1), 1)),
        tail_mode=str(compression.get("tail_mode", tail_default)).strip().lower(),
        # 0.20+: the cheap tool-result prune (prune_tool_results_only), off unless configured
        proactive_prune_tokens=max(0, _config_int(compression.get("proactive_prune_tokens", 0), 0)),
        proactive_prune_min_result_chars=_config_int(compression.get("proactive_prune_min_result_chars", 8000), 8000),
        proactive_prune_min_reclaim_tokens=max(
            0, _config_int(compression.get("proactive_prune_min_reclaim_tokens", 4096), 4096)),
    )


def _config_int(raw: Any, default: int) -> int:
    """Hermes 0.20+'s reading of its integer compression keys: integers, integral floats and
    numeric strings; booleans, fractions and anything else are the default."""
    if isinstance(raw, bool):
        return default
    if isinstance(raw, int):
        return raw
    if isinstance(raw, float):
        return int(raw) if raw.is_integer() else default
    try:
        return int(str(raw).strip())
    except (TypeError, ValueError):
        return default


def _model_thresholds(raw: Any) -> Dict[str, float]:
    """``compression.model_thresholds`` as the host keeps it: a mapping's numeric (not boolean)
    values, keys as strings; {} for anything else."""
    if not isinstance(raw, Mapping):
        return {}
    return {str(k): float(v) for k, v in raw.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def _threshold_tokens(raw: Any) -> Optional[int]:
    """``compression.threshold_tokens`` as 0.20 reads it: ``int()`` of it, None when that fails
    or is not positive."""
    if raw is None:
        return None
    try:
        value = int(raw)
    except (TypeError, ValueError):
        return None
    return value if value > 0 else None


def _model_section(config: Mapping[str, Any]) -> Dict[str, Any]:
    model = config.get("model")
    if isinstance(model, str):
        return {"default": model}
    return dict(model) if isinstance(model, Mapping) else {}


def _host_int(value: Any) -> Optional[int]:
    """``int(value)`` as the host reads ``model.context_length``; None when that fails."""
    if value is None:
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _positive_int(value: Any) -> Optional[int]:
    if value is None or isinstance(value, bool):
        return None
    try:
        parsed = int(value)
    except (TypeError, ValueError):
        return None
    return parsed if parsed > 0 else None

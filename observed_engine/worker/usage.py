"""Reading the ``usage`` dict the host passes to ``update_from_response``.

Hosts send the legacy keys (prompt/completion/total) and, newer ones, the
canonical buckets (input/output/cache_read/cache_write/reasoning). Providers
also send odd values. We count what is a non-negative integer and report the
rest as problems (the caller logs once and counts them); we never raise.
"""

from __future__ import annotations

from typing import Any, Dict, List, Tuple

# token_type label -> keys that may carry it, first valid one wins
TOKEN_TYPES: Dict[str, Tuple[str, ...]] = {
    "prompt": ("prompt_tokens", "input_tokens"),
    "completion": ("completion_tokens", "output_tokens"),
    "cache_read": ("cache_read_tokens", "cache_read_input_tokens"),
    "cache_write": ("cache_write_tokens", "cache_creation_input_tokens"),
    "reasoning": ("reasoning_tokens",),
}


# Beyond this a count is garbage, not tokens (and would not fit a float exactly, nor
# beyond 2**63 the store's INTEGER column).
MAX_TOKENS = 2 ** 53


def parse_usage(usage: Any) -> Tuple[Dict[str, int], List[str]]:
    """Return ({token_type: tokens}, [problem kinds]).

    Problem kinds: ``usage_not_a_dict``, ``usage_field_<key>_<type>`` for a value
    that is not a non-negative int (``None`` counts as absent, not a problem),
    ``usage_field_<key>_too_large`` for one above ``MAX_TOKENS``.
    """
    if usage is None:
        return {}, []
    if not isinstance(usage, dict):
        return {}, ["usage_not_a_dict"]
    values: Dict[str, int] = {}
    problems: List[str] = []
    for token_type, keys in TOKEN_TYPES.items():
        for key in keys:
            if key not in usage:
                continue
            raw = usage[key]
            if type(raw) is int and 0 <= raw <= MAX_TOKENS:     # the usual case, checked first
                values[token_type] = raw
                break
            if raw is None:
                continue
            if isinstance(raw, bool) or not isinstance(raw, int):
                if isinstance(raw, float) and raw.is_integer() and 0 <= raw <= MAX_TOKENS:
                    values[token_type] = int(raw)
                    break
                if isinstance(raw, float) and raw.is_integer() and raw > MAX_TOKENS:
                    problems.append(f"usage_field_{key}_too_large")
                    continue
                problems.append(f"usage_field_{key}_{type(raw).__name__}")
                continue
            if raw < 0:
                problems.append(f"usage_field_{key}_negative")
                continue
            if raw > MAX_TOKENS:
                problems.append(f"usage_field_{key}_too_large")
                continue
            values[token_type] = raw
            break
    return values, problems

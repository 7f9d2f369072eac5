"""Which engine methods are traced, and how the host treats each of them.

The facts come from the host contract (shared/design/hermes-host-contract.md):
which hooks the host calls, which exceptions it swallows ("fail open"), and
which hooks it only calls when the engine overrides them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Tuple

PLAIN = "plain"          # timestamps + compact event, everything else off the hook path
COMPRESS = "compress"    # live span (children nest), deadline watchdog, token snapshot
TOOL = "tool"            # live `execute_tool <name>` span
CLONE = "clone"          # the clone comes back observed too
SELECT = "select"        # select_context: fail-open table and churn


@dataclass(frozen=True)
class HookSpec:
    name: str
    kind: str = PLAIN
    # The host swallows (logs) an exception from this hook and goes on: record it as fail-open.
    host_swallows: bool = False
    # Head calls these on every request/turn only when the engine overrides the ABC's
    # default; the wrapper defines them only then, so the host's identity check still works.
    only_if_overridden: bool = False
    # Called on every provider request and, in every engine we know, never calls another
    # hook of its engine. The wrapper's hook for it checks the self-call guard but does not
    # set it (one thread-local read instead of a read and two writes), and takes the fast
    # generated form with the inner's exact signature (wrapper.py).
    leaf: bool = False


HOOK_SPECS: Tuple[HookSpec, ...] = (
    HookSpec("update_model"),
    HookSpec("on_session_start", host_swallows=True),
    HookSpec("on_session_end", host_swallows=True),
    HookSpec("on_session_reset", host_swallows=True),
    HookSpec("update_from_response", leaf=True),
    HookSpec("should_compress", leaf=True),
    HookSpec("should_compress_info", leaf=True),
    HookSpec("should_compress_preflight", leaf=True),
    HookSpec("should_defer_preflight_to_real_usage", leaf=True),
    HookSpec("compress", kind=COMPRESS),
    HookSpec("has_content_to_compress", leaf=True),
    HookSpec("prune_tool_results_only"),
    HookSpec("pending_compression_operation", leaf=True),
    HookSpec("get_automatic_compaction_status_message", leaf=True),
    HookSpec("emit_automatic_compaction_status"),
    HookSpec("get_tool_schemas", host_swallows=True),   # swallowed on refresh; the first call (agent init) is not
    HookSpec("handle_tool_call", kind=TOOL, host_swallows=True),
    HookSpec("get_status", leaf=True),
    HookSpec("bind_session_state", host_swallows=True),
    HookSpec("carry_over_new_session_context"),
    HookSpec("is_available", leaf=True),
    HookSpec("record_timeout_failure"),
    HookSpec("clone_for_agent", kind=CLONE),
    HookSpec("select_context", kind=SELECT, host_swallows=True, only_if_overridden=True),
    HookSpec("on_turn_complete", host_swallows=True, only_if_overridden=True),
)

BY_NAME: Dict[str, HookSpec] = {h.name: h for h in HOOK_SPECS}
HOOK_INDEX: Dict[str, int] = {h.name: i for i, h in enumerate(HOOK_SPECS)}
HOOK_NAMES: Tuple[str, ...] = tuple(h.name for h in HOOK_SPECS)


def overrides_abc_default(engine: object, name: str) -> bool:
    """The head host's test: is ``engine.<name>`` something other than the ABC's default?

    Mirrors ``getattr(engine.<name>, "__func__", None) is ContextEngine.<name>``; on
    0.19.0, whose ABC has no such method, any method the engine has counts.
    """
    try:
        from agent.context_engine import ContextEngine
    except Exception:  # Hermes not importable: only the engine's own method counts
        ContextEngine = None  # type: ignore[assignment]
    bound = getattr(engine, name, None)
    if bound is None or not callable(bound):
        return False
    default = getattr(ContextEngine, name, None) if ContextEngine is not None else None
    if default is None:
        return True
    return getattr(bound, "__func__", None) is not default

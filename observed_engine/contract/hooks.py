"""Which engine methods are traced, and how the host treats each of them.

The facts come from the host contract (docs/design/host-contract.md): which
hooks the host calls, which exceptions it swallows ("fail open"), which hooks it
only calls when the engine overrides them, and what the hook path copies for the
worker. One entry per hook; capture (the hook forms), worker (the handlers) and
the plugin side (doctor) all read this table.
"""

from __future__ import annotations

from typing import Dict, Optional, Tuple

from .records import record

PLAIN = "plain"          # timestamps + compact event, everything else off the hook path
COMPRESS = "compress"    # live span (children nest), deadline watchdog, token snapshot
TOOL = "tool"            # live `execute_tool <name>` span
CLONE = "clone"          # the clone comes back observed too
SELECT = "select"        # select_context: fail-open table and churn
PRUNE = "prune"          # prune_tool_results_only: its input and result lists copied (the host appends to them)


@record
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
    # generated form with the inner's exact signature (capture/exact_leaf.py).
    leaf: bool = False
    # The hook may change the engine's state numbers (contract.events.STATE_FIELDS): the hook
    # path copies them right after the call (HookEvent.extra), before the host changes them.
    reads_state: bool = False
    # The host propagates an exception from the first call (agent init) and swallows later
    # ones (get_tool_schemas: swallowed on MCP refresh): only later ones are fail-open.
    first_call_propagates: bool = False
    # A natural boundary after which the host may end the process at once (``hermes -z`` ends
    # with os._exit() right after on_session_end: no atexit handler runs). The hook delivers
    # what is queued before it returns, within DELIVERY_BUDGET_SECONDS.
    delivers: bool = False


HOOK_SPECS: Tuple[HookSpec, ...] = (
    HookSpec("update_model", reads_state=True),
    HookSpec("on_session_start", host_swallows=True),
    HookSpec("on_session_end", host_swallows=True, delivers=True),
    HookSpec("on_session_reset", host_swallows=True, reads_state=True),
    HookSpec("update_from_response", leaf=True, reads_state=True),
    HookSpec("should_compress", leaf=True),
    HookSpec("should_compress_info", leaf=True, host_swallows=True),
    HookSpec("should_compress_preflight", leaf=True),
    HookSpec("should_defer_preflight_to_real_usage", leaf=True),
    HookSpec("compress", kind=COMPRESS),
    HookSpec("has_content_to_compress", leaf=True),
    HookSpec("prune_tool_results_only", kind=PRUNE, host_swallows=True),
    HookSpec("pending_compression_operation", leaf=True),
    HookSpec("get_automatic_compaction_status_message", leaf=True),
    HookSpec("emit_automatic_compaction_status"),
    HookSpec("get_tool_schemas", host_swallows=True, first_call_propagates=True),
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

DELIVERY_BUDGET_SECONDS = 1.0

BY_NAME: Dict[str, HookSpec] = {h.name: h for h in HOOK_SPECS}
HOOK_INDEX: Dict[str, int] = {h.name: i for i, h in enumerate(HOOK_SPECS)}
HOOK_NAMES: Tuple[str, ...] = tuple(h.name for h in HOOK_SPECS)
# Hook kinds that open a live span on the hook path (HookEvent.span_or_parent is that span).
LIVE_SPAN_KINDS: Tuple[str, ...] = (COMPRESS, TOOL)
# Hooks the ABC may provide a default for, which doctor reports on (head calls the
# only_if_overridden ones only when the engine overrides them).
OPTIONAL_HOOKS: Tuple[str, ...] = (
    "select_context", "on_turn_complete", "get_tool_schemas", "handle_tool_call",
    "should_compress_preflight", "on_session_start", "on_session_end", "on_session_reset",
    "update_model", "get_status",
)


def overrides_default(engine: object, name: str, engine_abc: Optional[type]) -> bool:
    """The head host's test: is ``engine.<name>`` something other than ``engine_abc``'s default?

    Mirrors ``getattr(engine.<name>, "__func__", None) is ContextEngine.<name>``. A hook the
    ABC lacks (0.19.0 has no select_context) counts when the engine has it at all; so does
    every hook when no ABC is known. The one predicate for the wrapper and for doctor.
    """
    try:
        bound = getattr(engine, name, None)
    except Exception:  # probe: an engine whose property or __getattr__ raises; False means "not overridden"
        return False
    if bound is None or not callable(bound):
        return False
    default = getattr(engine_abc, name, None) if engine_abc is not None else None
    if default is None:
        return True
    return getattr(bound, "__func__", None) is not default


def is_wrapped(engine: object, spec: HookSpec, engine_abc: Optional[type]) -> bool:
    """Does the observed engine override this hook? (Only where the bare engine has it; the
    only_if_overridden ones only where the bare engine overrides the ABC's default.)"""
    if spec.only_if_overridden:
        return overrides_default(engine, spec.name, engine_abc)
    try:
        return callable(getattr(engine, spec.name, None))
    except Exception:  # probe: an engine whose property or __getattr__ raises; False: left unwrapped
        return False



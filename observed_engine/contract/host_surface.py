"""The engine names the host uses that are not hooks: the other half of the host's surface.

The host's counters, class-level lookups and the built-in's own helpers, each with why it is not
a hook. When editing: the drift guard fails on any name the installed Hermes uses that is in
neither this table nor ``hooks.HOOK_SPECS``; a name goes here only when it is not something to
trace. Not imported by the engine at run time (tests and docs read it).

The full account: docs/design/internals.md, *observed_engine/contract/host_surface.py*.
"""

from __future__ import annotations

from typing import Dict

# The state the ABC declares (H1, H2): the host reads and writes these on the engine itself.
ENGINE_STATE: Dict[str, str] = {
    "name": "the engine's name, which the host selects it by (H7); read, never called",
    "last_prompt_tokens": "counter the host reads and writes (-1 after a compaction, H1)",
    "last_completion_tokens": "counter the host reads and writes (H1)",
    "last_total_tokens": "counter the host reads (H2)",
    "threshold_tokens": "counter the host reads and writes (H1)",
    "context_length": "the model's window; the host reads and writes it (H1)",
    "compression_count": "counter the host reads and writes (H1)",
    "threshold_percent": "preflight parameter the host reads and writes (H1)",
    "protect_first_n": "preflight parameter the host reads (H2)",
    "protect_last_n": "preflight parameter the host reads (H2)",
}

# Looked up on ``type(engine)`` or with getattr, the built-in's guards and records (H3): the
# generated class never overrides them, so the class-level lookup finds the bare function.
CLASS_LEVEL: Dict[str, str] = {
    "_automatic_compression_blocked": "the built-in's block guard, looked up on type(engine) (H3)",
    "get_active_compression_failure_cooldown": "the built-in's cooldown, looked up with getattr (H3)",
    "record_completed_compaction": "the built-in's record after a committed compaction (H3)",
    "_load_fallback_compression_streak": "head: the built-in's persisted streak, on type(engine) (H3)",
    "_load_ineffective_compression_count": "head: the built-in's persisted count, on type(engine) (H3)",
}

# The built-in ``ContextCompressor``'s own methods and fields that the 0.20 and 0.22 hosts use
# where the engine has them (getattr with a default, or on the built-in only). They are not on
# the ABC, so plugin engines do not have them and the host skips them; for the built-in they
# are its bookkeeping around a compaction or a preflight estimate, not decisions of the engine:
# untraced, they run as bare.
BUILTIN_OWN: Dict[str, str] = {
    "_begin_compression_telemetry": "0.20: the built-in's own per-attempt telemetry record",
    "_micro_compact": "0.20, 0.22: the built-in's optional micro-compaction after a turn (off by default)",
    "note_request_rough_estimate": "0.20: the built-in remembers the host's rough estimate for display",
    "snapshot_preflight_display_tokens": "0.20, 0.22: display-only token figure saved before a preflight",
    "rollback_interrupted_preflight_display_tokens": "0.20, 0.22: that figure restored after an interrupt",
    "maybe_seed_preflight_display_tokens": "0.22: that figure seeded from the preflight estimate",
    "note_usage_less_response": "0.22: the built-in notes a provider response without usage",
    "note_native_compaction_checkpoint": "0.22: the built-in notes a provider-side (native) compaction",
    "record_rejected_compaction": "0.22: the built-in's anti-thrash record when the host rejects a result",
    "_record_compression_failure_cooldown": "0.22: the built-in's cooldown set by the host after a failure",
    "_record_structural_no_op": "0.22: the built-in's record of a compaction that could not shrink",
    "_record_committed_compression_effect": "0.22: the built-in's record of what a committed compaction saved",
    "_compression_block_reason": "0.22: why the built-in blocks automatic compression (for a warning)",
    "_effective_threshold_cap": "0.22: the built-in's threshold cap for the window, read at agent init",
    "_last_cooldown_refresh_was_authoritative": "0.20, 0.22: a built-in field the host reads after a cooldown",
}

NON_HOOKS: Dict[str, str] = {**ENGINE_STATE, **CLASS_LEVEL, **BUILTIN_OWN}

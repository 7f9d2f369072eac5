"""The words every side uses: outcomes, event kinds, reasons, alerts and their severities.

Defined once here; the worker writes them into spans, metrics and store rows, the
dashboard reads them back, the alert rules and the docs are checked against them
(tests/contract/test_vocabulary.py, tests/contract/test_public_contract.py). Renaming one is a change of the public
contract (docs/design/telemetry-contract.md): add, never rename without a migration note.
"""

from __future__ import annotations

from typing import Dict, Tuple

# -- hook calls ---------------------------------------------------------------------
CALL_OK = "ok"
CALL_ERROR = "error"
CALL_OUTCOMES: Tuple[str, ...] = (CALL_OK, CALL_ERROR)

# -- compress() -----------------------------------------------------------------------
COMPRESSED = "compressed"
NOOP = "noop"
TIMEOUT = "timeout"
COMPRESS_OUTCOMES: Tuple[str, ...] = (COMPRESSED, NOOP, CALL_ERROR, TIMEOUT)
LATE = "late"        # store outcome of a late_completion row whose compress() returned normally

# -- compression past its deadline (metric kind, store event) -------------------------
DEADLINE_EXCEEDED = "deadline_exceeded"
HOST_REPORTED = "host_reported"
LATE_COMPLETION = "late_completion"
TIMEOUT_KINDS: Tuple[str, ...] = (DEADLINE_EXCEEDED, HOST_REPORTED, LATE_COMPLETION)
UNSPECIFIED = "unspecified"   # a host_reported row whose host gave no failure_kind

# -- summary failures: compress() returned although the summary model failed ----------
FALLBACK_SUMMARY = "fallback_summary"
ABORTED = "aborted"
SUMMARY_FAILURE_KINDS: Tuple[str, ...] = (FALLBACK_SUMMARY, ABORTED)
CAUSE_AUTH = "auth"
CAUSE_NETWORK = "network"
CAUSE_OTHER = "other"
SUMMARY_FAILURE_CAUSES: Tuple[str, ...] = (CAUSE_AUTH, CAUSE_NETWORK, CAUSE_OTHER)

# -- fail-open: the host swallowed a hook's failure and went on -----------------------
FAIL_OPEN = "fail_open"
REASON_EXCEPTION = "exception"
REASON_INVALID_RETURN = "invalid_return"
FAIL_OPEN_REASONS: Tuple[str, ...] = (REASON_EXCEPTION, REASON_INVALID_RETURN)

# -- select_context ---------------------------------------------------------------------
UNCHANGED = "unchanged"
SAME_SELECTION = "same_selection"
CHANGED_SELECTION = "changed_selection"
SELECTION_RESULTS: Tuple[str, ...] = (UNCHANGED, SAME_SELECTION, CHANGED_SELECTION, FAIL_OPEN)

# -- prune_tool_results_only (Hermes 0.20+: the cheap tool-result prune after a tool iteration) --
# The host commits the engine's answer only when it pruned something (n) into a NEW list
# (``_pruned_n and _pruned_msgs is not messages``); it falls open (keeps its list) on an exception
# and on a value it cannot unpack into (list, n). Outcome of a prune row, span and counter.
PRUNED = "pruned"              # n and a new list: the host goes on with it
UNCOMMITTED = "uncommitted"    # n, but the input list itself came back: the host keeps its list as is
# NOOP: nothing pruned (n is 0); FAIL_OPEN: not a (list, n) pair; CALL_ERROR: the engine raised
PRUNE_OUTCOMES: Tuple[str, ...] = (PRUNED, NOOP, UNCOMMITTED, FAIL_OPEN, CALL_ERROR)

# -- on_turn_complete (Hermes 0.20+: after a user turn's finalisation) -------------------------
TURN_COMPLETED = "completed"
TURN_INTERRUPTED = "interrupted"   # interrupted=True (wins over failed)
TURN_FAILED = "failed"             # failed=True
TURN_OUTCOMES: Tuple[str, ...] = (TURN_COMPLETED, TURN_INTERRUPTED, TURN_FAILED)
# turn_exit_reason as the host words it, without the detail some carry in parentheses
# ("text_response(finish_reason=stop)", "local_processing_error(<error text>)": the detail may quote
# an error message, so it never leaves the process). These words (0.20.1.2 and 0.22.2.post1) are
# the label's values; another identifier is stored as it is and labelled "other"; none given is
# "unspecified" (UNSPECIFIED).
TURN_EXIT_REASONS: Tuple[str, ...] = (
    "text_response", "max_iterations_reached", "budget_exhausted", "interrupted_by_user",
    "interrupted_by_system", "interrupted_during_api_call", "all_retries_exhausted_no_response",
    "empty_response_exhausted", "error_near_max_iterations", "local_processing_error",
    "repeated_outer_errors", "session_persistence_failed", "compaction_handoff_not_actionable",
    "context_compression_timeout", "context_compression_exhausted", "partial_stream_recovery",
    "fallback_prior_turn_content", "guardrail_halt", "ollama_runtime_context_too_small",
    "pending_tool_result", "review_input_budget_exhausted", "redirect_restart_limit_exceeded",
    "rebuilt_restart_limit_exceeded", "interpreter_shutdown", "unknown",
)
EXIT_REASON_OTHER = "other"

# -- clone_for_agent (Hermes 0.22+: the plugin system's one engine, copied for every agent) ------
CLONE_OBSERVED = "observed"        # a new engine, observed by the same pipeline (shares its writer)
CLONE_SAME_ENGINE = "same_engine"  # the engine returned itself: every agent shares one instance
CLONE_UNOBSERVED = "unobserved"    # the copy could not be observed (its class cannot be extended)
CLONE_OUTCOMES: Tuple[str, ...] = (CLONE_OBSERVED, CLONE_SAME_ENGINE, CLONE_UNOBSERVED, CALL_ERROR)

# -- usage passed to update_from_response ---------------------------------------------
TOKEN_TYPES: Tuple[str, ...] = ("prompt", "completion", "cache_read", "cache_write", "reasoning")

# -- compression tokens/messages histograms ---------------------------------------------
STAGES: Tuple[str, ...] = ("before", "after")

# -- telemetry drops ----------------------------------------------------------------------
DROP_EVENT = "event"
DROP_STORE_ROW = "store_row"
DROP_SPAN = "span"
DROP_SIGNALS: Tuple[str, ...] = (DROP_EVENT, DROP_STORE_ROW, DROP_SPAN)

# -- store rows: the ``event`` column -------------------------------------------------------
EVENT_CALL = "call"
EVENT_BAD_INPUT = "bad_input"
EVENT_SUMMARY_FAILURE = "summary_failure"
EVENT_COMPRESSION_BLOCKED = "compression_blocked"   # outcome 'started' / 'ended', reason: BLOCKED_REASONS
STORE_EVENTS: Tuple[str, ...] = (EVENT_CALL,) + TIMEOUT_KINDS + (FAIL_OPEN, EVENT_BAD_INPUT,
                                                                  EVENT_SUMMARY_FAILURE, EVENT_COMPRESSION_BLOCKED)
# The rare rows an operator looks at one by one (every store event but calls and bad input).
INCIDENT_EVENTS: Tuple[str, ...] = TIMEOUT_KINDS + (FAIL_OPEN, EVENT_SUMMARY_FAILURE)

# -- compression decisions: should_compress* and should_defer_preflight_to_real_usage ----
# ``decision`` store column and the ``decision`` label of hermes_context_compression_checks_total.
DECISION_COMPRESS = "compress"     # should_compress*: True (compress now)
DECISION_SKIP = "skip"             # should_compress*: False
DECISION_DEFER = "defer"           # should_defer_preflight_to_real_usage: True (wait for real usage)
DECISION_ESTIMATE = "estimate"     # ... False (the host goes on with its rough estimate)
COMPRESS_DECISIONS: Tuple[str, ...] = (DECISION_COMPRESS, DECISION_SKIP)
DEFER_DECISIONS: Tuple[str, ...] = (DECISION_DEFER, DECISION_ESTIMATE)
DECISIONS: Tuple[str, ...] = COMPRESS_DECISIONS + DEFER_DECISIONS
# Where the checked tokens came from (span attribute hermes.context.checked_tokens.source).
CHECKED_FROM_ARGUMENT = "argument"
CHECKED_FROM_STATE = "state"       # called without tokens: the engine's last_prompt_tokens
# Decision reasons (store ``reason`` of a decision row): the engine's own reason where it gives
# one (should_compress_info), else what the numbers and the engine's state say.
DECISION_BELOW_THRESHOLD = "below_threshold"
DECISION_AT_THRESHOLD = "at_or_above_threshold"
DECISION_BLOCKED_UNKNOWN = "declined_above_threshold"   # skip at/above the threshold, no block state known

# The words should_compress_info's reason starts with on the built-in compressor (0.20+:
# "cooldown:<seconds>", "ineffective", "blocked"), as the blocked reasons below; the variable part
# after ":" or "(" is left out (decision rows keep a bounded word).
ENGINE_DECISION_REASONS: Dict[str, str] = {
    "cooldown": "summary_cooldown", "ineffective": "ineffective_compression",
    "attempts_exhausted": "attempts_exhausted", "blocked": "other",
}

# -- automatic compression blocked (gauge hermes_context_compression_blocked{reason}) ----
BLOCKED_SUMMARY_COOLDOWN = "summary_cooldown"          # summary model failed: retries paused
BLOCKED_INEFFECTIVE = "ineffective_compression"        # compactions did not clear the threshold
BLOCKED_FALLBACK_STREAK = "fallback_streak"            # repeated placeholder-summary compactions
BLOCKED_ATTEMPTS_EXHAUSTED = "attempts_exhausted"      # an engine's own attempt budget is used up
BLOCKED_OTHER = "other"                                # an engine-reported reason we do not know
BLOCKED_REASONS: Tuple[str, ...] = (BLOCKED_SUMMARY_COOLDOWN, BLOCKED_INEFFECTIVE, BLOCKED_FALLBACK_STREAK,
                                    BLOCKED_ATTEMPTS_EXHAUSTED, BLOCKED_OTHER)
# store rows of event EVENT_COMPRESSION_BLOCKED: outcome says whether the block began or ended
BLOCK_STARTED = "started"
BLOCK_ENDED = "ended"
BLOCK_OUTCOMES: Tuple[str, ...] = (BLOCK_STARTED, BLOCK_ENDED)

# -- the plugin ------------------------------------------------------------------------------
# context.engine: observed, its config section, its plugin directory and entry point
PLUGIN_NAME = "observed"
# Hermes' name for its built-in ContextCompressor (context.engine: compressor): observed.inner's default
BUILTIN_ENGINE = "compressor"

# -- tokenizer ------------------------------------------------------------------------------
TOKENIZER_ESTIMATE = "estimate"      # counts are a labelled estimate (no tiktoken encoding)
TOKENIZER_TIKTOKEN_PREFIX = "tiktoken:"
# token_estimates{reason}: why a call's counts are the estimate although an encoding is configured
ESTIMATE_HELPER_BUSY = "helper_busy"   # a session end's delivery did not wait for the counting helper
ESTIMATE_REASONS: Tuple[str, ...] = (ESTIMATE_HELPER_BUSY,)
# tokens/ writes these two words itself (it imports nothing outside the package, by test);
# tests/tokens/test_tokens.py::test_methods_are_the_vocabulary_words ties them to these.

# -- alerts (deploy/prometheus/alerts.yml) and their severities -------------------------------
CRITICAL = "critical"
WARNING = "warning"
INFO = "info"
SEVERITIES: Tuple[str, ...] = (CRITICAL, WARNING, INFO)

ALERT_COMPRESSION_TIMEOUT = "HermesContextCompressionTimeout"
ALERT_FAIL_OPEN = "HermesContextEngineFailOpen"
ALERT_COMPRESSION_STUCK = "HermesContextCompressionStuck"
ALERT_NEAR_WINDOW = "HermesContextNearWindow"
ALERT_COMPRESSION_ERRORS = "HermesContextCompressionErrors"
ALERT_SUMMARY_FAILING = "HermesContextSummaryFailing"
ALERT_TELEMETRY_ERRORS = "HermesObservedTelemetryErrors"
ALERT_COMPRESSION_BLOCKED = "HermesContextCompressionBlocked"
ALERT_COMPRESSION_THRASH = "HermesContextCompressionThrash"
ALERT_THRESHOLD_DEAD_ZONE = "HermesContextThresholdDeadZone"

# alert name -> severity label. HermesContextSummaryFailing's is a template in the rule:
# critical for an auth cause (it does not heal by itself), else warning (summary_failure_severity).
ALERT_SEVERITIES: Dict[str, str] = {
    ALERT_COMPRESSION_TIMEOUT: WARNING,
    ALERT_FAIL_OPEN: WARNING,
    ALERT_COMPRESSION_STUCK: CRITICAL,
    ALERT_NEAR_WINDOW: WARNING,
    ALERT_COMPRESSION_ERRORS: WARNING,
    ALERT_SUMMARY_FAILING: WARNING,
    ALERT_TELEMETRY_ERRORS: INFO,
    ALERT_COMPRESSION_BLOCKED: WARNING,
    ALERT_COMPRESSION_THRASH: WARNING,
    ALERT_THRESHOLD_DEAD_ZONE: WARNING,
}
ALERT_NAMES: Tuple[str, ...] = tuple(ALERT_SEVERITIES)


def summary_failure_severity(cause: str | None) -> str:
    """HermesContextSummaryFailing's severity for a cause, as the rule's template computes it."""
    return CRITICAL if cause == CAUSE_AUTH else WARNING

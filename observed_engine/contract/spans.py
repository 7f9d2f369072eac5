"""Span names and attribute keys, defined once (OpenTelemetry GenAI conventions where they exist)."""

from __future__ import annotations

HOOK_SPAN_PREFIX = "context_engine."          # context_engine.<hook>
TOOL_SPAN_PREFIX = "execute_tool "            # execute_tool <tool name>


def hook_span_name(hook: str) -> str:
    return HOOK_SPAN_PREFIX + hook


def tool_span_name(tool: object) -> str:
    return TOOL_SPAN_PREFIX + str(tool)


# every hook span
ENGINE_NAME = "hermes.context_engine.name"
HOOK = "hermes.context_engine.hook"
CONVERSATION_ID = "gen_ai.conversation.id"

# engine tools
OPERATION_NAME = "gen_ai.operation.name"
OPERATION_EXECUTE_TOOL = "execute_tool"
TOOL_NAME = "gen_ai.tool.name"
TOOL_CALL_ARGUMENTS = "gen_ai.tool.call.arguments"      # only with capture_content

# session / model
SESSION_BOUNDARY_REASON = "hermes.session.boundary_reason"
REQUEST_MODEL = "gen_ai.request.model"

# update_from_response
USAGE_INPUT_TOKENS = "gen_ai.usage.input_tokens"
USAGE_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"

# cache use per response (update_from_response)
CACHE_READ_RATIO = "hermes.context.cache_read_ratio"            # cache_read / prompt tokens
CACHE_REWRITE_TOKENS = "hermes.context.compaction.cache_rewrite_tokens"   # first response after a compaction

# compression decisions (should_compress, should_compress_preflight, should_compress_info,
# should_defer_preflight_to_real_usage)
DECISION = "hermes.context.decision"                   # compress / skip / defer / estimate
DECISION_REASON = "hermes.context.decision.reason"
CHECKED_TOKENS = "hermes.context.checked_tokens"       # the tokens the engine was asked about
CHECKED_TOKENS_SOURCE = "hermes.context.checked_tokens.source"   # argument / state
THRESHOLD_TOKENS = "hermes.context.threshold_tokens"   # the engine's threshold at that moment
BLOCKED_REASON = "hermes.context.compression.blocked_reason"     # automatic compression blocked

# compress: the summary model
SUMMARY_MODEL = "hermes.context.summary.model"
SUMMARY_PROVIDER = "hermes.context.summary.provider"
SUMMARY_INPUT_TOKENS = "hermes.context.summary.input_tokens"
SUMMARY_OUTPUT_TOKENS = "hermes.context.summary.output_tokens"

# compress
MESSAGES_BEFORE = "hermes.context.messages.before"
MESSAGES_AFTER = "hermes.context.messages.after"
TOKENS_BEFORE = "hermes.context.tokens.before"
TOKENS_AFTER = "hermes.context.tokens.after"
COMPRESS_OUTCOME = "hermes.context.compress.outcome"
TOKENIZER = "hermes.context.tokenizer"
CURRENT_TOKENS = "hermes.context.current_tokens"
COMPRESS_FORCE = "hermes.context.compress.force"
FOCUS_TOPIC = "hermes.context.focus_topic"                # only with capture_content
SUMMARY_FAILURE = "hermes.context.compress.summary_failure"
SUMMARY_FAILURE_CAUSE = "hermes.context.compress.summary_failure_cause"
FAILURE_KIND = "hermes.context.compress.failure_kind"     # record_timeout_failure
FAILURE_REASON = "hermes.context.compress.failure_reason"  # only with capture_content

# the deadline event on a compress span still running
DEADLINE_EVENT = "hermes.context.compress.deadline_exceeded"
DEADLINE_SECONDS = "hermes.context.compress.deadline_seconds"
ELAPSED_SECONDS = "hermes.context.compress.elapsed_seconds"

# select_context
SELECTION_RESULT = "hermes.context.selection.result"
SELECTION_MESSAGES = "hermes.context.selection.messages"
SELECTION_TOKENS = "hermes.context.selection.tokens"
REQUEST_TOKENS = "hermes.context.request.tokens"
SELECTION_BUDGET_TOKENS = "hermes.context.selection.budget_tokens"
SELECTION_CACHE_PREFIX_LOST = "hermes.context.selection.cache_prefix_lost_tokens"

# prune_tool_results_only (also MESSAGES_BEFORE/AFTER, TOKENS_BEFORE/AFTER, CURRENT_TOKENS, TOKENIZER)
PRUNE_OUTCOME = "hermes.context.prune.outcome"                 # vocabulary.PRUNE_OUTCOMES
PRUNE_RESULTS = "hermes.context.prune.results"                 # the n the engine reported
PRUNE_COMMITTED = "hermes.context.prune.committed"             # the host goes on with the new list
PRUNE_RECLAIMED_TOKENS = "hermes.context.prune.reclaimed_tokens"   # tokens before - after, committed

# on_turn_complete (also MESSAGES_AFTER / TOKENS_AFTER: the finished transcript; USAGE_*: the usage given)
TURN_OUTCOME = "hermes.turn.outcome"                 # vocabulary.TURN_OUTCOMES
TURN_EXIT_REASON = "hermes.turn.exit_reason"         # the host's word, without its detail
TURN_API_CALLS = "hermes.turn.api_call_count"
TURN_INTERRUPTED = "hermes.turn.interrupted"
TURN_FAILED = "hermes.turn.failed"
TURN_ID = "hermes.turn.id"

# clone_for_agent
CLONE_OUTCOME = "hermes.context_engine.clone.outcome"   # vocabulary.CLONE_OUTCOMES

# the exception event (OpenTelemetry semantic conventions)
EXCEPTION_EVENT = "exception"
EXCEPTION_TYPE = "exception.type"
EXCEPTION_MESSAGE = "exception.message"
EXCEPTION_STACKTRACE = "exception.stacktrace"
EXCEPTION_ESCAPED = "exception.escaped"
REDACTED = "[redacted: observed.capture_content is off]"

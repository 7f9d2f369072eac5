"""The metric catalogue: every metric observed-engine emits, defined once.

The instruments (``instruments.py``), the README table, the alert rules, the
Grafana board and the Streamlit dashboard are all checked against this module.
``otel_name`` is the OpenTelemetry instrument name; ``prom_name`` is what the
OpenTelemetry Prometheus exporter exposes on ``/metrics`` (dots become
underscores, the unit ``s`` adds ``_seconds``, counters add ``_total``); a test
proves the translation with the real exporter.
"""

from __future__ import annotations

from typing import Dict, Optional, Tuple

from . import vocabulary as _vocab
from .records import record

COUNTER = "counter"
HISTOGRAM = "histogram"
OBSERVABLE_GAUGE = "observable_gauge"

# Latency buckets: sub-millisecond hooks up to the host's 600 s compression ceiling.
HOOK_LATENCY_BUCKETS = (
    0.000001, 0.000005, 0.00001, 0.00005, 0.0001, 0.0005, 0.001, 0.005,
    0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0,
)
COMPRESSION_LATENCY_BUCKETS = (
    0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0,
    90.0, 120.0, 180.0, 240.0, 300.0, 450.0, 600.0,
)
TOKEN_BUCKETS = (
    1000, 2000, 4000, 8000, 16000, 32000, 64000, 100000, 128000, 200000,
    256000, 400000, 512000, 1000000, 2000000,
)
MESSAGE_BUCKETS = (5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000)
TURN_API_CALL_BUCKETS = (1, 2, 3, 5, 10, 20, 50, 100)


@record
class MetricSpec:
    key: str                      # short key used in code (Instruments attribute)
    otel_name: str
    prom_name: str
    kind: str
    unit: str
    labels: Tuple[str, ...]
    description: str
    buckets: Optional[Tuple[float, ...]] = None
    # Closed label value sets (documentation and validation); open labels
    # (engine, hook names of unknown engines) are capped at runtime instead.
    label_values: Optional[Dict[str, Tuple[str, ...]]] = None


METRICS: Tuple[MetricSpec, ...] = (
    MetricSpec(
        "hook_calls", "hermes.context_engine.hook.calls",
        "hermes_context_engine_hook_calls_total", COUNTER, "{call}",
        ("engine", "hook", "outcome"), "Every hook call of the context engine.",
        label_values={"outcome": _vocab.CALL_OUTCOMES},
    ),
    MetricSpec(
        "hook_duration", "hermes.context_engine.hook.duration",
        "hermes_context_engine_hook_duration_seconds", HISTOGRAM, "s",
        ("engine", "hook"), "Hook latency as the host sees it.",
        buckets=HOOK_LATENCY_BUCKETS,
    ),
    MetricSpec(
        "prompt_tokens", "hermes.context.prompt_tokens",
        "hermes_context_prompt_tokens", OBSERVABLE_GAUGE, "{token}",
        ("engine",), "Last prompt tokens of the engine (the -1 'awaiting real usage' sentinel shows as 0).",
    ),
    MetricSpec(
        "threshold_tokens", "hermes.context.threshold_tokens",
        "hermes_context_threshold_tokens", OBSERVABLE_GAUGE, "{token}",
        ("engine",), "Prompt size at which the engine compresses.",
    ),
    MetricSpec(
        "window_tokens", "hermes.context.window_tokens",
        "hermes_context_window_tokens", OBSERVABLE_GAUGE, "{token}",
        ("engine",), "The model's context window (engine.context_length).",
    ),
    MetricSpec(
        "usage_ratio", "hermes.context.usage_ratio",
        "hermes_context_usage_ratio", OBSERVABLE_GAUGE, "1",
        ("engine",), "Prompt tokens / context window (highest among live engines with that name).",
    ),
    MetricSpec(
        "usage_tokens", "hermes.context_engine.usage_tokens",
        "hermes_context_engine_usage_tokens_total", COUNTER, "{token}",
        ("engine", "token_type"), "Usage reported to update_from_response, per token type.",
        label_values={"token_type": _vocab.TOKEN_TYPES},
    ),
    MetricSpec(
        "compressions", "hermes.context.compressions",
        "hermes_context_compressions_total", COUNTER, "{call}",
        ("engine", "outcome"), "compress() results.",
        label_values={"outcome": _vocab.COMPRESS_OUTCOMES},
    ),
    MetricSpec(
        "summary_failures", "hermes.context.compression.summary_failures",
        "hermes_context_compression_summary_failures_total", COUNTER, "{call}",
        ("engine", "kind", "cause"),
        "compress() calls that returned normally although the summary model failed, as the engine "
        "reports it (the built-in compressor does): a fallback summary was inserted (messages dropped "
        "without a real summary) or the compression was aborted (messages kept, context still full).",
        label_values={"kind": _vocab.SUMMARY_FAILURE_KINDS, "cause": _vocab.SUMMARY_FAILURE_CAUSES},
    ),
    MetricSpec(
        "compression_checks", "hermes.context.compression.checks",
        "hermes_context_compression_checks_total", COUNTER, "{call}",
        ("engine", "hook", "decision"),
        "Every compression decision the host asked for: should_compress / should_compress_preflight / "
        "should_compress_info answer compress or skip, should_defer_preflight_to_real_usage defer "
        "(wait for the provider's real usage) or estimate (go on with the rough estimate).",
        label_values={"decision": _vocab.DECISIONS},
    ),
    MetricSpec(
        "compression_blocked", "hermes.context.compression.blocked",
        "hermes_context_compression_blocked", OBSERVABLE_GAUGE, "1",
        ("engine", "reason"),
        "1 while the engine's own state blocks automatic compression (summary-failure cooldown, "
        "ineffective-compression or fallback-streak breaker, attempts exhausted), per reason, else 0; "
        "read from the engine's instance state, no engine code runs.",
        label_values={"reason": _vocab.BLOCKED_REASONS},
    ),
    MetricSpec(
        "summary_tokens", "hermes.context.compression.summary_tokens",
        "hermes_context_compression_summary_tokens_total", COUNTER, "{token}",
        ("engine", "token_type"),
        "Tokens the summary model used for compress() calls, where observable (Hermes' own "
        "auxiliary usage record of task 'compression', read-only).",
        label_values={"token_type": _vocab.TOKEN_TYPES},
    ),
    MetricSpec(
        "cache_rewrite_tokens", "hermes.context.compaction.cache_rewrite_tokens",
        "hermes_context_compaction_cache_rewrite_tokens_total", COUNTER, "{token}",
        ("engine",),
        "Prompt tokens the first response after a compaction had to write into the provider's prompt "
        "cache again (cache_write tokens where reported, else prompt minus cache_read tokens); a committed "
        "tool-result prune (Hermes 0.20+) is such a boundary too.",
    ),
    MetricSpec(
        "compression_duration", "hermes.context.compression.duration",
        "hermes_context_compression_duration_seconds", HISTOGRAM, "s",
        ("engine",), "compress() latency.", buckets=COMPRESSION_LATENCY_BUCKETS,
    ),
    MetricSpec(
        "compression_tokens", "hermes.context.compression.tokens",
        "hermes_context_compression_tokens", HISTOGRAM, "{token}",
        ("engine", "stage"), "Tokens going into (before) and out of (after) compress().",
        buckets=TOKEN_BUCKETS, label_values={"stage": _vocab.STAGES},
    ),
    MetricSpec(
        "compression_messages", "hermes.context.compression.messages",
        "hermes_context_compression_messages", HISTOGRAM, "{message}",
        ("engine", "stage"), "Messages going into (before) and out of (after) compress().",
        buckets=MESSAGE_BUCKETS, label_values={"stage": _vocab.STAGES},
    ),
    MetricSpec(
        "compression_in_flight", "hermes.context.compression.in_flight",
        "hermes_context_compression_in_flight", OBSERVABLE_GAUGE, "{call}",
        ("engine",), "compress() calls running now.",
    ),
    MetricSpec(
        "compression_oldest_age", "hermes.context.compression.oldest_in_flight_age",
        "hermes_context_compression_oldest_in_flight_age_seconds", OBSERVABLE_GAUGE, "s",
        ("engine",), "Age of the oldest compress() call still running (0 when none).",
    ),
    MetricSpec(
        "compression_deadline", "hermes.context.compression.deadline",
        "hermes_context_compression_deadline_seconds", OBSERVABLE_GAUGE, "s",
        ("engine",), "The deadline applied to each compress() call.",
    ),
    MetricSpec(
        "compression_timeouts", "hermes.context.compression.timeouts",
        "hermes_context_compression_timeouts_total", COUNTER, "{event}",
        ("engine", "kind"), "Compression past its deadline: detected while running, reported by the host, or finished late.",
        label_values={"kind": _vocab.TIMEOUT_KINDS},
    ),
    MetricSpec(
        "fail_open", "hermes.context_engine.fail_open",
        "hermes_context_engine_fail_open_total", COUNTER, "{event}",
        ("engine", "hook", "reason"), "Hook failures the host falls open on (request or turn goes on unchanged).",
        label_values={"reason": _vocab.FAIL_OPEN_REASONS},
    ),
    MetricSpec(
        "selections", "hermes.context.selections",
        "hermes_context_selections_total", COUNTER, "{call}",
        ("engine", "result"), "select_context outcomes.",
        label_values={"result": _vocab.SELECTION_RESULTS},
    ),
    MetricSpec(
        "cache_prefix_lost", "hermes.context.selection.cache_prefix_lost_tokens",
        "hermes_context_selection_cache_prefix_lost_tokens_total", COUNTER, "{token}",
        ("engine",), "Prompt-cache prefix tokens invalidated by changed selections.",
    ),
    MetricSpec(
        "tool_result_prunes", "hermes.context.tool_result_prunes",
        "hermes_context_tool_result_prunes_total", COUNTER, "{call}",
        ("engine", "outcome"),
        "prune_tool_results_only() results (Hermes 0.20+, after a tool iteration that did not compress): "
        "pruned (the host goes on with the new list), noop (nothing pruned), uncommitted (a count but the "
        "input list came back, so the host keeps it), fail_open (not a (list, n) pair), error (raised).",
        label_values={"outcome": _vocab.PRUNE_OUTCOMES},
    ),
    MetricSpec(
        "tool_result_prune_results", "hermes.context.tool_result_prune.results",
        "hermes_context_tool_result_prune_results_total", COUNTER, "{result}",
        ("engine",), "Tool results the committed prunes pruned, as the engine counts them.",
    ),
    MetricSpec(
        "tool_result_prune_reclaimed_tokens", "hermes.context.tool_result_prune.reclaimed_tokens",
        "hermes_context_tool_result_prune_reclaimed_tokens_total", COUNTER, "{token}",
        ("engine",), "Tokens the committed prunes took out of the conversation (before minus after, "
                     "counted like compression tokens).",
    ),
    MetricSpec(
        "turns", "hermes.context.turns",
        "hermes_context_turns_total", COUNTER, "{turn}",
        ("engine", "outcome", "exit_reason"),
        "Finished user turns the host reported to on_turn_complete (Hermes 0.20+, engines that define "
        "it): completed, interrupted or failed, and the host's exit reason (its word without detail; "
        "words it did not have in 0.22 count as other).",
        label_values={"outcome": _vocab.TURN_OUTCOMES,
                      "exit_reason": _vocab.TURN_EXIT_REASONS + (_vocab.EXIT_REASON_OTHER, _vocab.UNSPECIFIED)},
    ),
    MetricSpec(
        "turn_api_calls", "hermes.context.turn.api_calls",
        "hermes_context_turn_api_calls", HISTOGRAM, "{call}",
        ("engine",), "Provider calls per finished turn (on_turn_complete's api_call_count).",
        buckets=TURN_API_CALL_BUCKETS,
    ),
    MetricSpec(
        "clones", "hermes.context_engine.clones",
        "hermes_context_engine_clones_total", COUNTER, "{call}",
        ("engine", "outcome"),
        "clone_for_agent() calls (Hermes 0.22+ gives every agent its own copy of a plugin engine): "
        "observed (a new engine on the same pipeline), same_engine (the engine returned itself), "
        "unobserved (the copy could not be observed), error (raised; the host falls back to its built-in).",
        label_values={"outcome": _vocab.CLONE_OUTCOMES},
    ),
    MetricSpec(
        "bad_input", "hermes.context_engine.bad_input",
        "hermes_context_engine_bad_input_total", COUNTER, "{event}",
        ("engine", "hook", "kind"), "Odd input the wrapper could not fully interpret (logged once per kind); the host's call went through unchanged.",
    ),
    MetricSpec(
        "token_estimates", "hermes.context_engine.token_estimates",
        "hermes_context_engine_token_estimates_total", COUNTER, "{call}",
        ("engine", "reason"),
        "Calls whose token counts are the estimate (ceil(chars/4)) although a tiktoken encoding is "
        "configured: helper_busy, a session end delivered what was queued before the token-counting "
        "helper (lowest CPU priority) answered. Their rows and spans say tokenizer='estimate'.",
        label_values={"reason": _vocab.ESTIMATE_REASONS},
    ),
    MetricSpec(
        "telemetry_errors", "hermes.context_engine.telemetry_errors",
        "hermes_context_engine_telemetry_errors_total", COUNTER, "{error}",
        ("component",), "The wrapper's own failures, swallowed.",
    ),
    MetricSpec(
        "telemetry_dropped", "hermes.context_engine.telemetry_dropped",
        "hermes_context_engine_telemetry_dropped_total", COUNTER, "{item}",
        ("signal",), "Telemetry items dropped because a bounded queue was full (event, store_row, span).",
        label_values={"signal": _vocab.DROP_SIGNALS},
    ),
)

BY_KEY: Dict[str, MetricSpec] = {m.key: m for m in METRICS}
BY_PROM_NAME: Dict[str, MetricSpec] = {m.prom_name: m for m in METRICS}


def prometheus_series_names() -> set:
    """Every series name a Prometheus query may use (histograms add _bucket/_sum/_count)."""
    names = set()
    for m in METRICS:
        names.add(m.prom_name)
        if m.kind == HISTOGRAM:
            names.update({m.prom_name + "_bucket", m.prom_name + "_sum", m.prom_name + "_count"})
    return names


def markdown_table() -> str:
    """The README's metric table, generated from the catalogue."""
    rows = ["| metric | type | labels | meaning |", "|---|---|---|---|"]
    for m in METRICS:
        kind = {"observable_gauge": "gauge"}.get(m.kind, m.kind)
        rows.append(f"| `{m.prom_name}` | {kind} | {', '.join(m.labels)} | {m.description} |")
    return "\n".join(rows)

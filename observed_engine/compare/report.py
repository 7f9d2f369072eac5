"""The compare report: per engine and per conversation, as JSON (``compare.json``) and
Markdown (``compare.md``).

``compare.json`` is what the dashboard's "Compare engines" view opens (its ``kind`` is
``observed-engine-compare``, ``replay: true``: the numbers come from a replay, not from live
traffic). Message text never goes into either file; session ids do (they are the operator's
own, and name what was replayed).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Dict, List, Optional

from ..contract import vocabulary as vocab

KIND = "observed-engine-compare"
FORMAT = 1
JSON_NAME = "compare.json"
MARKDOWN_NAME = "compare.md"


def percentile(values: List[float], q: float) -> Optional[float]:
    """Nearest-rank percentile; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100.0 * len(ordered)) - 1)]


def summarise_replay(raw: Dict[str, Any], context_length: int) -> Dict[str, Any]:
    """One conversation × engine: the numbers of the report from a replay's raw result."""
    rows = raw.get("rows") or []
    calls = [r for r in rows if r.get("hook") == "compress" and r.get("event") == vocab.EVENT_CALL]
    outcomes: Dict[str, int] = {}
    for r in calls:
        outcomes[r.get("outcome") or "?"] = outcomes.get(r.get("outcome") or "?", 0) + 1
    compressed = [r for r in calls if r.get("outcome") == vocab.COMPRESSED]
    failures: Dict[str, int] = {}
    for r in rows:
        if r.get("event") == vocab.EVENT_SUMMARY_FAILURE:
            key = f"{r.get('outcome')}/{r.get('reason')}"
            failures[key] = failures.get(key, 0) + 1
    blocked = sum(1 for r in rows if r.get("event") == vocab.EVENT_COMPRESSION_BLOCKED and r.get("outcome") == "started")
    durations = [float(r["duration_s"]) for r in calls if isinstance(r.get("duration_s"), (int, float))]
    requests = raw.get("requests") or []
    over = sorted({q["turn"] for q in requests if q.get("over_window")})

    def total(key: str, rs=compressed) -> int:
        return int(sum(r.get(key) or 0 for r in rs))

    return {
        "status": "error" if raw.get("error") else "ok",
        "error": raw.get("error"),
        "engine_class": raw.get("engine_class"),
        "turns": raw.get("turns"), "turns_replayed": raw.get("turns_done"),
        "requests": len(requests),
        "divergences": (raw.get("divergences") or []) + (
            [f"{raw['summary_requests_to_replay_llm']} summary request(s) reached the replay LLM (no auxiliary "
             f"compression model is configured, so the summary model is the main one): the replay answered them"]
            if raw.get("summary_requests_to_replay_llm") else []),
        "compress_calls": len(calls),
        "compressions": len(compressed),
        "outcomes": outcomes,
        "compression_list": [{"outcome": r.get("outcome"), "tokens_before": r.get("tokens_before"),
                              "tokens_after": r.get("tokens_after"), "messages_before": r.get("messages_before"),
                              "messages_after": r.get("messages_after"), "duration_s": r.get("duration_s"),
                              "reason": r.get("reason")} for r in calls],
        "tokens_before": total("tokens_before"), "tokens_after": total("tokens_after"),
        "tokens_saved": total("tokens_before") - total("tokens_after"),
        "messages_before": total("messages_before"), "messages_after": total("messages_after"),
        "messages_saved": total("messages_before") - total("messages_after"),
        "compress_p50_s": percentile(durations, 50), "compress_p95_s": percentile(durations, 95),
        "compress_durations_s": durations,
        "summary_failures": sum(failures.values()), "summary_failure_kinds": failures,
        "compression_blocked": blocked,
        "summary_calls": raw.get("summary_calls"),
        "cache_prefix_lost_tokens": int(sum(q.get("cache_prefix_lost_tokens") or 0 for q in requests)),
        "max_request_tokens": max((q["prompt_tokens"] for q in requests), default=0),
        "over_window_turns": over,
        "context_length": context_length,
        "final_messages": raw.get("final_messages"), "final_tokens": raw.get("final_tokens"),
        "seconds": raw.get("seconds"),
        # what a sweep ranks and checks (observed-engine tune)
        "prompt_tokens": int(sum(q.get("prompt_tokens") or 0 for q in requests)),
        "summary_llm_calls": raw.get("summary_llm_calls"),
        "summary_prompt_tokens": raw.get("summary_prompt_tokens"),
        "summary_completion_tokens": raw.get("summary_completion_tokens"),
        "summary_tokens": (raw.get("summary_prompt_tokens") or 0) + (raw.get("summary_completion_tokens") or 0),
        "engine_settings": raw.get("engine_settings") or {},
        "tools_sent": raw.get("tools_sent"), "toolsets": raw.get("toolsets"), "agent_tools": raw.get("agent_tools"),
    }


def engine_totals(results: List[Dict[str, Any]]) -> Dict[str, Any]:
    """One engine over every conversation it replayed (skipped ones left out)."""
    ran = [r for r in results if r.get("status") in ("ok", "error")]
    durations = [d for r in ran for d in r.get("compress_durations_s") or []]
    keys = ("compress_calls", "compressions", "tokens_before", "tokens_after", "tokens_saved",
            "messages_before", "messages_after", "messages_saved", "summary_failures",
            "cache_prefix_lost_tokens", "compression_blocked")
    out: Dict[str, Any] = {k: int(sum(r.get(k) or 0 for r in ran)) for k in keys}
    outcomes: Dict[str, int] = {}
    for r in ran:
        for k, v in (r.get("outcomes") or {}).items():
            outcomes[k] = outcomes.get(k, 0) + v
    out.update({
        "conversations": len(ran),
        "errors": sum(1 for r in ran if r["status"] == "error"),
        "skipped": sum(1 for r in results if r.get("status") == "skipped"),
        "outcomes": outcomes,
        "compress_p50_s": percentile(durations, 50), "compress_p95_s": percentile(durations, 95),
        "over_window_turns": int(sum(len(r.get("over_window_turns") or []) for r in ran)),
        "final_messages": int(sum(r.get("final_messages") or 0 for r in ran)),
        "final_tokens": int(sum(r.get("final_tokens") or 0 for r in ran)),
    })
    return out


def write(report: Dict[str, Any], out: Path) -> Dict[str, Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / JSON_NAME, "markdown": out / MARKDOWN_NAME}
    paths["json"].write_text(json.dumps(report, indent=2, default=str) + "\n", encoding="utf-8")
    paths["markdown"].write_text(markdown(report), encoding="utf-8")
    return paths


def _n(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:,.2f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def _ms(value: Optional[float]) -> str:
    return "–" if value is None else f"{value * 1000:,.0f} ms"


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def markdown(report: Dict[str, Any]) -> str:
    engines = report["engines"]
    lines = [
        "# observed-engine compare (replay)",
        "",
        f"Replayed {len(report['conversations'])} conversation(s) from `{report['state_db']}` through "
        f"{', '.join(f'`{e}`' for e in engines)}; summaries: {report['summary']}, usage: {report['usage']}, "
        f"window {report['context_length']:,} tokens. Numbers come from a replay, not from live traffic.",
        "",
        "## Per engine",
        "",
        "| engine | conversations | compressions (calls) | outcomes | tokens before → after (saved) | "
        "messages before → after | compress p50 / p95 | summary failures | cache prefix tokens lost | "
        "turns over window | final transcript | errors / skipped |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name in engines:
        t = report["totals"].get(name) or {}
        if t.get("unavailable"):
            lines.append(f"| `{name}` | – | – | – | – | – | – | – | – | – | – | unavailable: {_cell(t['unavailable'])} |")
            continue
        outcomes = ", ".join(f"{k} {v}" for k, v in sorted((t.get("outcomes") or {}).items())) or "–"
        lines.append(
            f"| `{name}` | {t['conversations']} | {t['compressions']} ({t['compress_calls']}) | {outcomes} | "
            f"{_n(t['tokens_before'])} → {_n(t['tokens_after'])} ({_n(t['tokens_saved'])}) | "
            f"{_n(t['messages_before'])} → {_n(t['messages_after'])} | "
            f"{_ms(t['compress_p50_s'])} / {_ms(t['compress_p95_s'])} | {t['summary_failures']} | "
            f"{_n(t['cache_prefix_lost_tokens'])} | {t['over_window_turns']} | "
            f"{_n(t['final_messages'])} msgs, {_n(t['final_tokens'])} tokens | {t['errors']} / {t['skipped']} |")
    lines += ["", "## Per conversation", ""]
    for conv in report["conversations"]:
        head = f"### `{conv['session_id']}`"
        if conv.get("skip"):
            lines += [head, "", f"Skipped: {_cell(conv['skip'])}", ""]
            continue
        lines += [head, "",
                  f"{conv['turns']} turns, {conv['messages']} messages recorded, "
                  f"{conv['recorded_compactions']} compaction(s) in the recording."
                  + "".join(f" {_cell(n)}." for n in conv.get("notes") or []), "",
                  "| engine | status | compressions (calls) | tokens before → after | messages before → after | "
                  "p50 / p95 | summary failures | cache lost | over window (turns) | final | notes |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        for name in engines:
            r = conv["engines"].get(name) or {}
            if r.get("status") == "skipped":
                lines.append(f"| `{name}` | skipped | | | | | | | | | {_cell(r.get('reason'))} |")
                continue
            notes = "; ".join(([r["error"]] if r.get("error") else []) + (r.get("divergences") or [])[:3])
            lines.append(
                f"| `{name}` | {r['status']} | {r['compressions']} ({r['compress_calls']}) | "
                f"{_n(r['tokens_before'])} → {_n(r['tokens_after'])} | {_n(r['messages_before'])} → "
                f"{_n(r['messages_after'])} | {_ms(r['compress_p50_s'])} / {_ms(r['compress_p95_s'])} | "
                f"{r['summary_failures']} | {_n(r['cache_prefix_lost_tokens'])} | "
                f"{', '.join(map(str, r['over_window_turns'])) or '–'} | "
                f"{_n(r['final_messages'])} msgs, {_n(r['final_tokens'])} tokens | {_cell(notes) or '–'} |")
        lines.append("")
    return "\n".join(lines) + "\n"

"""``observed-engine tune``: which settings of an engine would have served your conversations best.

Replays the recorded conversations through the current settings and every variant of a grid
(``sweep``), ranks the variants by an objective (``objective``) and writes ``tune.json`` and
``tune.md`` to the sweep's directory: per variant the totals, per conversation each variant's
numbers, the recommendation with the settings to paste into config.yaml and its margin over the
current settings, per conversation and overall, and the fidelity of the replay (``fidelity``).
The directory also holds one file per finished replay (``jobs/``): the same command again resumes
an interrupted sweep, or replays only the conversations recorded since.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, TextIO

from .. import host
from ..version import __version__
from . import fidelity, sweep
from . import objective as objective_mod
from .modes import SUMMARY_MODES
from .run import DEFAULT_CONTEXT_LENGTH, _config_file
from .sessions import StoreError, other_home_hint, read_conversations, recorded_store
from .variants import BUILTIN, Variant, VariantError, make, parse_variants

KIND = "observed-engine-tune"
FORMAT = 1
JSON_NAME = "tune.json"
MARKDOWN_NAME = "tune.md"
TOOLSETS_NAME = "toolsets.json"


class TuneError(Exception):
    """Bad input: the sweep cannot start (one line, exit 2)."""


def sweep_dir_name(engine: str, labels: Sequence[str], objective: str, context_length: int, summary: str,
                   usage: str) -> str:
    digest = hashlib.sha256(json.dumps([engine, list(labels), objective, context_length, summary, usage]).encode())
    return f"{engine}-{digest.hexdigest()[:10]}"


def _context_length(user_config: Dict[str, Any], given: Optional[int]) -> int:
    if given is not None:
        if given <= 0:
            raise TuneError(f"--context-length must be a positive number of tokens, not {given}; fix: --context-length 128000")
        return int(given)
    model = user_config.get("model") if isinstance(user_config.get("model"), dict) else {}
    try:
        return int(model.get("context_length")) if model.get("context_length") else DEFAULT_CONTEXT_LENGTH
    except (TypeError, ValueError):
        return DEFAULT_CONTEXT_LENGTH


def build_variants(engine: str, grids: Sequence[str], extra: Sequence[str], user_config: Dict[str, Any],
                   context_length: int) -> List[Variant]:
    """The current settings first, then the grid's variants, then the explicit ones."""
    current = make(engine, [], user_config)
    out: List[Variant] = [current]
    if not grids and not extra:
        if engine != BUILTIN:
            raise TuneError(f"no default grid for {engine!r}; fix: --grid key=values (its settings) or --variant")
        grids = sweep.default_grid(context_length)
    found = sweep.parse_grid(engine, grids, user_config) if grids else []
    if extra:
        found += parse_variants(list(extra), user_config)
    for v in found:
        if v.engine != engine:
            raise TuneError(f"--variant {v.label}: a sweep tunes one engine ({engine}); fix: compare engines with "
                            f"observed-engine compare")
        if all((v.engine, v.settings) != (o.engine, o.settings) for o in out):
            out.append(v)
    return out


def run_tune(*, hermes_home: Optional[str] = None, engine: str = BUILTIN, grids: Sequence[str] = (),
             variants: Sequence[str] = (), objective: Optional[str] = None, sessions: Optional[int] = None,
             session_ids: Sequence[str] = (), summary: str = "offline", usage: str = "tiktoken",
             context_length: Optional[int] = None, jobs: Optional[int] = None, out: Optional[Path] = None,
             progress: Optional[TextIO] = sys.stderr) -> Dict[str, Any]:
    """The sweep and its report (written to ``out``, default
    ``$HERMES_HOME/observed/tune/<engine>-<digest of the sweep's settings>/``)."""
    if summary not in SUMMARY_MODES:
        raise TuneError(f"--summary must be one of {', '.join(SUMMARY_MODES)}, not {summary!r}; fix: --summary offline")
    if usage not in ("tiktoken", "chars"):
        raise TuneError(f"--usage must be tiktoken or chars, not {usage!r}; fix: --usage tiktoken")
    if jobs is not None and jobs < 1:
        raise TuneError(f"--jobs must be 1 or more, not {jobs}; fix: --jobs 2")
    if sessions is not None and sessions < 1:
        raise TuneError(f"--sessions must be 1 or more, not {sessions}; fix: --sessions 5")
    home = host.hermes_home(hermes_home)
    written = _config_file(home)        # read as written: bad input must leave the home as it is
    window = _context_length(written, context_length)
    try:
        goal = objective_mod.parse_objective(objective)
        chosen = build_variants(engine.strip(), grids, variants, written, window)
    except VariantError as exc:
        raise TuneError(str(exc)) from None
    try:
        state_db = recorded_store(home, home_given=bool(hermes_home))
        conversations = read_conversations(state_db, session_ids=list(session_ids) or None,
                                           limit=None if session_ids else sessions,
                                           summary_body=host.compaction_summary_body,
                                           inline_tools=host.AGENT_INLINE_TOOLS)
    except StoreError as exc:
        raise TuneError(str(exc)) from None
    user_config = host.load_config(log_errors=False)
    if not conversations:
        raise TuneError(f"no conversation is recorded yet in {state_db}{other_home_hint(bool(hermes_home))}; "
                        f"fix: have a conversation with Hermes there first")
    runnable = [c for c in conversations if c.skip is None]
    recorded = fidelity.recorded_usage(state_db, runnable)
    platforms = {c.session_id: (recorded.get(c.session_id) or {}).get("source") or "cli" for c in runnable}
    toolsets = fidelity.toolsets_by_platform(user_config, platforms.values(), home)
    labels = [v.label for v in chosen]
    if out is None:
        out = home / "observed" / "tune" / sweep_dir_name(engine, labels, goal.text, window, summary, usage)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    # the tools every replay of this run sends (Hermes' availability checks, such as the vision
    # tools' auxiliary-provider health, are read once, here): kept for tracing a number back
    (out / TOOLSETS_NAME).write_text(json.dumps(toolsets, indent=1, default=str) + "\n", encoding="utf-8")
    started = time.time()
    run = sweep.run_jobs(runnable, chosen, user_config=user_config, context_length=window, summary=summary,
                         usage=usage, toolsets_for=lambda c: toolsets[platforms[c.session_id]],
                         jobs=jobs or sweep.default_jobs(), out=out, progress=progress)
    by_conv = sweep.conversations_with_variants(run["results"], runnable, chosen)
    rec = objective_mod.recommendation(chosen, by_conv, goal, chosen[0].label)
    report = {
        "kind": KIND, "format": FORMAT, "replay": True, "observed_engine": __version__,
        "hermes_agent": host.hermes_version(), "created": started, "state_db": str(state_db),
        "engine": engine, "grid": list(grids) or (sweep.default_grid(window) if engine == BUILTIN and not variants
                                                  else []),
        "objective": goal.text, "summary": summary, "usage": usage, "context_length": window,
        "current": chosen[0].label,
        "variants": [{"label": v.label, "settings": v.as_dict(), "config_yaml": v.config_yaml() if v.settings else "",
                      **rec["variants"][v.label],
                      "engine_settings": _effective(by_conv, v.label)} for v in chosen],
        "recommendation": {k: v for k, v in rec.items() if k != "variants"},
        "conversations": [_conversation(c, by_conv, chosen, recorded, toolsets[platforms[c.session_id]], usage,
                                        summary) for c in runnable]
                         + [{"session_id": c.session_id, "skip": c.skip, "turns": len(c.turns)}
                            for c in conversations if c.skip],
        "fidelity": {"limits": list(fidelity.GENERAL_LIMITS),
                     "toolsets": {p: {"enabled": ts.get("enabled"), "disabled": ts.get("disabled"),
                                      "tools": len(ts.get("schemas") or []), "error": ts.get("error")}
                                  for p, ts in toolsets.items()}},
        "unavailable": run["unavailable"],
        "throughput": _throughput(run, len(runnable), len(chosen)),
    }
    paths = write(report, out)
    report["files"] = {k: str(v) for k, v in paths.items()}
    return report


def _effective(by_conv: Dict[str, Dict[str, Any]], label: str) -> Dict[str, Any]:
    """The engine's own figures for this variant (threshold tokens, ...) when every conversation
    agrees on them (they depend on the window and the model, not on the conversation)."""
    seen = [r.get("engine_settings") for row in by_conv.values() for lb, r in row.items()
            if lb == label and r.get("engine_settings")]
    return seen[0] if seen and all(s == seen[0] for s in seen) else {}


def _throughput(run: Dict[str, Any], conversations: int, variants: int) -> Dict[str, Any]:
    replayed, seconds = run["replayed"], run["seconds"]
    return {"jobs": run["jobs"], "replayed": replayed, "reused": run["reused"],
            "shared": run.get("shared", 0), "seconds": round(seconds, 2),
            "conversations": conversations, "variants": variants,
            "replays_per_minute": round(replayed / seconds * 60, 1) if replayed and seconds > 0 else None}


def _conversation(conv, by_conv, chosen, recorded, toolsets, usage, summary) -> Dict[str, Any]:
    row = by_conv.get(conv.session_id) or {}
    current = row.get(chosen[0].label)
    return {
        "session_id": conv.session_id, "turns": len(conv.turns), "messages": len(conv.messages),
        "model": conv.model, "recorded_compactions": conv.compactions, "skip": None,
        "platform": (recorded.get(conv.session_id) or {}).get("source"),
        "prompt_size": fidelity.prompt_size(recorded.get(conv.session_id), current),
        "notes": fidelity.notes(conv, toolsets, current, usage, summary),
        "variants": {v.label: _cell(row.get(v.label)) for v in chosen},
    }


def _cell(result: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    if not result:
        return {"status": "missing"}
    if result.get("status") == "skipped":
        return {"status": "skipped", "reason": result.get("reason")}
    cell = {"status": result.get("status"), "error": result.get("error"),
            "divergences": (result.get("divergences") or [])[:3]}
    cell.update(objective_mod.metrics_of(result))
    cell["over_window_turns"] = result.get("over_window_turns") or []
    cell["max_request_tokens"] = result.get("max_request_tokens")
    cell["requests"] = result.get("requests")
    return cell


# -- the files -------------------------------------------------------------------------------

def write(report: Dict[str, Any], out: Path) -> Dict[str, Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / JSON_NAME, "markdown": out / MARKDOWN_NAME}
    for key, text in (("json", json.dumps(report, indent=2, default=str) + "\n"), ("markdown", markdown(report))):
        tmp = paths[key].with_name("." + paths[key].name + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(paths[key])
    return paths


def _n(v: Any) -> str:
    if v is None:
        return "–"
    return f"{v:+,}" if isinstance(v, int) and v < 0 else (f"{v:,}" if isinstance(v, int) else str(v))


def _signed(v: Any) -> str:
    return "–" if v is None else f"{v:+,}"


def _cell_text(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


COLUMNS = [("overflow turns", "overflow_turns"), ("summary tokens", "summary_tokens"),
           ("cache prefix lost", "cache_prefix_lost_tokens"), ("prompt tokens", "prompt_tokens"),
           ("compressions", "compressions"), ("summary failures", "summary_failures")]


def markdown(report: Dict[str, Any]) -> str:
    rec = report["recommendation"]
    t = report.get("throughput") or {}
    lines = [
        "# observed-engine tune (replay)", "",
        f"{len([c for c in report['conversations'] if not c.get('skip')])} conversation(s) from "
        f"`{report['state_db']}` × {len(report['variants'])} variant(s) of `{report['engine']}`; objective "
        f"`{report['objective']}`; summaries {report['summary']}, usage {report['usage']}, window "
        f"{report['context_length']:,} tokens. Numbers come from replays, not from live traffic.", "",
        f"Replayed {t.get('replayed', 0)} (conversation × variant) pairs in {t.get('seconds', 0)} s with "
        f"{t.get('jobs')} worker(s) ({t.get('replays_per_minute') or '–'} per minute); {t.get('reused', 0)} "
        f"kept from earlier runs; {t.get('shared', 0)} answered by the replay of a variant with the same "
        f"settings.", "",
        "## Recommendation", "",
    ]
    if rec.get("best") is None:
        lines += [f"None: {rec.get('why_none')}.", ""]
    elif rec.get("is_current"):
        lines += [f"Keep the current settings (`{rec['current']}`): no variant beats them on `{report['objective']}`.",
                  ""]
    else:
        m = rec.get("margin_overall") or {}
        lines += [f"**`{rec['best']}`**, against the current settings (`{rec['current']}`), over every replayed "
                  "conversation: " + ", ".join(f"{name} {_signed(m.get(key))}" for name, key in COLUMNS) + ".", "",
                  "Paste into config.yaml:", "", "```yaml", rec.get("config_yaml") or "", "```", ""]
    lines += ["## Variants", "",
              "| rank | variant | " + " | ".join(n for n, _ in COLUMNS) + " | engine's threshold tokens | why not |",
              "|---|---|" + "---|" * len(COLUMNS) + "---|---|"]
    for v in report["variants"]:
        tot = v.get("totals") or {}
        lines.append(f"| {v.get('rank', '–')} | `{_cell_text(v['label'])}` | "
                     + " | ".join(_n(tot.get(k)) for _, k in COLUMNS)
                     + f" | {_n((v.get('engine_settings') or {}).get('threshold_tokens'))} | "
                       f"{_cell_text(v.get('why_not') or '')} |")
    lines += ["", "## Per conversation", "",
              "Best: the variant that ranks first in that conversation alone. Prompt size: the replay at the "
              "current settings against the recording (mean prompt tokens per request).", "",
              "| conversation | turns | best here | recommended vs current | prompt size replay / recorded |",
              "|---|---|---|---|---|"]
    per = rec.get("margin_per_conversation") or {}
    best_here = rec.get("best_per_conversation") or {}
    for c in report["conversations"]:
        if c.get("skip"):
            lines.append(f"| `{_cell_text(c['session_id'])}` | {c.get('turns')} | skipped: {_cell_text(c['skip'])} | | |")
            continue
        m = (per.get(c["session_id"]) or {}).get("margin") or {}
        ps = c.get("prompt_size") or {}
        size = (f"{ps['difference_pct']:+.1f}% ({_n(ps.get('replayed_requests'))} / {_n(ps.get('recorded_requests'))} "
                f"requests)" if ps.get("difference_pct") is not None else "–")
        vs = ", ".join(f"{name} {_signed(m.get(key))}" for name, key in COLUMNS[:3]) if m else "–"
        lines.append(f"| `{_cell_text(c['session_id'])}` | {c['turns']} | "
                     f"`{_cell_text(best_here.get(c['session_id']) or '–')}` | {vs} | {size} |")
    lines += ["", "## Fidelity", ""] + [f"- {_cell_text(x)}" for x in report["fidelity"]["limits"]]
    notes = sorted({n for c in report["conversations"] for n in c.get("notes") or []})
    lines += [f"- {_cell_text(n)}" for n in notes]
    return "\n".join(lines) + "\n"

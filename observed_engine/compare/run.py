"""Running a comparison: the recorded conversations replayed through each engine, one report.

Reads conversations from Hermes' session store (``sessions.py``), replays each one through
each engine in the real host path against a local replay LLM (``replay.py``,
``replay_server.py``), and reports per engine and per conversation (``report.py``). One
failing engine or conversation never stops the others: it is marked in the report, with why.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, TextIO

from .. import host
from ..version import __version__
from . import fidelity, sweep
from . import report as report_mod
from .modes import SUMMARY_MODES
from .replay import BUILTIN
from .sessions import NothingRecorded, StoreError, other_home_hint, read_conversations, recorded_store
from .variants import Variant, VariantError, parse_variants

__all__ = ["CompareError", "StoreError", "run_compare", "DEFAULT_CONTEXT_LENGTH"]

DEFAULT_CONTEXT_LENGTH = 128_000


class CompareError(Exception):
    """Bad input: the run cannot start (printed as one line by the CLI)."""


Progress = sweep.Progress


def parse_engines(value: str | Sequence[str], user_config: Optional[Dict[str, Any]] = None) -> List[Variant]:
    """``--engines``: engines and variants (``engine@key=value,...``, ``variants``), validated."""
    try:
        return parse_variants(value, user_config)
    except VariantError as exc:
        raise CompareError(str(exc)) from None


def _config_file(home: Path) -> Dict[str, Any]:
    """``home``'s config.yaml as written (read only, without Hermes: loading it through Hermes
    prepares the home's folders), for validating a plugin engine's settings; {} when unreadable."""
    import yaml

    try:
        data = yaml.safe_load((home / "config.yaml").read_text(encoding="utf-8"))
    except (OSError, ValueError, yaml.YAMLError):
        return {}
    return data if isinstance(data, dict) else {}


def run_compare(*, hermes_home: Optional[str] = None, engines: str | Sequence[str] = (BUILTIN,),
                sessions: Optional[int] = 5, session_ids: Sequence[str] = (), summary: str = "offline",
                usage: str = "tiktoken", context_length: Optional[int] = None,
                out: Optional[Path] = None, progress: Optional[TextIO] = sys.stderr, jobs: int = 1) -> Dict[str, Any]:
    """Replay the recorded conversations through ``engines`` (names or variants,
    ``engine@key=value``), in ``jobs`` processes; the report (also written to ``out`` as
    compare.json and compare.md when given)."""
    home = host.hermes_home(hermes_home)
    variants = parse_engines(engines, _config_file(home))
    engine_names = [v.label for v in variants]
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise CompareError(f"--jobs must be a whole number of at least 1, not {jobs!r}; fix: --jobs 2")
    if summary not in SUMMARY_MODES:
        raise CompareError(f"--summary must be one of {', '.join(SUMMARY_MODES)}, not {summary!r}")
    if usage not in ("tiktoken", "chars"):
        raise CompareError(f"--usage must be tiktoken or chars, not {usage!r}")
    if sessions is not None and (isinstance(sessions, bool) or not isinstance(sessions, int) or sessions < 1):
        raise CompareError(f"--sessions must be a whole number of at least 1, not {sessions!r}; fix: --sessions 5")
    other_home = other_home_hint(bool(hermes_home))
    try:
        state_db = recorded_store(home, home_given=bool(hermes_home))
    except StoreError as exc:
        raise CompareError(str(exc)) from None
    user_config = host.load_config(log_errors=False)
    if context_length is None:
        configured = (user_config.get("model") or {}).get("context_length") if isinstance(
            user_config.get("model"), dict) else None
        try:
            context_length = int(configured) if configured else DEFAULT_CONTEXT_LENGTH
        except (TypeError, ValueError):
            context_length = DEFAULT_CONTEXT_LENGTH
    minimum = host.minimum_context_length() or 1
    if isinstance(context_length, bool) or not isinstance(context_length, int) or context_length < minimum:
        raise CompareError(f"--context-length {context_length!r} is below the {minimum:,} tokens this Hermes "
                           f"accepts as a model's window; fix: --context-length {max(minimum, DEFAULT_CONTEXT_LENGTH)} "
                           f"or the model's real window")
    try:
        conversations = read_conversations(state_db, session_ids=list(session_ids) or None,
                                           limit=None if session_ids else sessions,
                                           summary_body=host.compaction_summary_body,
                                           inline_tools=host.AGENT_INLINE_TOOLS)
    except NothingRecorded as exc:
        said, _, fix = str(exc).partition("; fix: ")
        raise CompareError(f"{said}{other_home}; fix: {fix}") from None
    except StoreError as exc:
        raise CompareError(str(exc)) from None
    if not conversations:
        raise CompareError(f"no conversation is recorded yet in {state_db}: Hermes has not finished a turn "
                           f"in that home{other_home}; fix: have a conversation with Hermes there first")
    runnable = [c for c in conversations if c.skip is None]
    recorded = fidelity.recorded_usage(state_db, runnable)
    platforms = {c.session_id: (recorded.get(c.session_id) or {}).get("source") or "cli" for c in runnable}
    toolsets = fidelity.toolsets_by_platform(user_config, platforms.values(), home)
    started = time.time()
    run = sweep.run_jobs(runnable, variants, user_config=user_config, context_length=context_length,
                         summary=summary, usage=usage, toolsets_for=lambda c: toolsets[platforms[c.session_id]],
                         jobs=jobs, out=None, progress=progress)
    unavailable: Dict[str, str] = {}
    per_engine: Dict[str, List[Dict[str, Any]]] = {e: [] for e in engine_names}
    conv_out: List[Dict[str, Any]] = []
    for conv in conversations:
        entry: Dict[str, Any] = {"session_id": conv.session_id, "sessions": conv.sessions, "model": conv.model,
                                 "turns": len(conv.turns), "messages": len(conv.messages),
                                 "recorded_compactions": conv.compactions,
                                 "recorded_summaries": len(conv.summaries), "skip": conv.skip, "engines": {},
                                 "notes": [] if conv.system_prompt or conv.skip else [
                                     "no recorded system prompt: the replay sent the one its agent built"]}
        conv_out.append(entry)
        if conv.skip:
            continue
        for variant in variants:
            result = run["results"].get((conv.session_id, variant.label)) or {
                "status": "skipped", "reason": "not replayed"}
            if result.get("unavailable"):
                unavailable.setdefault(variant.label, result["reason"])
            entry["engines"][variant.label] = result
            per_engine[variant.label].append(result)
        current = next((entry["engines"][v.label] for v in variants if v.current), None)
        entry["prompt_size"] = fidelity.prompt_size(recorded.get(conv.session_id), current)
    totals: Dict[str, Any] = {}
    for engine in engine_names:
        totals[engine] = report_mod.engine_totals(per_engine[engine])
        if engine in unavailable:
            totals[engine]["unavailable"] = unavailable[engine]
    report = {
        "kind": report_mod.KIND, "format": report_mod.FORMAT, "replay": True,
        "observed_engine": __version__, "hermes_agent": host.hermes_version(),
        "created": started, "seconds": time.time() - started,
        "state_db": str(state_db), "engines": engine_names, "summary": summary, "usage": usage,
        "context_length": context_length, "totals": totals, "conversations": conv_out,
    }
    if out is not None:
        report["files"] = {k: str(v) for k, v in report_mod.write(report, Path(out)).items()}
    return report

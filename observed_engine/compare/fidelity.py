"""How far a replay can be trusted, per conversation: what the recording says it cost, the
toolsets the agent gets, and what the replay cannot reproduce.

The replayed agent gets the toolsets the operator's configuration enables for the platform the
conversation came from (``host.configured_toolsets``, resolved once per platform here, in the
operator's home: the replay's own home is a temporary one). The recording's own prompt sizes are
the provider's: Hermes adds each request's usage to its session row (``input_tokens`` +
``cache_read_tokens`` + ``cache_write_tokens``, ``api_call_count``), so the mean prompt per request
of the recording and of the replay at the current settings can be set side by side.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Optional

from .. import host
from .sessions import Conversation, tool_names

USAGE_COLUMNS = ("input_tokens", "cache_read_tokens", "cache_write_tokens", "api_call_count")


def recorded_usage(state_db: Path, conversations: Iterable[Conversation]) -> Dict[str, Dict[str, Any]]:
    """``{session_id: {"source", "prompt_tokens", "requests"}}`` from the session rows of each
    conversation's chain (read-only); a conversation whose rows lack the columns gets None."""
    out: Dict[str, Dict[str, Any]] = {}
    try:
        conn = sqlite3.connect(f"file:{state_db}?mode=ro", uri=True)
    except sqlite3.Error:
        return out
    try:
        cols = {r[1] for r in conn.execute("PRAGMA table_info(sessions)")}
        have = [c for c in USAGE_COLUMNS if c in cols]
        source = "source" if "source" in cols else "NULL"
        for conv in conversations:
            marks = ",".join("?" * len(conv.sessions))
            rows = conn.execute(f"SELECT id, {source}, {', '.join(have) or 'NULL'} FROM sessions "
                                f"WHERE id IN ({marks})", conv.sessions).fetchall() if conv.sessions else []
            by_id = {r[0]: r for r in rows}
            root = by_id.get(conv.session_id)
            entry: Dict[str, Any] = {"source": (root[1] if root else None) or "cli",
                                     "prompt_tokens": None, "requests": None}
            if "api_call_count" in have and "input_tokens" in have and rows:
                idx = {c: 2 + have.index(c) for c in have}
                entry["requests"] = int(sum(r[idx["api_call_count"]] or 0 for r in rows))
                entry["prompt_tokens"] = int(sum(sum(r[idx[c]] or 0 for c in have if c != "api_call_count")
                                                 for r in rows))
            out[conv.session_id] = entry
    except sqlite3.Error:
        pass
    finally:
        conn.close()
    return out


def toolsets_by_platform(user_config: Mapping[str, Any], platforms: Iterable[str],
                         home: Optional[Path] = None) -> Dict[str, Dict[str, Any]]:
    """Per platform: the toolsets and their schemas as a fresh Hermes process of the operator's
    would build them, computed once per run so that every replay (in whichever process) sends
    exactly these.

    They are computed in a child process, not here: some tools' availability hangs on state a
    process accumulates (the vision tools resolve the auxiliary provider, whose failures Hermes
    remembers for 60 s, and whose "main" runtime a replay's config would have set), and building
    them writes into the home (a session store, locks). The child's HERMES_HOME is a scratch copy
    of ``home``'s ``config.yaml`` (its ``plugins/`` linked, its ``.env`` read for the keys tools
    check), and the scratch path in the schemas is put back to ``home``'s, as the operator's own
    agents name it. Without ``home`` (tests, embedders) they are computed in this process."""
    wanted = sorted(set(platforms))
    if home is None:
        return {p: _toolsets_here(user_config, p) for p in wanted}
    import json as _json
    import shutil
    import subprocess
    import sys
    import tempfile

    from .replay import scratch_dir

    tmp = Path(tempfile.mkdtemp(prefix="observed-toolsets-", dir=scratch_dir()))
    scratch = tmp / "home"
    scratch.mkdir()
    try:
        if (home / "config.yaml").is_file():
            shutil.copy2(home / "config.yaml", scratch / "config.yaml")
        if (home / "plugins").is_dir():
            (scratch / "plugins").symlink_to(home / "plugins", target_is_directory=True)
        env = dict(os.environ)
        env.update({k: v for k, v in _dotenv(home / ".env").items() if k not in env})
        env["HERMES_HOME"] = str(scratch)
        env["OBSERVED_TOKENIZER_PROCESS"] = "0"
        proc = subprocess.run([sys.executable, "-m", "observed_engine.compare.fidelity", *wanted], env=env,
                              capture_output=True, text=True, timeout=300)
        if proc.returncode != 0:
            raise RuntimeError((proc.stderr.strip().splitlines() or ["no output"])[-1])
        text = proc.stdout.strip().splitlines()[-1].replace(_json.dumps(str(scratch))[1:-1],
                                                              _json.dumps(str(home))[1:-1])
        return _json.loads(text)
    except Exception as exc:
        return {p: {"enabled": [], "disabled": [], "schemas": [], "error": f"{type(exc).__name__}: {exc}"}
                for p in wanted}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _dotenv(path: Path) -> Dict[str, str]:
    """``KEY=value`` lines of a .env file (comments, ``export`` and quotes as dotenv reads them)."""
    out: Dict[str, str] = {}
    try:
        lines = path.read_text(encoding="utf-8").splitlines() if path.is_file() else []
    except OSError:
        return out
    for line in lines:
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.removeprefix("export ").partition("=")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        if key.strip():
            out[key.strip()] = value
    return out


def _toolsets_here(user_config: Mapping[str, Any], platform: str) -> Dict[str, Any]:
    try:
        ts = host.configured_toolsets(user_config, platform)
        ts["schemas"] = host.tool_definitions(ts)
        return ts
    except Exception as exc:   # a platform Hermes does not know: its default toolset name
        return {"enabled": [], "disabled": [], "schemas": [], "error": f"{type(exc).__name__}: {exc}"}


def prompt_size(recorded: Optional[Mapping[str, Any]], result: Optional[Mapping[str, Any]]) -> Optional[Dict[str, Any]]:
    """The replay's mean prompt per request against the recording's (current settings)."""
    if not recorded or not result or result.get("status") not in ("ok", "error"):
        return None
    rec_tokens, rec_requests = recorded.get("prompt_tokens"), recorded.get("requests")
    rep_tokens, rep_requests = result.get("prompt_tokens"), result.get("requests")
    out = {"recorded_prompt_tokens": rec_tokens, "recorded_requests": rec_requests,
           "replayed_prompt_tokens": rep_tokens, "replayed_requests": rep_requests, "difference_pct": None}
    if rec_tokens and rec_requests and rep_tokens and rep_requests:
        out["difference_pct"] = round(((rep_tokens / rep_requests) / (rec_tokens / rec_requests) - 1) * 100, 1)
    return out


def notes(conv: Conversation, toolsets: Mapping[str, Any], result: Optional[Mapping[str, Any]], usage: str,
          summary: str) -> List[str]:
    """Where this conversation's replay is limited, one sentence each."""
    out: List[str] = []
    if toolsets.get("error"):
        out.append(f"the toolsets of platform could not be resolved ({toolsets['error']}): no configured tools sent")
    agent_tools = set((result or {}).get("agent_tools") or [])
    outside = [n for n in tool_names(conv.messages) if agent_tools and n not in agent_tools]
    if outside:
        out.append(f"recorded tool(s) {', '.join(outside)} are not in the configured toolsets (an MCP server's, "
                   f"or since disabled): the replay offered them with a minimal schema")
    if usage == "tiktoken":
        out.append("prompt tokens are tiktoken's count, not the provider's")
    else:
        out.append("prompt tokens are characters / 4 (Hermes' rough estimate), not the provider's")
    if summary == "offline":
        out.append("summaries are the recorded ones then a stand-in: summary model and timeout settings change "
                   "only what the host derives from them")
    if not conv.system_prompt:
        out.append("no recorded system prompt: the replay sent the one its agent built")
    return out


GENERAL_LIMITS = (
    "Conversations with multimodal content or with tools Hermes runs inside the agent (todo, memory, "
    "session_search, clarify, delegate_task, ...) are not replayed (listed as skipped, with why).",
    "Tools never run: each call is answered with its recorded result. MCP servers are not connected: "
    "their recorded tools get a minimal schema.",
    "Hermes' background skill review (a forked agent after some turns, outside the conversation) is off.",
    "Tool availability (a tool's requirements: keys, binaries, the vision tools' auxiliary provider) is "
    "checked once per run, in this process's environment; the tools sent are kept in toolsets.json.",
)


if __name__ == "__main__":      # the child process of toolsets_by_platform: platforms as arguments
    import json
    import sys

    config = host.load_config(log_errors=False)
    print(json.dumps({p: _toolsets_here(config, p) for p in sys.argv[1:]}, default=str))

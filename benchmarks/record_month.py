"""Build a recorded month: a Hermes home whose ``state.db`` holds N conversations written by real agents.

Each conversation is a seeded script (10-60 turns by default: user messages, assistant replies,
a third of the turns with 1-3 tool calls of ``terminal``, ``read_file`` or ``search_files`` and
their results, now and then a very large result). A real Hermes 0.19.0 ``AIAgent`` plays it: its
provider is the package's replay LLM on 127.0.0.1 serving the script's assistant messages in order
(usage counted with tiktoken, as ``compare`` counts), its tool calls are answered with the
script's results (no tool runs), its summariser is a deterministic stand-in (no network), and its
session store is Hermes' own ``SessionDB`` on ``HOME/state.db`` (in-place compaction, Hermes'
default). The agent gets the toolsets ``hermes`` gives an agent of that platform (most
conversations ``cli``, some ``telegram``) and the built-in compressor at the home's settings
(Hermes' defaults), observed into ``HOME/observed/telemetry.sqlite`` (where an installed observed engine writes, so the
dashboard shows the month's sessions): ``HOME/live.json`` keeps every conversation's live compressions (tokens and messages before/after), which the built-in replayed
at these settings must reproduce. Two more conversations are written with the ``SessionDB`` API:
one calls ``todo`` (Hermes runs it inside the agent), one has an image: ``compare``/``tune`` skip
them and say why.

``compare`` and ``tune`` read this home exactly as they read a real one (``--hermes-home HOME``).
Recording runs in ``--jobs`` processes writing to the same state.db through ``SessionDB`` (as a
gateway and its cron jobs do).

    python benchmarks/record_month.py --home /tmp/month [--conversations 200] [--min-turns 10]
                                      [--max-turns 60] [--window 128000] [--seed 29] [--jobs 2]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import sys
import time
from pathlib import Path
from typing import Any, Dict, List

MODEL = "gpt-4o"             # tiktoken's o200k_base, as the replay counts it
TOOLS = ("terminal", "read_file", "search_files")


# -- the scripts -------------------------------------------------------------------------------

def _vocabulary(rng: random.Random, n: int = 3000) -> List[str]:
    syllables = ["ka", "lo", "mi", "ten", "ser", "vo", "qua", "ri", "del", "pan", "tor", "ex", "un", "shi",
                 "ber", "ne", "sta", "pro", "gra", "fil", "com", "dat", "ing", "ment", "ar", "os"]
    words = set()
    while len(words) < n:
        words.add("".join(rng.choice(syllables) for _ in range(rng.randint(1, 4))))
    return sorted(words)


def _text(rng: random.Random, vocab: List[str], chars: int) -> str:
    out: List[str] = []
    size = 0
    while size < chars:
        sentence = " ".join(rng.choice(vocab) for _ in range(rng.randint(5, 18))).capitalize() + "."
        if rng.random() < 0.08:
            sentence += f"\n```\n{rng.choice(vocab)}({rng.randint(0, 999)}) -> {rng.choice(vocab)}\n```\n"
        out.append(sentence)
        size += len(sentence) + 1
    return " ".join(out)[:chars]


def make_script(seed: int, turns: int, *, tool_share: float = 0.33, huge_share: float = 0.04) -> List[Dict[str, Any]]:
    """``[{"user": text, "replies": [assistant / tool messages]}]`` for one conversation."""
    rng = random.Random(seed)
    vocab = _vocabulary(random.Random(seed // 1000))
    script: List[Dict[str, Any]] = []
    call = 0
    for t in range(turns):
        replies: List[Dict[str, Any]] = []
        if rng.random() < tool_share:
            calls = []
            for _ in range(rng.randint(1, 3)):
                call += 1
                name = rng.choice(TOOLS)
                args = {"terminal": {"command": f"ls {rng.choice(vocab)}"},
                        "read_file": {"path": f"/srv/{rng.choice(vocab)}.py"},
                        "search_files": {"pattern": rng.choice(vocab)}}[name]
                calls.append({"id": f"call_{seed}_{call}", "type": "function",
                              "function": {"name": name, "arguments": json.dumps(args)}})
            replies.append({"role": "assistant", "content": _text(rng, vocab, rng.randint(0, 300)),
                            "tool_calls": calls})
            for c in calls:
                size = rng.randint(50_000, 120_000) if rng.random() < huge_share else rng.randint(800, 15_000)
                replies.append({"role": "tool", "tool_call_id": c["id"], "tool_name": c["function"]["name"],
                                "content": _text(rng, vocab, size)})
        replies.append({"role": "assistant", "content": _text(rng, vocab, rng.randint(400, 5000))})
        script.append({"user": f"[{t + 1}] " + _text(rng, vocab, rng.randint(80, 2000)), "replies": replies})
    return script


def summary_for(prompt: str) -> str:
    """The stand-in summariser: deterministic, about as long as a real handoff summary."""
    digest = hashlib.sha256(prompt.encode("utf-8", "surrogatepass")).hexdigest()
    body = " ".join(digest[i:i + 8] for i in range(0, 64, 8))
    return ("## Goal\nContinue the user's task.\n## Progress\n"
            + f"Summarised {len(prompt)} characters of earlier turns ({body}). " * 12
            + "\n## Next steps\nAnswer the latest message.")


# -- recording ---------------------------------------------------------------------------------

def _fake_call_llm(*args, **kwargs):   # noqa: ARG001 (call_llm's signature)
    from types import SimpleNamespace

    messages = kwargs.get("messages") or [{"content": ""}]
    text = summary_for(str(messages[0].get("content", "")))
    message = SimpleNamespace(content=text, role="assistant", tool_calls=None)
    return SimpleNamespace(choices=[SimpleNamespace(message=message, finish_reason="stop")], usage=None)


def record_conversation(home: Path, index: int, seed: int, turns: int, window: int, platform: str,
                        toolsets: Dict[str, Any] = None) -> Dict[str, Any]:
    """Play one script through a real agent into ``home``'s state.db; its live compressions.

    ``toolsets`` (``compare.fidelity.toolsets_by_platform``'s, for ``platform``): the tools a
    fresh Hermes process of this home sends. Without them the agent's own (built in this process,
    whose earlier agents can change what Hermes finds available: the vision tools)."""
    import io
    from contextlib import redirect_stdout

    from observed_engine import host
    from observed_engine.api import observe
    from observed_engine.compare.replay_server import ReplayServer
    from observed_engine.compare.sessions import tool_names
    from observed_engine.pipeline import Registry

    script = make_script(seed, turns)
    replies = [r for t in script for r in t["replies"] if r["role"] == "assistant"]
    results = {r["tool_call_id"]: r["content"] for t in script for r in t["replies"] if r["role"] == "tool"}
    names = tool_names([r for t in script for r in t["replies"]])
    live_store = home / "observed" / "telemetry.sqlite"      # the month's live telemetry, as installed
    registry = Registry()
    started = time.time()          # this conversation's rows: this process's since now (one at a time)
    cc = host.compressor_module()
    before = cc.call_llm
    cc.call_llm = _fake_call_llm
    try:
        with ReplayServer(replies, model=MODEL, context_length=window, usage="tiktoken") as server, \
                redirect_stdout(io.StringIO()):
            toolsets = toolsets or host.configured_toolsets(host.load_config(), platform)
            agent = host.ai_agent_class()(
                base_url=server.base_url, api_key="sk-month", provider="custom", model=MODEL, quiet_mode=True,
                skip_context_files=True, skip_memory=True, enabled_toolsets=toolsets["enabled"],
                disabled_toolsets=toolsets["disabled"] or None, platform=platform,
                max_iterations=max(len(t["replies"]) for t in script) + 2, save_trajectories=False,
                session_db=host.session_db(home / "state.db"))
            if toolsets.get("schemas") is not None:
                host.use_tool_schemas(agent, toolsets["schemas"])
            observe(agent.context_compressor, settings={"traces": False, "metrics": False,
                                                        "store": {"path": str(live_store)}}, registry=registry)
            history = None
            with host.replay_tool_results(agent, results, names):
                for turn in script:
                    out = agent.run_conversation(turn["user"], conversation_history=history)
                    history = out.get("messages") or history
            session = agent.session_id
        registry.flush(15)
    finally:
        cc.call_llm = before
        registry.shutdown(5)
    import sqlite3

    conn = sqlite3.connect(live_store)
    try:
        rows = conn.execute("SELECT tokens_before, tokens_after, messages_before, messages_after, outcome "
                            "FROM events WHERE hook = 'compress' AND event = 'call' AND pid = ? AND ts >= ? "
                            "ORDER BY ts", (os.getpid(), started)).fetchall()
    finally:
        conn.close()
    return {"index": index, "session_id": session, "turns": turns, "platform": platform,
            "compressions": [list(r[:4]) for r in rows if r[4] == "compressed"],
            "compress_outcomes": [r[4] for r in rows]}


def _worker_init(home: str) -> None:
    os.environ["HERMES_HOME"] = home
    os.environ["OBSERVED_TOKENIZER_PROCESS"] = "0"


def _worker(task) -> Dict[str, Any]:
    return record_conversation(Path(os.environ["HERMES_HOME"]), *task)


def write_config(home: Path, window: int) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.yaml").write_text(
        f"model:\n  default: {MODEL}\n  provider: custom\n  context_length: {window}\n"
        "skills:\n  creation_nudge_interval: 0   # no background skill review: its requests would take scripted replies\n",
        encoding="utf-8")


def write_unreplayable(home: Path) -> None:
    """Two conversations the replay must skip, with why (written with Hermes' SessionDB API)."""
    from observed_engine import host

    db = host.session_db(home / "state.db")
    try:
        db.create_session(session_id="month-todo", source="cli", model=MODEL)
        db.append_message("month-todo", "user", "plan the week")
        db.append_message("month-todo", "assistant", "", tool_calls=[
            {"id": "t1", "type": "function", "function": {"name": "todo", "arguments": "{\"todos\": []}"}}])
        db.append_message("month-todo", "tool", "{}", tool_call_id="t1", tool_name="todo")
        db.append_message("month-todo", "assistant", "Planned.")
        db.create_session(session_id="month-image", source="cli", model=MODEL)
        db.append_message("month-image", "user", [{"type": "text", "text": "what is this"},
                                                  {"type": "image_url", "image_url": {"url": "data:,"}}])
        db.append_message("month-image", "assistant", "A diagram.")
    finally:
        db.close()


def record_month(home: Path, *, conversations: int = 200, min_turns: int = 10, max_turns: int = 60,
                 window: int = 128_000, seed: int = 29, jobs: int = 1, telegram_share: float = 0.1,
                 progress=sys.stderr) -> Dict[str, Any]:
    home = Path(home).resolve()
    write_config(home, window)
    from observed_engine.compare import fidelity

    rng = random.Random(seed)
    plan = [(i, seed * 1000 + i, rng.randint(min_turns, max_turns), window,
             "telegram" if rng.random() < telegram_share else "cli") for i in range(conversations)]
    tools = fidelity.toolsets_by_platform({}, {t[4] for t in plan}, home)
    tasks = [t + (tools[t[4]],) for t in plan]
    started = time.monotonic()
    live: List[Dict[str, Any]] = []
    if jobs <= 1:
        os.environ["HERMES_HOME"] = str(home)
        for task in tasks:
            live.append(record_conversation(home, *task))
            if progress:
                progress.write(f"\rrecorded {len(live)}/{len(tasks)}")
    else:
        import multiprocessing as mp

        with mp.get_context("spawn").Pool(jobs, initializer=_worker_init, initargs=(str(home),)) as pool:
            for item in pool.imap_unordered(_worker, tasks):
                live.append(item)
                if progress:
                    progress.write(f"\rrecorded {len(live)}/{len(tasks)}")
    if progress:
        progress.write("\n")
    os.environ["HERMES_HOME"] = str(home)
    write_unreplayable(home)
    live.sort(key=lambda x: x["index"])
    summary = {"conversations": len(live), "window": window, "seed": seed, "model": MODEL,
               "turns": sum(x["turns"] for x in live), "seconds": round(time.monotonic() - started, 1),
               "sessions": {x["session_id"]: x for x in live}}
    (home / "live.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    return summary


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--home", required=True, help="the Hermes home to write (state.db, config.yaml, live.json)")
    p.add_argument("--conversations", type=int, default=200)
    p.add_argument("--min-turns", type=int, default=10)
    p.add_argument("--max-turns", type=int, default=60)
    p.add_argument("--window", type=int, default=128_000)
    p.add_argument("--seed", type=int, default=29)
    p.add_argument("--jobs", type=int, default=1)
    args = p.parse_args(argv)
    home = Path(args.home)
    if (home / "state.db").exists():
        print(f"{home / 'state.db'} exists: pick an empty home", file=sys.stderr)
        return 2
    s = record_month(home, conversations=args.conversations, min_turns=args.min_turns, max_turns=args.max_turns,
                     window=args.window, seed=args.seed, jobs=args.jobs)
    compressed = sum(1 for x in s["sessions"].values() if x["compressions"])
    print(f"{s['conversations']} conversations, {s['turns']} turns, {compressed} with live compressions "
          f"({sum(len(x['compressions']) for x in s['sessions'].values())} in all), in {s['seconds']} s -> {home}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

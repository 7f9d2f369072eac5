"""Resident memory of observation: a 12-turn session, bare against observed, and 1,000 sessions in
one gateway-like process.

    python benchmarks/memory.py [--rounds 3] [--turns 12] [--sessions 1000] [--sample-every 100]
                                [--modes bare,observed]   (--rounds 0: the gateway only)

Each run is a fresh process running a real Hermes ``run_agent.AIAgent`` against the loopback fake LLM
(``tests/support/fake_llm_server.py``, in this, the parent, process), configured as
``benchmarks/agent_process.py`` configures it (``bare``: Hermes' own compressor; ``observed``:
``context.engine: observed`` through the plugin's entry point with the installed defaults).

* ``session``: ``--turns`` turns (3 compressions with the defaults), the session end, then the
  process's resident memory (``VmRSS``) and its peak (``VmHWM``), and the token-counting helper
  process's own (it is a separate process: its memory is not in the host's).
* ``gateway``: ``--sessions`` sessions one after another in one process, as a gateway runs them:
  for each, a new ``AIAgent`` with its own session id, two turns, the session end
  (``shutdown_memory_provider``, ``close``). Every ``--sample-every`` sessions, after a full
  garbage collection, the process's RSS. Printed: the samples and the growth per 100 sessions over
  the second half (the first sessions fill caches: Hermes', tiktoken's, the store's).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from scratch import scratch_dir

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))

import agent_process as ap  # noqa: E402  (the same workload and config as the CPU benchmark)

GATEWAY_TURNS = 2
GATEWAY_QUESTION = "detail " * 40


def _status_kb(pid: int | str, field: str) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def _helper_memory_mb() -> dict:
    """RSS and peak RSS (MB) of the token-counting helper processes this process started."""
    helper = sys.modules.get("observed_engine.tokens.helper")
    rss = hwm = 0
    found = 0
    for h in list(getattr(helper, "_HELPERS", {}).values()):
        r, p = _status_kb(h.pid, "VmRSS"), _status_kb(h.pid, "VmHWM")
        if r is not None:
            found += 1
            rss += r
            hwm += p or r
    return {"helpers": found, "rss_mb": rss / 1024, "hwm_mb": hwm / 1024}


def _self_mb() -> dict:
    return {"rss_mb": (_status_kb("self", "VmRSS") or 0) / 1024, "hwm_mb": (_status_kb("self", "VmHWM") or 0) / 1024}


def _new_agent(base_url: str, session_id: str | None = None):
    from run_agent import AIAgent

    return AIAgent(base_url=base_url, api_key="sk-fake", provider="custom", model=ap.MODEL,
                   quiet_mode=True, skip_context_files=True, skip_memory=True, enabled_toolsets=[],
                   max_iterations=4, save_trajectories=False, session_id=session_id)


def child(mode: str, workload: str, turns: int, sessions: int, sample_every: int) -> None:
    if mode != "bare":
        ap._time_the_plugin({"import_cpu_s": 0.0, "build_cpu_s": 0.0}, lambda: 0.0)
    base_url = os.environ["BENCH_BASE_URL"]
    report: dict = {"mode": mode, "workload": workload}
    if workload == "session":
        agent = _new_agent(base_url)
        history = None
        for i in range(turns):
            history = agent.run_conversation(f"Question {i + 1}: go on. " + ap.QUESTION,
                                             conversation_history=history).get("messages")
        report["observed"] = getattr(agent.context_compressor, "name", None) == "observed"
        report["compressions"] = agent.context_compressor.compression_count
        agent.shutdown_memory_provider(history)
        agent.close()
        gc.collect()
        report["self"] = _self_mb()
        report["helper"] = _helper_memory_mb()
    else:
        samples = []
        observed = None
        for n in range(1, sessions + 1):
            agent = _new_agent(base_url, session_id=f"gw-{n}")
            observed = getattr(agent.context_compressor, "name", None) == "observed"
            history = None
            for i in range(GATEWAY_TURNS):
                history = agent.run_conversation(f"Session {n} question {i + 1}. " + GATEWAY_QUESTION,
                                                 conversation_history=history).get("messages")
            agent.shutdown_memory_provider(history)
            agent.close()
            del agent, history
            if n % sample_every == 0:
                gc.collect()
                samples.append({"sessions": n, **_self_mb(), "helper_rss_mb": _helper_memory_mb()["rss_mb"]})
                print(f"  {mode} gateway: {n} sessions, RSS {samples[-1]['rss_mb']:.1f} MB", file=sys.stderr,
                      flush=True)
        report["observed"] = observed
        report["samples"] = samples
    sys.stdout.write("BENCH " + json.dumps(report) + "\n")
    sys.stdout.flush()


def run_one(mode: str, workload: str, args, base_url: str) -> dict:
    from support.servers import free_port

    home = scratch_dir(f"oe-mem-{mode}-")
    Path(home, "config.yaml").write_text(ap._config(mode, base_url, free_port(), None), encoding="utf-8")
    env = {k: v for k, v in os.environ.items()
           if not (k.startswith("OTEL_") or k.endswith("_API_KEY") or k == "TIKTOKEN_CACHE_DIR")}
    env.update(HERMES_HOME=home, BENCH_BASE_URL=base_url, PYTHONUNBUFFERED="1", PYTHONPYCACHEPREFIX=ap.pycache())
    proc = subprocess.run([sys.executable, __file__, "--child", mode, workload, str(args.turns),
                           str(args.sessions), str(args.sample_every)],
                          stdout=subprocess.PIPE, stderr=None, env=env, cwd=home, text=True)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("BENCH ")), None)
    if proc.returncode != 0 or line is None:
        raise RuntimeError(f"{mode}/{workload} child failed ({proc.returncode}):\n{proc.stdout[-3000:]}")
    report = json.loads(line[6:])
    if mode != "bare" and not report["observed"]:
        raise RuntimeError(f"{mode}: the host did not get the observed engine")
    return report


def _growth_per_100(samples: list) -> float:
    """Least-squares slope of RSS over the second half of the samples, MB per 100 sessions."""
    half = samples[len(samples) // 2:]
    if len(half) < 2:
        return float("nan")
    xs = [s["sessions"] for s in half]
    ys = [s["rss_mb"] for s in half]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return 100 * sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / den if den else float("nan")


def _print_sessions(args, modes, sessions) -> None:
    print(f"\n== session: {args.turns} turns, medians of {args.rounds} runs per mode (MB)")
    for mode in modes:
        runs = sessions[mode]
        print(f"  {mode:9s} RSS {statistics.median(r['self']['rss_mb'] for r in runs):7.1f}  "
              f"peak {statistics.median(r['self']['hwm_mb'] for r in runs):7.1f}  "
              f"token helper RSS {statistics.median(r['helper']['rss_mb'] for r in runs):6.1f} "
              f"(peak {statistics.median(r['helper']['hwm_mb'] for r in runs):6.1f})  "
              f"compressions {statistics.median(r['compressions'] for r in runs):.0f}")
    if set(modes) != {"bare", "observed"}:
        return
    d_rss = statistics.median(o["self"]["rss_mb"] - b["self"]["rss_mb"]
                              for o, b in zip(sessions["observed"], sessions["bare"]))
    d_hwm = statistics.median(o["self"]["hwm_mb"] - b["self"]["hwm_mb"]
                              for o, b in zip(sessions["observed"], sessions["bare"]))
    print(f"  observed - bare: RSS {d_rss:+.1f} MB, peak {d_hwm:+.1f} MB (paired medians; the helper's own "
          "memory is in its line above)")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="session runs per mode")
    parser.add_argument("--turns", type=int, default=12)
    parser.add_argument("--sessions", type=int, default=1000, help="gateway sessions per mode (0: skip)")
    parser.add_argument("--sample-every", type=int, default=100)
    parser.add_argument("--modes", default="bare,observed", help="which of bare,observed to run")
    parser.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        mode, workload, turns, sessions, every = args.child
        child(mode, workload, int(turns), int(sessions), int(every))
        return 0

    from support.fake_llm_server import FakeLLMServer

    modes = tuple(m for m in ("bare", "observed") if m in args.modes.split(","))
    with FakeLLMServer(model=ap.MODEL, context_length=ap.CONTEXT_LENGTH, reply_chars=ap.REPLY_CHARS) as llm:
        sessions = {m: [] for m in modes}
        for r in range(args.rounds):
            for mode in (modes if r % 2 == 0 else modes[::-1]):
                sessions[mode].append(run_one(mode, "session", args, llm.base_url))
        if args.rounds > 0:
            _print_sessions(args, modes, sessions)
        if args.sessions > 0:
            print(f"\n== gateway: {args.sessions} sessions of {GATEWAY_TURNS} turns in one process")
            for mode in modes:
                report = run_one(mode, "gateway", args, llm.base_url)
                samples = report["samples"]
                print(f"  {mode:9s} RSS after " + ", ".join(f"{s['sessions']}: {s['rss_mb']:.1f}" for s in samples))
                print(f"  {mode:9s} growth over the second half: {_growth_per_100(samples):+.2f} MB per 100 sessions; "
                      f"token helper RSS at the end {samples[-1]['helper_rss_mb']:.1f} MB")
    load = os.getloadavg()
    print(f"\npython {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average {load[0]:.2f} {load[1]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

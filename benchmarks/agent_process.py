"""What observation costs a whole Hermes process: a real AIAgent, bare against observed, interleaved.

Each run is a fresh Python process (so every once-per-process cost is in it: imports, the
pipeline, the tokenizer, the exporters' threads, the exit) running a real Hermes 0.19.0
``run_agent.AIAgent`` against the loopback fake LLM of ``tests/support/fake_llm_server.py`` (which
runs in this, the parent, process: its CPU is not counted). Two workloads:

  session   ``--turns`` turns (default 12) in a 64K window with long replies, so the built-in
            compressor compresses (3 times with the defaults); then the session ends as
            Hermes ends one (``shutdown_memory_provider`` -> ``on_session_end``, ``close``) and
            the process exits normally.
  oneshot   what ``hermes -z`` does: one turn, the same session end, then ``os._exit(0)``.

Modes: ``bare`` (Hermes' own compressor); ``observed`` (``context.engine: observed`` around
it, through the plugin's entry point, with the installed defaults: the SQLite store; metrics and
spans go to the process's global OpenTelemetry providers, which Hermes leaves unset);
``observed-full`` (also Prometheus ``/metrics`` on a loopback port, nobody scraping, and OTLP/HTTP
spans and metrics to a loopback receiver in this process: everything on); ``observed-inproc``
(``observed`` with ``OBSERVED_TOKENIZER_PROCESS=0``: the encoding loaded in the process, as before
the token-counting helper). ``--modes`` picks.

A probe thread in each child sleeps 1 ms at a time and notes how late it wakes; the longest delay
per turn is how long a thread wanting the GIL back (the host's, when its provider answers) had to
wait, plus the OS's scheduling delay, which bare runs show too.

Before the timed runs, one untimed one-shot per mode fills a bytecode cache (in a temporary
``PYTHONPYCACHEPREFIX``, ``PYTHONDONTWRITEBYTECODE`` unset), as installing a package compiles
it: otherwise an environment that sets ``PYTHONDONTWRITEBYTECODE`` (as this project's does)
would charge observed runs for compiling the engine's sources at every start.

Runs alternate between the modes (rotating the order) ``--rounds`` times. Per run, from the
child's ``wait4()`` rusage: whole-process CPU (user + system, everything up to the exit);
from the child itself: wall time of each turn (which turns compressed), and the CPU of the
observer's own threads (``/proc/self/task/<tid>/stat``). Printed: medians per mode and the
observed/bare ratios, plus each run's figures.

    python benchmarks/agent_process.py [--rounds 5] [--turns 12] [--oneshot-rounds 5] [--modes bare,observed,observed-full]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from scratch import scratch_dir

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

MODEL = "fake-model"
CONTEXT_LENGTH = 64_000
REPLY_CHARS = 52_000
QUESTION = "detail " * 300


# --------------------------------------------------------------------------- child

def _thread_cpu_s(thread) -> float:
    """The thread's CPU seconds: its CPU-time clock (ns resolution) where the system has one; else
    /proc's tick counts, whose 10 ms resolution loses up to 10 ms per thread (with five observer
    threads, most of what they spend in a one-shot)."""
    try:
        return time.clock_gettime(time.pthread_getcpuclockid(thread.ident))
    except (AttributeError, OSError, TypeError, ValueError):
        pass
    try:
        with open(f"/proc/self/task/{thread.native_id}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def _observer_threads() -> dict:
    """CPU seconds of the threads observation runs (ours and the OTel SDK's/Prometheus'), by name."""
    import threading

    out: dict = {}
    for t in threading.enumerate():
        if t is threading.main_thread() or t.native_id is None:
            continue
        name = t.name
        if name.startswith(("observed-engine", "Otel", "OTel")) or "prometheus" in name.lower() \
                or name.startswith("Thread-") and "serve_forever" in repr(getattr(t, "_target", "")):
            key = name.split("(")[0].rstrip("-0123456789 ") or name
            out[key] = out.get(key, 0.0) + _thread_cpu_s(t)
    return out


def _helper_cpu() -> float:
    """CPU seconds of the token-counting helper processes (observed_engine.tokens.helper) so far."""
    helper = sys.modules.get("observed_engine.tokens.helper")
    total = 0.0
    for h in list(getattr(helper, "_HELPERS", {}).values()):
        try:
            with open(f"/proc/{h.pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, IndexError, ValueError):
            pass
    return total


class StallProbe:
    """A thread that sleeps 1 ms at a time and notes how late it wakes: how long a thread that wants
    the GIL back (as the host's does when its provider answers) waits for it, plus the OS's own
    scheduling delay (the same in every mode). ``take()``: the longest delay since the last take."""

    def __init__(self) -> None:
        import threading

        self.longest = 0.0
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="bench-stall-probe", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        clock = time.perf_counter
        while not self._stop:
            t0 = clock()
            time.sleep(0.001)
            late = clock() - t0 - 0.001
            if late > self.longest:
                self.longest = late

    def take(self) -> float:
        longest, self.longest = self.longest, 0.0
        return longest

    def stop(self) -> None:
        self._stop = True


def _time_the_plugin(observer: dict, cpu) -> None:
    """Declare the ``observed`` entry point (this process only, as ``install --route entrypoint``
    declares it) so that Hermes' own plugin loader imports and registers it, as in a real process,
    and time what that costs: the import (charged only for the modules the observer adds, since
    Hermes has imported run_agent, yaml, requests, sqlite3, ... by then; importing the observer
    ahead of Hermes charged it 70-93 ms instead of 26-33 ms) and ``register`` (pipeline, providers,
    store, generated class). Declared before ``run_agent`` is imported: that import already scans
    the entry points."""
    import importlib.metadata as md

    from support.entry_points import simulate_observed_entry_point

    class TimedEntryPoint(md.EntryPoint):
        def load(self):
            c0 = cpu()
            module = super().load()
            import observed_engine.pipeline.pipeline  # noqa: F401  (register imports it; charged here)
            observer["import_cpu_s"] += cpu() - c0
            register = module.register

            def timed_register(ctx):
                c1 = cpu()
                try:
                    return register(ctx)
                finally:
                    observer["build_cpu_s"] += cpu() - c1

            module.register = timed_register
            return module

    # where `install --route entrypoint` declared it already, the timed one answers in its place
    simulate_observed_entry_point(setattr, TimedEntryPoint, replace_declared=True)


def child(mode: str, workload: str, turns: int) -> None:
    cpu = time.process_time
    t_start, c_start = time.perf_counter(), cpu()
    observer = {"import_cpu_s": 0.0, "build_cpu_s": 0.0}
    if mode != "bare":
        _time_the_plugin(observer, cpu)
    from run_agent import AIAgent

    base_url = os.environ["BENCH_BASE_URL"]
    agent = AIAgent(
        base_url=base_url, api_key="sk-fake", provider="custom", model=MODEL,
        quiet_mode=True, skip_context_files=True, skip_memory=True, enabled_toolsets=[],
        max_iterations=4, save_trajectories=False,
    )
    engine = agent.context_compressor
    setup = {"wall_s": time.perf_counter() - t_start, "cpu_s": cpu() - c_start,
             "engine": type(engine).__name__, "observed": getattr(engine, "name", None) == "observed"}
    history = None
    per_turn = []
    probe = StallProbe()
    for i in range(turns):
        before = engine.compression_count
        probe.take()
        t0, c0 = time.perf_counter(), cpu()
        result = agent.run_conversation(f"Question {i + 1}: go on. " + QUESTION, conversation_history=history)
        history = result.get("messages")
        per_turn.append({"wall_s": time.perf_counter() - t0, "cpu_s": cpu() - c0,
                         "compressed": engine.compression_count - before, "stall_s": probe.take()})
    probe.stop()
    t0, c0 = time.perf_counter(), cpu()
    agent.shutdown_memory_provider(history)      # -> the engine's on_session_end (observed: delivery)
    agent.close()
    end_wall, end_cpu = time.perf_counter() - t0, cpu() - c0
    report = {"mode": mode, "workload": workload, "setup": setup, "turns": per_turn,
              "end_wall_s": end_wall, "end_cpu_s": end_cpu, "observer": observer, "threads": _observer_threads(), "helpers": _helper_cpu(),
              "compressions": engine.compression_count}
    sys.stdout.write("BENCH " + json.dumps(report) + "\n")
    sys.stdout.flush()
    if workload == "oneshot":
        os._exit(0)                              # what `hermes -z` does: no atexit handler runs


# --------------------------------------------------------------------------- parent

def _config(mode: str, base_url: str, prom_port: int, otlp_url: str | None) -> str:
    """Hermes' config.yaml for ``mode``."""
    text = ("model:\n"
            f"  default: {MODEL}\n  provider: custom\n  base_url: {base_url}\n"
            f"  context_length: {CONTEXT_LENGTH}\n"
            "compression:\n  protect_first_n: 1\n  protect_last_n: 2\n")
    if mode == "bare":
        return text
    text += ("context:\n  engine: observed\n"
             "plugins:\n  enabled:\n    - observed\n"
             "observed:\n  inner: compressor\n")
    if mode == "observed-full":
        text += (f"  prometheus:\n    enabled: true\n    host: 127.0.0.1\n    port: {prom_port}\n"
                 f"  otlp:\n    enabled: true\n    protocol: http/protobuf\n    endpoint: {otlp_url}\n")
    return text


@functools.cache
def pycache() -> str:
    """The children's shared bytecode cache, made once by the parent (a child never makes one)."""
    return scratch_dir("oe-bench-pycache-")


def run_one(mode: str, workload: str, turns: int, base_url: str, otlp_url: str | None) -> dict:
    from support.servers import free_port

    home = scratch_dir(f"oe-agent-{mode}-")
    Path(home, "config.yaml").write_text(_config(mode, base_url, free_port(), otlp_url), encoding="utf-8")
    env = {k: v for k, v in os.environ.items()
           if not (k.startswith("OTEL_") or k.endswith("_API_KEY")
                   or k in ("TIKTOKEN_CACHE_DIR", "PYTHONDONTWRITEBYTECODE"))}
    # bytecode cached (outside the tree) as an installed package has it; see the warm-up runs in main()
    env["PYTHONPYCACHEPREFIX"] = pycache()
    env.update(HERMES_HOME=home, BENCH_BASE_URL=base_url, PYTHONUNBUFFERED="1")
    if mode == "observed-inproc":
        env["OBSERVED_TOKENIZER_PROCESS"] = "0"      # as before the helper: the encoding loaded here
    out_path = Path(home, "child.out")
    with open(out_path, "wb") as out:
        proc = subprocess.Popen([sys.executable, __file__, "--child", mode, workload, str(turns)],
                                stdout=out, stderr=subprocess.STDOUT, env=env, cwd=home)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    text = out_path.read_text(errors="replace")
    line = next((ln for ln in text.splitlines() if ln.startswith("BENCH ")), None)
    if proc.returncode != 0 or line is None:
        raise RuntimeError(f"{mode}/{workload} child failed ({proc.returncode}):\n{text[-3000:]}")
    report = json.loads(line[6:])
    report["process_cpu_s"] = usage.ru_utime + usage.ru_stime
    report["maxrss_mb"] = usage.ru_maxrss / 1024
    return report


def _median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else float("nan")


def summarise(workload: str, runs: dict) -> None:
    modes = list(runs)
    print(f"\n== {workload}: medians over {len(runs[modes[0]])} interleaved runs per mode")
    first_compress = {}
    for mode in modes:
        fc = []
        for r in runs[mode]:
            idx = next((i for i, t in enumerate(r["turns"]) if t["compressed"]), None)
            fc.append(r["turns"][idx]["wall_s"] if idx is not None else None)
        first_compress[mode] = fc
    head = f"{'':34s}" + "".join(f"{m:>16s}" for m in modes)
    print(head)

    def row(label, per_mode, fmt="{:16.3f}", ratio=False):
        cells = "".join(fmt.format(per_mode[m]) for m in modes)
        extra = ""
        if ratio and "bare" in per_mode:
            extra = "   " + "  ".join(f"{m}/bare {per_mode[m] / per_mode['bare']:.3f}x"
                                      for m in modes if m != "bare")
        print(f"{label:34s}{cells}{extra}")

    med = {m: _median([r["process_cpu_s"] for r in runs[m]]) for m in modes}
    row("whole-process CPU s", med, ratio=True)
    diffs = {m: _median([o["process_cpu_s"] - b["process_cpu_s"] for o, b in zip(runs[m], runs["bare"])])
             for m in modes}
    row("  minus bare (paired) s", diffs, "{:+16.3f}")
    row("setup (import + AIAgent) CPU s", {m: _median([r["setup"]["cpu_s"] for r in runs[m]]) for m in modes})
    row("turns' process CPU s", {m: _median([sum(t["cpu_s"] for t in r["turns"]) for r in runs[m]])
                                     for m in modes})
    row("all turns wall s", {m: _median([sum(t["wall_s"] for t in r["turns"]) for r in runs[m]])
                            for m in modes}, ratio=True)
    row("first turn wall ms", {m: 1000 * _median([r["turns"][0]["wall_s"] for r in runs[m]]) for m in modes},
        "{:16.1f}")
    if any(v is not None for v in first_compress["bare"]):
        fcm = {m: 1000 * _median(first_compress[m]) for m in modes}
        row("first compression turn wall ms", fcm, "{:16.1f}")
        row("  minus bare (paired) ms", {m: 1000 * _median([
            (o - b) if o is not None and b is not None else None
            for o, b in zip(first_compress[m], first_compress["bare"])]) for m in modes}, "{:+16.1f}")
        paired = {m: [(o - b) for o, b in zip(first_compress[m], first_compress["bare"])
                      if o is not None and b is not None] for m in modes}
        row("  minus bare (paired mean) ms", {m: 1000 * sum(d) / len(d) if d else float("nan")
                                              for m, d in paired.items()}, "{:+16.1f}")
        row("  longest stall in it ms", {m: 1000 * _median([
            next((t["stall_s"] for t in r["turns"] if t["compressed"]), None) for r in runs[m]]) for m in modes},
            "{:16.1f}")
    row("longest stall, any turn ms", {m: 1000 * _median([max(t["stall_s"] for t in r["turns"]) for r in runs[m]])
                                       for m in modes}, "{:16.1f}")
    row("session end wall ms", {m: 1000 * _median([r["end_wall_s"] for r in runs[m]]) for m in modes},
        "{:16.1f}")
    row("observer imports CPU s", {m: _median([r["observer"]["import_cpu_s"] for r in runs[m]]) for m in modes})
    row("observer engine build CPU s", {m: _median([r["observer"]["build_cpu_s"] for r in runs[m]])
                                        for m in modes})
    row("session end CPU s", {m: _median([r["end_cpu_s"] for r in runs[m]]) for m in modes})
    row("observer threads CPU s", {m: _median([sum(r["threads"].values()) for r in runs[m]]) for m in modes})
    end_bare = _median([r["end_cpu_s"] for r in runs["bare"]])
    row("observation CPU, attributed s", {m: _median([
        r["observer"]["import_cpu_s"] + r["observer"]["build_cpu_s"] + sum(r["threads"].values())
        + max(0.0, r["end_cpu_s"] - end_bare) for r in runs[m]]) for m in modes})
    row("compressions", {m: _median([r["compressions"] for r in runs[m]]) for m in modes}, "{:16.0f}")
    row("token helper process CPU s", {m: _median([r.get("helpers", 0.0) for r in runs[m]]) for m in modes})
    row("peak RSS MB", {m: _median([r["maxrss_mb"] for r in runs[m]]) for m in modes}, "{:16.1f}")
    names = sorted({n for m in modes for r in runs[m] for n in r["threads"]})
    for name in names:
        row(f"  thread {name[:24]} CPU s",
            {m: _median([r["threads"].get(name, 0.0) for r in runs[m]]) for m in modes})
    print("per run, whole-process CPU s:")
    for m in modes:
        print(f"  {m:14s} " + " ".join(f"{r['process_cpu_s']:.3f}" for r in runs[m]))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="session runs per mode")
    parser.add_argument("--turns", type=int, default=12)
    parser.add_argument("--oneshot-rounds", type=int, default=5, help="oneshot runs per mode (0: skip)")
    parser.add_argument("--modes", default="bare,observed,observed-full")
    parser.add_argument("--json", metavar="PATH", help="also write every run's report there")
    parser.add_argument("--child", nargs=3, metavar=("MODE", "WORKLOAD", "TURNS"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.child[0], args.child[1], int(args.child[2]))
        return 0

    from support.fake_llm_server import FakeLLMServer

    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if modes[0] != "bare" or not set(modes) <= {"bare", "observed", "observed-full", "observed-inproc"}:
        parser.error("--modes: bare first, then any of observed, observed-full, observed-inproc")
    sink = None
    otlp_url = None
    if "observed-full" in modes:
        from support.otlp_receiver import OtlpReceiver

        sink = OtlpReceiver(grpc_enabled=False).start()
        otlp_url = sink.http_endpoint
    everything: dict = {}
    with FakeLLMServer(model=MODEL, context_length=CONTEXT_LENGTH, reply_chars=REPLY_CHARS) as llm:
        for mode in modes:        # untimed: compiles the bytecode once, as installing a package does
            run_one(mode, "oneshot", 1, llm.base_url, otlp_url)
        for workload, rounds, turns in (("session", args.rounds, args.turns), ("oneshot", args.oneshot_rounds, 1)):
            if rounds <= 0:
                continue
            runs: dict = {m: [] for m in modes}
            for r in range(rounds):
                order = modes[r % len(modes):] + modes[:r % len(modes)]
                for mode in order:
                    report = run_one(mode, workload, turns, llm.base_url, otlp_url)
                    if mode != "bare" and not report["setup"]["observed"]:
                        raise RuntimeError(f"{mode}: the host did not get the observed engine: {report['setup']}")
                    runs[mode].append(report)
                    print(f"  {workload} round {r + 1} {mode:14s} CPU {report['process_cpu_s']:.3f} s, "
                          f"compressions {report['compressions']}", flush=True)
            summarise(workload, runs)
            everything[workload] = runs
    if args.json:
        Path(args.json).write_text(json.dumps(everything, indent=1), encoding="utf-8")
    if sink is not None:
        sink.stop()
    load = os.getloadavg()
    print(f"\npython {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average {load[0]:.2f} {load[1]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

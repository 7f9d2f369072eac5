"""The sweep's throughput: (conversation × variant) replays per minute, one process against a pool.

Runs ``observed-engine tune``'s sweep (``compare.tune.run_tune``) over a recorded month
(``benchmarks/record_month.py``) with each ``--jobs`` value, into a fresh directory each time (no
kept results), and prints per run: replays, wall seconds, replays per minute, the CPU of this
process and its workers (``os.times``: children are counted once they are reaped), the 1-minute
load average before and after (the machine's other work: a busy machine's figures are only
indicative). Also checks that the built-in at the home's settings reproduced the live compressions
of every conversation (``HOME/live.json``) and that the runs agree conversation by conversation.

    python benchmarks/tune_sweep.py --home /tmp/month [--conversations 20] [--grid threshold=0.75,0.9]
                                    [--jobs 1,2] [--out DIR]

``--conversations N`` takes the N newest; the default grid is the built-in's (13 variants with
the current settings).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path


def _jobs_results(out: Path) -> dict:
    found = {}
    for f in (out / "jobs").glob("*.json"):
        d = json.loads(f.read_text())
        found[(d["session_id"], d["variant"])] = d["result"]
    return found


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--home", required=True)
    p.add_argument("--conversations", type=int, default=None)
    p.add_argument("--grid", action="append", default=None)
    p.add_argument("--jobs", default="1,2")
    p.add_argument("--out", default=None, help="keep the runs here (default: a temporary directory, removed)")
    args = p.parse_args(argv)
    from observed_engine.compare.tune import run_tune

    home = Path(args.home).resolve()
    live = json.loads((home / "live.json").read_text())["sessions"]
    base = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="tune-bench-"))
    runs = []
    for jobs in [int(j) for j in args.jobs.split(",")]:
        out = base / f"jobs-{jobs}"
        shutil.rmtree(out, ignore_errors=True)
        load0 = os.getloadavg()[0]
        t0, c0 = time.monotonic(), os.times()
        rep = run_tune(hermes_home=str(home), grids=args.grid or (), sessions=args.conversations, jobs=jobs, out=out)
        wall, c1 = time.monotonic() - t0, os.times()
        cpu = (c1.user - c0.user) + (c1.system - c0.system) + (c1.children_user - c0.children_user) + (
            c1.children_system - c0.children_system)
        t = rep["throughput"]
        runs.append({"jobs": jobs, "conversations": t["conversations"], "variants": t["variants"],
                     "replays": t["replayed"], "wall_s": round(wall, 1), "sweep_s": t["seconds"],
                     "replays_per_minute": t["replays_per_minute"], "cpu_s": round(cpu, 1),
                     "cpu_per_replay_s": round(cpu / max(1, t["replayed"]), 2),
                     "load_before": round(load0, 2), "load_after": round(os.getloadavg()[0], 2), "out": str(out),
                     "recommendation": rep["recommendation"].get("best")})
    results = {r["jobs"]: _jobs_results(Path(r["out"])) for r in runs}
    exact = mismatched = 0
    for (session, label), result in next(iter(results.values())).items():
        if label != "compressor" or session not in live:
            continue
        shape = [[c["tokens_before"], c["tokens_after"], c["messages_before"], c["messages_after"]]
                 for c in result.get("compression_list") or []]
        if shape == live[session]["compressions"] and not result.get("divergences"):
            exact += 1
        else:
            mismatched += 1
    keys = ("status", "compressions", "tokens_before", "tokens_after", "prompt_tokens", "summary_tokens",
            "cache_prefix_lost_tokens", "over_window_turns")
    first = next(iter(results.values()))
    agree = all({k: r.get(k) for k in keys} == {k: first[key].get(k) for k in keys}
                for res in results.values() for key, r in res.items())
    print(json.dumps({"runs": runs, "current_settings_reproduce_live": {"exact": exact, "mismatched": mismatched},
                      "runs_agree_per_conversation": agree, "cpus": os.cpu_count()}, indent=1))
    if not args.out:
        shutil.rmtree(base, ignore_errors=True)
    return 0 if mismatched == 0 and agree else 1


if __name__ == "__main__":
    sys.exit(main())

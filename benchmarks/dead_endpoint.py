"""Hook latency with a dead OTLP endpoint vs the normal figure (target: within 10 %).

    .venv/bin/python benchmarks/dead_endpoint.py [--calls 10000] [--rounds 20] [--protocols grpc,http/protobuf]

One process per protocol holds four observed engines (same engine class, same settings
apart from the OTLP endpoint) and measures the wall time of ``should_compress`` on each in
interleaved rounds (``--rounds`` x ``--calls`` calls, order rotated), so process-to-process
noise does not enter the comparison:

- ``off``       OTLP disabled (reference only)
- ``live``      OTLP to a working receiver in another process: the NORMAL figure
- ``blackhole`` OTLP to a socket that accepts connections and never answers
- ``refused``   OTLP to a port nothing listens on

Before measuring, every engine makes 5000 calls and the script waits 1.5 s, so the dead
exporters are stuck or failing (queues full, retries in flight) while the calls are timed.
Logs go to a file as in a Hermes process; the table shows how many lines were written.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from scratch import scratch_dir

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

SCENARIOS = ("off", "live", "blackhole", "refused")


def run_child(args) -> None:
    """One process per protocol: the four scenarios as four observed engines, measured in turns."""
    if "HERMES_HOME" not in os.environ:
        os.environ["HERMES_HOME"] = scratch_dir("dead-endpoint-home-")
    log_path = Path(tempfile.mkstemp(prefix="dead-endpoint-", suffix=".log")[1])
    handler = logging.FileHandler(log_path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=logging.WARNING, handlers=[handler])

    from prometheus_client.parser import text_string_to_metric_families
    from support.engines import ScriptedEngine
    from support.latency import ReceiverProcess, hook_latencies, interleaved, summary
    from support.servers import BlackHole, free_port, http_get, refused_port

    import observed_engine
    from observed_engine import observe

    receiver = ReceiverProcess()
    hole = BlackHole()
    endpoints = {"live": receiver.endpoint(args.protocol), "blackhole": f"http://127.0.0.1:{hole.port}",
                 "refused": f"http://127.0.0.1:{refused_port()}"}
    engines, ports = {}, {}
    for scenario in SCENARIOS:
        ports[scenario] = free_port()       # each pipeline's own /metrics: its error / drop counters
        settings = {"store": {"enabled": False}, "prometheus": {"enabled": True, "port": ports[scenario]}}
        if scenario != "off":
            settings["otlp"] = {"enabled": True, "protocol": args.protocol, "endpoint": endpoints[scenario],
                                "export_interval_seconds": 0.5, "timeout_seconds": args.export_timeout}
        engines[scenario] = observe(ScriptedEngine(f"bench_{scenario}"), settings=settings)

    # Get the exporters busy before measuring: a first batch of spans, one export cycle.
    for eng in engines.values():
        hook_latencies(eng, n=5_000, warmup=0)
    time.sleep(1.5)
    samples = interleaved(engines, rounds=args.rounds, n=args.calls)
    observed_engine.flush(2.0)
    results = []
    for scenario in SCENARIOS:
        errors, dropped = {}, {}
        text = http_get(f"http://127.0.0.1:{ports[scenario]}/metrics")
        for fam in text_string_to_metric_families(text):
            for smp in fam.samples:
                if smp.name == "hermes_context_engine_telemetry_errors_total":
                    errors[smp.labels["component"]] = smp.value
                elif smp.name == "hermes_context_engine_telemetry_dropped_total":
                    dropped[smp.labels["signal"]] = smp.value
        per_round = [statistics.median(samples[scenario][i:i + args.calls]) / 1000
                     for i in range(0, len(samples[scenario]), args.calls)]
        results.append({"scenario": scenario, "protocol": args.protocol, **summary(samples[scenario]),
                        "round_medians_us": per_round, "score_us": statistics.mean(per_round),
                        "errors": errors, "dropped": dropped})
    received = receiver.stop()
    hole.close()
    lines = log_path.read_text().splitlines()
    print(json.dumps({"results": results, "received": received, "log_lines": len(lines),
                      "log_head": lines[:12]}), flush=True)
    os._exit(0)        # do not wait for the dead exporters' shutdown at exit


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--protocols", default="grpc,http/protobuf")
    ap.add_argument("--export-timeout", type=float, default=5.0, help="observed.otlp.timeout_seconds")
    ap.add_argument("--target", type=float, default=0.10, help="allowed slowdown vs live (0.10 = 10%%)")
    ap.add_argument("--scenario", choices=("all",), help=argparse.SUPPRESS)
    ap.add_argument("--protocol", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.scenario:
        run_child(args)
        return

    rows, logs = [], {}
    for protocol in args.protocols.split(","):
        cmd = [sys.executable, __file__, "--scenario", "all", "--protocol", protocol,
               "--calls", str(args.calls), "--rounds", str(args.rounds),
               "--export-timeout", str(args.export_timeout)]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        if out.returncode != 0 or not out.stdout.strip():
            print(f"{protocol}: FAILED\n{out.stderr[-3000:]}", file=sys.stderr)
            continue
        report = json.loads(out.stdout.strip().splitlines()[-1])
        rows.extend(report["results"])
        logs[protocol] = (report["log_lines"], report["received"])

    print(f"\nshould_compress latency: {args.rounds} interleaved rounds x {args.calls} calls per scenario, "
          f"one process per protocol\n(normal = OTLP to a live receiver in another process; score = mean of the "
          f"round medians; target: dead <= normal +{args.target:.0%}; export timeout {args.export_timeout:g} s)\n")
    print(f"{'protocol':<14} {'scenario':<10} {'score µs':>9} {'median µs':>10} {'p99 µs':>8} "
          f"{'vs live':>8} {'verdict':>8} {'round medians µs':>18} {'export errors':>14} {'spans dropped':>14}")
    failed = False
    for protocol in args.protocols.split(","):
        live = next((r for r in rows if r["protocol"] == protocol and r["scenario"] == "live"), None)
        for r in (r for r in rows if r["protocol"] == protocol):
            delta = (r["score_us"] / live["score_us"] - 1) if live else float("nan")
            verdict = "-"
            if r["scenario"] in ("blackhole", "refused") and live:
                verdict = "ok" if delta <= args.target else "SLOW"
                failed |= verdict != "ok"
            errs = sum(v for k, v in r["errors"].items() if k.startswith("exporter"))
            print(f"{protocol:<14} {r['scenario']:<10} {r['score_us']:>9.2f} {r['median_us']:>10.2f} "
                  f"{r['p99_us']:>8.2f} {delta:>+8.1%} {verdict:>8} "
                  f"{min(r['round_medians_us']):>8.2f}-{max(r['round_medians_us']):<9.2f} {errs:>14.0f} "
                  f"{r['dropped'].get('span', 0):>14.0f}")
        if protocol in logs:
            n_lines, received = logs[protocol]
            print(f"{'':<14} (log lines written: {n_lines}; live receiver got {received.get('spans', '?')} spans)")
    print("\nThe hook path never touches an exporter; differences between scenarios come from the worker and "
          "exporter\nthreads sharing the GIL. 'off' vs 'live' shows the run-to-run noise of this machine.")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()

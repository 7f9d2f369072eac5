"""``observed-engine demo``'s main: the paths, the LLM, the home, the traffic and the dashboard."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import List, Optional

from .. import host
from .arguments import build_parser, check_arguments, demo_paths
from .dashboard import (
    RACE_RETRIES,
    _in_use,
    _netloc,
    choose_dashboard_port,
    last_line,
    start_dashboard,
    wait_until_serving,
)
from .engines import router_engine
from .errors import DemoArgumentError
from .home import private_environment, write_demo_home
from .llm import DemoLLM
from .traffic import Traffic


def main(argv: Optional[List[str]] = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        directory, store, home = demo_paths(args)
    except DemoArgumentError as exc:
        print(f"observed-engine demo: {exc}", file=sys.stderr)
        return 2
    if host.hermes_version() is None:  # imports agent.context_engine only, not the agent loop (which writes into a home)
        print("observed-engine demo: Hermes Agent is not installed here; fix: bash scripts/demo.sh "
              "(or pip install '/path/to/observed-engine[demo]' from a checkout)", file=sys.stderr)
        return 2
    with private_environment(home, directory / "tiktoken"):
        try:
            check_arguments(args)
            port, note = (None, None) if args.no_dashboard else choose_dashboard_port(args.host, args.port)
        except DemoArgumentError as exc:
            print(f"observed-engine demo: {exc}", file=sys.stderr)
            return 2
        return _run(args, directory, store, home, port, note)


def observe_requests(traffic: Traffic, router_every: int) -> Optional[str]:
    """Have the router sessions' selections made on Hermes' request hook; the line to print when
    this Hermes has no such hook (its router sessions then record no select_context)."""
    if host.add_request_observer(traffic.on_request) or not router_every:
        return None
    return ("demo: this Hermes offers no pre_api_request plugin hook, so the router sessions make no "
            "selections: the dashboard shows no select_context rows for them")


def _run(args: argparse.Namespace, directory: Path, store: Path, home: Path,
         port: Optional[int], port_note: Optional[str]) -> int:
    try:
        host.ai_agent_class()
    except ImportError as exc:
        print(f"observed-engine demo: Hermes Agent cannot be imported ({exc}); fix: bash scripts/demo.sh "
              "(or pip install '/path/to/observed-engine[demo]' from a checkout)", file=sys.stderr)
        return 2
    store.parent.mkdir(parents=True, exist_ok=True)
    directory.mkdir(parents=True, exist_ok=True)
    inside = store.parent == directory
    print(f"demo: its own directory {directory} ({'the store, ' if inside else ''}the agents' Hermes home, the "
          f"token cache, the dashboard's log): it writes nothing elsewhere{'' if inside else ' but the store'}; "
          "delete it to start afresh")
    settings = {
        "store": {"path": str(store)},
        "compress_timeout_seconds": args.deadline,
        "prometheus": {"enabled": bool(args.prometheus_port), "port": args.prometheus_port or 9464},
    }
    llm = DemoLLM(reply_chars=args.reply_chars, context_length=args.context_length, slow_every=args.slow_every,
                  slow_seconds=args.deadline * 1.5, fail_every=args.fail_every).start()
    write_demo_home(home, llm, settings, args.context_length)
    host.reset_plugin_discovery()
    traffic = Traffic(llm, router_engine(settings, args.context_length), args.sessions, args.turn_delay,
                      router_every=args.router_every)
    note = observe_requests(traffic, args.router_every)
    if note:
        print(note)

    log = directory / "dashboard.log"
    dashboard = None if args.no_dashboard else start_dashboard(store, args.host, port, log=log)
    print(f"demo: writing telemetry to {store}")
    if port_note and dashboard is not None:
        print(f"demo: {port_note}")
    if args.prometheus_port:
        print(f"demo: Prometheus metrics on http://127.0.0.1:{args.prometheus_port}/metrics")
    sys.stdout.flush()

    threads = [threading.Thread(target=traffic.run_session, args=(i,), daemon=True) for i in range(args.sessions)]
    for t in threads:
        t.start()
    stop_requested = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop_requested.set())
    started = time.monotonic()
    code = 0
    try:
        if dashboard is not None:
            why = wait_until_serving(dashboard, args.host, port, log=log, stop=stop_requested)
            for _ in range(RACE_RETRIES):
                # another program took the port between the check and Streamlit's bind (two demos
                # started at once): the default port moves on, as it does for a port taken before
                if why is None or args.port is not None or dashboard.poll() is None or not _in_use(args.host, port):
                    break
                try:
                    port, note = choose_dashboard_port(args.host, None, start=port + 1)
                except DemoArgumentError:
                    break
                print(f"demo: {note}")
                dashboard = start_dashboard(store, args.host, port, log=log) or dashboard
                why = wait_until_serving(dashboard, args.host, port, log=log, stop=stop_requested)
            if why is None:
                print(f"demo: dashboard on http://{_netloc(args.host, port)}  (Ctrl-C to stop)")
            elif not stop_requested.is_set():
                print(f"observed-engine demo: the dashboard did not start on {_netloc(args.host, port)}: {why}; "
                      f"its log: {log}", file=sys.stderr)
                stop_requested.set()
                code = 1
        said_gone = False
        while not stop_requested.is_set():
            elapsed = time.monotonic() - started
            if args.duration and elapsed >= args.duration:
                break
            if dashboard is not None and not said_gone and dashboard.poll() is not None:
                said_gone = True
                why = last_line(log)
                print(f"\nobserved-engine demo: the dashboard stopped (Streamlit exited with code "
                      f"{dashboard.returncode}{': ' + why if why else ''}); the traffic goes on; its log: {log}",
                      file=sys.stderr)
            sys.stdout.write(
                f"\rdemo: {elapsed:6.0f}s  turns {traffic.turns:6d}  compressions {traffic.compressions:4d}  "
                f"summaries {llm.summaries:4d} ({llm.failures} failed)  sessions {traffic.finished:3d} ended")
            sys.stdout.flush()
            stop_requested.wait(1.0)
    except KeyboardInterrupt:
        pass
    finally:
        print()
        traffic.stop.set()
        for t in threads:
            t.join(timeout=args.deadline * 2 + 2)
        from ..api import flush

        flush(10.0)
        llm.stop()
        host.reset_plugin_discovery()
        if dashboard is not None:
            try:
                os.killpg(dashboard.pid, signal.SIGTERM)
                dashboard.wait(timeout=10)
            except Exception:  # teardown: the group is gone already, or it did not exit in 10 s: kill it
                dashboard.kill()
        print(f"demo: done ({traffic.turns} turns, {traffic.compressions} compressions); store {store}")
    return code

"""``observed-engine dashboard``: the Streamlit dashboard of the installed package, on
127.0.0.1:8501 by default, reading the current Hermes home's store (or ``--store`` /
``--prometheus``).

When editing: flags are checked before Streamlit starts (one line, exit 2); the command line
comes from ``observed_engine.demo.dashboard_command``; this process execs Streamlit, so the exit
code, Ctrl-C and signals are Streamlit's. POSIX only, as Hermes.

The full account: docs/design/internals.md, *observed_engine/cli/dashboard.py*.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from .. import host
from . import inputs
from .errors import CliError


def exec_streamlit(argv, env) -> int:
    """Replace this process by *argv* (does not return)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(argv[0], argv, env)
    raise AssertionError("unreachable")      # pragma: no cover


def cmd_dashboard(args) -> int:
    from ..demo import DASHBOARD_APP, DASHBOARD_EXTRA, dashboard_command, streamlit_installed

    if not streamlit_installed():
        print(f"observed-engine dashboard: {DASHBOARD_EXTRA}", file=sys.stderr)
        return 2
    if not DASHBOARD_APP.is_file():
        raise CliError(f"this observed-engine installation lacks its dashboard app ({DASHBOARD_APP}); "
                       "fix: reinstall 'observed-engine[dashboard]'")
    prometheus = inputs.prometheus_url(args.prometheus) if args.prometheus is not None else None
    store = None
    if args.store is not None:
        if not args.store.strip():
            raise CliError("--store is empty; fix: the path of a telemetry store (default: the Hermes home's "
                           "observed/telemetry.sqlite)")
        store = Path(args.store).expanduser()
    if prometheus is None:
        shown = store if store is not None else host.default_store_path()
        problem = inputs.store_problem(shown)
        if problem:
            raise CliError(f"{'--store ' if store is not None else 'the store '}{shown} {problem}")
    inputs.listen_address(args.host, args.port)
    argv = dashboard_command(DASHBOARD_APP, store=store, prometheus=prometheus, address=args.host.strip(),
                             port=args.port, allow_source_change=args.allow_source_change)
    # The app prefers an OBSERVED_PROMETHEUS_URL from the environment over its --store flag;
    # OBSERVED_SOURCE makes the source given here (or the store, by default) the one it opens.
    env = dict(os.environ, OBSERVED_SOURCE="prometheus" if args.prometheus else "sqlite")
    return exec_streamlit(argv, env)


def add_parser(sub) -> None:
    p = sub.add_parser("dashboard", help="serve the Streamlit dashboard (needs observed-engine[dashboard])",
                       description="Serve the dashboard on HOST:PORT (default 127.0.0.1:8501), reading "
                                   "the current Hermes home's telemetry store unless told otherwise.")
    source = p.add_mutually_exclusive_group()
    source.add_argument("--store", metavar="PATH", help="SQLite store to read (default: the Hermes home's)")
    source.add_argument("--prometheus", metavar="URL", help="read a Prometheus that scrapes the engines instead")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default: %(default)s)")
    p.add_argument("--port", type=inputs.port_number, default=8501,
                   help="port to listen on, 1-65535 (default: %(default)s)")
    p.add_argument("--allow-source-change", action="store_true",
                   help="let the dashboard's visitors switch to another store or Prometheus")
    p.set_defaults(func=cmd_dashboard)

"""The demo's arguments, checked before anything is created."""

from __future__ import annotations

import argparse
import math
import os
from pathlib import Path

from .. import host
from ..contract.store_schema import DEMO_DIR_ENV, DEMO_STORE_FILE, demo_dir
from .dashboard import DEFAULT_DASHBOARD_PORT, port_in_use
from .errors import DemoArgumentError


class _Parser(argparse.ArgumentParser):
    def error(self, message):       # argparse's usage errors: one line, like every other
        raise DemoArgumentError(f"{message}; fix: see `observed-engine demo --help`")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="observed-engine demo", description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=None,
                        help="the demo's own directory, the only place it writes: its store, the private Hermes "
                             f"home its agents run in, its token cache, the dashboard's log (default: ${DEMO_DIR_ENV}, "
                             "else $XDG_STATE_HOME/observed-engine/demo, ~/.local/state/observed-engine/demo; "
                             "with --store alone: the store's folder)")
    parser.add_argument("--store", type=Path, default=None, help="SQLite store to write (default: DIR/demo.sqlite)")
    parser.add_argument("--sessions", type=int, default=3, help="concurrent sessions (default 3)")
    parser.add_argument("--duration", type=float, default=0, help="seconds to run; 0 = until Ctrl-C")
    parser.add_argument("--turn-delay", type=float, default=0.25, help="mean pause between turns, seconds")
    parser.add_argument("--deadline", type=float, default=3.0, help="compress deadline for the demo, seconds")
    parser.add_argument("--slow-every", type=int, default=5, help="every Nth summary is slow (0: never)")
    parser.add_argument("--fail-every", type=int, default=4,
                        help="every Nth summary call fails, HTTP 401 and a dropped connection in turn (0: never)")
    parser.add_argument("--router-every", type=int, default=3,
                        help="every Nth session runs the topic router instead of the built-in (0: never)")
    parser.add_argument("--context-length", type=int, default=64_000, help="the model's window (Hermes: >= 64000)")
    parser.add_argument("--reply-chars", type=int, default=40_000, help="length of each fake reply")
    parser.add_argument("--host", default="127.0.0.1", help="address the dashboard listens on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=None,
                        help=f"dashboard port (default {DEFAULT_DASHBOARD_PORT}, or the next free one when it is "
                             "taken; a port given here that is taken is an error)")
    parser.add_argument("--prometheus-port", type=int, default=0, help="also serve /metrics on this port")
    parser.add_argument("--no-dashboard", action="store_true")
    return parser


# (flag, smallest value, what the value is, an example fix)
_NUMBERS = (
    ("--sessions", 1, "the number of concurrent sessions", "--sessions 3"),
    ("--duration", 0, "the seconds to run", "--duration 60, or 0 to run until Ctrl-C"),
    ("--turn-delay", 0, "the pause between turns (seconds)", "--turn-delay 0.25"),
    ("--deadline", 0.001, "the compress deadline (seconds)", "--deadline 3"),
    ("--slow-every", 0, "a summary count", "--slow-every 5, or 0 for never"),
    ("--fail-every", 0, "a summary count", "--fail-every 4, or 0 for never"),
    ("--router-every", 0, "a session count", "--router-every 3, or 0 for never"),
    ("--reply-chars", 1, "the reply length", "--reply-chars 40000"),
    ("--prometheus-port", 0, "a TCP port", "--prometheus-port 9464, or leave it out"),
)


def check_arguments(args: argparse.Namespace) -> None:
    """Raise DemoArgumentError for the first wrong argument. Creates nothing."""
    for flag, least, what, fix in _NUMBERS:
        value = getattr(args, flag[2:].replace("-", "_"))
        if not math.isfinite(value) or value < least:
            shown = f"{value:g}" if isinstance(value, float) else str(value)
            problem = f"{what} must be at least {least:g}" if math.isfinite(value) else "not a finite number"
            raise DemoArgumentError(f"{flag} {shown}: {problem}; fix: {fix}")
    for flag, value, least in (("--port", args.port, 1), ("--prometheus-port", args.prometheus_port, 0)):
        if value is not None and not least <= value <= 65535:
            raise DemoArgumentError(f"{flag} {value}: not a TCP port; fix: a port from 1 to 65535"
                                    + (", e.g. --port 8501" if flag == "--port" else ", e.g. --prometheus-port 9464"))
    if not args.no_dashboard and not args.host.strip():
        raise DemoArgumentError("--host is empty (Streamlit would listen on every interface); "
                                "fix: an address to listen on, such as 127.0.0.1")
    minimum = host.minimum_context_length() or 64_000
    if args.context_length < minimum:
        raise DemoArgumentError(f"--context-length {args.context_length}: below Hermes' smallest model window "
                                f"({minimum:,} tokens; its agent refuses smaller ones); fix: --context-length {minimum}")
    if args.store is not None:
        store = args.store.expanduser()
        if store.is_dir():
            raise DemoArgumentError(f"--store {args.store}: is a directory; fix: a file in it, "
                                    f"e.g. --store {store / DEMO_STORE_FILE}")
        parent = _existing_ancestor(store.parent)
        if not parent.is_dir():
            raise DemoArgumentError(f"--store {args.store}: {parent} is a file, not a directory; "
                                    "fix: a store path in a directory")
    if args.dir is not None and _existing_ancestor(args.dir.expanduser()).is_file():
        raise DemoArgumentError(f"--dir {args.dir}: {_existing_ancestor(args.dir.expanduser())} is a file; "
                                "fix: a directory of its own for the demo (created if missing)")
    if args.prometheus_port and not args.no_dashboard and args.prometheus_port == (args.port or DEFAULT_DASHBOARD_PORT):
        raise DemoArgumentError(f"--prometheus-port {args.prometheus_port}: the dashboard's port too; "
                                "fix: another --prometheus-port")
    if args.prometheus_port:
        try:
            taken = port_in_use("127.0.0.1", args.prometheus_port)
        except OSError:
            taken = True
        if taken:
            raise DemoArgumentError(f"--prometheus-port {args.prometheus_port}: 127.0.0.1:{args.prometheus_port} "
                                    "is in use by another program; fix: another --prometheus-port, or leave it out")


def _existing_ancestor(path: Path) -> Path:
    while not path.exists() and path.parent != path:
        path = path.parent
    return path


def demo_paths(args: argparse.Namespace) -> tuple:
    """``(directory, store, hermes_home)``: the demo's own directory (``--dir``, else
    ``$OBSERVED_DEMO_DIR`` or the state directory, else, with ``--store`` alone, the store's
    folder), the store in it, the private Hermes home in it. Nothing is created."""
    store = args.store.expanduser().resolve() if args.store is not None else None
    if args.dir is not None:
        directory = args.dir.expanduser().resolve()
    elif store is not None and not os.environ.get(DEMO_DIR_ENV):
        directory = store.parent
    else:
        directory = demo_dir().resolve()
    store = store or directory / DEMO_STORE_FILE
    return directory, store, directory / (store.stem + "-hermes-home")

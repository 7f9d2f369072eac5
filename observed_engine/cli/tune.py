"""``observed-engine tune``: sweep an engine's settings over the recorded conversations.

Prints the Markdown (or JSON) report, a progress bar on stderr, and keeps every finished replay
in ``--out`` (default ``$HERMES_HOME/observed/tune/<engine>-<digest>/``, the same for the same
sweep). When editing: running the command again resumes the sweep or adds new conversations;
Ctrl-C keeps what is done (exit 130).

The full account (with the flags): docs/design/internals.md, *observed_engine/cli/tune.py*.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from .. import host
from ..compare import objective, variants
from ..compare.modes import SUMMARY_MODES
from . import inputs
from .errors import CliError


def cmd_tune(args) -> int:
    from ..compare import sweep, tune  # the replay side: imported when the command runs

    home = inputs.home_dir(args.hermes_home)
    try:
        with host.untouched_home(home):
            rep = tune.run_tune(hermes_home=args.hermes_home, engine=args.engine, grids=args.grid or (),
                                variants=args.variant or (), objective=args.objective, sessions=args.sessions,
                                session_ids=args.session or (), summary=args.summary, usage=args.usage,
                                context_length=args.context_length, jobs=args.jobs,
                                out=Path(args.out).expanduser() if args.out else None,
                                progress=None if args.quiet else sys.stderr)
    except tune.TuneError as exc:
        raise CliError(str(exc)) from None
    except sweep.SweepInterrupted as exc:
        print(f"observed-engine tune: {exc}", file=sys.stderr)
        return 130
    if args.json:
        print(json.dumps(rep, indent=2, default=str))
    else:
        print(tune.markdown(rep), end="")
    print(f"report: {rep['files']['json']} and {rep['files']['markdown']}", file=sys.stderr)
    return 0 if rep["throughput"]["replayed"] + rep["throughput"]["reused"] else 1


def add_parser(sub, home_help: str) -> None:
    p = sub.add_parser("tune", help="sweep an engine's settings over the recorded conversations and recommend some")
    p.add_argument("--engine", default=variants.BUILTIN,
                   help=f"the engine to tune (default {variants.BUILTIN}, the built-in)")
    p.add_argument("--grid", action="append", metavar="KEY=VALUES",
                   help="a setting and its values: start:stop:step (inclusive) or v1,v2,... (repeatable: the "
                        "grid is every combination). Default for the built-in: threshold and target_ratio")
    p.add_argument("--variant", action="append", metavar="ENGINE@K=V,...", help="one more variant (repeatable)")
    p.add_argument("--objective", default=objective.DEFAULT_OBJECTIVE, metavar="M1,M2,... | M1=W1,...",
                   help=f"metrics in priority order, or weighted (lower is better): {', '.join(objective.METRICS)} "
                        f"(default {objective.DEFAULT_OBJECTIVE}). A variant that loses a turn to overflow never wins")
    p.add_argument("--hermes-home", metavar="DIR", help=home_help)
    which = p.add_mutually_exclusive_group()
    which.add_argument("--sessions", type=int, metavar="N", help="the N newest conversations (default: all)")
    which.add_argument("--session", action="append", metavar="ID", help="this conversation (repeatable)")
    p.add_argument("--jobs", type=int, metavar="N", help="worker processes (default: the CPU count)")
    p.add_argument("--summary", choices=SUMMARY_MODES, default="offline",
                   help="offline: the recorded summaries, then a fixed stand-in (default); configured: the "
                        "auxiliary model of that Hermes home (its cost)")
    p.add_argument("--usage", choices=("tiktoken", "chars"), default="tiktoken",
                   help="how the replay LLM counts a request's prompt tokens (default tiktoken)")
    p.add_argument("--context-length", type=int, metavar="N",
                   help="the model's window (default: model.context_length of config.yaml, else 128000)")
    p.add_argument("--out", metavar="DIR", help="the sweep's directory (default $HERMES_HOME/observed/tune/...)")
    p.add_argument("--json", action="store_true", help="print the JSON report instead of the Markdown one")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_tune)

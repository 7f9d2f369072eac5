"""``observed-engine compare``: replay recorded conversations through several engines.

    observed-engine compare --engines compressor,<name>[,<name>...] [--hermes-home H]
                            [--sessions N | --session ID ...] [--summary offline|configured]
                            [--usage tiktoken|chars] [--context-length N] [--out DIR] [--json]

Prints the Markdown report (or the JSON one with --json) on stdout, the progress bar on
stderr, and writes compare.json and compare.md to --out (default
$HERMES_HOME/observed/compare/<UTC time>/). The session store is opened read-only.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from .. import host
from ..compare.modes import SUMMARY_MODES
from . import inputs, yaml_edit
from .errors import CliError
from .paths import config_path


def cmd_compare(args) -> int:
    from ..compare import report as report_mod
    from ..compare import run as compare  # the replay side: imported when the command runs

    home = inputs.home_dir(args.hermes_home)
    for sid in args.session or ():
        if not sid.strip():
            raise CliError("--session is empty; fix: a session id of that home's state.db (`hermes sessions list`)")
    if args.out is not None and not args.out.strip():
        raise CliError("--out is empty; fix: the directory for compare.json and compare.md (created if missing)")
    out = Path(args.out).expanduser() if args.out else \
        home / "observed" / "compare" / time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    # checked now, not after minutes of replays
    inputs.writable_dir(out, "where compare writes its report")
    for name in (report_mod.JSON_NAME, report_mod.MARKDOWN_NAME):
        if (out / name).is_dir():
            raise CliError(f"{out / name} is a directory, where compare writes its report; fix: another --out")
    # the home's config.yaml is read with Hermes' loader, which must not meet a file it cannot parse
    cfg_file = config_path(home)
    data = yaml_edit.parse(cfg_file, yaml_edit.read_text(cfg_file))
    if data is not None and not isinstance(data, dict):
        raise CliError(f"{cfg_file}: the top level is {inputs.describe(data)}, not a mapping of keys; fix: the "
                       f"file must hold keys such as `model:`")
    try:
        with host.untouched_home(home):
            rep = compare.run_compare(hermes_home=args.hermes_home, engines=args.engines,
                                      sessions=args.sessions, session_ids=args.session or (),
                                      summary=args.summary, usage=args.usage,
                                      context_length=args.context_length, out=out,
                                      progress=None if args.quiet else sys.stderr, jobs=args.jobs)
    except compare.CompareError as exc:
        raise CliError(str(exc)) from None
    if args.json:
        print(json.dumps(rep, indent=2, default=str))
    else:
        print(report_mod.markdown(rep), end="")
    print(f"report: {rep['files']['json']} and {rep['files']['markdown']}", file=sys.stderr)
    ran = [r for c in rep["conversations"] for r in c["engines"].values() if r.get("status") != "skipped"]
    return 0 if ran else 1


def add_parser(sub, home_help: str) -> None:
    p = sub.add_parser("compare", help="replay recorded conversations through several engines and compare them")
    p.add_argument("--engines", required=True, metavar="A,B,...",
                   help="engines to compare: compressor (the built-in) and plugin engine names, each optionally "
                        "with settings: compressor@threshold=0.8,protect_last_n=10")
    p.add_argument("--hermes-home", metavar="DIR", help=home_help)
    which = p.add_mutually_exclusive_group()
    which.add_argument("--sessions", type=inputs.positive_int, default=5, metavar="N",
                       help="the N newest conversations that can be replayed (default 5)")
    which.add_argument("--session", action="append", metavar="ID", help="this conversation (repeatable)")
    p.add_argument("--summary", choices=SUMMARY_MODES, default="offline",
                   help="offline: the recorded summaries, then a fixed stand-in, no network (default); "
                        "configured: the auxiliary model of that Hermes home (its cost)")
    p.add_argument("--usage", choices=("tiktoken", "chars"), default="tiktoken",
                   help="how the replay LLM counts a request's prompt tokens (default tiktoken)")
    p.add_argument("--context-length", type=inputs.positive_int, metavar="N",
                   help="the model's window (default: model.context_length of config.yaml, else 128000)")
    p.add_argument("--out", metavar="DIR", help="where compare.json and compare.md go "
                                                "(default $HERMES_HOME/observed/compare/<time>/)")
    p.add_argument("--json", action="store_true", help="print the JSON report instead of the Markdown one")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--jobs", type=int, default=1, metavar="N", help="replay in N worker processes (default 1)")
    p.set_defaults(func=cmd_compare)

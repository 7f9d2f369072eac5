"""``observed-engine demo ...``: the arguments go to ``observed_engine.demo`` as they are
(it has its own parser and ``--help``); loaded only when asked for."""

from __future__ import annotations

import sys
from typing import List


def cmd_demo(argv: List[str]) -> int:
    try:
        from observed_engine.demo import main as demo_main
    except ImportError as exc:
        print(f"observed-engine demo is not available in this build: {exc}", file=sys.stderr)
        return 2
    return int(demo_main(list(argv)) or 0)


def add_parser(sub) -> None:
    sub.add_parser("demo", help="run the demo (arguments are passed on; see `observed-engine demo --help`)",
                   add_help=False)

"""How the dashboard was started: its flags (after ``--``) and the environment.

    streamlit run app.py --server.address 127.0.0.1 -- [--store PATH | --prometheus URL] [--refresh S] [--allow-source-change]

Started with ``--store`` or ``--prometheus`` the source is pinned: the sidebar shows it
read-only and no widget can point the dashboard at another file or server, unless
``--allow-source-change`` (or ``OBSERVED_ALLOW_SOURCE_CHANGE=1``) says so.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from typing import Optional, Sequence

SQLITE = "sqlite"
PROMETHEUS = "prometheus"
KINDS = (SQLITE, PROMETHEUS)

ENV_STORE = "OBSERVED_STORE"
ENV_PROMETHEUS = "OBSERVED_PROMETHEUS_URL"
ENV_REFRESH = "OBSERVED_REFRESH_SECONDS"
ENV_SOURCE = "OBSERVED_SOURCE"                     # optional: "sqlite" or "prometheus" to force the default
ENV_ALLOW_SOURCE_CHANGE = "OBSERVED_ALLOW_SOURCE_CHANGE"
DEFAULT_PROMETHEUS_URL = "http://127.0.0.1:9090"
DEFAULT_REFRESH_S = 5.0

_TRUE = ("1", "true", "yes", "on")


@dataclass(frozen=True)
class Options:
    store: Optional[str] = None            # --store
    prometheus: Optional[str] = None       # --prometheus
    refresh: Optional[float] = None        # --refresh
    allow_source_change: bool = False      # --allow-source-change or OBSERVED_ALLOW_SOURCE_CHANGE=1

    @property
    def pinned(self) -> bool:
        """The source came from the command line and may not be changed from the page."""
        return bool(self.store or self.prometheus) and not self.allow_source_change

    def default_kind(self) -> str:
        if self.prometheus and not self.store:
            return PROMETHEUS
        if self.store:
            return SQLITE
        forced = os.environ.get(ENV_SOURCE, "").strip().lower()
        if forced in KINDS:
            return forced
        if os.environ.get(ENV_PROMETHEUS) and not os.environ.get(ENV_STORE):
            return PROMETHEUS
        return SQLITE

    def store_path(self) -> str:
        """The configured store: --store, OBSERVED_STORE, else the current Hermes home's."""
        return self.store or os.environ.get(ENV_STORE) or default_store_path()

    def prometheus_url(self) -> str:
        """The configured Prometheus (may be empty)."""
        return (self.prometheus or os.environ.get(ENV_PROMETHEUS, "")).strip()

    def refresh_seconds(self) -> float:
        if self.refresh and self.refresh > 0:
            return float(self.refresh)
        try:
            v = float(os.environ.get(ENV_REFRESH, DEFAULT_REFRESH_S))
        except ValueError:
            return DEFAULT_REFRESH_S
        return v if v > 0 else DEFAULT_REFRESH_S


def parse(argv: Optional[Sequence[str]] = None) -> Options:
    """The flags Streamlit passes the script (everything after ``--``); unknown ones are ignored."""
    p = argparse.ArgumentParser(add_help=False, exit_on_error=False)
    p.add_argument("--store")
    p.add_argument("--prometheus")
    p.add_argument("--refresh")
    p.add_argument("--allow-source-change", action="store_true")
    try:
        args, _ = p.parse_known_args(list(sys.argv[1:] if argv is None else argv))
    except argparse.ArgumentError:          # e.g. --store without a value: as if none were given
        args = p.parse_known_args([])[0]
    try:
        refresh = float(args.refresh) if args.refresh else None
    except ValueError:
        refresh = None
    allow = args.allow_source_change or os.environ.get(ENV_ALLOW_SOURCE_CHANGE, "").strip().lower() in _TRUE
    return Options(store=args.store or None, prometheus=args.prometheus or None, refresh=refresh,
                   allow_source_change=allow)


def default_store_path() -> str:
    from observed_engine.host import default_store_path as _default
    return str(_default())

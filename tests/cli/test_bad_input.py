"""The CLI's rule, as a table: every command given a wrong input says so on one line of stderr
(what is wrong, and the fix), exits 2, prints no traceback, and creates or changes nothing,
neither in the Hermes home nor in the Hermes installation (its ``plugins/context_engine/``, the
entry point's place in site-packages).

Each row of :data:`ROWS` is run as the operator runs it: ``python -m observed_engine <argv>``
in a fresh process, current directory outside the checkout, ``HERMES_HOME`` a temporary home
(``{home}`` in argv; ``{tmp}`` is its parent). A row's ``setup`` prepares the wrong input;
``ro`` mounts paths read-only for that one process (a private mount namespace, so nothing
outlives it; the rows are skipped where this machine cannot). Before and after, the whole
temporary tree and the Hermes installation's directories are snapshotted (type, mode, bytes)
and must be identical.

``doctor`` is a report: a config.yaml it cannot read is its ``[FAIL] config`` line on stdout,
exit 1 (rows with ``code=1``, ``stream="stdout"``), and nothing on stderr; a home that does not
exist is an operator error like everywhere else.

Rows for ``demo`` are in the same list (``demo-...``), each with ``--dir`` in the temporary tree.
"""

from __future__ import annotations

import os
import shlex
import shutil
import socket
import sqlite3
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, Optional, Sequence, Tuple

import pytest

from observed_engine import host

Setup = Callable[[Path, Path], None]


# -- how a wrong input is made ---------------------------------------------------------------

def config(text: str) -> Setup:
    """config.yaml with *text* ({tmp}: the temporary directory)."""
    def make(home: Path, tmp: Path) -> None:
        (home / "config.yaml").write_text(text.replace("{tmp}", str(tmp)), encoding="utf-8")
    return make


def config_bytes(data: bytes) -> Setup:
    def make(home: Path, tmp: Path) -> None:
        (home / "config.yaml").write_bytes(data)
    return make


def file_at(rel: str, text: str = "x\n") -> Setup:
    def make(home: Path, tmp: Path) -> None:
        path = tmp / rel.format(home="home")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return make


def dir_at(rel: str) -> Setup:
    def make(home: Path, tmp: Path) -> None:
        (tmp / rel.format(home="home")).mkdir(parents=True, exist_ok=True)
    return make


def fifo_at(rel: str) -> Setup:
    def make(home: Path, tmp: Path) -> None:
        os.mkfifo(tmp / rel.format(home="home"))
    return make


def sqlite_at(rel: str, *statements: str) -> Setup:
    def make(home: Path, tmp: Path) -> None:
        path = tmp / rel.format(home="home")
        path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(path)
        for sql in statements or ("CREATE TABLE accounts (id INTEGER PRIMARY KEY, name TEXT)",):
            conn.execute(sql)
        conn.commit()
        conn.close()
    return make


def hermes_state_db(home: Path, tmp: Path) -> None:
    """An empty state.db as Hermes creates it (its schema, no conversation)."""
    host.session_db(home / "state.db").close()


def installed(home: Path, tmp: Path) -> None:
    """A home observed-engine was installed in (its record), without touching the installation."""
    (home / "config.yaml").write_text("context:\n  engine: observed\nobserved:\n  inner: compressor\n")
    (home / "observed").mkdir()
    (home / "observed" / "install.json").write_text('{"previous_engine": null, "routes": ["bundled"]}\n')


def both(*setups: Setup) -> Setup:
    def make(home: Path, tmp: Path) -> None:
        for setup in setups:
            setup(home, tmp)
    return make


BROKEN_YAML = "model:\n  default: gpt-4o\n bad: [1, 2\ncontext:\n  engine: compressor\n"
DEEP_YAML = "a: " + "[" * 5000 + "]" * 5000 + "\n"


@dataclass
class Case:
    id: str
    argv: Sequence[str]
    expect: str                       # text the one line (or doctor's report) contains
    setup: Optional[Setup] = None
    code: int = 2
    stream: str = "stderr"            # where `expect` is: stderr (the one line) or stdout (doctor)
    ro: Tuple[str, ...] = ()          # paths mounted read-only for the run ({home}, {tmp}, {plugins}, {site})
    needs: Optional[str] = None       # "streamlit"; "no-user-engines": a Hermes that does not load
                                      # engines from $HERMES_HOME/plugins/ (0.19 and older)

    def param(self):
        return pytest.param(self, id=self.id)


H = ["--hermes-home", "{home}"]
MISSING = "{tmp}/no-such-home"

ROWS = [
    # -- the Hermes home, for every command that takes one ------------------------------------------
    *[Case(f"{cmd}-missing-home", [cmd, *extra, "--hermes-home", MISSING], "no Hermes home at")
      for cmd, extra in (("install", []), ("uninstall", []), ("doctor", []),
                         ("compare", ["--engines", "compressor"]))],
    *[Case(f"{cmd}-home-is-a-file", [cmd, *extra, "--hermes-home", "{tmp}/a-file"], "is a file, not a Hermes home",
           setup=file_at("a-file"))
      for cmd, extra in (("install", []), ("uninstall", []), ("doctor", []),
                         ("compare", ["--engines", "compressor"]))],
    *[Case(f"{cmd}-empty-home", [cmd, *extra, "--hermes-home", ""], "--hermes-home is empty")
      for cmd, extra in (("install", []), ("uninstall", []), ("doctor", []),
                         ("compare", ["--engines", "compressor"]))],
    Case("install-home-under-a-file", ["install", "--hermes-home", "{tmp}/a-file/home"], "a part of that path is a file",
         setup=file_at("a-file")),
    Case("install-unicode-missing-home", ["install", "--hermes-home", "{tmp}/hérmès-hømé-☃"], "no Hermes home at"),
    Case("doctor-home-from-env-missing", ["doctor"], "no Hermes home at", setup=lambda h, t: shutil.rmtree(h)),
    Case("install-read-only-home", ["install", *H], "cannot write into the Hermes home", ro=("{home}",)),
    Case("uninstall-read-only-home", ["uninstall", *H], "cannot write into the Hermes home", setup=installed,
         ro=("{home}",)),
    Case("uninstall-unknown-home", ["uninstall", *H], "observed-engine is not installed in the Hermes home"),
    Case("uninstall-unknown-home-with-config", ["uninstall", *H], "observed-engine is not installed",
         setup=config("context:\n  engine: compressor\n")),

    # -- config.yaml ---------------------------------------------------------------------------------
    *[Case(f"{cmd}-broken-yaml", [cmd, *H], "config.yaml: not valid YAML at line 3, column 2", setup=config(BROKEN_YAML))
      for cmd in ("install", "uninstall")],
    Case("compare-broken-yaml", ["compare", "--engines", "compressor", *H], "not valid YAML at line 3, column 2",
         setup=both(config(BROKEN_YAML), hermes_state_db)),
    Case("doctor-broken-yaml", ["doctor", *H], "[FAIL] config: {home}/config.yaml: not valid YAML at line 3, column 2",
         setup=config(BROKEN_YAML), code=1, stream="stdout"),
    *[Case(f"{cmd}-{name}", [cmd, *H], expect, setup=setup)
      for cmd in ("install", "uninstall")
      for name, expect, setup in (
          ("top-level-list", "the top level is a list, not a mapping", config("- a\n- b\n")),
          ("top-level-text", "the top level is the text", config("just some words\n")),
          ("not-utf8", "is not UTF-8 text (line 2)", config_bytes(b"model:\n  default: caf\xe9\n")),
          ("config-is-a-dir", "config.yaml is a directory", dir_at("home/config.yaml")),
          ("config-is-a-fifo", "config.yaml is not a regular file", fifo_at("home/config.yaml")),
          ("duplicate-keys", "duplicate key", config("context:\n  engine: a\ncontext:\n  engine: b\n")),
          ("nested-too-deep", "config.yaml: not valid YAML", config(DEEP_YAML)),
          ("context-is-a-list", "context is a list, not a mapping", config("context: [engine]\n")),
          ("context-is-a-number", "context is the number 5, not a mapping", config("context: 5\n")),
          ("engine-is-a-number", "context.engine is the number 5, not an engine name", config("context:\n  engine: 5\n")),
          ("engine-is-a-list", "context.engine is a list, not an engine name", config("context:\n  engine: [a]\n")),
          ("engine-is-empty", "context.engine is an empty text", config("context:\n  engine: ''\n")),
          ("observed-is-a-list", "observed is a list, not a mapping", config("observed: [inner]\n")),
          ("observed-is-true", "observed is true (a yes/no value), not a mapping", config("observed: true\n")),
          ("inner-is-a-number", "observed.inner is the number 3, not an engine name", config("observed:\n  inner: 3\n")),
          ("plugins-is-text", "plugins is the text 'observed', not a mapping", config("plugins: observed\n")),
          ("enabled-is-text", "plugins.enabled is the text 'observed', not a list",
           config("plugins:\n  enabled: observed\n")),
          ("disabled-is-a-number", "plugins.disabled is the number 0, not a list",
           config("plugins:\n  disabled: 0\n")),
      )],
    *[Case(f"doctor-{name}", ["doctor", *H], expect, setup=setup, code=1, stream="stdout")
      for name, expect, setup in (
          ("top-level-list", "[FAIL] config: {home}/config.yaml: the top level is a list", config("- a\n")),
          ("not-utf8", "[FAIL] config: {home}/config.yaml is not UTF-8 text", config_bytes(b"a: \xff\n")),
          ("config-is-a-dir", "[FAIL] config: {home}/config.yaml is a directory", dir_at("home/config.yaml")),
          ("config-is-a-fifo", "[FAIL] config: {home}/config.yaml is not a regular file", fifo_at("home/config.yaml")),
          ("context-is-a-list", "[FAIL] config: {home}/config.yaml: context is a list", config("context: [x]\n")),
          ("observed-store-is-a-number", "[FAIL] observed section: observed.store: expected a mapping, got 5",
           config("context:\n  engine: observed\nobserved:\n  store: 5\n")),
          ("inner-is-observed", "[FAIL] observed section: observed.inner: 'observed' would wrap",
           config("context:\n  engine: observed\nobserved:\n  inner: observed\n")),
          ("huge-prometheus-port", "[FAIL] observed section: observed.prometheus.port: 99999999999999999999 is out "
                                   "of range", config("observed:\n  prometheus:\n    port: 99999999999999999999\n")),
          ("prometheus-host-not-an-address", "[FAIL] prometheus: observed.prometheus.host 'not a host' is not an "
                                             "address of this machine",
           config("observed:\n  prometheus:\n    enabled: true\n    host: not a host\n")),
          ("store-path-is-a-dir", "[FAIL] store: {tmp}/a-dir is a directory",
           both(dir_at("a-dir"), config("context:\n  engine: observed\nobserved:\n  store:\n    path: {tmp}/a-dir\n"))),
          ("store-is-another-program-s", "[FAIL] store: {tmp}/other.sqlite is another program's SQLite database",
           both(sqlite_at("other.sqlite"),
                config("context:\n  engine: observed\nobserved:\n  store:\n    path: {tmp}/other.sqlite\n"))),
      )],

    # -- install's own values -------------------------------------------------------------------------
    Case("install-bad-observed-key", ["install", *H], "observed.store.retention_days: expected a number",
         setup=config("observed:\n  store:\n    retention_days: soon\n")),
    Case("install-huge-prometheus-port", ["install", *H], "observed.prometheus.port: 99999 is out of range",
         setup=config("observed:\n  prometheus:\n    port: 99999\n")),
    Case("install-negative-retention", ["install", *H], "observed.store.retention_days: must be a positive",
         setup=config("observed:\n  store:\n    retention_days: -5\n")),
    Case("install-store-path-is-a-dir", ["install", *H], "observed.store.path) is a directory",
         setup=both(dir_at("a-dir"), config("observed:\n  store:\n    path: {tmp}/a-dir\n"))),
    Case("install-store-is-another-program-s", ["install", *H], "is another program's SQLite database",
         setup=both(sqlite_at("other.sqlite"), config("observed:\n  store:\n    path: {tmp}/other.sqlite\n"))),
    Case("install-observed-dir-is-a-file", ["install", *H], "/observed is a file, where observed-engine keeps",
         setup=file_at("home/observed")),
    Case("install-state-not-json", ["install", *H], "install.json (observed-engine's record of this install) is damaged",
         setup=file_at("home/observed/install.json", "{not json")),
    Case("install-state-is-a-list", ["install", *H], "is damaged: not a JSON object",
         setup=file_at("home/observed/install.json", "[1, 2]\n")),
    Case("install-state-routes-wrong", ["install", *H], "is damaged: routes is not a list of names",
         setup=file_at("home/observed/install.json", '{"routes": 5}\n')),
    Case("install-state-is-a-dir", ["install", *H], "cannot read {home}/observed/install.json",
         setup=dir_at("home/observed/install.json")),
    Case("uninstall-state-not-json", ["uninstall", *H], "is damaged",
         setup=both(config("context:\n  engine: observed\n"), file_at("home/observed/install.json", "nope"))),
    Case("install-unknown-inner", ["install", *H, "--inner", "nosuch-engine"],
         "--inner names 'nosuch-engine', a context engine Hermes cannot find (it finds: compressor"),
    Case("install-unicode-inner", ["install", *H, "--inner", "ünïcødé-☃"], "a context engine Hermes cannot find"),
    Case("install-empty-inner", ["install", *H, "--inner", ""], "--inner is empty"),
    Case("install-blank-inner", ["install", *H, "--inner", "   "], "--inner is empty"),
    Case("install-inner-is-a-path", ["install", *H, "--inner", "../../../tmp/x"], "is not an engine name"),
    Case("install-inner-observed", ["install", *H, "--inner", "observed"], "would wrap the observed engine in itself"),
    Case("install-unknown-previous-engine", ["install", *H],
         "context.engine in {home}/config.yaml names 'gone-engine', a context engine Hermes cannot find",
         setup=config("context:\n  engine: gone-engine\n")),
    Case("install-unknown-observed-inner", ["install", *H], "observed.inner in {home}/config.yaml names 'gone'",
         setup=config("observed:\n  inner: gone\n")),
    Case("install-unknown-route", ["install", *H, "--route", "nosuch"], "argument --route: invalid choice: 'nosuch'"),
    Case("install-empty-route", ["install", *H, "--route", ""], "argument --route: invalid choice: ''"),
    Case("install-unknown-flag", ["install", *H, "--bogus"], "unrecognized arguments: --bogus"),
    Case("install-route-user-on-0.19", ["install", *H, "--route", "user"],
         "does not load context engines from $HERMES_HOME/plugins/", needs="no-user-engines"),
    Case("install-read-only-hermes", ["install", *H, "--route", "bundled"], "cannot write", ro=("{plugins}",)),
    Case("install-read-only-everywhere", ["install", *H], "no discovery route is usable",
         ro=("{plugins}", "{site}"), needs="no-user-engines"),
    Case("install-read-only-site", ["install", *H, "--route", "entrypoint"],
         "(the Python environment Hermes imports from)", ro=("{site}",)),
    Case("unknown-command", ["nosuch"], "argument COMMAND: invalid choice: 'nosuch'"),

    # -- dashboard --------------------------------------------------------------------------------------
    *[Case(f"dashboard-port-{name}", ["dashboard", "--port", port], expect, needs="streamlit")
      for name, port, expect in (
          ("99999", "99999", "argument --port: 99999 is not a port number (1 to 65535)"),
          ("huge", "99999999999999999999999", "is not a port number (1 to 65535)"),
          ("zero", "0", "argument --port: 0 is not a port number"),
          ("negative", "-1", "argument --port: -1 is not a port number"),
          ("text", "http", "argument --port: expected a port number (1 to 65535), not 'http'"),
          ("empty", "", "argument --port: expected a port number"),
      )],
    Case("dashboard-busy-port", ["dashboard", "--port", "{busy_port}"], "is in use by another program", needs="streamlit"),
    Case("dashboard-empty-host", ["dashboard", "--host", ""], "--host is empty", needs="streamlit"),
    Case("dashboard-host-with-space", ["dashboard", "--host", "127.0.0.1 x"], "is not an address", needs="streamlit"),
    Case("dashboard-foreign-host", ["dashboard", "--host", "192.0.2.1"], "is not an address of this machine",
         needs="streamlit"),
    Case("dashboard-host-not-an-address", ["dashboard", "--host", "999.1.1.1.1"], "is not an address of this machine",
         needs="streamlit"),
    *[Case(f"dashboard-prometheus-{name}", ["dashboard", "--prometheus", url], expect, needs="streamlit")
      for name, url, expect in (
          ("file", "file:///etc/passwd", "--prometheus 'file:///etc/passwd' is not an http:// or https:// URL"),
          ("ftp", "ftp://127.0.0.1/x", "is not an http:// or https:// URL"),
          ("javascript", "javascript:alert(1)", "is not an http:// or https:// URL"),
          ("empty", "", "--prometheus '' is not an http:// or https:// URL"),
          ("no-host", "http://", "has no host"),
          ("bad-port", "http://127.0.0.1:99999", "is not a URL"),
          ("bare-host", "127.0.0.1:9090", "is not an http:// or https:// URL"),
      )],
    Case("dashboard-store-is-a-dir", ["dashboard", "--store", "{tmp}"], "--store {tmp} is a directory", needs="streamlit"),
    Case("dashboard-store-is-text", ["dashboard", "--store", "{tmp}/notes.txt"], "is not an SQLite database",
         setup=file_at("notes.txt", "hello\n"), needs="streamlit"),
    Case("dashboard-store-is-another-program-s", ["dashboard", "--store", "{tmp}/other.sqlite"],
         "is another program's SQLite database", setup=sqlite_at("other.sqlite"), needs="streamlit"),
    Case("dashboard-store-is-hermes-state-db", ["dashboard", "--store", "{home}/state.db"],
         "is another program's SQLite database", setup=hermes_state_db, needs="streamlit"),
    Case("dashboard-store-empty", ["dashboard", "--store", ""], "--store is empty", needs="streamlit"),
    Case("dashboard-default-store-is-a-dir", ["dashboard"], "the store {home}/observed/telemetry.sqlite is a directory",
         setup=dir_at("home/observed/telemetry.sqlite"), needs="streamlit"),
    Case("dashboard-store-and-prometheus", ["dashboard", "--store", "x", "--prometheus", "http://x"],
         "not allowed with argument", needs="streamlit"),

    # -- compare ------------------------------------------------------------------------------------------
    Case("compare-no-state-db", ["compare", "--engines", "compressor", *H],
         "no session store at {home}/state.db: Hermes has recorded no conversation in that home"),
    Case("compare-empty-state-db", ["compare", "--engines", "compressor", *H],
         "no conversation is recorded yet in {home}/state.db", setup=hermes_state_db),
    Case("compare-zero-byte-state-db", ["compare", "--engines", "compressor", *H],
         "no conversation is recorded yet in {home}/state.db", setup=file_at("home/state.db", "")),
    Case("compare-state-db-is-a-dir", ["compare", "--engines", "compressor", *H], "state.db is a directory",
         setup=dir_at("home/state.db")),
    Case("compare-state-db-is-text", ["compare", "--engines", "compressor", *H], "is not a readable SQLite file",
         setup=file_at("home/state.db", "not a database at all, but long enough to be read as one\n" * 20)),
    Case("compare-state-db-of-another-program", ["compare", "--engines", "compressor", *H], "not a Hermes state.db",
         setup=sqlite_at("home/state.db")),
    *[Case(f"compare-{name}", ["compare", *args, *H], expect, setup=setup or hermes_state_db)
      for name, args, expect, setup in (
          ("sessions-0", ["--engines", "compressor", "--sessions", "0"],
           "argument --sessions: expected a whole number of at least 1, not 0", None),
          ("sessions-negative", ["--engines", "compressor", "--sessions", "-1"], "not -1", None),
          ("sessions-text", ["--engines", "compressor", "--sessions", "five"], "not 'five'", None),
          ("context-length-negative", ["--engines", "compressor", "--context-length", "-5"],
           "argument --context-length: expected a whole number of at least 1, not -5", None),
          ("context-length-tiny", ["--engines", "compressor", "--context-length", "5"],
           "--context-length 5 is below the 64,000 tokens", None),
          ("engines-empty", ["--engines", ""], "no engine named", None),
          ("engines-commas", ["--engines", " , ,"], "no engine named", None),
          ("engines-observed", ["--engines", "compressor,observed"], "'observed' is this tool's own wrapper", None),
          ("no-engines", [], "the following arguments are required: --engines", None),
          ("empty-session", ["--engines", "compressor", "--session", ""], "--session is empty", None),
          ("sessions-and-session", ["--engines", "compressor", "--sessions", "2", "--session", "x"],
           "not allowed with argument", None),
          ("unknown-summary", ["--engines", "compressor", "--summary", "online"], "argument --summary: invalid choice",
           None),
          ("out-is-a-file", ["--engines", "compressor", "--out", "{tmp}/a-file"],
           "{tmp}/a-file (where compare writes its report) is a file", both(hermes_state_db, file_at("a-file"))),
          ("out-under-a-file", ["--engines", "compressor", "--out", "{tmp}/a-file/report"],
           "{tmp}/a-file is a file, so {tmp}/a-file/report", both(hermes_state_db, file_at("a-file"))),
          ("out-empty", ["--engines", "compressor", "--out", ""], "--out is empty", None),
      )],
    Case("compare-out-read-only", ["compare", "--engines", "compressor", *H, "--out", "{tmp}/ro/report"],
         "is not writable for this user", setup=both(hermes_state_db, dir_at("ro")), ro=("{tmp}/ro",)),
    # -- demo: every row with --dir in the temporary tree, so the snapshot holds the demo's directory
    *[Case(f"demo-{name}", ["demo", *argv, "--dir", "{tmp}/demo"], expect)
      for name, argv, expect in (
          ("port-out-of-range", ["--port", "99999"], "--port 99999: not a TCP port"),
          ("port-zero", ["--port", "0"], "--port 0: not a TCP port"),
          ("port-not-a-number", ["--port", "eighty"], "argument --port: invalid int value: 'eighty'"),
          ("busy-port", ["--port", "{busy_port}"], "127.0.0.1:{busy_port} is in use by another program"),
          ("busy-prometheus-port", ["--prometheus-port", "{busy_port}"],
           "127.0.0.1:{busy_port} is in use by another program"),
          ("prometheus-port-out-of-range", ["--prometheus-port", "70000"], "--prometheus-port 70000: not a TCP port"),
          ("sessions-zero", ["--sessions", "0"], "--sessions 0: the number of concurrent sessions must be at least 1"),
          ("sessions-negative", ["--sessions", "-3"], "--sessions -3:"),
          ("duration-negative", ["--duration", "-1"], "--duration -1: the seconds to run must be at least 0"),
          ("duration-nan", ["--duration", "nan"], "--duration nan: not a finite number"),
          ("turn-delay-negative", ["--turn-delay", "-0.5"], "--turn-delay -0.5:"),
          ("deadline-zero", ["--deadline", "0"], "--deadline 0:"),
          ("reply-chars-zero", ["--reply-chars", "0"], "--reply-chars 0:"),
          ("slow-every-negative", ["--slow-every", "-1"], "--slow-every -1:"),
          ("context-length-below-hermes", ["--context-length", "1000"], "below Hermes' smallest model window"),
          ("empty-host", ["--host", ""], "--host is empty"),
          ("foreign-host", ["--host", "192.0.2.1"], "--host '192.0.2.1': not an address of this machine"),
          ("host-not-an-address", ["--host", "127.0.0.1 x"], "not an address of this machine"),
          ("store-is-a-directory", ["--store", "{tmp}"], "is a directory"),
          ("unknown-flag", ["--no-such-flag"], "unrecognized arguments: --no-such-flag"),
      )],
    Case("demo-store-under-a-file", ["demo", "--store", "{tmp}/a-file/demo.sqlite"], "is a file, not a directory",
         setup=file_at("a-file")),
    Case("demo-dir-is-a-file", ["demo", "--dir", "{tmp}/a-file"], "--dir {tmp}/a-file:", setup=file_at("a-file")),
    Case("compare-variant-unknown-key", ["compare", "--engines", "compressor@thresold=0.8", *H],
         "compressor: unknown setting 'thresold'", setup=hermes_state_db),
    Case("compare-variant-bad-value", ["compare", "--engines", "compressor@threshold=1.5", *H],
         "threshold=1.5: must be in (0, 1]", setup=hermes_state_db),

    # -- tune ---------------------------------------------------------------------------------------------
    Case("tune-no-state-db", ["tune", *H], "no session store at {home}/state.db"),
    Case("tune-empty-state-db", ["tune", *H], "no conversation is recorded yet in {home}/state.db",
         setup=hermes_state_db),
    *[Case(f"tune-{name}", ["tune", *args, *H], expect, setup=hermes_state_db)
      for name, args, expect in (
          ("grid-backwards", ["--grid", "threshold=0.9:0.5:0.1"], "needs start <= stop"),
          ("grid-no-values", ["--grid", "threshold"], "write key=start:stop:step"),
          ("grid-unknown-key", ["--grid", "thresold=0.8,0.9"], "unknown setting 'thresold'"),
          ("grid-bad-value", ["--grid", "protect_last_n=4,x"], "protect_last_n=x: must be an integer"),
          ("objective-unknown", ["--objective", "overflow,speed"], "unknown metric 'speed'"),
          ("objective-mixed", ["--objective", "summary-tokens=1,cache-lost"], "give every metric a weight or none"),
          ("plugin-without-grid", ["--engine", "lossless-hermes"], "no default grid for 'lossless-hermes'"),
          ("jobs-0", ["--jobs", "0"], "--jobs must be 1 or more"),
          ("variant-other-engine", ["--variant", "lossless-hermes@fresh_tail_count=8"], "a sweep tunes one engine"),
      )],
]


# -- running a row -------------------------------------------------------------------------------------

def snapshot(*roots: Path) -> Dict[str, tuple]:
    """Every entry under *roots*: (kind, mode, bytes or link target)."""
    seen: Dict[str, tuple] = {}
    for root in roots:
        if not os.path.lexists(root):
            seen[str(root)] = ("absent",)
            continue
        for dirpath, dirnames, filenames in os.walk(root):
            for name in [*dirnames, *filenames]:
                path = Path(dirpath) / name
                st = path.lstat()
                if path.is_symlink():
                    seen[str(path)] = ("link", os.readlink(path))
                elif path.is_dir():
                    seen[str(path)] = ("dir", st.st_mode)
                elif path.is_file():
                    seen[str(path)] = ("file", st.st_mode, path.read_bytes())
                else:
                    seen[str(path)] = ("other", st.st_mode)
            seen[str(dirpath)] = ("dir", Path(dirpath).lstat().st_mode)
    return seen


def installation_roots() -> Tuple[Path, Path]:
    from observed_engine.cli import entry_point

    return host.bundled_engines_dir(), entry_point.site_dir()


def ours_in_site(site: Path) -> Dict[str, tuple]:
    return {p.name: snapshot(p) for p in site.glob("observed_engine_hermes_entrypoint-*")}


_CAN_MOUNT: Optional[bool] = None


def can_mount_read_only() -> bool:
    global _CAN_MOUNT
    if _CAN_MOUNT is None:
        unshare = shutil.which("unshare")
        _CAN_MOUNT = bool(unshare) and os.geteuid() == 0 and subprocess.run(
            [unshare, "--mount", "sh", "-c", "mount --bind -o ro /tmp /tmp && ! touch /tmp/.observed-ro-probe"],
            capture_output=True, timeout=30).returncode == 0
    return _CAN_MOUNT


def streamlit_installed() -> bool:
    from observed_engine.demo import streamlit_installed as installed_

    return installed_()


_IMPORT_LEAVES: Optional[set] = None
OURS_IN_HOME = ("observed", "plugins", "state.db")     # with config.yaml and its config.yaml.* backups


def hermes_import_leaves(tmp: Path) -> set:
    """What importing Hermes' config module creates by itself in a home holding a config.yaml:
    nothing on 0.19 and older; on the lines that load config.yaml while that module is imported
    (0.20, 0.22: before anything can stop it), their home skeleton, and on 0.22 a backups/ copy.
    Where there are any, such a Hermes line also writes its home while it runs (0.22: cache/), so
    on those lines a row's home is checked for observed-engine's files only."""
    global _IMPORT_LEAVES
    if _IMPORT_LEAVES is None:
        bare = tmp / "bare-home"
        bare.mkdir()
        (bare / "config.yaml").write_text("model:\n  default: some-model\n", encoding="utf-8")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "OBSERVED_", "HERMES_"))}
        subprocess.run([sys.executable, "-c", "import hermes_cli.config"], cwd=tmp, env=dict(env, HERMES_HOME=str(bare)),
                       capture_output=True, timeout=120)
        _IMPORT_LEAVES = {p.name for p in bare.iterdir()} - {"config.yaml"}
        shutil.rmtree(bare)
    return _IMPORT_LEAVES


@pytest.fixture
def busy_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        yield sock.getsockname()[1]


def run_case(case: Case, tmp: Path, busy: int):
    """The row's setup, then its command in a fresh process; returns the process, the values of
    the placeholders and the snapshots of *tmp* before and after the command."""
    home = tmp / "home"
    home.mkdir()
    work = tmp / "cwd"                    # the current directory: outside the checkout
    work.mkdir()
    plugins, site = installation_roots()
    values = {"home": str(home), "tmp": str(tmp), "plugins": str(plugins), "site": str(site),
              "busy_port": str(busy)}
    if case.setup is not None:
        case.setup(home, tmp)
    argv = [sys.executable, "-m", "observed_engine", *[a.format(**values) for a in case.argv]]
    if case.ro:
        if not can_mount_read_only():
            pytest.skip("this machine cannot mount a directory read-only for one process (needs root and unshare)")
        mounts = " && ".join(f"mount --bind -o ro {shlex.quote(p.format(**values))} {shlex.quote(p.format(**values))}"
                             for p in case.ro)
        argv = [shutil.which("unshare"), "--mount", "sh", "-c", f"{mounts} && exec {shlex.join(argv)}"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "OBSERVED_", "HERMES_"))}
    env["HERMES_HOME"] = str(home)
    before = snapshot(tmp)
    proc = subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True, timeout=120)
    return proc, values, before, snapshot(tmp)


@pytest.mark.parametrize("case", [c.param() for c in ROWS])
def test_wrong_input_is_one_line_and_changes_nothing(case: Case, tmp_path, busy_port):
    if case.needs == "streamlit" and not streamlit_installed():
        pytest.skip("the dashboard extra is not installed")
    if case.needs == "no-user-engines" and host.supports_user_engines():
        pytest.skip(f"this Hermes ({host.hermes_version()}) loads engines from $HERMES_HOME/plugins/")
    leaves = hermes_import_leaves(tmp_path)
    plugins, site = installation_roots()
    installation_before = (snapshot(plugins), ours_in_site(site))
    proc, values, before, after = run_case(case, tmp_path, busy_port)
    expect = case.expect.format(**values)
    out, err = proc.stdout, proc.stderr
    assert "Traceback" not in out + err, out + err
    assert proc.returncode == case.code, f"exit {proc.returncode}\nstdout: {out}\nstderr: {err}"
    if case.stream == "stderr":
        assert err.endswith("\n") and err.count("\n") == 1, f"not one line on stderr: {err!r}"
        assert err.startswith("observed-engine"), err
        assert expect in err, f"{expect!r} not in {err!r}"
        assert "fix" in err, f"the line names no fix: {err!r}"
        assert out == "", out
    else:
        assert err == "", f"stderr should be empty: {err!r}"
        assert expect in out, f"{expect!r} not in:\n{out}"
    # nothing created or changed: the temporary tree (the home, the files the row names) ...
    home = Path(values["home"])

    def hermes_own(path: str) -> bool:
        """New, in the home, and none of observed-engine's files: tolerated only on the Hermes
        lines that write their home by themselves (see hermes_import_leaves); on 0.19 nothing is."""
        rel = Path(path).relative_to(home).parts if Path(path).is_relative_to(home) else ()
        return (bool(leaves) and bool(rel) and path not in before
                and rel[0] not in OURS_IN_HOME and not rel[0].startswith("config.yaml"))

    changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k) and not hermes_own(k))
    assert not changed, f"changed: {changed}"
    # ... and the Hermes installation
    assert (snapshot(plugins), ours_in_site(site)) == installation_before


def test_the_table_covers_every_command():
    from observed_engine import cli

    parser = cli.build_parser()
    commands = next(a for a in parser._actions if a.dest == "command").choices
    covered = {c.argv[0] for c in ROWS}
    assert set(commands) <= covered, set(commands) - covered

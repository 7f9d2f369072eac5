"""What the operator hands a command, checked before the command changes anything.

The rule of the whole CLI (tests/cli/test_bad_input.py runs it as a table): a wrong input is
one line on stderr that names what is wrong and the fix, exit code 2, no traceback, and no
file created or changed, in the Hermes home or in the Hermes installation. So every check
here runs before the first write, and each raises :class:`CliError` (or, for a flag's value,
``argparse.ArgumentTypeError``, which the parser prints the same way).
"""

from __future__ import annotations

import argparse
import errno
import ipaddress
import os
import socket
import stat
from pathlib import Path
from typing import Any, List, Optional

from .. import host
from ..contract.vocabulary import BUILTIN_ENGINE
from .errors import CliError
from .paths import PLUGIN_NAME

MAX_PORT = 65_535


# -- values of flags (argparse types: the parser prints their message on one line) -------------

def positive_int(text: str) -> int:
    """A whole number of at least 1 (``--sessions``, ``--context-length``)."""
    try:
        value = int(str(text).strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, not {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, not {value}")
    return value


def port_number(text: str) -> int:
    """A TCP port, 1 to 65535."""
    try:
        value = int(str(text).strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number (1 to {MAX_PORT}), not {text!r}") from None
    if not 1 <= value <= MAX_PORT:
        raise argparse.ArgumentTypeError(f"{value} is not a port number (1 to {MAX_PORT})")
    return value


# -- descriptions ---------------------------------------------------------------------------------

def describe(value: Any) -> str:
    """A YAML value as the operator wrote it: ``a list``, ``the number 5``, ``the text 'x'``."""
    if value is None:
        return "empty"
    if isinstance(value, bool):
        return f"{str(value).lower()} (a yes/no value)"
    if isinstance(value, (int, float)):
        return f"the number {value!r}"
    if isinstance(value, str):
        return f"the text {value!r}" if value.strip() else "an empty text"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, (list, tuple)):
        return "a list"
    return f"a {type(value).__name__}"


def _why(exc: OSError) -> str:
    return exc.strerror or type(exc).__name__


# -- the Hermes home -------------------------------------------------------------------------------

def home_dir(arg: Optional[str], *, write: bool = False) -> Path:
    """The Hermes home a command works on: ``--hermes-home``, else ``HERMES_HOME``, else
    ``~/.hermes``. It must exist and be a directory this user can read (and, with *write*,
    write): a command never creates a home, so a mistyped one is said, not made."""
    if arg is not None and not arg.strip():
        raise CliError("--hermes-home is empty; fix: pass the Hermes home directory (such as ~/.hermes)")
    where = "--hermes-home" if arg else ("$HERMES_HOME" if os.environ.get("HERMES_HOME") else "the default home")
    try:
        home = host.hermes_home(arg)
    except (OSError, RuntimeError, ValueError) as exc:
        raise CliError(f"--hermes-home {arg!r} is not a usable path ({exc}); fix: pass the Hermes home directory") \
            from None
    try:
        mode = os.stat(home).st_mode
    except FileNotFoundError:
        raise CliError(f"no Hermes home at {home} ({where}); fix: pass the home Hermes runs with "
                       f"(--hermes-home DIR), or create it with `hermes setup`") from None
    except NotADirectoryError:
        raise CliError(f"no Hermes home at {home} ({where}): a part of that path is a file; "
                       f"fix: pass the Hermes home directory") from None
    except OSError as exc:
        raise CliError(f"cannot look at the Hermes home {home}: {_why(exc)}; fix: pass a home this user "
                       f"can read") from None
    if not stat.S_ISDIR(mode):
        raise CliError(f"{home} ({where}) is a file, not a Hermes home directory; fix: pass the directory "
                       f"that holds Hermes' config.yaml")
    if not os.access(home, os.R_OK | os.X_OK):
        raise CliError(f"cannot read the Hermes home {home} (permission denied); fix: run as the user "
                       f"Hermes runs as")
    if write and not os.access(home, os.W_OK | os.X_OK):
        raise CliError(f"cannot write into the Hermes home {home} (read-only, or permission denied); fix: "
                       f"run as the user Hermes runs as")
    return home


def writable_dir(path: Path, what: str) -> None:
    """*path* is a directory this user can write, or can be created: every part of it that
    exists is a directory, and the nearest existing one is writable."""
    probe = path
    while True:
        try:
            mode = os.stat(probe).st_mode
        except FileNotFoundError:
            if probe.parent == probe:
                break
            probe = probe.parent
            continue
        except NotADirectoryError:
            probe = probe.parent
            continue
        except OSError as exc:
            raise CliError(f"cannot use {path} ({what}): {_why(exc)}") from None
        if not stat.S_ISDIR(mode):
            if probe == path:
                raise CliError(f"{path} ({what}) is a file, where a directory belongs; fix: move the file "
                               f"away, or name a directory")
            raise CliError(f"{probe} is a file, so {path} ({what}) cannot be created; fix: move the file "
                           f"away, or name another directory")
        if not os.access(probe, os.W_OK | os.X_OK):
            raise CliError(f"cannot write {path} ({what}): {probe} is not writable for this user; fix: run "
                           f"as the user who owns it, or name another directory")
        return


def writable_file(path: Path, what: str) -> None:
    """*path* is a regular file this user can replace, or can be created in a writable directory."""
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        writable_dir(path.parent, f"the directory of {what}")
        return
    except OSError as exc:
        raise CliError(f"cannot use {path} ({what}): {_why(exc)}") from None
    if stat.S_ISDIR(mode):
        raise CliError(f"{path} ({what}) is a directory, where a file belongs; fix: move it away")
    if not stat.S_ISREG(mode):
        raise CliError(f"{path} ({what}) is not a regular file; fix: replace it with the file itself")
    if not os.access(path, os.W_OK) or not os.access(path.parent, os.W_OK | os.X_OK):
        raise CliError(f"cannot write {path} ({what}): read-only, or permission denied; fix: run as the user "
                       f"who owns it")


# -- config.yaml's keys that install and uninstall read or write ---------------------------------

def check_shape(data: Any, cfg_file: Path) -> None:
    """The keys the commands read and edit have the types Hermes gives them: ``context`` and
    ``observed`` and ``plugins`` are mappings, ``context.engine`` and ``observed.inner`` engine
    names, ``plugins.enabled`` / ``plugins.disabled`` lists. Anything else would be overwritten
    (losing what the operator wrote) or read wrongly, so it is refused with the key's name."""
    problem = shape_problem(data)
    if problem:
        raise CliError(f"{cfg_file}: {problem}")


def shape_problem(data: Any) -> Optional[str]:
    """None if :func:`check_shape` accepts *data*, else its message (without the file name)."""
    if not isinstance(data, dict):
        return (f"the top level is {describe(data)}, not a mapping of keys; fix: the file must hold keys "
                f"such as `model:` and `context:`")
    for key, example in (("context", "engine: compressor"), (PLUGIN_NAME, "inner: compressor"),
                         ("plugins", "enabled: [a-plugin]")):
        value = data.get(key)
        if value is not None and not isinstance(value, dict):
            return f"{key} is {describe(value)}, not a mapping; fix: write it as `{key}:` with `{example}` under it"
    for keys in (("context", "engine"), (PLUGIN_NAME, "inner")):
        value = (data.get(keys[0]) or {}).get(keys[1])
        if value is not None and not (isinstance(value, str) and value.strip()):
            return (f"{'.'.join(keys)} is {describe(value)}, not an engine name; fix: name an engine "
                    f"(such as compressor) or remove the key")
    for keys in (("plugins", "enabled"), ("plugins", "disabled")):
        value = (data.get("plugins") or {}).get(keys[1])
        if value is not None and not isinstance(value, list):
            return (f"{'.'.join(keys)} is {describe(value)}, not a list; fix: write it as a list of plugin "
                    f"names (`{keys[1]}: [name]`)")
    return None


def engine_arg(value: Optional[str]) -> Optional[str]:
    """``--inner``: None when not given, else the name, stripped; an empty name, ``observed``,
    or a name that is a path (the directory loader would import it from outside
    ``plugins/context_engine/``) is refused."""
    if value is None:
        return None
    name = value.strip()
    if not name:
        raise CliError("--inner is empty; fix: name the engine to observe (compressor, or a plugin's "
                       "engine), or leave --inner out")
    if name == PLUGIN_NAME:
        raise CliError("--inner observed would wrap the observed engine in itself; "
                       "fix: name the engine to observe (default: compressor)")
    problem = engine_name_problem(name)
    if problem:
        raise CliError(f"--inner {value!r} {problem}")
    return name


def engine_name_problem(name: str) -> Optional[str]:
    if any(ch in name for ch in "/\\") or name.startswith(".") or any(ch.isspace() or not ch.isprintable()
                                                                      for ch in name):
        return ("is not an engine name (no path, spaces or control characters); fix: name an engine such "
                "as compressor")
    return None


def findable_engines(name: str) -> Optional[List[str]]:
    """The context engines this Hermes' own loaders can find by name, if *name* is not one of
    them (sorted); None when it is (or when Hermes is not importable, so nothing can be said).
    The cheap sources first (the built-in, the directory loader's directories, the plugin
    entry points), then, only if needed, Hermes' plugin scan (observed's own engine dry)."""
    from .. import plugin

    if name == BUILTIN_ENGINE:
        return None
    if host.bundled_engines_dir() is None:
        return None
    names = {BUILTIN_ENGINE, *host.directory_engine_names(), *(ep.name for ep in host.entry_points())}
    names.discard(PLUGIN_NAME)
    if name in names:
        return None
    try:
        with plugin.dry_run():
            found = host.simulate_selection(name, directory=False)
    except ImportError:
        return None
    except Exception:  # Hermes' plugin scan failed: the names from the cheap sources are still offered
        found = {"registrations": []}
    registered = {r["engine"] for r in found.get("registrations", []) if isinstance(r.get("engine"), str)}
    registered.discard(PLUGIN_NAME)
    if name in registered:
        return None
    return sorted(names | registered)


def store_problem(path: Path) -> Optional[str]:
    """Why *path* cannot be an observed-engine store (None: it can, or it does not exist yet)."""
    import sqlite3

    from ..store.connection import SQLITE_HEADER, ForeignStoreError, check_ours

    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        return f"cannot be read: {_why(exc)}"
    if stat.S_ISDIR(mode):
        return "is a directory; fix: name the store file in it (such as telemetry.sqlite)"
    if not stat.S_ISREG(mode):
        return "is not a regular file; fix: name an observed-engine store file"
    try:
        with open(path, "rb") as f:
            head = f.read(len(SQLITE_HEADER))
    except OSError as exc:
        return f"cannot be read: {_why(exc)}; fix: run as the user who owns it"
    if not head:
        return None
    if head != SQLITE_HEADER:
        return "is not an SQLite database, so not an observed-engine store; fix: name the store file"
    try:
        conn = sqlite3.connect(quiet_readonly_uri(path), uri=True, timeout=1.0)
        try:
            check_ours(conn, path)
        finally:
            conn.close()
    except ForeignStoreError:
        return "is another program's SQLite database, not an observed-engine store; fix: name the store file"
    except sqlite3.Error as exc:
        return f"cannot be read as SQLite ({exc}); fix: name the store file"
    return None


def quiet_readonly_uri(path: Path) -> str:
    """The URI that opens the SQLite file *path* read-only and leaves nothing behind: without a
    ``-wal`` file beside it (no writer has it open), also ``immutable``, since a plain read-only
    open of a WAL database creates its ``-wal`` and ``-shm`` files."""
    from ..store import readonly_uri

    uri = readonly_uri(path)
    return uri if os.path.exists(f"{path}-wal") else uri + "&immutable=1"


# -- network -----------------------------------------------------------------------------------------

def listen_address(address: str, port: int) -> None:
    """*address*:*port* is somewhere this machine can listen now: a valid address of it, and
    a port nobody listens on."""
    text = (address or "").strip()
    if not text:
        raise CliError("--host is empty; fix: an address to listen on, such as 127.0.0.1")
    if any(ch.isspace() or not ch.isprintable() for ch in text) or "/" in text:
        raise CliError(f"--host {address!r} is not an address; fix: an address to listen on, such as 127.0.0.1")
    try:
        ipaddress.ip_address(text)
        flags = socket.AI_NUMERICHOST | socket.AI_PASSIVE
    except ValueError:
        flags = socket.AI_PASSIVE
    try:
        infos = socket.getaddrinfo(text, port, type=socket.SOCK_STREAM, flags=flags)
    except (OSError, UnicodeError) as exc:
        raise CliError(f"--host {address!r} is not an address of this machine ({exc}); fix: an address to "
                       f"listen on, such as 127.0.0.1") from None
    family, kind, proto, _name, sockaddr = infos[0]
    try:
        with socket.socket(family, kind, proto) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(sockaddr)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise CliError(f"{text}:{port} is in use by another program; fix: --port with a free port") from None
        if exc.errno == errno.EADDRNOTAVAIL:
            raise CliError(f"--host {address!r} is not an address of this machine; fix: 127.0.0.1, or one "
                           f"of its own addresses") from None
        if exc.errno == errno.EACCES:
            raise CliError(f"this user may not listen on {text}:{port} (ports below 1024 need privileges); "
                           f"fix: --port 1024 or above") from None
        raise CliError(f"cannot listen on {text}:{port}: {_why(exc)}; fix: another --host or --port") from None


def prometheus_url(url: str) -> str:
    """``--prometheus``: an http:// or https:// URL with a host and a valid port."""
    from urllib.parse import urlsplit

    text = (url or "").strip()
    fix = "fix: the Prometheus server's http:// or https:// URL, such as http://127.0.0.1:9090"
    try:
        parts = urlsplit(text)
        hostname, _port = parts.hostname, parts.port
    except ValueError as exc:
        raise CliError(f"--prometheus {url!r} is not a URL ({exc}); {fix}") from None
    if parts.scheme.lower() not in ("http", "https"):
        raise CliError(f"--prometheus {url!r} is not an http:// or https:// URL; {fix}")
    if not hostname or any(ch.isspace() or not ch.isprintable() for ch in text):
        raise CliError(f"--prometheus {url!r} has no host; {fix}")
    return text


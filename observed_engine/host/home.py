"""HERMES_HOME and config.yaml as Hermes resolves and reads them, and a guard that keeps the
home's skeleton from being created by the ``observed-engine`` commands."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Any, Dict, Optional

from ..contract.store_schema import default_store_path as _store_under

logger = logging.getLogger(__name__)


def truthy(value: Any, default: bool = False) -> bool:
    if value is None:
        return default
    return str(value).strip().lower() in {"true", "1", "yes", "on"}


def hermes_home(arg: Optional[str] = None) -> Path:
    """The Hermes home in effect, resolved as Hermes does (its context-local override,
    HERMES_HOME, ~/.hermes). ``arg`` (a ``--hermes-home`` flag) also sets ``HERMES_HOME``
    for this process, so Hermes' own functions agree."""
    if arg:
        path = Path(arg).expanduser().resolve()
        os.environ["HERMES_HOME"] = str(path)
        return path
    try:
        from hermes_constants import get_hermes_home

        return Path(get_hermes_home())
    except Exception:  # no Hermes (or no get_hermes_home): resolved from the env as Hermes does
        env = os.environ.get("HERMES_HOME")
        return Path(env) if env else Path.home() / ".hermes"


def default_store_path(home: Optional[os.PathLike | str] = None) -> Path:
    """HERMES_HOME/observed/telemetry.sqlite."""
    return _store_under(home if home is not None else hermes_home())


def load_config(*, log_errors: bool = True) -> Dict[str, Any]:
    """Hermes' merged config for the current HERMES_HOME (``hermes_cli.config.load_config``);
    {} when Hermes is missing or the file is unreadable (logged when ``log_errors``)."""
    try:
        from hermes_cli.config import load_config as _load

        cfg = _load()
        return cfg if isinstance(cfg, dict) else {}
    except Exception as exc:
        if log_errors:
            logger.error("observed: could not read the Hermes config.yaml (%s); using defaults", exc)
        return {}


class untouched_home:
    """While open, Hermes' config loader does not create its home skeleton (``SOUL.md``,
    ``cron/``, ``logs/``, ``sessions/`` ...; ``hermes_cli.config.ensure_hermes_home``) in
    *home*: the ``observed-engine`` commands read a home with Hermes' own loaders and must
    leave it as they found it, apart from the files they exist to write. Other homes (a
    compare replay's temporary one) are created as usual. No-op without Hermes.

    Nothing is imported for it: ``hermes_cli.config`` is patched when it is loaded already,
    else as soon as its import finishes (a finder on ``sys.meta_path`` for the block). The
    0.20 and 0.22 lines load config.yaml while that module is being imported (their
    provider discovery), before it can be patched: there the first import creates the
    skeleton in a home that lacks it, as any ``hermes`` command does; so the commands check
    everything they can before anything imports Hermes."""

    MODULE = "hermes_cli.config"

    def __init__(self, home: os.PathLike | str) -> None:
        self.home = str(home)
        self._module = self._original = self._finder = None

    def __enter__(self) -> untouched_home:
        module = sys.modules.get(self.MODULE)
        if module is not None:
            self._patch(module)
        else:
            self._finder = _AfterImport(self.MODULE, self._patch)
            sys.meta_path.insert(0, self._finder)
        return self

    def _patch(self, module) -> None:
        original = getattr(module, "ensure_hermes_home", None)
        if not callable(original) or self._module is not None:
            return
        kept = self.home

        def ensure_hermes_home(*args, **kwargs):
            try:
                from hermes_constants import get_hermes_home

                if str(get_hermes_home()) == kept:
                    return None
            except Exception:  # no home to compare with: the host's own function runs
                pass
            return original(*args, **kwargs)

        self._module, self._original = module, original
        module.ensure_hermes_home = ensure_hermes_home

    def __exit__(self, *exc) -> bool:
        if self._finder is not None:
            try:
                sys.meta_path.remove(self._finder)
            except ValueError:
                pass
            self._finder = None
        if self._module is not None:
            self._module.ensure_hermes_home = self._original
            self._module = self._original = None
        return False


class _AfterImport:
    """A ``sys.meta_path`` finder that lets the other finders find *name* and calls
    ``then(module)`` once the module's code has run."""

    def __init__(self, name: str, then) -> None:
        self.name, self.then = name, then

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.name:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
                spec.loader = _ThenLoader(spec.loader, self.then)
                return spec
        return None


class _ThenLoader:
    def __init__(self, loader, then) -> None:
        self._loader, self._then = loader, then

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module) -> None:
        self._loader.exec_module(module)
        try:
            self._then(module)
        except Exception:  # the patch is a courtesy; the import itself succeeded
            pass

    def __getattr__(self, attr):
        return getattr(self._loader, attr)


def read_config() -> Dict[str, Any]:
    """Hermes' merged config for the current HERMES_HOME, as :func:`load_config` reads it,
    but raising what Hermes raises (ImportError without Hermes, its error for a broken
    config.yaml), for ``observed-engine doctor`` to report; {} for an empty config."""
    from hermes_cli.config import load_config as _load

    return _load() or {}


def config_defaults(*path: str) -> Dict[str, Any]:
    """A copy of the section of Hermes' ``DEFAULT_CONFIG`` at ``path`` (``("compression",)``,
    ``("auxiliary", "compression")``): the keys that section accepts and their defaults; {}
    without Hermes or for a section it does not have."""
    try:
        from hermes_cli.config import DEFAULT_CONFIG
    except Exception:  # no Hermes, or its config module fails to import: no known defaults ({})
        return {}
    node: Any = DEFAULT_CONFIG
    for key in path:
        node = node.get(key) if isinstance(node, dict) else None
    return dict(node) if isinstance(node, dict) else {}

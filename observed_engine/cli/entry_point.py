"""The ``hermes_agent.plugins`` entry point ``observed``, written by ``install --route entrypoint``.

The observed-engine package declares no Hermes entry point: an entry point is package
metadata, and Hermes' plugin scan lists every one it finds, so the package alone would
change what Hermes shows (``hermes plugins list``: ``observed  not enabled``) before the
operator opted in. The entry-point route instead writes a small distribution of its own
next to the observed-engine package, ``observed_engine_hermes_entrypoint-<version>.dist-info``
(METADATA, entry_points.txt, RECORD, INSTALLER and our marker), that declares
``observed = observed_engine.hermes_plugin``; ``uninstall`` removes it once no Hermes home
that installed it still uses it. ``pip uninstall observed-engine-hermes-entrypoint`` removes
it too (RECORD lists its files).
"""

from __future__ import annotations

import importlib
import importlib.metadata as md
import json
import shutil
import sys
import sysconfig
from pathlib import Path
from typing import List, Optional

from .. import host
from ..version import __version__
from .errors import CliError
from .paths import PLUGIN_NAME, home_uses

DIST_NAME = "observed-engine-hermes-entrypoint"
DIST_PREFIX = "observed_engine_hermes_entrypoint-"
MODULE = "observed_engine.hermes_plugin"
MARKER = "observed-engine.json"       # inside the dist-info: which Hermes homes use it
SUMMARY = ("Hermes plugin entry point of observed-engine (context.engine: observed), written by "
           "`observed-engine install --route entrypoint`; `observed-engine uninstall` removes it")


def site_dir() -> Path:
    """Where the entry point's dist-info goes: beside the observed-engine distribution that
    Hermes imports, else this interpreter's site-packages.

    Not the first distribution this process happens to see: ``python -m observed_engine``
    puts the current directory first on ``sys.path``, and a source checkout there holds an
    ``observed_engine.egg-info`` (``pip install -e`` leaves it), where Hermes never looks.
    So the current directory is left out of the search, and an installed ``.dist-info`` is
    preferred to any ``.egg-info``."""
    try:
        cwd: Optional[Path] = Path.cwd().resolve()
    except OSError:
        cwd = None
    search = []
    for entry in sys.path:
        if not entry:
            continue
        try:
            if cwd is not None and Path(entry).resolve() == cwd:
                continue
        except (OSError, RuntimeError):
            continue
        search.append(entry)
    found = []
    try:
        found = list(md.distributions(name="observed-engine", path=search))
    except Exception:  # unreadable metadata: no distribution found there
        pass
    found.sort(key=lambda dist: not str(getattr(dist, "_path", "")).endswith(".dist-info"))
    for dist in found:
        try:
            return Path(dist.locate_file("")).resolve()
        except Exception:  # a distribution whose files cannot be located (a broken install): try the next one
            continue
    return Path(sysconfig.get_paths()["purelib"])


def written_dirs(base: Optional[Path] = None) -> List[Path]:
    """Our dist-info directories in *base* (default :func:`site_dir`)."""
    base = base or site_dir()
    try:
        return sorted(p for p in base.iterdir() if p.name.startswith(DIST_PREFIX) and p.name.endswith(".dist-info"))
    except OSError:
        return []


def homes_of(info: Path) -> List[str]:
    try:
        homes = json.loads((info / MARKER).read_text(encoding="utf-8")).get("homes", [])
        return [str(h) for h in homes if isinstance(h, str)]
    except (OSError, ValueError, AttributeError):
        return []


def write(home: Path) -> Path:
    """Write (or refresh) the dist-info, adding *home* to the homes that use it; returns it."""
    base = site_dir()
    homes = sorted({h for d in written_dirs(base) for h in homes_of(d)} | {str(home)})
    info = base / f"{DIST_PREFIX}{__version__}.dist-info"
    files = {
        "METADATA": (f"Metadata-Version: 2.1\nName: {DIST_NAME}\nVersion: {__version__}\n"
                     f"Summary: {SUMMARY}\nRequires-Dist: observed-engine\n"),
        "entry_points.txt": f"[{host.ENTRY_POINTS_GROUP}]\n{PLUGIN_NAME} = {MODULE}\n",
        "INSTALLER": "observed-engine\n",
        MARKER: json.dumps({"homes": homes}, indent=2) + "\n",
    }
    try:
        for old in written_dirs(base):
            if old != info:
                shutil.rmtree(old)
        info.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            (info / name).write_text(text, encoding="utf-8")
        record = [f"{info.name}/{name},," for name in [*files, "RECORD"]]
        (info / "RECORD").write_text("\n".join(record) + "\n", encoding="utf-8")
    except OSError as exc:
        raise CliError(f"cannot write the entry point into {base}: {exc}; fix: rerun with write access "
                       f"to that Python environment, or use --route bundled") from exc
    importlib.invalidate_caches()
    return info


def remove(home: Path, *, also_in: Optional[Path] = None) -> List[str]:
    """Drop *home* from the homes using the entry point; remove the dist-info when no other
    home that installed it still uses it (:func:`paths.home_uses`: its install record is there
    and names the route). *also_in*: another directory to look in (where an earlier install
    recorded that it wrote it). Returns what was done, as output lines."""
    out: List[str] = []
    bases = [site_dir()]
    if also_in is not None and also_in not in bases:
        bases.append(also_in)
    for info in [d for base in bases for d in written_dirs(base)]:
        before = homes_of(info)
        if before and str(home) not in before:
            continue                      # another Hermes home's, not this one's to change
        homes = [h for h in before if h != str(home) and home_uses(h, "entrypoint")]
        try:
            if homes:
                (info / MARKER).write_text(json.dumps({"homes": homes}, indent=2) + "\n", encoding="utf-8")
                out.append(f"entry point: {info} kept (still used by {', '.join(homes)})")
            else:
                shutil.rmtree(info)
                out.append(f"entry point: removed {info}")
        except OSError as exc:
            out.append(f"entry point: could not update {info}: {exc}")
    importlib.invalidate_caches()
    return out


def used_by(home: Path) -> bool:
    return any(str(home) in homes_of(d) for d in written_dirs())

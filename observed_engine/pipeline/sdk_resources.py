"""Import ``opentelemetry.sdk.resources`` without importing psutil.

The SDK's resources module imports psutil (~8 ms of CPU per ``hermes -z`` process) for one use,
``process.owner``. :func:`import_sdk_resources` refuses psutil to the importing thread during
that import only, then gives the module a stand-in that imports the real psutil on first use.
When editing: nothing may change for other users of the SDK, and anything unexpected falls back
to the normal import.

The full account: docs/design/internals.md, *observed_engine/pipeline/sdk_resources.py*.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import threading
from types import ModuleType

_SDK_RESOURCES = "opentelemetry.sdk.resources"
_PSUTIL = "psutil"


class RefusePsutilFinder:
    """A meta-path finder refusing ``import psutil`` to one thread; every other import, and
    psutil in every other thread, goes on to the next finders."""

    def __init__(self, thread_id: int) -> None:
        self.thread_id = thread_id

    def find_spec(self, name, path=None, target=None):  # noqa: ARG002 (the finder protocol)
        if name == _PSUTIL and threading.get_ident() == self.thread_id:
            raise ImportError(f"{_PSUTIL} is imported on first use (observed_engine.pipeline.sdk_resources)",
                              name=name)
        return None


class _LazyPsutil:
    """The SDK's ``psutil`` global until first used: the first attribute access imports psutil,
    puts the real module in that global and returns the attribute from it."""

    __slots__ = ("_owner",)

    def __init__(self, owner: ModuleType) -> None:
        self._owner = owner

    def __getattr__(self, name):
        owner = object.__getattribute__(self, "_owner")
        try:
            real = importlib.import_module(_PSUTIL)
        except ImportError:
            # installed but not importable: what the SDK's own import would have left behind
            if getattr(owner, _PSUTIL, None) is self:
                setattr(owner, _PSUTIL, None)
            raise
        if getattr(owner, _PSUTIL, None) is self:
            setattr(owner, _PSUTIL, real)
        return getattr(real, name)

    def __repr__(self) -> str:
        return "<psutil, imported on first use>"


def _import_psutil_into(module: ModuleType) -> None:
    """The fallback: psutil imported now into the module's global, as the SDK itself does."""
    try:
        real = importlib.import_module(_PSUTIL)
    except ImportError:
        real = None
    except Exception:  # psutil's import breaks (not ImportError): the module's psutil is left as it is
        return
    try:
        setattr(module, _PSUTIL, real)
    except Exception:  # a read-only module: the stand-in keeps importing on use
        pass


def import_sdk_resources() -> ModuleType:
    """``opentelemetry.sdk.resources``, imported without importing psutil when that saves anything."""
    if _SDK_RESOURCES in sys.modules or _PSUTIL in sys.modules:
        return importlib.import_module(_SDK_RESOURCES)
    try:
        installed = importlib.util.find_spec(_PSUTIL) is not None
    except Exception:
        installed = False       # unknown: import normally
    if not installed:
        return importlib.import_module(_SDK_RESOURCES)

    finder = RefusePsutilFinder(threading.get_ident())
    sys.meta_path.insert(0, finder)
    try:
        module = importlib.import_module(_SDK_RESOURCES)
    except Exception:  # retried below without the finder: a plain import, whose error reaches the caller
        module = None
    finally:
        try:
            sys.meta_path.remove(finder)
        except ValueError:
            pass
    if module is None:
        # not expected (the SDK catches psutil's ImportError): a plain import, with what it raises
        return importlib.import_module(_SDK_RESOURCES)

    # (a thread that imports the module at this moment waits for the import above and could, in
    # the few instructions until the line below, see None: it then detects without process.owner)
    try:
        if getattr(module, _PSUTIL) is None:
            if _PSUTIL in sys.modules:          # another thread imported it meanwhile
                setattr(module, _PSUTIL, sys.modules[_PSUTIL])
            else:
                setattr(module, _PSUTIL, _LazyPsutil(module))
    except Exception:  # psutil cannot be read or set there: imported into the module now, as the SDK does
        _import_psutil_into(module)
    return module

